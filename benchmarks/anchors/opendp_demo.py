"""The shipped demo's four tables (configs/acs_demo.yaml) in OpenDP's Polars context, run in
benchmarks/.venvs/opendp: the small-release anchor of benchmarks/small_release.py.

Same data file, the same tables and declared key sets (joined with `with_keys`, so every
declared cell is released), the same ε per table (pure DP, discrete Laplace on counts), one
row per person. The parent times the whole process; this prints one JSON line with the
cells released and the seconds after imports.

    benchmarks/.venvs/opendp/bin/python benchmarks/anchors/opendp_demo.py ROOT
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from pathlib import Path

import opendp.prelude as dp
import polars as pl

dp.enable_features("contrib")

EPSILON = {"puma_by_sex": 0.25, "adults_by_puma_age_group": 0.25, "race_by_hispanic_origin": 0.2,
           "marital_status_by_sex": 0.3}


def main(root: Path) -> None:
    start = time.perf_counter()
    pumas = [line.strip() for line in (root / "configs" / "domains" / "puma.txt").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    domains = {"PUMA": pumas, "SEX": [1, 2], "AGE_GROUP": [0, 1, 2], "RAC1P": list(range(1, 10)),
               "HISP": list(range(5)), "MSP": list(range(1, 7))}
    age = pl.col("AGEP").cast(pl.Int64)
    lf = pl.scan_csv(root / "data" / "nist_acs" / "national2019.csv", null_values=["N"],
                     schema_overrides={"PUMA": pl.String}).select(
        pl.col("PUMA"), age.alias("AGEP"), pl.col("SEX").cast(pl.Int64), pl.col("RAC1P").cast(pl.Int64),
        pl.col("HISP").cast(pl.Int64), pl.col("MSP").cast(pl.Int64),
        ((age >= 18).cast(pl.Int64) + (age >= 65).cast(pl.Int64)).alias("AGE_GROUP"))
    total = sum(EPSILON.values())
    context = dp.Context.compositor(data=lf, privacy_unit=dp.unit_of(contributions=1),
                                    privacy_loss=dp.loss_of(epsilon=total),
                                    split_by_weights=[EPSILON[t] / total for t in EPSILON])
    tables = [("puma_by_sex", ("PUMA", "SEX"), None), ("adults_by_puma_age_group", ("PUMA", "AGE_GROUP"), "adults"),
              ("race_by_hispanic_origin", ("RAC1P", "HISP"), None), ("marital_status_by_sex", ("MSP", "SEX"), "adults")]
    released = 0
    for _, dims, where in tables:
        values = [domains[d] if not (where and d == "AGE_GROUP") else [1, 2] for d in dims]
        keys = pl.DataFrame(list(itertools.product(*values)), schema=list(dims), orient="row")
        query = context.query()
        if where == "adults":
            query = query.filter(pl.col("AGEP") >= 18)
        released += query.group_by(list(dims)).agg(dp.len()).with_keys(keys).release().collect().height
    print(json.dumps({"anchor": "opendp-polars", "compute": time.perf_counter() - start, "cells": released}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
