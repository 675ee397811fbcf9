"""The 6-table workload with OpenDP's Polars context (run in benchmarks/.venvs/opendp).

Same data, tables, declared key sets (joined with `with_keys`, so every declared cell is
released), ε = 0.5 per table (pure DP, discrete Laplace), one row per person. Prints one JSON
line: seconds after imports and start-up until every table is collected ("compute"), and the
number of cells released.

    benchmarks/.venvs/opendp/bin/python benchmarks/anchors/opendp_polars.py DATA_DIR
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from pathlib import Path

import opendp.prelude as dp
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workload import AGE_EDGES, EPSILON_PER_TABLE, TABLES, domains  # noqa: E402

dp.enable_features("contrib")


def main(data_dir: Path) -> None:
    start = time.perf_counter()
    doms = domains(data_dir)
    age = pl.col("AGEP").cast(pl.Int64)
    lf = pl.scan_parquet(data_dir / "persons.parquet").select(
        pl.col("STATE").cast(pl.String), pl.col("COUNTY").cast(pl.String), pl.col("TRACT").cast(pl.String),
        age.alias("AGEP"), pl.col("SEX").cast(pl.Int64), pl.col("RAC1P").cast(pl.Int64),
        pl.col("HISP").cast(pl.Int64),
        # derived columns: a row-by-row map before the analysis (bin index of the age)
        pl.sum_horizontal([(age >= edge).cast(pl.Int64) for edge in AGE_EDGES[1:-1]]).alias("AGE_GROUP"),
        (age >= 18).cast(pl.Int64).alias("VOTING_AGE"))
    context = dp.Context.compositor(data=lf, privacy_unit=dp.unit_of(contributions=1),
                                    privacy_loss=dp.loss_of(epsilon=EPSILON_PER_TABLE * len(TABLES)),
                                    split_evenly_over=len(TABLES))
    released = 0
    for dims in TABLES:
        keys = pl.DataFrame(list(itertools.product(*(doms[d] for d in dims))), schema=list(dims), orient="row")
        keys = keys.with_columns(*(pl.col(d).cast(pl.String if d in ("STATE", "COUNTY", "TRACT") else pl.Int64)
                                   for d in dims))
        query = context.query().group_by(list(dims)).agg(dp.len()).with_keys(keys)
        released += query.release().collect().height
    print(json.dumps({"anchor": "opendp-polars", "compute": time.perf_counter() - start, "cells": released}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
