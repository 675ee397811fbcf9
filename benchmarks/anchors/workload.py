"""The 6-table census workload, shared by the anchor scripts (imports nothing outside the
standard library, so each anchor's venv can load it): the tables, their declared domains and
the derived columns, exactly as benchmarks/generate.py declares them for dprelease."""

from __future__ import annotations

from pathlib import Path

AGE_EDGES = [0, 5, 10, 15, 18, 20, 25, 30, 35, 40, 45, 50, 55, 60, 62, 65, 67, 70, 75, 80, 85, 100]
VOTING_EDGES = [0, 18, 100]
EPSILON_PER_TABLE = 0.5  # six tables: ε = 3 in all, pure DP, add/remove one row
TABLES = [("STATE", "SEX", "AGEP"), ("COUNTY", "SEX", "AGE_GROUP"), ("TRACT", "SEX"), ("TRACT", "RAC1P"),
          ("COUNTY", "RAC1P", "HISP"), ("TRACT", "VOTING_AGE", "HISP")]


def domains(data_dir: Path) -> dict[str, list]:  # type: ignore[type-arg]
    """The declared domain of every column a table groups by (derived columns: bin indices)."""
    text = {name: (data_dir / f"{name.lower()}s.txt").read_text().split()
            for name in ("STATE",)} | {"COUNTY": (data_dir / "counties.txt").read_text().split(),
                                        "TRACT": (data_dir / "tracts.txt").read_text().split()}
    return {**text, "AGEP": list(range(100)), "SEX": [1, 2], "RAC1P": list(range(1, 10)), "HISP": list(range(5)),
            "AGE_GROUP": list(range(len(AGE_EDGES) - 1)), "VOTING_AGE": [0, 1]}


def cells(data_dir: Path) -> int:
    d = domains(data_dir)
    total = 0
    for dims in TABLES:
        n = 1
        for dim in dims:
            n *= len(d[dim])
        total += n
    return total
