"""Reading a published release into pandas: ``dprelease.read_release(path)``.

Reads only what a release publishes (``manifest.json``, ``spec.json``, ``tables/``,
``measurements/``, ``invariants/``, ``postprocessed/``), never the confidential data, and
spends nothing: everything here is post-processing of published outputs.

Every table comes back as a :class:`pandas.DataFrame` whose category columns have an ordered
:class:`pandas.CategoricalDtype` in the order the spec declared (saved in the release's
``spec.json``), with every declared category, also those no published row holds (an omitted
structural zero, say). The manifest's facts come back typed: budgets as the
:mod:`dprelease.accounting` budgets (:class:`~dprelease.accounting.PureDP`,
:class:`~dprelease.accounting.ZCDP`, :class:`~dprelease.accounting.ApproxDP`, exact fractions),
scales as fractions. Example::

    >>> import dprelease
    >>> release = dprelease.read_release("outputs/acs-demo-2019")
    >>> release.total
    PureDP(epsilon=Fraction(1, 1))
    >>> release.facts("puma_by_sex").margin_of_error
    12
    >>> release.table("puma_by_sex").dtypes
    PUMA     category
    SEX      category
    count       int64
    dtype: object
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np
import pandas as pd
import pyarrow as pa

from dprelease.accounting import Budget
from dprelease.plan.margins import Margin
from dprelease.publish.manifest_reader import (
    MANIFEST_FORMAT,
    NotARelease,
    entry_budget,
    read_budget,
    read_json,
    read_manifest,
    release_budgets,
)
from dprelease.publish.layout import EARLIER_MARGIN_COLUMNS, MARGIN_COLUMNS, invariant_path, table_path, value_column
from dprelease.spec import ROOT, MeanMeasure, ModeMeasure, RangeColumn, Spec, Table
from dprelease.spec.canonical import spec_from_canonical

__all__ = ["MANIFEST_FORMATS", "NotARelease", "Part", "Release", "TableFacts", "read_release"]

MANIFEST_FORMATS = (MANIFEST_FORMAT,)  # the manifest formats this reader knows (one: manifest_reader's)


@dataclass(frozen=True, slots=True)
class Part:
    """One noisy part of a mean: its ``sum`` (of centred values) or its ``count``."""

    part: str
    budget: Budget
    mechanism: str
    sensitivity: int
    scale: Fraction
    margin_of_error: float  # at the release's confidence, in the part's units
    margin_of_error_95: float


@dataclass(frozen=True, slots=True)
class TableFacts:
    """What the manifest states about one measurement: a table, or one level of a geographic one.

    ``margin_of_error`` is the a-priori margin of each cell's noise at the release's confidence
    (``margin_of_error_95`` at 95%), in the published unit (persons, or the summed column's
    unit); None for a mode or quantile, which publishes a category, not a number, and for a
    mean: a mean's error depends on its cell's count, and its parts' margins (``parts``: the
    noisy sum of value − centre and the noisy count) are not in the mean's unit. ``margin`` is
    the measurement's margin in its measure's own units (:class:`dprelease.plan.margins.Margin`:
    a mean's by its cells' count, a mode's count gap, a quantile's rank error); :meth:`Release.margins` gives it
    per published cell."""

    name: str
    level: str | None
    measure: str  # count, sum, mean, mode or quantile
    column: str | None  # the column summed, averaged, or whose mode or quantile is published
    budget: Budget
    ledger_charge: Budget  # in the ledger's terms
    mechanism: str
    sensitivity: int
    scale: Fraction
    margin_of_error: float | None
    margin_of_error_95: float | None
    cells: int
    structural_cells: int
    group_by: tuple[str, ...]
    post_process: str
    file: str
    measurements_file: str
    parts: tuple[Part, ...]  # a mean's sum and count; () otherwise
    entry: Mapping[str, Any] = field(repr=False)  # the manifest's record, as published (read-only)
    margin: Margin | None = None


def read_release(path: str | Path) -> Release:
    """Read the published release at ``path`` (its directory, or its ``manifest.json``).

    Raises :class:`NotARelease` (a :class:`dprelease.errors.UserError`) with what is wrong and
    what to do when ``path`` is not a release, its manifest is of a format this version does not
    read, or its files do not agree with its manifest."""
    directory = Path(path)
    if directory.name == "manifest.json" and directory.is_file():
        directory = directory.parent
    if not (directory / "manifest.json").is_file():
        raise NotARelease(_not_a_release(directory))
    manifest = read_manifest(directory)
    spec_file = directory / str(manifest.get("spec", "spec.json"))
    try:
        spec = spec_from_canonical(read_json(spec_file), spec_file)
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        raise NotARelease(f"{spec_file} is not a saved spec this version reads ({type(exc).__name__}: {exc}); "
                          "the release directory has been altered") from None
    try:
        return Release(directory, manifest, spec)
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        raise NotARelease(f"{directory}/manifest.json does not state what this version reads "
                          f"({type(exc).__name__}: {exc}); the release directory has been altered") from None


class Release:
    """A published release: the manifest's facts, and its tables as DataFrames (read on demand).

    Attributes: ``path``, ``manifest`` (the published dict), ``spec`` (the saved spec, typed),
    ``release``, ``dataset``, ``created_at``, ``definition`` (pure, zcdp or approx),
    ``neighbouring``, ``confidence`` (a Fraction), ``total`` (what the tables spent, a typed
    budget), ``release_budget``, ``ledger_charge`` (in the ledger's terms), ``lifetime_cap``,
    ``lifetime_spent_before``, ``lifetime_spent_after``, ``implied_approximate_dp`` (zCDP: the
    (ε, δ) it implies, else None), ``geography`` (levels, coarse to fine), ``invariant_levels``
    (levels whose totals are published exactly, outside differential privacy) and
    ``measurements`` (one :class:`TableFacts` per table and level)."""

    def __init__(self, path: Path, manifest: dict[str, Any], spec: Spec):
        self.path, self.manifest, self.spec = path, manifest, spec
        kind = spec.definition
        budgets = release_budgets(manifest)
        self.release: str = manifest["release"]
        self.dataset: str = manifest["dataset"]
        self.created_at: str = manifest["created_at"]
        self.definition: str = kind
        self.neighbouring: str = manifest["privacy"]["neighbouring"]
        self.confidence = Fraction(manifest["confidence"])
        self.total, self.release_budget, self.ledger_charge = budgets.total, budgets.release, budgets.ledger_charge
        self.lifetime_cap, self.lifetime_spent_before = budgets.cap, budgets.spent_before
        self.lifetime_spent_after = budgets.spent_after
        implied = manifest.get("implied_approximate_dp")
        self.implied_approximate_dp = read_budget(implied) if implied else None
        self.geography: tuple[str, ...] = tuple(manifest.get("geography", ()))
        self.invariant_levels: tuple[str, ...] = tuple(t["level"] for t in manifest.get("invariants", {})
                                                       .get("totals", ()))
        self.measurements = tuple(_facts(entry) for entry in manifest["tables"])
        self._tables = {t.name: t for t in spec.tables}
        self._local = {t["name"]: t for t in manifest.get("local_tables", ())}
        missing = {f.name for f in self.measurements} - set(self._tables)
        if missing:
            raise ValueError(f"tables {sorted(missing)} are not in the saved spec")

    def __repr__(self) -> str:
        lines = [f"<release {self.release} of dataset {self.dataset}, {self.created_at}: {self.definition}, "
                 f"total {self.total}>"]
        for name in self.table_names:
            levels = self.levels(name)
            lines.append(f"  {name}" + (f" (levels: {', '.join(levels)})" if levels != (None,) else ""))
        return "\n".join(lines)

    # ---------------------------------------------------------------- what there is

    @property
    def table_names(self) -> tuple[str, ...]:
        """Every published table: central tables in manifest order, then local ones."""
        return tuple(dict.fromkeys(f.name for f in self.measurements)) + tuple(self._local)

    def levels(self, name: str) -> tuple[str | None, ...]:
        """A geographic table's levels, the root first; ``(None,)`` for any other table."""
        if name in self._local:
            return (None,)
        levels = tuple(f.level for f in self.measurements if f.name == name)
        if not levels:
            raise KeyError(f"{self.release} has no table {name!r}; it has {', '.join(self.table_names)}")
        return levels

    def facts(self, name: str, level: str | None = None) -> TableFacts:
        """What the manifest states about table ``name`` (at ``level``, for a geographic table)."""
        level = self._level(name, level)
        return next(f for f in self.measurements if f.name == name and f.level == level)

    def local_facts(self, name: str) -> Mapping[str, Any]:
        """The manifest's record of a local table (protocol, per-respondent ε, collection)."""
        if name not in self._local:
            raise KeyError(f"{self.release} has no local table {name!r}")
        return MappingProxyType(self._local[name])

    def summary(self) -> pd.DataFrame:
        """One row per measurement: table, level, measure, mechanism, budget (typed, exact),
        sensitivity, scale, margin of error, cells."""
        return pd.DataFrame([{"table": f.name, "level": f.level, "measure": f.measure, "column": f.column,
                              "mechanism": f.mechanism, "budget": f.budget, "sensitivity": f.sensitivity,
                              "scale": f.scale, "margin_of_error": f.margin_of_error, "cells": f.cells,
                              "structural_cells": f.structural_cells, "post_process": f.post_process}
                             for f in self.measurements])

    @property
    def postprocessed(self) -> tuple[str, ...]:
        """The versions ``dprelease postprocess`` wrote beside the tables, oldest first."""
        versions = self.path / "postprocessed"
        found = [p.name for p in versions.iterdir() if p.is_dir() and not p.name.startswith(".")] \
            if versions.is_dir() else []
        return tuple(sorted(found, key=lambda n: (int(n.split("-")[0]) if n.split("-")[0].isdigit() else 0, n)))

    # ---------------------------------------------------------------- the tables

    def __getitem__(self, key: str | tuple[str, str]) -> pd.DataFrame:
        """``release["puma_by_sex"]``, or ``release["persons_by_sex_age_group", "PUMA"]``."""
        return self.table(*key) if isinstance(key, tuple) else self.table(key)

    def table(self, name: str, level: str | None = None, *, version: str | None = None) -> pd.DataFrame:
        """Table ``name`` as published (at ``level``, for a geographic table; from a
        ``postprocessed`` version if given): its geography and group_by columns, then ``count``,
        ``sum``, ``mean`` and ``count``, ``mode`` or ``quantile``, then ``structural`` if the
        table has structural zeros. Category columns (a mode's and a quantile's too) are ordered
        categoricals in declared order; an empty mode or mean is missing (NaN)."""
        if name in self._local:
            return self._local_table(name, version)
        level = self._level(name, level)
        table, facts = self._tables[name], self.facts(name, level)
        dims = next(d for lv, d, _ in table.measured() if lv == level)
        values = _value_columns(table)
        base = self.path if version is None else self._version(version)
        parquet = facts.file.endswith(".parquet")  # a large level (publish.table_file); never a path of the manifest's
        if version is not None and not (base / table_path(table, level, suffix="parquet" if parquet else "csv")).exists():
            parquet = not parquet  # a version written where the size that chooses Parquet was another
        path = base / table_path(table, level, suffix="parquet" if parquet else "csv")
        listed = self._columns(name, level)  # accuracy: margin_columns (named as when the release was published)
        margin = None if facts.margin is None else next(
            (c for c in (MARGIN_COLUMNS[facts.margin.kind], EARLIER_MARGIN_COLUMNS[facts.margin.kind]) if c in listed), None)
        if margin is not None:
            values[margin] = pa.float64() if facts.margin.kind == "mean" else pa.int64()
        if parquet:  # a mode's or quantile's category, as categories of its column (null: an empty cell)
            frame = self._read_parquet(path, dims, values, optional=("structural",), categories=(
                {table.measure.kind: table.measure.column} if isinstance(table.measure, ModeMeasure) else {}))
        else:
            frame = self._read_csv(path, dims, values, optional=("structural",))
        expected = facts.cells - (facts.structural_cells if table.structural_zeros == "omit" else 0)
        if len(frame) != expected:
            raise NotARelease(f"{path}: {len(frame)} rows, the manifest states {expected}; the release directory "
                              "has been altered")
        if isinstance(table.measure, ModeMeasure) and not parquet:  # Parquet's is categorical already
            frame[table.measure.kind] = self._categorical(path, table.measure.column, frame[table.measure.kind],
                                                          empty_is_missing=True)
        measured = self.spec.column(table.measure.column) if isinstance(table.measure, ModeMeasure) else None
        if isinstance(measured, RangeColumn) and measured.missing is None:  # a range column's value: a number
            frame[table.measure.kind] = _numbers(frame[table.measure.kind])  # (with a missing category: categories)
        return frame

    def margins(self, name: str, level: str | None = None) -> pd.DataFrame:
        """Table ``name`` as :meth:`table` gives it, with its margin per cell at the release's
        confidence (:attr:`TableFacts.margin`), in columns named for what they count, so that no
        figure of rows sits where a value's margin is read:

        * a count or a sum: ``margin_of_error`` (persons, the summed unit), the same for all cells
          but the structural ones (exact zeros: 0, as the published margin columns give them);
        * a mean: ``margin_of_error`` in the mean's unit at the cell's published noisy count (a
          plug-in for its row count; NaN where it gives no bound);
        * a mode: ``count_gap``, in rows: the published category's count is within it of the
          true mode's;
        * a quantile: ``rank_error``, in rows: the published category's rank is within it of
          q·n, beyond the best category's own distance (which a release does not publish: so no
          interval of quantile levels is derived from it). Never in the value's units: no
          published figure converts ranks into values with a stated guarantee.

        Post-processing of published figures only."""
        frame, margin = self.table(name, level), self.facts(name, level).margin
        if margin.kind == "mean":
            frame["margin_of_error"] = pd.Series([margin.at_count(n) for n in frame["count"]], dtype="float64")
        elif margin.kind == "mode":
            frame["count_gap"] = margin.value
        elif margin.kind == "quantile":
            frame["rank_error"] = margin.value
        else:
            frame["margin_of_error"] = float(margin.value) if margin.value is not None else np.nan
        if "structural" in frame:  # an exact zero (no category, an empty mean): no noise, no margin, as published
            column = {"mode": "count_gap", "quantile": "rank_error"}.get(margin.kind, "margin_of_error")
            frame[column] = frame[column].where(~frame["structural"].astype(bool), 0)
        return frame

    def tables(self) -> dict[str, pd.DataFrame | dict[str, pd.DataFrame]]:
        """Every table: a DataFrame, or for a geographic table a dict of one per level."""
        out: dict[str, pd.DataFrame | dict[str, pd.DataFrame]] = {}
        for name in self.table_names:
            levels = self.levels(name)
            out[name] = self.table(name) if levels == (None,) else {lv: self.table(name, lv) for lv in levels}  # type: ignore[misc]
        return out

    def noisy(self, name: str, level: str | None = None) -> pd.DataFrame:
        """The raw noisy measurements of table ``name`` (``measurements/…parquet``), before any
        post-processing: category columns as in :meth:`table`, then ``noisy_count``,
        ``noisy_sum``, ``noisy_mode`` (the chosen category's code) or a mean's ``noisy_sum``
        (of value − centre) and ``noisy_count``, and ``structural`` if any cell is."""
        import pyarrow.parquet as pq

        level = self._level(name, level)
        table, facts = self._tables[name], self.facts(name, level)
        path = self.path / facts.measurements_file
        try:
            arrow = pq.read_table(path)
        except (OSError, pa.ArrowException) as exc:
            raise NotARelease(f"{path}: cannot read the release's noisy measurements ({exc})") from None
        dims = next(d for lv, d, _ in table.measured() if lv == level)
        frame = pd.DataFrame({c: self._categorical(path, c, _text(arrow.column(c))) if c in dims
                              else arrow.column(c).to_pandas() for c in arrow.column_names})
        if list(frame.columns[:len(dims)]) != list(dims) or len(frame) != facts.cells:
            raise NotARelease(f"{path}: not the {facts.cells} cells over {', '.join(dims) or 'no column'} the manifest "
                              "states; the release directory has been altered")
        return frame

    def invariants(self, level: str) -> pd.DataFrame:
        """The totals published EXACTLY, outside differential privacy, at ``level``: the
        level's places (none at the root) and ``count``."""
        if level not in self.invariant_levels:
            raise KeyError(f"{self.release} publishes no invariant totals at {level!r}"
                           + (f"; it does at {', '.join(self.invariant_levels)}" if self.invariant_levels else ""))
        dims = () if level == ROOT else (level,)
        return self._read_csv(self.path / invariant_path(level), dims, {"count": pa.int64()})

    # ---------------------------------------------------------------- reading files

    def _level(self, name: str, level: str | None) -> str | None:
        levels = self.levels(name)
        if level not in levels:
            if levels == (None,):
                raise KeyError(f"{name} is not a geographic table: read it without a level")
            raise KeyError(f"{name} is published per level: name one of {', '.join(map(str, levels))}")
        return level

    def _columns(self, name: str, level: str | None) -> list[str]:
        """The columns the manifest lists for the measurement (none in manifests before it listed them)."""
        entry = next((t for t in self.manifest["tables"] if t["name"] == name and t.get("level") == level), {})
        return [c["name"] for c in entry.get("columns", [])]

    def _version(self, version: str) -> Path:
        if version not in self.postprocessed:
            raise KeyError(f"{self.release} has no post-processed version {version!r}"
                           + (f"; it has {', '.join(self.postprocessed)}" if self.postprocessed else ""))
        return self.path / "postprocessed" / version

    def _local_table(self, name: str, version: str | None) -> pd.DataFrame:
        entry = self._local[name]
        base = self.path if version is None else self._version(version)
        numbers = {"answers": pa.int64(), **{c: pa.float64() for c in ("share", "se", "share_mi", "se_mi")}}
        return self._read_csv(base / entry["file"], (entry["column"],), numbers)

    def _read_csv(self, path: Path, dims: tuple[str, ...], values: dict[str, pa.DataType],
                  optional: tuple[str, ...] = ()) -> pd.DataFrame:
        """A published CSV with exactly these columns (``optional`` ones may follow): dims as
        declared categories, values typed; any other layout is a clear error."""
        from pyarrow import csv as pacsv

        try:
            with path.open(newline="", encoding="utf-8") as f:
                header = next(csv.reader(f), [])
        except OSError as exc:
            raise NotARelease(f"{path}: cannot read a table the manifest lists ({exc.strerror}); the release "
                              "directory is incomplete") from None
        wanted = [*dims, *values]
        if header[:len(wanted)] != wanted or not set(header[len(wanted):]) <= set(optional):
            raise NotARelease(f"{path}: columns {header}, expected {wanted}; the release directory has been altered")
        types = {**{c: pa.string() for c in header}, **values, **({"structural": pa.bool_()}
                                                                   if "structural" in header else {})}
        try:
            arrow = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(column_types=types,
                                                                              strings_can_be_null=False))
        except pa.ArrowException as exc:
            raise NotARelease(f"{path}: not a table this version reads ({exc})") from None
        frame = pd.DataFrame({c: (self._categorical(path, c, arrow.column(c).to_pandas()) if c in dims
                                  else arrow.column(c).to_pandas()) for c in header})
        return frame

    def _read_parquet(self, path: Path, dims: tuple[str, ...], values: dict[str, pa.DataType],
                      optional: tuple[str, ...] = (), categories: Mapping[str, str] = MappingProxyType({})
                      ) -> pd.DataFrame:
        """A published Parquet table with exactly these columns (``optional`` ones may follow):
        dims as declared categories, and each value column of ``categories`` (a mode's or a
        quantile's) as the categories of the column it names, a null an empty cell; the other
        values of their types. Any other layout is a clear error."""
        import pyarrow.parquet as pq

        try:
            arrow = pq.read_table(path)
        except OSError as exc:
            raise NotARelease(f"{path}: cannot read a table the manifest lists ({exc}); the release directory is "
                              "incomplete or altered") from None
        header = arrow.schema.names
        wanted = [*dims, *values]
        if header[:len(wanted)] != wanted or not set(header[len(wanted):]) <= set(optional):
            raise NotARelease(f"{path}: columns {header}, expected {wanted}; the release directory has been altered")
        types = {**values, "structural": pa.bool_()}
        out: dict[str, pd.Series] = {}
        for c in header:
            column = arrow.column(c)
            if c in dims or c in categories:
                out[c] = self._categories(path, c if c in dims else categories[c], column, empty_is_missing=c not in dims)
            elif column.type != types[c]:
                raise NotARelease(f"{path}: column {c} is {column.type}, expected {types[c]}; the release directory "
                                  "has been altered")
            else:
                out[c] = column.to_pandas()
        return pd.DataFrame(out)

    def _categories(self, path: Path, column: str, arr: pa.ChunkedArray, empty_is_missing: bool) -> pd.Series:
        """A Parquet column of categories (dictionary-encoded, or text) as an ordered categorical
        over the declared categories of ``column``, without a text value a row; a null only
        where ``empty_is_missing`` (a mode with no category)."""
        import pyarrow.compute as pc

        declared = list(self.spec.column(column).categories)
        whole = arr.combine_chunks() if arr.num_chunks else pa.array([], pa.string())
        if not pa.types.is_dictionary(whole.type):
            if not (pa.types.is_string(whole.type) or pa.types.is_large_string(whole.type)):
                raise NotARelease(f"{path}: {column} is {whole.type}, not categories; the release directory has "
                                  "been altered")
            whole = pc.dictionary_encode(whole)
        position = {c: i for i, c in enumerate(declared)}
        labels = whole.dictionary.to_pylist()
        unknown = [v for v in labels if v not in position]
        if unknown:
            raise NotARelease(f"{path}: {column} holds {unknown[0]!r}, not a declared category of {column}; the "
                              "release directory has been altered")
        if whole.null_count and not empty_is_missing:
            raise NotARelease(f"{path}: {column} has empty cells; the release directory has been altered")
        remap = np.array([position[v] for v in labels] + [-1], dtype=np.int64)  # the last: a null
        indices = np.asarray(whole.indices.fill_null(len(labels)).to_numpy(zero_copy_only=False), dtype=np.int64)
        dtype = pd.CategoricalDtype(declared, ordered=True)
        return pd.Series(pd.Categorical.from_codes(remap[indices], dtype=dtype))

    def _categorical(self, path: Path, column: str, texts: pd.Series, empty_is_missing: bool = False) -> pd.Series:
        """``texts`` as an ordered categorical over the declared categories of ``column``."""
        declared = pd.CategoricalDtype(list(self.spec.column(column).categories), ordered=True)
        empty = (texts == "") if empty_is_missing else pd.Series(False, index=texts.index)
        unknown = ~texts.isin(declared.categories) & ~empty
        if unknown.any():
            raise NotARelease(f"{path}: {column} holds {texts[unknown].iloc[0]!r}, not a declared category of "
                              f"{column}; the release directory has been altered")
        return texts.mask(empty).astype(declared)


def _numbers(categories: pd.Series) -> pd.Series:
    """A categorical of a range column's values (whole numbers written as text) as nullable
    integers (an empty cell: missing)."""
    values = np.asarray([int(c) for c in categories.cat.categories] + [0], dtype=np.int64)
    codes = categories.cat.codes.to_numpy()
    return pd.Series(pd.arrays.IntegerArray(values[codes], codes < 0), index=categories.index)


def _value_columns(table: Table) -> dict[str, pa.DataType]:
    """The published value columns of a central table and their types."""
    match table.measure:
        case MeanMeasure():
            return {"mean": pa.float64(), "count": pa.int64()}
        case ModeMeasure():
            return {table.measure.kind: pa.string()}
        case _:
            return {value_column(table): pa.int64()}


def _facts(entry: dict[str, Any]) -> TableFacts:
    measure = entry.get("measure", "count")
    name = measure if isinstance(measure, str) else next(k for k in ("sum", "mean", "mode", "quantile")
                                                         if k in measure)
    category = name in ("mode", "quantile", "mean")  # no one margin in the published unit
    parts = tuple(Part(p["part"], entry_budget(p), p["mechanism"],
                       p["sensitivity"], Fraction(p["scale"]), p["moe"], p["moe95"]) for p in entry.get("parts", ()))
    return TableFacts(
        name=entry["name"], level=entry.get("level"), measure=name,
        column=None if isinstance(measure, str) else measure[name],
        budget=entry_budget(entry), ledger_charge=read_budget(entry["ledger_charge"]),
        mechanism=entry["mechanism"], sensitivity=entry["sensitivity"], scale=Fraction(entry["scale"]),
        margin_of_error=None if category else entry["moe"],
        margin_of_error_95=None if category else entry["moe95"],
        cells=entry["cells"], structural_cells=entry.get("structural_cells", 0),
        group_by=tuple(entry.get("group_by", ())), post_process=entry["post_process"], file=entry["file"],
        measurements_file=entry["measurements"], parts=parts, entry=MappingProxyType(entry),
        margin=Margin.from_record(entry["margin"]))


def _text(column: pa.ChunkedArray) -> pd.Series:
    """A parquet column of categories (dictionary-encoded) as text."""
    arr = column.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    return arr.to_pandas()


def _not_a_release(directory: Path) -> str:
    if not directory.exists():
        return f"{directory} does not exist: give the directory of a published release (e.g. outputs/<release>)"
    if not directory.is_dir():
        return f"{directory} is not a published release: give its directory, which holds manifest.json"
    inside = sorted(p.parent.name for p in directory.glob("*/manifest.json"))
    if inside:
        return (f"{directory} is not a release but holds releases: read one of "
                + ", ".join(str(directory / n) for n in inside[:5]) + ("…" if len(inside) > 5 else ""))
    return (f"{directory} is not a published release: it has no manifest.json (a release directory holds "
            "manifest.json, spec.json and tables/, as `dprelease run` publishes them)")
