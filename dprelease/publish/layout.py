"""Publication: write a release into a staging directory, then move it into place.

Everything written here is published, so it holds nothing derived from the confidential data
except the noisy outputs. Data fingerprints, row counts and timings belong to the internal
run record (:func:`write_internal_record`), which is never published.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np
import pyarrow as pa

from dprelease.host import files
from dprelease.accounting import amount_text, fraction_text, unit_key
from dprelease.plan import TablePlan
from dprelease.plan.local import LocalPlan
from dprelease.plan.margins import Margin
from dprelease.spec import ROOT, MeanMeasure, ModeMeasure, Spec, Table

if TYPE_CHECKING:
    from dprelease.ledger import RecordIdentity


@dataclass(frozen=True, slots=True)
class Layout:
    """Where a release lives under an output directory."""

    output_dir: Path
    release: str
    run_id: str

    @property
    def final(self) -> Path:
        return self.output_dir / self.release

    @property
    def staging(self) -> Path:
        return self.output_dir / ".staging" / f"{self.release}.{self.run_id}"

    @property
    def internal(self) -> Path:
        return self.output_dir / "_internal" / self.release


PARQUET_CELLS = 1 << 20  # a table level of more cells is published as Parquet (a census's blocks), else CSV


def table_path(table: Table, level: str | None, kind: str = "tables", suffix: str = "csv") -> str:
    """``tables/<table>.csv``, or ``tables/<table>/<level>.csv`` for a geographic table."""
    return f"{kind}/{table.name}.{suffix}" if level is None else f"{kind}/{table.name}/{level}.{suffix}"


def table_file(table: Table, level: str | None, cells: int) -> str:
    """Where a table level of ``cells`` cells is published: CSV (one line a cell, read anywhere)
    up to :data:`PARQUET_CELLS`, Parquet above it (its category columns dictionary-encoded: a
    level of millions of blocks is a fraction of its CSV's size, written and read without a
    text column a cell). The manifest names the file; :func:`dprelease.read_release` reads both."""
    return table_path(table, level, suffix="parquet" if cells > PARQUET_CELLS else "csv")


def cell_columns(spec: Spec, dims: tuple[str, ...], start: int = 0, stop: int | None = None) -> dict[str, pa.Array]:
    """The columns of every cell (or of cells ``start`` to ``stop``), as published categories, in
    row-major order."""
    sizes = [spec.column(c).size for c in dims]
    cells = int(np.prod(sizes)) if sizes else 1
    stop = cells if stop is None else min(stop, cells)
    out: dict[str, pa.Array] = {}
    repeat = cells
    position = np.arange(start, stop, dtype=np.int64) if (start, stop) != (0, cells) else None
    for name, size in zip(dims, sizes):
        repeat //= size
        if position is None:
            index = np.tile(np.repeat(np.arange(size, dtype=np.int32), repeat), cells // (size * repeat))
        else:
            index = (position // repeat % size).astype(np.int32)
        categories = pa.array(spec.column(name).categories, pa.string())
        out[name] = pa.DictionaryArray.from_arrays(pa.array(index), categories)
    return out


PARQUET_SLICE = 1 << 20  # cells written at a time (a row group each): a large level's columns never built whole


def value_column(table: Table) -> str:
    """The published value of every cell: ``count``, ``sum`` for a sum measure, ``mode`` for a mode."""
    if isinstance(table.measure, ModeMeasure):
        return table.measure.kind
    if isinstance(table.measure, MeanMeasure):
        return "mean"
    return "count" if table.measure is None else "sum"


# the margin columns of `accuracy: margin_columns`: the privacy noise's, named so (ACS users read `moe` as the
# sampling error of weighted estimates; these are unweighted counts and the survey's sampling error is not in them)
MARGIN_COLUMNS = {"cell": "noise_moe", "mean": "noise_moe", "mode": "noise_count_gap", "quantile": "noise_rank_error"}
EARLIER_MARGIN_COLUMNS = {"cell": "moe", "mean": "moe", "mode": "moe_count_gap", "quantile": "moe_rank"}  # read, kept
_NOT_SAMPLING = ("the privacy noise's only, not the sampling error of weighted estimates (the table counts records, "
                 "unweighted): ")


def margin_values(margin: Margin, values: np.ndarray, structural: np.ndarray | None) -> pa.Array:
    """Per published cell, its margin of error at the spec's confidence in the estimate's own units
    (:mod:`dprelease.plan.margins`): a count's or sum's noise margin; a mean's bound at the cell's
    published count (empty where the count gives no bound); a mode's count gap or a quantile's rank
    error. A function of the plan and of published values alone. Structural cells: 0 (known)."""
    cells = values.shape[-1]
    if margin.kind == "mean":
        shown = [margin.at_count(n) for n in np.asarray(values[1], dtype=np.float64)]
        means = np.array([np.nan if m is None else round(m, 2) for m in shown], dtype=np.float64)
        if structural is not None:
            means[structural] = 0
        return pa.array(means, pa.float64(), from_pandas=True)  # NaN → empty
    if margin.value is None:
        return pa.nulls(cells, pa.int64())
    whole = np.full(cells, margin.value, dtype=np.int64)
    if structural is not None:
        whole[structural] = 0
    return pa.array(whole, pa.int64())


def column_meanings(spec: Spec, table: Table, dims: tuple[str, ...], structural: np.ndarray | None,
                    margin: Margin | None, margin_names: Mapping[str, str] = MARGIN_COLUMNS) -> list[dict[str, str]]:
    """The columns of a published table file, in order, and what each means (the manifest's
    ``columns``): what :func:`write_table` writes with the same arguments."""
    out = [{"name": d, "meaning": f"category of {d}" + (" (geographic level)" if i == 0 and d in spec.geography
                                                           else "")} for i, d in enumerate(dims)]
    confidence = f"{float(spec.confidence):.0%}"
    if isinstance(table.measure, ModeMeasure):
        out.append({"name": value_column(table), "meaning": f"the category of {table.measure.column} chosen by the "
                    f"exponential mechanism ({table.measure.kind}); empty in a structural cell"})
    elif isinstance(table.measure, MeanMeasure):
        out += [{"name": "mean", "meaning": f"noisy mean of {table.measure.column} (its noisy sum over its noisy "
                 "count, clamped to the declared bounds); empty where the noisy count is below 1"},
                {"name": "count", "meaning": "noisy count of the rows the mean is over (at least 0)"}]
    else:
        what = "persons" if table.measure is None else f"{table.measure.column}"
        out.append({"name": value_column(table), "meaning": f"noisy {'count of' if table.measure is None else 'sum of'} "
                    f"{what}, post-processed ({table.post_process})"})
    if margin is not None:
        meaning = _NOT_SAMPLING + {"cell": f"± margin of error at {confidence} of the noise added to this cell (before "
                           "post-processing), in the estimate's units",
                   "mean": f"± margin of error at {confidence} of the mean, in {table.measure.column if table.measure else ''} "
                           "units, at this cell's published count (a conservative bound); empty where the count "
                           "gives none",
                   "mode": f"at {confidence}, the published category's count is within this many rows of the true "
                           "mode's",
                   "quantile": f"at {confidence}, the published category's rank is within this many rows of the "
                               "quantile's"}[margin.kind]
        out.append({"name": margin_names[margin.kind], "meaning": meaning})
    if structural is not None and structural.any() and table.structural_zeros != "omit":
        out.append({"name": "structural", "meaning": "true where the spec makes the cell impossible: an exact zero, "
                    "not an estimate"})
    return out


def write_table(spec: Spec, table: Table, dims: tuple[str, ...], level: str | None, values: np.ndarray,
                directory: Path, structural: np.ndarray | None = None, margin: Margin | None = None,
                margin_names: Mapping[str, str] = MARGIN_COLUMNS) -> Path:
    """The level's geography column (if any), the group_by columns with their labels, then ``count``
    (or ``sum``, or ``mode``: the chosen category's label; or ``mean`` and ``count``).

    ``margin`` (the plan's :class:`~dprelease.plan.margins.Margin`, with ``accuracy:
    margin_columns: true``): a column of each cell's margin of error beside the estimate
    (:func:`margin_values`; named as in :data:`MARGIN_COLUMNS`).

    ``structural`` (the plan's structural cells, a function of the spec): with ``structural_zeros:
    publish`` (the default) they are published as exact zeros (an empty mode or mean) and a last
    column ``structural`` (true/false) marks them, in tables that have any; with ``omit`` they are
    left out."""
    cells = spec.dims_cells(dims)
    path = directory / table_file(table, level, cells)
    marked = structural is not None and bool(structural.any())
    if path.suffix == ".csv":  # CSV: every category as its label
        return _write_csv(_table_slice(spec, table, dims, values, structural if marked else None, margin, margin_names,
                                       True, 0, cells), path)
    # Parquet keeps the categories dictionary-encoded, written a slice of cells at a time
    return _write_parquet((_table_slice(spec, table, dims, values, structural if marked else None, margin,
                                        margin_names, False, at, at + PARQUET_SLICE)
                           for at in range(0, cells, PARQUET_SLICE)), path)


def _table_slice(spec: Spec, table: Table, dims: tuple[str, ...], values: np.ndarray, structural: np.ndarray | None,
                 margin: Margin | None, margin_names: Mapping[str, str], text: bool, start: int, stop: int) -> pa.Table:
    """Cells ``start`` to ``stop`` of a published table file, as :func:`write_table` states them
    (``structural``: None unless the table has structural cells).""" 
    columns = {k: v.dictionary_decode() if text else v for k, v in cell_columns(spec, dims, start, stop).items()}
    values = values[..., start:stop]
    structural = None if structural is None else structural[start:stop]
    if isinstance(table.measure, ModeMeasure):
        labels = spec.column(table.measure.column).categories
        codes = np.asarray(values, dtype=np.int64)
        chosen = pa.array(codes.clip(0), pa.int32(), mask=codes < 0)  # −1: no category (a structural cell)
        mode = pa.DictionaryArray.from_arrays(chosen, pa.array(labels, pa.string()))
        columns[value_column(table)] = mode.dictionary_decode() if text else mode
    elif isinstance(table.measure, MeanMeasure):  # (mean, count): an empty mean where the noisy count is < 1
        columns["mean"] = pa.array(values[0], pa.float64(), from_pandas=True)  # NaN → empty
        columns["count"] = pa.array(values[1].astype(np.int64), pa.int64())
    else:
        columns[value_column(table)] = pa.array(values, pa.int64())
    if margin is not None:
        columns[margin_names[margin.kind]] = margin_values(margin, values, structural)
    arrow = pa.table(columns)
    if structural is not None:
        if table.structural_zeros == "omit":
            arrow = arrow.filter(pa.array(~structural))
        else:
            arrow = arrow.append_column("structural", pa.array(structural, pa.bool_()))
    return arrow


def write_local_table(spec: Spec, plan: LocalPlan, counts: np.ndarray, estimates: tuple[Any, Any],
                      directory: Path) -> Path:
    """``tables/<name>.csv`` of a local table: per category the randomized answers received, and
    the estimated share of true answers with its standard error, by iterative Bayesian update
    (``share``, ``se``) and by matrix inversion projected onto the simplex (``share_mi``, ``se_mi``)."""
    ibu, mi = estimates
    columns = {plan.column: pa.array(spec.column(plan.column).categories, pa.string()),
               "answers": pa.array(counts, pa.int64()),
               "share": pa.array(ibu.proportions, pa.float64(), from_pandas=True),
               "se": pa.array(ibu.standard_errors, pa.float64(), from_pandas=True),
               "share_mi": pa.array(mi.proportions, pa.float64(), from_pandas=True),
               "se_mi": pa.array(mi.standard_errors, pa.float64(), from_pandas=True)}
    return _write_csv(pa.table(columns), directory / f"tables/{plan.name}.csv")


def invariant_path(level: str) -> str:
    return f"invariants/{level}.csv"


def write_invariant(spec: Spec, level: str, totals: np.ndarray, directory: Path) -> Path:
    """``invariants/<level>.csv``: the level's column (none at the root), then the EXACT ``count``."""
    return _write_counts(spec, () if level == ROOT else (level,), totals, directory / invariant_path(level))


def read_invariant(spec: Spec, level: str, path: Path) -> np.ndarray:
    """The exact totals of a published ``invariants/<level>.csv``, checked against the domain."""
    from pyarrow import csv

    types = {"count": pa.int64(), **({} if level == ROOT else {level: pa.string()})}
    table = csv.read_csv(path, convert_options=csv.ConvertOptions(column_types=types))
    expected = [] if level == ROOT else [str(v) for v in spec.column(level).categories]
    got = [] if level == ROOT else [str(v) for v in table.column(level).to_pylist()]
    if got != expected or table.num_rows != max(len(expected), 1):
        raise ValueError(f"{path.name} does not list the declared places of {level}")
    return np.asarray(table.column("count").to_numpy(), dtype=np.int64)


def _write_counts(spec: Spec, dims: tuple[str, ...], values: np.ndarray, path: Path, name: str = "count") -> Path:
    columns = {k: v.dictionary_decode() for k, v in cell_columns(spec, dims).items()}
    columns[name] = pa.array(values, pa.int64())
    return _write_csv(pa.table(columns), path)


def _write_csv(arrow: pa.Table, path: Path) -> Path:
    """A published CSV, owner-only (:mod:`dprelease.host.files`)."""
    from pyarrow import csv

    return files.write_with(path, lambda f: csv.write_csv(arrow, f, csv.WriteOptions(quoting_style="needed")))


def _write_parquet(slices: Iterable[pa.Table], path: Path) -> Path:
    """A published Parquet table from its slices of rows (a row group each, so a large level's
    columns are never built whole), owner-only (:mod:`dprelease.host.files`)."""
    import pyarrow.parquet as pq

    def write(f: Any) -> None:
        writer = None
        for part in slices:
            if writer is None:
                writer = pq.ParquetWriter(f, part.schema)
            writer.write_table(part)
        if writer is not None:
            writer.close()

    return files.write_with(path, write)


def write_measurement(spec: Spec, table: Table, dims: tuple[str, ...], plan: TablePlan, noisy: np.ndarray,
                      directory: Path) -> Path:
    """``measurements/...parquet``: the raw noisy counts, so post-processing can be re-run. A table
    with structural cells has a last column ``structural``: those cells were not measured (no
    noise) and hold their exact value, 0 (a mode's is null: no category)."""
    mask = plan.structural_mask() if plan.structural else None
    metadata = {"dprelease": json.dumps({"table": table.name, "level": plan.level,
                                         **({"centre": table.measure.centre,
                                             "note": "noisy_sum adds up value − centre"}
                                            if isinstance(table.measure, MeanMeasure) else {}),
                                         unit_key(plan.budget): amount_text(plan.budget),  # "rho" under zcdp
                                         **({"delta": fraction_text(plan.delta)} if plan.delta is not None else {}),
                                         "mechanism": plan.mechanism, "sensitivity": plan.shown_sensitivity,
                                         "scale": fraction_text(plan.shown_scale)})}

    def part(start: int, stop: int) -> pa.Table:
        columns = dict(cell_columns(spec, dims, start, stop))
        values = noisy[..., start:stop]
        if isinstance(table.measure, MeanMeasure):  # the centred sum (value units) and the count
            columns["noisy_sum"] = pa.array(values[0], pa.int64())
            columns["noisy_count"] = pa.array(values[1], pa.int64())
        elif isinstance(table.measure, ModeMeasure):
            columns["noisy_" + value_column(table)] = pa.array(values, pa.int64(), mask=np.asarray(values) < 0)
        else:
            columns["noisy_" + value_column(table)] = pa.array(values, pa.int64())
        if mask is not None:
            columns["structural"] = pa.array(mask[start:stop], pa.bool_())
        return pa.table(columns).replace_schema_metadata(metadata)

    cells = spec.dims_cells(dims)
    return _write_parquet((part(at, at + PARQUET_SLICE) for at in range(0, cells, PARQUET_SLICE)),
                          directory / table_path(table, plan.level, "measurements", "parquet"))


@dataclass(frozen=True, slots=True)
class ForeignRelease:
    release: str
    why: str  # "dataset 'x'" or "the same data (dataset 'x')"
    ledger: str  # its ledger's id and location, as its manifest states them


def foreign_releases(output_dir: Path, known_run_ids: set[str], dataset: str, digest: str,
                     identity: RecordIdentity | None = None) -> list[ForeignRelease]:
    """Releases in ``output_dir`` whose run the ledger in use does not record (``known_run_ids``)
    and that are of ``dataset`` (by name, periods included) or of the same data: under their own
    ledger's key, where this process can read it, their internal record's keyed fingerprint
    matches the plain ``digest``, or their sealed identity is the same people as ``identity``
    (the data's records). Reads manifests and internal records, never data."""

    found = []
    base = dataset.partition("/")[0]
    entries = sorted(p for p in output_dir.iterdir() if not p.name.startswith((".", "_"))) if output_dir.is_dir() else []
    for entry in entries:
        manifest_path = entry / "manifest.json"
        try:
            record = json.loads(manifest_path.read_text("utf-8"))
        except (FileNotFoundError, NotADirectoryError):
            continue  # not a release
        except OSError as exc:  # another user's owner-only release: unreadable, so never compared (fail closed)
            found.append(ForeignRelease(entry.name, f"unknown data (its manifest cannot be read here: {exc.strerror}; "
                                        "perhaps another user's release)", "that wrote it (not readable here)"))
            continue
        except ValueError:
            continue
        if not isinstance(record, dict) or record.get("run_id") in known_run_ids:
            continue
        ledger = record.get("ledger") or {}
        shown = (f"{ledger.get('id')} at {ledger.get('location')}" if ledger.get("id")
                 else "that wrote it (its manifest predates ledger ids)")
        name = str(record.get("dataset", ""))
        if name.partition("/")[0] == base:
            found.append(ForeignRelease(manifest_path.parent.name, f"dataset {name!r}", shown))
            continue
        same = _same_data(output_dir / "_internal" / manifest_path.parent.name / "run.json", ledger, digest, identity)
        if same is not False:  # the same data, or data that cannot be compared: refused either way
            found.append(ForeignRelease(manifest_path.parent.name, f"the same data (as dataset {name!r})" if same else
                                        f"dataset {name!r}, whose data cannot be compared with this one (its "
                                        "internal record or its ledger's key is not readable here)", shown))
    return found


def _same_data(record_path: Path, ledger: dict[str, Any], digest: str,
               identity: RecordIdentity | None) -> bool | None:
    """Whether another ledger's release read the data whose plain SHA-256 is ``digest``, or data
    of the same people as ``identity``: its internal record's keyed fingerprint, or its sealed
    identity, under that ledger's key (beside it, or at the usual key path); None when it cannot
    be told (fail closed: the caller refuses)."""
    from dprelease.errors import LedgerError
    from dprelease.ledger import keys, resolve_location

    try:
        record = json.loads(record_path.read_text("utf-8"))
        theirs = str(record.get("data_fingerprint") or "")
        sealed = str(record.get("data_identity") or "")
        check = record.get("key_check")
    except (OSError, ValueError, AttributeError):
        return None
    if not theirs.startswith(keys.PREFIX):
        return theirs == digest if theirs else None  # a record from before keyed fingerprints
    candidates = []
    try:
        ledger_id = str(ledger["id"])
        location = resolve_location(str(ledger["location"]))
        candidates = [keys.key_path(location, ledger_id)]
        if location.sqlite_path is not None:
            candidates.append(keys.beside(location.sqlite_path))
        found = [k for k in (keys.read_key(p) for p in candidates) if k is not None]
    except (KeyError, TypeError, LedgerError):
        return None
    if check is not None:  # only that ledger's own key: another key (a new ledger at its path, $DPRELEASE_LEDGER_KEY
        found = [k for k in found if not keys.keys_differ(keys.check_value(k, ledger_id), str(check))]  # ...) tells nothing
    if not found:
        return None
    if any(keys.keyed(k, digest) == theirs for k in found):
        return True
    if not sealed or identity is None:
        return False  # (a record from before sealed identities, without its key check: as it was told then)
    plain = [p for p in (keys.unseal(k, ledger_id, sealed) for k in found) if p is not None]
    if not plain:
        return None  # not sealed under any key found here: cannot be told
    try:
        return any(identity.matches(p) is not None for p in plain)
    except ValueError:  # an identity of another version: cannot be told
        return None


def write_json(path: Path, data: dict[str, Any]) -> None:
    """``data`` as JSON at ``path``, written whole and owner-only through a fresh temporary file
    (:func:`dprelease.host.files.write_text`: never through a link planted there)."""
    files.write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def move_into_place(layout: Layout) -> None:
    """One rename: the release appears whole or not at all."""
    if layout.final.exists():
        raise FileExistsError(f"{layout.final} appeared while the release was running")
    os.rename(layout.staging, layout.final)
    _fsync_dir(layout.output_dir)
    _remove_if_empty(layout.staging.parent)


def discard_staging(layout: Layout) -> None:
    """Remove a run's staged outputs: noisy results of a run that will not be published must
    not stay around to be picked from."""
    shutil.rmtree(layout.staging, ignore_errors=True)
    _remove_if_empty(layout.staging.parent)


def staged_runs(output_dir: Path, release: str) -> list[str]:
    """Run ids with staged (unpublished) outputs of ``release`` under ``output_dir``."""
    staging = output_dir / ".staging"
    if not staging.is_dir():
        return []
    return [p.name[len(release) + 1:] for p in staging.iterdir() if p.name.startswith(release + ".")]


def sync_tree(root: Path) -> None:
    """fsync every staged file and folder, so the rename publishes what is on disk."""
    for path in sorted(root.rglob("*"), reverse=True):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        else:
            _fsync_dir(path)
    _fsync_dir(root)


def _remove_if_empty(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
