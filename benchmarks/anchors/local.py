"""Exact-histogram anchors of the 6-table workload, run in a fresh process each (no noise, no
checks): the floor any implementation pays, and two ordinary ways to get the same counts.

* plain: pyarrow reads the columns, integer codes, one ``numpy.bincount`` per table;
* pandas: ``read_parquet`` + ``groupby(...).size()`` + ``reindex`` onto the declared domain;
* duckdb: one ``GROUP BY`` query per table on the Parquet file + ``reindex`` onto the domain.

Imports are not timed. Prints one JSON line: seconds, and the total count of every table
(each must equal 6 × rows: a check that all three count the same thing).

    python benchmarks/anchors/local.py plain|pandas|duckdb DATA_DIR
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workload import AGE_EDGES, TABLES, domains  # noqa: E402

COLUMNS = ["STATE", "COUNTY", "TRACT", "AGEP", "SEX", "RAC1P", "HISP"]


def plain(data_dir: Path) -> int:
    table = pq.read_table(data_dir / "persons.parquet", columns=COLUMNS)
    codes, sizes = {}, {}
    for name in ("STATE", "COUNTY", "TRACT"):
        col = table.column(name).combine_chunks()  # the generator writes them dictionary-encoded, in domain order
        codes[name], sizes[name] = col.indices.to_numpy(), len(col.dictionary)
    age = table.column("AGEP").to_numpy().astype(np.int64)
    codes["AGEP"], sizes["AGEP"] = age, 100
    codes["SEX"], sizes["SEX"] = table.column("SEX").to_numpy().astype(np.int64) - 1, 2
    codes["RAC1P"], sizes["RAC1P"] = table.column("RAC1P").to_numpy().astype(np.int64) - 1, 9
    codes["HISP"], sizes["HISP"] = table.column("HISP").to_numpy().astype(np.int64), 5
    lookup = np.searchsorted(AGE_EDGES, np.arange(100), side="right") - 1
    codes["AGE_GROUP"], sizes["AGE_GROUP"] = lookup[age], len(AGE_EDGES) - 1
    codes["VOTING_AGE"], sizes["VOTING_AGE"] = (age >= 18).astype(np.int64), 2
    total = 0
    for dims in TABLES:
        index = np.zeros(table.num_rows, dtype=np.int64)
        for d in dims:
            index *= sizes[d]
            index += codes[d]
        total += int(np.bincount(index, minlength=math.prod(sizes[d] for d in dims)).sum())
    return total


def _age_group_sql() -> str:
    return " + ".join(f"(AGEP >= {edge})::INTEGER" for edge in AGE_EDGES[1:-1])


def pandas_(data_dir: Path) -> int:
    import pandas as pd

    doms = domains(data_dir)
    df = pd.read_parquet(data_dir / "persons.parquet", columns=COLUMNS)
    df["AGE_GROUP"] = np.searchsorted(AGE_EDGES, df["AGEP"].to_numpy(), side="right") - 1
    df["VOTING_AGE"] = (df["AGEP"] >= 18).astype(np.int8)
    total = 0
    for dims in TABLES:
        full = pd.MultiIndex.from_product([doms[d] for d in dims], names=list(dims))
        counts = df.groupby(list(dims), observed=True).size().reindex(full, fill_value=0)
        total += int(counts.sum())
    return total


def duckdb_(data_dir: Path) -> int:
    import duckdb
    import pandas as pd

    doms = domains(data_dir)
    con = duckdb.connect()
    source = (f"(SELECT *, {_age_group_sql()} AS AGE_GROUP, (AGEP >= 18)::INTEGER AS VOTING_AGE "
              f"FROM read_parquet('{data_dir / 'persons.parquet'}'))")
    total = 0
    for dims in TABLES:
        keys = ", ".join(f"{d}::VARCHAR AS {d}" if d in ("STATE", "COUNTY", "TRACT") else f"{d}::BIGINT AS {d}"
                         for d in dims)
        df = con.execute(f"SELECT {keys}, count(*) AS n FROM {source} GROUP BY ALL").df()
        full = pd.MultiIndex.from_product([doms[d] for d in dims], names=list(dims))
        total += int(df.set_index(list(dims))["n"].reindex(full, fill_value=0).sum())
    return total


def main() -> None:
    kind, data_dir = sys.argv[1], Path(sys.argv[2])
    run = {"plain": plain, "pandas": pandas_, "duckdb": duckdb_}[kind]
    start = time.perf_counter()
    total = run(data_dir)
    print(json.dumps({"anchor": kind, "compute": time.perf_counter() - start, "total": total}))


if __name__ == "__main__":
    main()
