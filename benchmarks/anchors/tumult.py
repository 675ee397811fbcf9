"""The 6-table workload with Tumult Analytics on Spark (run in benchmarks/.venvs/tumult).

Same data, tables, declared key sets (KeySet.from_dict: the cross product of the domains),
ε = 0.5 per table (PureDPBudget, AddOneRow), derived columns by bin_column. Spark runs
local[2] (this machine's two cores). Prints one JSON line: seconds after Spark's start-up
until every table is collected ("compute"), and the number of cells released.

    benchmarks/.venvs/tumult/bin/python benchmarks/anchors/tumult.py DATA_DIR
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workload import AGE_EDGES, EPSILON_PER_TABLE, TABLES, VOTING_EDGES, domains  # noqa: E402


def main(data_dir: Path) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable  # Spark's Python workers: this venv's
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from tmlt.analytics import AddOneRow, BinningSpec, KeySet, PureDPBudget, QueryBuilder, Session

    warehouse = tempfile.mkdtemp(prefix="tumult-warehouse-")  # Tumult's temporary tables: never in the repository
    spark = (SparkSession.builder.master("local[2]").config("spark.driver.memory", "8g")
             .config("spark.sql.warehouse.dir", warehouse)
             .config("spark.sql.shuffle.partitions", "8").config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    start = time.perf_counter()
    doms = domains(data_dir)
    df = spark.read.parquet(str(data_dir / "persons.parquet")).select(
        *(F.col(c).cast("string") for c in ("STATE", "COUNTY", "TRACT")),
        *(F.col(c).cast("long") for c in ("AGEP", "SEX", "RAC1P", "HISP")))
    session = Session.from_dataframe(privacy_budget=PureDPBudget(EPSILON_PER_TABLE * len(TABLES)),
                                     source_id="persons", dataframe=df, protected_change=AddOneRow())
    released = 0
    for dims in TABLES:
        query = QueryBuilder("persons")
        if "AGE_GROUP" in dims:
            query = query.bin_column("AGEP", BinningSpec(AGE_EDGES, names=list(range(len(AGE_EDGES) - 1)),
                                                         right=False), name="AGE_GROUP")
        if "VOTING_AGE" in dims:
            query = query.bin_column("AGEP", BinningSpec(VOTING_EDGES, names=[0, 1], right=False),
                                     name="VOTING_AGE")
        keys = KeySet.from_dict({d: doms[d] for d in dims})
        result = session.evaluate(query.groupby(keys).count(), PureDPBudget(EPSILON_PER_TABLE))
        released += len(result.toPandas())
    print(json.dumps({"anchor": "tumult-analytics", "compute": time.perf_counter() - start, "cells": released}))
    spark.stop()
    shutil.rmtree(warehouse, ignore_errors=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
