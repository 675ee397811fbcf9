"""A starter release spec from a data file and its data dictionary (``dprelease init``).

The dictionary (JSON: ``{COLUMN: {"description": ..., "values": {...}}}``, the NIST ACS
excerpt's format) declares each column: ``values`` mapping codes to labels is a categorical
column (``domain:`` and ``labels:``); ``values`` with ``min`` and ``max`` is a ``range:`` (other
numeric codes beside them widen it, with their labels in a comment); a code that is not a number
and whose label starts with "N/A" is a missing value (``na_values`` and the column's
``missing:`` category). Domains come from the dictionary only: the data is read (streamed) to
*report* the codes it uses that the dictionary lacks, per column, never to add them. Nothing is
spent and no ledger is created.

The spec is a file to review and commit, so it holds nothing read from the data's rows: its
text is a function of the dictionary, the data's header (column names), the file's name and
format, and the paths alone. What the scan finds (:class:`Finding`: the values and how many rows
have them) is for the terminal only, as ``dprelease check`` shows it.

Its ledger and output directory are pinned in the project's ``ledgers/`` and ``outputs/`` where the
spec is inside a project (a git work tree: the shipped specs' convention, ``ledger:
../ledgers/NAME.sqlite`` from ``configs/``), else beside the spec's folder, never in it.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Iterator

from dprelease.errors import UserError

EXAMPLES = 5  # example codes shown per column


@dataclass
class StarterColumn:
    name: str
    description: str | None = None
    domain: list[str] | None = None  # categorical codes, dictionary order
    labels: list[str] | None = None
    range: tuple[int, int] | None = None
    range_notes: list[str] = field(default_factory=list)  # codes inside a range, with their labels
    missing: str | None = None  # the label of the missing category
    na_codes: list[str] = field(default_factory=list)
    skipped: str | None = None  # why the column is not declared (then commented out)


@dataclass
class Finding:
    """Codes in the data that the declared column does not hold (reported, never added)."""

    column: str
    rows: int
    examples: list[str]
    what: str  # "codes the dictionary lacks" or "values outside the range" ...


@dataclass
class Starter:
    text: str  # nothing from the data's rows (the module's docstring)
    columns: list[StarterColumn]
    findings: list[Finding]  # for the terminal only
    notes: list[str]
    complete: bool  # every column declared (a dictionary was given)
    release: str
    ledger: str  # the pins as written, relative to the spec file
    output_dir: str


def pins(dataset: str, spec_dir: Path | None = None, project: Path | None = None) -> tuple[str, str]:
    """The starter spec's ``ledger:`` and ``output_dir:`` for ``dataset``, relative to the spec's
    folder ``spec_dir``: the project's ``ledgers/`` and ``outputs/`` where the spec is inside a
    project (``project``: its top folder, e.g. a git work tree's), as the shipped specs pin
    theirs; else beside the spec's folder (``../ledgers``, ``../outputs``), never in it."""
    if project is None or spec_dir is None or not spec_dir.is_relative_to(project) or spec_dir == project / "ledgers":
        return f"../ledgers/{dataset}.sqlite", "../outputs"
    return (os.path.relpath(project / "ledgers" / f"{dataset}.sqlite", spec_dir),
            os.path.relpath(project / "outputs", spec_dir))


# ---------------------------------------------------------------- the dictionary


def read_dictionary(path: Path) -> dict[str, StarterColumn]:
    """The dictionary's columns; a UserError naming the file, what is wrong and the fix."""
    fmt = 'a JSON object {"COLUMN": {"description": "...", "values": {"CODE": "label", ...} or {"min": LO, "max": HI}}}'
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: no such dictionary file; pass --dictionary FILE of an existing file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read the dictionary ({exc}); it should be {fmt}") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}:{exc.lineno}:{exc.colno}: the dictionary is not valid JSON ({exc.msg}); "
                        f"it should be {fmt}") from None
    if not isinstance(raw, dict) or not raw:
        raise UserError(f"{path}: the dictionary is not a non-empty JSON object of columns; it should be {fmt}")
    columns = {}
    for name, entry in raw.items():
        if not isinstance(entry, dict):
            raise UserError(f"{path}: column {name!r} is not an object; it should be {fmt}")
        values = entry.get("values")
        if values is not None and not isinstance(values, dict):
            raise UserError(f"{path}: column {name!r}: values is not an object of codes; it should be {fmt}")
        description = entry.get("description")
        columns[name] = _column(str(name), description if isinstance(description, str) else None, values)
    return columns


def _is_number(text: str) -> bool:
    return re.fullmatch(r"-?\d+(\.\d+)?", text) is not None


def _is_na(code: str, label: object) -> bool:
    return not _is_number(code) and isinstance(label, str) and label.strip().upper().startswith("N/A")


def _column(name: str, description: str | None, values: dict | None) -> StarterColumn:
    col = StarterColumn(name, description)
    if not values:
        col.skipped = "the dictionary gives no values"
        return col
    codes = {str(k): v for k, v in values.items() if k not in ("min", "max")}
    col.na_codes = [c for c, label in codes.items() if _is_na(c, label)]
    if col.na_codes:
        col.missing = "; ".join(str(codes[c]) for c in col.na_codes)
    rest = {c: label for c, label in codes.items() if c not in col.na_codes}
    if "min" in values or "max" in values:
        lo, hi = values.get("min"), values.get("max")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi)):
            col.skipped = (f"the dictionary's range [{lo}, {hi}] is not of whole numbers (a range: holds integers "
                           "only); a sum or mean can read it undeclared, with bounds: and granularity:")
            return col
        for code in rest:
            if re.fullmatch(r"-?\d+", code) is None:
                col.skipped = f"the dictionary mixes a range with the code {code!r}"
                return col
            lo, hi = min(lo, int(code)), max(hi, int(code))
        col.range = (lo, hi)
        col.range_notes = [f"{c} = {label}" for c, label in rest.items()]
        return col
    col.domain = list(rest)
    col.labels = [str(label) for label in rest.values()]
    if not col.domain:
        col.skipped = "the dictionary gives only missing-value codes"
    return col


# ---------------------------------------------------------------- the data


def data_format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv", ".txt"):
        return "csv"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    raise UserError(f"{path}: cannot tell the data's format from the extension {suffix or '(none)'}; "
                    "init reads .csv, .tsv or .parquet files")


def _batches(path: Path, fmt: str, columns: list[str] | None) -> Iterator[dict[str, list]]:
    import pyarrow as pa

    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            f = pq.ParquetFile(path)
        except (OSError, pa.ArrowException) as exc:
            raise UserError(f"{path}: cannot read the Parquet file ({exc})") from None
        for batch in f.iter_batches(columns=columns):
            yield {n: batch.column(n).cast(pa.string()).to_pylist() for n in batch.schema.names}
        return
    import pyarrow.csv as pcsv

    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    names = header(path)
    try:
        reader = pcsv.open_csv(path, parse_options=pcsv.ParseOptions(delimiter=delimiter),
                               convert_options=pcsv.ConvertOptions(
                                   column_types={n: pa.string() for n in names}, strings_can_be_null=False,
                                   include_columns=columns))
        for batch in reader:
            yield {n: batch.column(n).to_pylist() for n in batch.schema.names}
    except pa.ArrowException as exc:
        raise UserError(f"{path}: cannot read the CSV file ({exc})") from None


def header(path: Path) -> list[str]:
    """The data's column names."""
    fmt = data_format(path)
    if not path.is_file():
        raise UserError(f"{path}: no such data file; pass the path of a .csv or .parquet file")
    import pyarrow as pa

    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            return list(pq.ParquetFile(path).schema_arrow.names)
        except (OSError, pa.ArrowException) as exc:
            raise UserError(f"{path}: cannot read the Parquet file ({exc})") from None
    import pyarrow.csv as pcsv

    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    try:
        reader = pcsv.open_csv(path, parse_options=pcsv.ParseOptions(delimiter=delimiter))
        return list(reader.schema.names)
    except pa.ArrowException as exc:
        raise UserError(f"{path}: cannot read the CSV header ({exc})") from None


def scan(path: Path, columns: list[StarterColumn], na_values: set[str]) -> list[Finding]:
    """Per declared column, the data's values the declaration does not hold."""
    declared = [c for c in columns if c.skipped is None]
    if not declared:
        return []
    counts: dict[str, Counter] = {c.name: Counter() for c in declared}
    for batch in _batches(path, data_format(path), [c.name for c in declared]):
        for name, values in batch.items():
            counts[name].update(v if v is not None else "" for v in values)
    findings = []
    for c in declared:
        seen = counts[c.name]
        if c.domain is not None:
            bad = {v: n for v, n in seen.items() if v not in c.domain and v not in na_values and v != ""}
            what = "code(s) the dictionary lacks (not added to the domain)"
        else:
            lo, hi = c.range  # type: ignore[misc]
            bad = {v: n for v, n in seen.items() if v not in na_values and v != ""
                   and not (re.fullmatch(r"[+-]?[0-9]{1,18}(\.0*)?", v) and lo <= int(v.split(".")[0]) <= hi)}  # "15400.0"
                                                                                    # is whole, as the reader takes it
            what = f"value(s) outside the declared range: not a whole number from {lo} to {hi}"
        if bad:
            examples = sorted(bad, key=lambda v: (-bad[v], v))[:EXAMPLES]
            findings.append(Finding(c.name, sum(bad.values()), examples, what))
        missing = sum(n for v, n in seen.items() if v in na_values or v == "")
        if missing and c.missing is None:
            findings.append(Finding(c.name, missing, sorted({v for v in seen if v in na_values or v == ""})[:EXAMPLES],
                                    "missing value(s), and the dictionary declares no missing category "
                                    "(add missing: LABEL to the column)"))
    return findings


# ---------------------------------------------------------------- the spec


def _q(text: object) -> str:
    return json.dumps(str(text), ensure_ascii=False)


def dataset_name(path: Path) -> str:
    name = re.sub(r"[^a-z0-9._-]+", "-", path.stem.lower()).strip("-._")
    return name or "dataset"


def starter(data: Path, output: Path, dictionary: Path | None = None, project: Path | None = None) -> Starter:
    """The starter spec's text for ``data``, to be written at ``output`` (inside the project
    whose top folder is ``project``, if any: see :func:`pins`)."""
    data = Path(data)
    names = header(data)
    fmt = data_format(data)
    notes: list[str] = []
    if dictionary is not None:
        known = read_dictionary(dictionary)
        columns = [known[n] for n in names if n in known]
        for n in known:
            if n not in names:
                notes.append(f"column {n} is in the dictionary but not in the data's header; left out")
        for n in names:
            if n not in known:
                notes.append(f"column {n} is in the data but not in the dictionary; a TODO in the spec")
        undocumented = [n for n in names if n not in known]
    else:
        columns, undocumented = [], list(names)
    na_values = sorted({code for c in columns if c.skipped is None for code in c.na_codes})
    findings = scan(data, columns, set(na_values)) if columns else []
    name = dataset_name(data)
    release = f"{name}-release-1"
    ledger, output_dir = pins(name, output.resolve().parent, project)
    rel = os.path.relpath(data.resolve(), output.resolve().parent)
    lines = [
        f"# A starter release spec for {data.name}, written by `dprelease init`"
        + (f" from the data dictionary {dictionary.name}." if dictionary is not None else "."),
        "# Domains, labels and ranges come from the dictionary only, never from the data."
        if dictionary is not None else
        "# No dictionary was given: every column below needs its domain (see the TODOs).",
        "# What init found in the data's rows went to its terminal only: this file holds no data value and",
        "# no count. Check it with `dprelease validate SPEC`, see what it would spend with `dprelease plan SPEC`.",
        f"release: {release}",
        "# Where the dataset's lifetime budget lives and where releases land: beside this file's folder,",
        "# never in it (relative to this file; keep both out of version control). `dprelease ledger init",
        "# --spec SPEC --reason TEXT` creates the ledger: every release of this dataset spends from that one.",
        f"ledger: {ledger}",
        f"output_dir: {output_dir}",
        "dataset:",
        f"  name: {name}                       # the ledger key",
        f"  path: {_q(rel)}",
        f"  format: {fmt}",
    ]
    if na_values:
        lines.append(f"  na_values: [{', '.join(_q(v) for v in na_values)}]   # the dictionary's N/A codes")
    lines += [
        "  lifetime_budget: {epsilon: 4}      # every release of this dataset spends from it; set on first use",
        "privacy: {definition: pure, unit: row}   # add/remove one row: one row per person",
        "budget: {epsilon: 1}                 # this release's total",
        "accuracy: {confidence: 0.95}",
        "",
        "columns:",
    ]
    for c in columns:
        lines += _column_lines(c)
    for n in undocumented:
        lines.append(f"  {n}: {{}}   # TODO: declare domain: [...] or range: [lo, hi]")
    proposed = proposed_rules(columns)
    if proposed:
        lines += ["", *proposed]
    lines += ["", "tables:"]
    example = _example_column(columns)
    budget = Fraction(1, 4)
    if example is not None:
        lines += [
            f"  # EXAMPLE (edit or replace): the number of rows per {example.name}, at ε = {budget}",
            f"  - name: example_count_by_{example.name.lower()}",
            f"    group_by: [{example.name}]",
            f'    epsilon: "{budget}"',
        ]
    else:
        first = undocumented[0] if undocumented else (names[0] if names else "COLUMN")
        lines += [
            f"  # EXAMPLE (edit or replace; TODO: {first} needs a domain first)",
            f"  - name: example_count_by_{dataset_name(Path(first))}",
            f"    group_by: [{first}]",
            f'    epsilon: "{budget}"',
        ]
    cat = [c for c in columns if c.skipped is None and c.domain is not None]
    rng = [c for c in columns if c.skipped is None and c.range is not None]
    a = cat[1].name if len(cat) > 1 else "COLUMN_A"
    b = cat[2].name if len(cat) > 2 else "COLUMN_B"
    lines += [
        "  # Another example, commented out: a two-way count table with a filter.",
        f"  # - name: {a.lower()}_by_{b.lower()}",
        f"  #   group_by: [{a}, {b}]",
    ]
    if rng:
        lo, hi = rng[0].range  # type: ignore[misc]
        lines.append(f"  #   where: {{{rng[0].name}: {{ge: {(lo + hi) // 2}}}}}   # ge gt le lt: range columns only")
    lines += ['  #   epsilon: "1/4"', ""]
    return Starter("\n".join(lines), columns, findings, notes,
                   complete=dictionary is not None and not undocumented, release=release, ledger=ledger,
                   output_dir=output_dir)


_UNDER_AGE = re.compile(r"^N/A \((?:age )?(?:less than|under|younger than) (\d+)(?: years?)?(?: old)?\)?$", re.IGNORECASE)


def proposed_rules(columns: list[StarterColumn]) -> list[str]:
    """The rules the dictionary states, commented out for the statistician to accept: a missing
    category labelled "N/A (age less than 15 years)" (or "less than 15 years old", "under 15")
    is missing exactly when the age is under 15 — ``if: {AGE: {lt: 15}}, then: {COLUMN:
    {missing: true}}, both_ways: true`` —, where one declared range column is the age (its
    description says "age"). A label of several conditions ("… or …") proposes nothing. Once
    accepted, a run checks each rule against the data before spending, and the cells a rule
    excludes are structural zeros from the start (docs/structural_zeros.md). A function of the
    dictionary alone: no data value."""
    ages = [c for c in columns if c.skipped is None and c.range is not None
            and re.search(r"\bage\b", c.description or "", re.IGNORECASE)]
    if len(ages) != 1:
        return []
    age = ages[0]
    rules: list[str] = []
    for c in columns:
        found = _UNDER_AGE.match(c.missing.strip()) if c.skipped is None and c.missing and c is not age else None
        if found is None:
            continue
        years = int(found.group(1))
        rules += [f"#   - name: {c.name.lower()}-not-applicable-under-{years}",
                  f"#     description: {_q(f'the dictionary: {c.name} is {c.missing!r} exactly when {age.name} < {years}')}",
                  f"#     if: {{{age.name}: {{lt: {years}}}}}",
                  f"#     then: {{{c.name}: {{missing: true}}}}",
                  "#     both_ways: true"]
    if not rules:
        return []
    return ["# Rules the dictionary states (proposed: uncomment those that hold for every row; a run checks",
            "# them against the data before spending, and the cells they exclude become structural zeros,",
            "# published as exact zeros instead of noise, e.g. a table of adults by marital status has no",
            "# \"N/A (age less than 15 years)\" cells).",
            "# rules:", *rules]


def _example_column(columns: list[StarterColumn]) -> StarterColumn | None:
    cat = [c for c in columns if c.skipped is None and c.domain is not None and len(c.domain) > 1]
    return min(cat, key=lambda c: len(c.domain), default=None)  # type: ignore[arg-type]


def _column_lines(c: StarterColumn) -> list[str]:
    """The column's declaration, from the dictionary alone."""
    lines = []
    if c.skipped is not None:
        lines.append(f"  # {c.name}: not declared: {c.skipped}" + (f" ({c.description})" if c.description else ""))
        lines.append(f"  # {c.name}: {{}}   # TODO: declare domain: [...] or range: [lo, hi] to use it in a table")
        return lines
    lines.append(f"  {c.name}:")
    if c.description:
        lines.append(f"    description: {_q(c.description)}")
    if c.domain is not None:
        lines.append(f"    domain: [{', '.join(_q(v) for v in c.domain)}]")
        lines.append("    labels:")
        lines += [f"      - {_q(label)}   # {code}" for code, label in zip(c.domain, c.labels or [])]
    else:
        lo, hi = c.range  # type: ignore[misc]
        note = f"   # codes: {'; '.join(c.range_notes)}" if c.range_notes else ""
        lines.append(f"    range: [{lo}, {hi}]{note}")
    if c.missing is not None:
        lines.append(f"    missing: {_q(c.missing)}   # the code(s) {', '.join(c.na_codes)}")
    return lines
