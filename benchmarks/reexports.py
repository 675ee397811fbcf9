"""The same people re-exported: variants of one CSV file as a hurried operator makes them.

Each variant keeps the people of the source file (``national2019.csv`` in the benchmark and
the tests): rows reordered, CRLF line endings, every field quoted, CSV → Parquet (types
inferred by Arrow), that Parquet file back to CSV, a constant column added, one column dropped,
a tenth of the rows dropped, a tenth more rows added (people of another file); and the evasions
a review found (issue 27): two constant columns added (an export date, a version), the header
lower-cased, two columns dropped (a weight and the geography), one column dropped and one
added, every row twice (``cat f f`` under one header), every row three times, half of the rows
twice. Deterministic
(a fixed seed), written with the standard library and pyarrow; used by
``benchmarks/identity.py`` and ``tests/test_record_identity.py``.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

VARIANTS = ("reordered", "CRLF", "quoted", "Parquet", "Parquet → CSV", "constant column added", "column dropped",
            "10% rows dropped", "10% rows added", "two constant columns added", "header lower-cased",
            "two columns dropped", "one column dropped, one added", "every row twice", "every row three times",
            "half of the rows twice")


def write_reexports(source: Path, others: Path, out: Path, *, drop: str = "DREM",
                    drop_two: tuple[str, str] = ("WGTP", "PUMA"), seed: int = 2027) -> dict[str, Path]:
    """Every variant of ``source`` in ``out`` (created); ``others`` (another file of the same
    columns, other people) supplies the added tenth. ``drop`` is the column dropped, ``drop_two``
    the two dropped together."""
    out.mkdir(parents=True, exist_ok=True)
    lines = source.read_text("utf-8").splitlines()
    header, rows = lines[0], lines[1:]
    rng = np.random.default_rng(seed)  # which rows: a fixed choice, never noise

    def text(name: str, body: list[str], ending: str = "\n") -> Path:
        path = out / name
        path.write_bytes((ending.join(body) + ending).encode("utf-8"))
        return path

    quoted = io.StringIO()
    csv.writer(quoted, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(csv.reader(lines))
    pq.write_table(pa_csv.read_csv(source), out / "typed.parquet")
    pa_csv.write_csv(pq.read_table(out / "typed.parquet"), out / "from_parquet.csv")
    def without(names: tuple[str, ...], line: str) -> str:
        at = {header.split(",").index(n) for n in names}
        return ",".join(v for i, v in enumerate(line.split(",")) if i not in at)

    extra = others.read_text("utf-8").splitlines()[1:]
    half = np.random.default_rng(seed + 1).random(len(rows)) < 0.5  # its own draw: the others' stay as they were
    return {
        "reordered": text("reordered.csv", [header, *(rows[i] for i in rng.permutation(len(rows)))]),
        "CRLF": text("crlf.csv", lines, "\r\n"),
        "quoted": text("quoted.csv", quoted.getvalue().splitlines()),
        "Parquet": out / "typed.parquet",
        "Parquet → CSV": out / "from_parquet.csv",
        "constant column added": text("constant.csv", [header + ",SOURCE", *(r + ",acs" for r in rows)]),
        "column dropped": text("dropped.csv", [without((drop,), line) for line in lines]),
        "10% rows dropped": text("fewer.csv", [header, *(r for r, keep in zip(rows, rng.random(len(rows)) >= 0.1)
                                                         if keep)]),
        "10% rows added": text("more.csv", [header, *rows, *(extra[i] for i in rng.choice(len(extra), len(rows) // 10,
                                                                                          replace=False))]),
        "two constant columns added": text("two_constants.csv", [header + ",EXPORT_DATE,VERSION",
                                                                  *(r + ",2027-01-15,3" for r in rows)]),
        "header lower-cased": text("lower.csv", [header.lower(), *rows]),
        "two columns dropped": text("two_dropped.csv", [without(drop_two, line) for line in lines]),
        "one column dropped, one added": text("swapped.csv", [without((drop,), header) + ",EXPORT_DATE",
                                                               *(without((drop,), r) + ",2027-01-15" for r in rows)]),
        "every row twice": text("twice.csv", [header, *rows, *rows]),
        "every row three times": text("thrice.csv", [header, *rows, *rows, *rows]),
        "half of the rows twice": text("half_twice.csv", [header, *rows, *(r for r, twice in zip(rows, half) if twice)]),
    }
