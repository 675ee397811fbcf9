"""The ``dataset:``, ``release:``, ``ledger:``, ``output_dir:`` and ``engine:`` sections: which file
is read, the names it is released and recorded under, where it is counted and where it lands."""

from __future__ import annotations

import re
import string
from datetime import datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

from dprelease.spec import defaults
from dprelease.spec.model import Dataset, Engine
from dprelease.spec.sections.privacy import Definition, delta_beside, typed
from dprelease.spec.sections.reader import Reader
from dprelease.spec.yamlsource import Path_

SAFE_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}")  # fullmatch: '$' in the schema allows a final newline


def na_values(r: Reader) -> tuple[str, ...]:
    """``dataset.na_values``, each as written: the texts that read as missing."""
    return tuple(r.text(("dataset", "na_values", i)) or "" for i, _ in
                 enumerate(r.get(("dataset", "na_values"), list, [])))


def dataset(r: Reader, d: Definition, run_date: datetime) -> Dataset | None:
    body = r.get(("dataset",), dict)
    if body is None:
        return None
    name, path = r.get(("dataset", "name"), str), r.get(("dataset", "path"), str)
    if path is not None and "\0" in path:
        r.fail(("dataset", "path"), "contains a NUL byte")
        return None
    fmt = r.get(("dataset", "format"), str)
    if fmt is None and path is not None:
        fmt = defaults.data_format(path)
        if fmt is None:
            r.fail(("dataset", "path"), f"cannot tell the format of {path!r} from its extension; "
                   "add dataset.format: csv or parquet")
    na = na_values(r)
    lifetime, lifetime_delta = _lifetime(r, d, body)
    partition = r.get(("dataset", "partition"), dict)
    column = value = None
    disjoint = False
    if partition is not None:
        column, disjoint = partition.get("column"), partition.get("disjoint_units") is True
        value = template(r, ("dataset", "partition", "value"), partition.get("value"), run_date)
        if not isinstance(column, str) or value is None:
            return None
    if name is None or path is None or fmt is None:
        return None
    resolved = (r.base / path) if not Path(path).is_absolute() else Path(path)
    if partition is not None and not _partition_ok(r, column, value):
        return None
    return Dataset(name=defaults.period_key(name, column, value, disjoint), path=path, resolved_path=resolved,
                   format=fmt, na_values=na,
                   delimiter=r.get(("dataset", "delimiter"), str, defaults.delimiter(path)), lifetime=None if lifetime is None else typed(d, lifetime, lifetime_delta),
                   partition_column=column, partition_value=value,
                   disjoint_units=disjoint, base_name=name if disjoint else None,
                   partition_template=partition.get("value") if partition else None)


def _lifetime(r: Reader, d: Definition, body: dict[str, Any]) -> tuple[Fraction | None, Fraction | None]:
    """The dataset's lifetime budget: (ε or ρ, δ), each None when not given."""
    if not isinstance(body.get("lifetime_budget"), dict):
        return None, None
    lifetime = r.fraction(("dataset", "lifetime_budget", d.cost), f"lifetime {d.symbol}")
    return lifetime, delta_beside(r, d, ("dataset", "lifetime_budget"), "lifetime")


def _partition_ok(r: Reader, column: str | None, value: str | None) -> bool:
    """The partition column is an undeclared data column, and the period a plain name."""
    declared = r.get(("columns",), dict, {}) or {}
    if column in declared:
        r.fail(("dataset", "partition", "column"), f"{column!r} is declared under columns:; the partition "
               "column is a data column read as text and not declared (it selects the period's rows)")
        return False
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,50}", value or ""):
        r.fail(("dataset", "partition", "value"), f"the period {value!r} must be letters, digits, '.', '_' "
               "or '-' (e.g. {run_date:%Y-%m})")
        return False
    return True


def template(r: Reader, at: Path_, text: object, run_date: datetime) -> str | None:
    """``text`` with its ``{run_date:FORMAT}`` fields resolved (UTC), or None (reported)."""
    if not isinstance(text, str):
        return None
    if "{" not in text and "}" not in text:
        return text
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]
        resolved = text.format(run_date=run_date) if fields and all(f == "run_date" for f in fields) else None
    except (ValueError, KeyError, IndexError):
        resolved = None
    if resolved is None:
        r.fail(at, f"{text!r} is not a template: its only field is {{run_date:FORMAT}} with a strftime FORMAT, "
               "e.g. acs-monthly-{run_date:%Y-%m}")
    return resolved


def release(r: Reader, run_date: datetime) -> tuple[str | None, str | None]:
    """(the release name, its template if it has one): ``{run_date:FORMAT}`` fields, FORMAT a
    strftime format, resolved with the run's date (UTC)."""
    text = r.get(("release",), str)
    if text is None:
        return None, None
    if "{" not in text and "}" not in text:
        if not SAFE_NAME.fullmatch(text):
            r.fail(("release",), f"{text!r} is not a safe name: use lower-case letters, digits, '.', '_' and "
                   "'-', starting with a letter or digit")
        return text, None
    resolved = template(r, ("release",), text, run_date)
    if resolved is None:
        return None, None
    if not SAFE_NAME.fullmatch(resolved):
        r.fail(("release",), f"{text!r} resolves to {resolved!r}, not a safe name (lower-case letters, digits, "
               "'.', '_', '-')")
        return None, None
    return resolved, text


def ledger(r: Reader) -> str | None:
    """The ledger's location as written (None: the default)."""
    written = r.get(("ledger",), str)
    if written is not None and "\0" in written:
        r.fail(("ledger",), "contains a NUL byte")
    return written


def output_dir(r: Reader) -> str | None:
    """Where the spec's releases land, as written (None: --output-dir, else ./outputs). A
    directory path, relative to the spec file or absolute; not a URL."""
    written = r.get(("output_dir",), str)
    if written is None:
        return None
    if "\0" in written:
        r.fail(("output_dir",), "contains a NUL byte")
    elif "://" in written:
        r.fail(("output_dir",), f"{written!r} is a URL; releases are written to a directory: give a path "
               "relative to this spec file, e.g. output_dir: ../outputs")
    elif not written.strip():
        r.fail(("output_dir",), "is blank; give a directory relative to this spec file, e.g. output_dir: ../outputs")
    return written


def engine(r: Reader) -> Engine:
    kind = r.get(("engine", "kind"), str, "local")
    if kind == "local" and r.get(("engine", "address"), str) is not None:
        r.fail(("engine", "address"), "an address is for kind: dask (the Dask scheduler); the local engine "
               "needs none", at_key=True)
    return Engine(kind=kind, address=r.get(("engine", "address"), str))


def check_safe_names(r: Reader) -> None:
    """The dataset's and the tables' names become file and ledger names: they must be safe ones."""
    for path in [("dataset", "name")] + [("tables", i, "name") for i, _ in enumerate(r.get(("tables",), list, []))]:
        name = r.get(path, str)
        if name is not None and not SAFE_NAME.fullmatch(name):
            r.fail(path, f"{name!r} is not a safe name: use lower-case letters, digits, '.', '_' and '-', "
                   "starting with a letter or digit")
