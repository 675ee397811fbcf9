"""Release specs: YAML in, typed immutable objects out."""

from dprelease.spec.canonical import canonical, fingerprint
from dprelease.spec.load import load_spec, schema
from dprelease.spec.model import (
    AutoSplit,
    BinnedColumn,
    CategoricalColumn,
    Column,
    Condition,
    LocalTable,
    MeanMeasure,
    ModeMeasure,
    Dataset,
    Engine,
    ROOT,
    RangeColumn,
    RollupColumn,
    Rule,
    Spec,
    SumMeasure,
    Table,
)

__all__ = [
    "AutoSplit", "BinnedColumn", "CategoricalColumn", "Column", "Condition", "LocalTable", "MeanMeasure", "ModeMeasure", "Dataset", "Engine", "ROOT", "RangeColumn",
    "RollupColumn", "Rule", "Spec", "SumMeasure", "Table", "canonical", "fingerprint", "load_spec", "schema",
]
