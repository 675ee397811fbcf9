"""``dprelease postprocess RELEASE_DIR``: new tables from the saved noisy measurements.

Post-processing is free: it reads only what the release published (``manifest.json``,
``spec.json``, ``measurements/`` and, if the spec has them, ``invariants/``), never the confidential data, and spends nothing, so
it touches no ledger. Each run writes a new version beside the old tables:
``RELEASE_DIR/postprocessed/<n>-<method>/tables/...``, moved into place in one rename.
"""

from __future__ import annotations

import os
import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dprelease.host import files
from dprelease.errors import UserError
from dprelease.publish.manifest_reader import read_json, read_manifest
from dprelease.postprocess import Invariants, check_invariants, postprocess_release
from dprelease.postprocess.hierarchy import noise_variance
from dprelease.publish.layout import read_invariant, sync_tree, utc_now, write_json, write_table
from dprelease.spec import fingerprint
from dprelease.spec.canonical import spec_from_canonical


def postprocess_release_dir(release_dir: Path, method: str | None) -> Path:
    manifest = read_manifest(release_dir)
    try:
        spec = spec_from_canonical(read_json(release_dir / manifest.get("spec", "spec.json")),
                                   release_dir / "spec.json")
    except (KeyError, ValueError, TypeError) as exc:
        raise UserError(f"{release_dir}/spec.json is not a valid saved spec ({exc}); the release directory has "
                        "been altered") from None
    if fingerprint(spec) != manifest["spec_fingerprint"]:
        raise UserError(f"{release_dir}/spec.json does not match the manifest's spec fingerprint; the release "
                        "directory has been altered")
    noisy: dict[tuple[str, str | None], np.ndarray] = {}
    variances: dict[tuple[str, str | None], float] = {}  # from the mechanism and scale the manifest records
    for entry in manifest["tables"]:
        key = (entry["name"], entry.get("level"))
        measure = entry.get("measure", "count")
        names = (["noisy_count"] if measure == "count" else ["noisy_sum", "noisy_count"] if "mean" in measure
                 else ["noisy_" + next(k for k in ("sum", "mode", "quantile") if k in measure)])
        read = pq.read_table(release_dir / entry["measurements"], columns=names)
        columns = [np.asarray(c.fill_null(-1).to_numpy(), dtype=np.int64) for c in read.columns]  # null: no mode
        noisy[key] = columns[0] if len(columns) == 1 else np.stack(columns)
        if noisy[key].shape[-1] != entry["cells"]:
            raise UserError(f"{entry['measurements']}: {noisy[key].shape[-1]} cells, the manifest says {entry['cells']}")
        if measure == "count":
            variances[key] = noise_variance(entry["mechanism"], Fraction(entry["scale"]))
    invariants: dict[str, np.ndarray] = {}
    for entry in manifest.get("invariants", {}).get("totals", []):
        try:
            invariants[entry["level"]] = read_invariant(spec, entry["level"], release_dir / entry["file"])
        except (OSError, ValueError, KeyError, pa.ArrowException) as exc:
            raise UserError(f"{release_dir}/{entry.get('file')}: cannot read the release's invariants ({exc}); the "
                            "release directory has been altered") from None
    if set(invariants) != set(spec.invariant_levels):
        raise UserError(f"{release_dir}/manifest.json does not list the invariants its spec declares; the release "
                        "directory has been altered")
    try:
        check_invariants(spec, invariants) if invariants else None
    except ValueError as exc:
        raise UserError(f"{release_dir}/invariants: {exc}; the release directory has been altered") from None
    structural = _structural(release_dir, spec, manifest)
    published = postprocess_release(spec, noisy, variances, method, invariants=Invariants.from_totals(invariants),
                                    structural=structural)
    versions = release_dir / "postprocessed"
    number = 1 + max((int(p.name.split("-")[0]) for p in versions.glob("*-*") if p.name.split("-")[0].isdigit()),
                     default=0)
    label = method or "as-specified"
    final = versions / f"{number}-{label}"
    staging = versions / f".{number}-{label}.staging"
    shutil.rmtree(staging, ignore_errors=True)
    files.make_dirs(staging)  # 0700, and postprocessed/ too if new (the tables in it 0600: dprelease.host.files)
    margins, names = _margin_columns(manifest)
    for table in spec.tables:
        for level, dims, _ in table.measured():
            write_table(spec, table, dims, level, published[(table.name, level)], staging,
                        structural[(table.name, level)], margins.get((table.name, level)), names)
    write_json(staging / "postprocess.json", {
        "release": spec.release, "method": method or "as specified per table", "created_at": utc_now(),
        "from": "measurements/ (the release's raw noisy values)", "budget_spent": "0",
        "note": "post-processing of published noisy measurements: no data read, no privacy budget spent"})
    sync_tree(staging)
    os.rename(staging, final)
    return final


def _margin_columns(manifest: dict) -> tuple[dict, dict]:  # type: ignore[type-arg]
    """The margins the release published beside its estimates (``accuracy: margin_columns``), by
    measurement, from the manifest's records, and the names it gave their columns (today's, or
    those of a release published before the privacy noise's margins were named so): the new
    version publishes them too, under the same names, as the release's manifest lists them."""
    from dprelease.plan.margins import Margin
    from dprelease.publish.layout import EARLIER_MARGIN_COLUMNS, MARGIN_COLUMNS

    listed = {c["name"] for t in manifest["tables"] for c in t.get("columns", [])[-2:]}  # a margin, then structural
    names = EARLIER_MARGIN_COLUMNS if listed & set(EARLIER_MARGIN_COLUMNS.values()) else MARGIN_COLUMNS
    return ({(t["name"], t.get("level")): Margin.from_record(t["margin"]) for t in manifest["tables"]
             if "margin" in t and any(c["name"] in names.values() for c in t.get("columns", []))}, names)


def _structural(release_dir: Path, spec, manifest: dict) -> dict[tuple[str, str | None], np.ndarray | None]:  # type: ignore[no-untyped-def,type-arg]
    """The release's structural cells: those its manifest lists, which must be the ones the saved
    spec implies (the planner's function of the spec); otherwise the directory was altered or
    written by a version that reasoned differently, and nothing is guessed. A release published
    before structural zeros existed (no ``structural_cells`` in its manifest) measured every cell,
    and is post-processed so."""
    from dprelease.plan.structural import cell_labels, measurement_masks

    masks = measurement_masks(spec)
    dims = {(t.name, level): d for t in spec.tables for level, d, _ in t.measured()}
    for entry in manifest["tables"]:
        key = (entry["name"], entry.get("level"))
        if "structural_cells" not in entry:  # published before structural zeros: every cell was measured
            masks[key] = None
            continue
        mask = masks.get(key)
        expected = [] if mask is None else cell_labels(spec, dims[key], np.flatnonzero(mask))
        listed = entry.get("structural", {}).get("cells", []) if entry.get("structural_cells") else []
        if listed != expected:
            raise UserError(f"{release_dir}/manifest.json lists {len(listed)} structural cells for {entry['name']}, its "
                            f"spec implies {len(expected)}; the release directory has been altered (or was written by "
                            "another version of dprelease)")
    return masks
