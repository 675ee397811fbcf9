"""The data sets and specs of benchmarks/consistency.py (issue 21).

``national2019``: the shipped NIST excerpt with `configs/acs_census.yaml` itself.
``nist2018``: the 2018 NIST excerpts national + Texas + Massachusetts, concatenated at run time
from ../shared/data/nist_acs into benchmarks/data/nist2018/ (git-ignored: never committed,
never read by tests), with a spec that is `configs/acs_census.yaml` with that data set and its
PUMA domain. Its PUMA domain is written from the excerpt's data dictionary: the list of PUMAs
of the NIST excerpts is public metadata (published with the data), not read off the records.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml

from dprelease.spec import RollupColumn, Spec, load_spec

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = ROOT.parent / "shared" / "data" / "nist_acs"
BUILT = HERE / "data" / "nist2018"
PARTS = {"national": "national/national2018.csv", "Texas": "texas/tx2018.csv",
         "Massachusetts": "massachusetts/ma2018.csv"}
STATE_CODES = {"Texas": "48", "Massachusetts": "25"}
DATASETS = ("national2019", "nist2018")

# the 3-table group of issue 21's scale goal (d = 7·13·2·9·5 = 8,190 detail cells per place)
THREE_TABLES = [
    {"name": "persons_by_marital_status_sex", "group_by": ["geography", "MSP", "SEX"], "consistency": "persons",
     "epsilon": {"root": 0.05, "STATE": 0.15, "PUMA": 0.3}},
    {"name": "persons_by_education_sex", "group_by": ["geography", "EDU", "SEX"], "consistency": "persons",
     "epsilon": {"root": 0.05, "STATE": 0.15, "PUMA": 0.3}},
    {"name": "persons_by_race_hispanic", "group_by": ["geography", "RAC1P", "HISP"], "consistency": "persons",
     "epsilon": {"root": 0.05, "STATE": 0.15, "PUMA": 0.3}},
]
EXTRA_COLUMNS = {
    "MSP": {"domain": [1, 2, 3, 4, 5, 6], "missing": "N/A (age less than 15 years)"},
    "EDU": {"domain": list(range(1, 13)), "missing": "N/A (less than 3 years old)"},
}


def hierarchy(spec: Spec) -> tuple[list[str], list[np.ndarray | None]]:
    """The spec's geographic levels, root first, and each level's places' parents at the level above."""
    names: list[str] = ["root"]
    parents: list[np.ndarray | None] = [None]
    for i, name in enumerate(spec.geography):
        if i == 0:
            parents.append(np.zeros(spec.column(name).size, dtype=np.int64))
        else:
            up = spec.column(spec.geography[i - 1])
            assert isinstance(up, RollupColumn) and up.source == name
            parents.append(np.asarray(up.parent_of, dtype=np.int64))
        names.append(name)
    return names, parents


def build_2018() -> dict:
    """Concatenate the 2018 excerpts into benchmarks/data/nist2018/persons.csv with its PUMA
    domain and spec; the counts it printed (persons, PUMAs, states). Reads ../shared only here."""
    import pandas as pd

    missing = [str(SHARED / p) for p in PARTS.values() if not (SHARED / p).is_file()]
    if missing or not (SHARED / "data_dictionary.json").is_file():
        raise SystemExit(f"the 2018 concatenation needs the NIST excerpts in {SHARED}: missing "
                         f"{', '.join(missing) or 'data_dictionary.json'}. Run the other data set "
                         "(--dataset national2019) or put the excerpts there.")
    BUILT.mkdir(parents=True, exist_ok=True)
    frames = {name: pd.read_csv(SHARED / path, dtype=str, keep_default_na=False) for name, path in PARTS.items()}
    data = pd.concat(frames.values(), ignore_index=True)
    data.to_csv(BUILT / "persons.csv", index=False)
    pumas = sorted(json.loads((SHARED / "data_dictionary.json").read_text())["PUMA"]["values"])
    (BUILT / "puma.txt").write_text(
        "# PUMAs of the NIST ACS excerpts (public metadata: the excerpts' data_dictionary.json), one per line\n"
        + "\n".join(pumas) + "\n")
    info = {"persons": len(data), "pumas": int(data["PUMA"].nunique()),
            "states": int(data["PUMA"].str[:2].nunique()),
            "named": {name: int(frames[name]["PUMA"].nunique()) for name in STATE_CODES},
            "parts": {name: len(f) for name, f in frames.items()}}
    unknown = set(data["PUMA"]) - set(pumas)
    if unknown:
        raise SystemExit(f"PUMAs in the data but not in the dictionary: {sorted(unknown)}")
    base = yaml.safe_load((ROOT / "configs" / "acs_census.yaml").read_text())
    base.update({"release": "acs-census-2018-concatenated", "ledger": "ledger.sqlite", "output_dir": "outputs",
                 "description": "configs/acs_census.yaml on the 2018 NIST excerpts national + TX + MA"})
    base["dataset"].update({"name": "nist-acs-2018-national-tx-ma", "path": "persons.csv"})
    base["columns"]["PUMA"]["domain_file"] = "puma.txt"
    _write_yaml(BUILT / "acs_census_2018.yaml", base)
    three = dict(base, release="three-tables-2018", tables=THREE_TABLES, budget={"epsilon": 2})
    three["columns"] = {**base["columns"], **EXTRA_COLUMNS}
    _write_yaml(BUILT / "three_tables_2018.yaml", three)
    (BUILT / "info.json").write_text(json.dumps(info, indent=2))
    return info


def _write_yaml(path: Path, content: dict) -> None:
    path.write_text("# generated by benchmarks/consistency_data.py: do not edit\n"
                    + yaml.safe_dump(content, sort_keys=False, allow_unicode=True))


def load_dataset(name: str) -> tuple[Spec, dict]:
    """The spec of a data set and what it holds (persons, PUMAs, states)."""
    if name == "national2019":
        spec = load_spec(ROOT / "configs" / "acs_census.yaml")
        import pandas as pd

        data = pd.read_csv(ROOT / "data" / "nist_acs" / "national2019.csv", dtype=str, usecols=["PUMA"])
        return spec, {"persons": len(data), "pumas": int(data["PUMA"].nunique()),
                      "states": int(data["PUMA"].str[:2].nunique())}
    if name == "nist2018":
        info = build_2018()
        return load_spec(BUILT / "acs_census_2018.yaml"), info
    raise SystemExit(f"unknown data set {name!r}: one of {', '.join(DATASETS)}")


def three_table_spec() -> Spec:
    """The 3-table group over the 2018 concatenation (built first)."""
    build_2018()
    return load_spec(BUILT / "three_tables_2018.yaml")
