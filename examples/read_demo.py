"""Reading a published release in pandas, notebook-style (each ``# %%`` is a cell).

Publish the demo first, then read it:

    dprelease ledger init --spec configs/acs_demo.yaml --reason "the demo's own budget"  # once
    dprelease run configs/acs_demo.yaml              # lands in outputs/acs-demo-2019
    python examples/read_demo.py outputs/acs-demo-2019

Nothing here reads the confidential data or spends budget: it reads what the release published.
"""

# %%
import sys

import pandas as pd

import dprelease

pd.set_option("display.width", 120)
pd.set_option("display.max_columns", 12)
release = dprelease.read_release(sys.argv[1] if len(sys.argv) > 1 else "outputs/acs-demo-2019")
print(release)
print()

# %% What the release spent and how accurate each table is (exact budgets, as the manifest states them)
print(f"total: {release.total}    lifetime: {release.lifetime_spent_after} spent of {release.lifetime_cap}")
print(release.summary()[["table", "measure", "mechanism", "budget", "scale", "margin_of_error", "cells"]])
print()

# %% A table: categories in the declared order (Male before Female), counts as integers
by_sex = release.table("puma_by_sex")
print(by_sex.head(6))
print(by_sex.dtypes)
print()

# %% Another: the missing category (under 15) is last, as declared; structural cells are marked
marital = release.table("marital_status_by_sex")
print(marital.pivot_table(index="MSP", columns="SEX", values="count", observed=False, aggfunc="sum"))
print(marital.dtypes)
print(list(marital["MSP"].cat.categories))
print()

# %% The margin of error travels with the table: a 95% interval per cell
moe = release.facts("puma_by_sex").margin_of_error_95
print(by_sex.assign(low=(by_sex["count"] - moe).clip(lower=0), high=by_sex["count"] + moe).head(4))
