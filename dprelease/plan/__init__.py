"""Planning: spec + ledger state → Plan, before any data is read.

* :mod:`~dprelease.plan.planner`: the release's plan (budgets, ledger terms, verdict);
* :mod:`~dprelease.plan.measurements`: one measurement's plan and its noise mechanism;
* :mod:`~dprelease.plan.local`: local tables (answers randomized by the respondents);
* :mod:`~dprelease.plan.structural`: structural zeros, cells the spec makes impossible;
* :mod:`~dprelease.plan.margins`: every margin of error in its measure's own units (counts,
  sums, means, modes, quantiles) at a stated confidence, and the ε a target margin needs;
* :mod:`~dprelease.plan.tradeoff`: each measurement's margin of error over a grid of budgets;
* :mod:`~dprelease.plan.allocation`: a split of the release budget that minimises the weighted
  sum of expected squared errors.
"""

from dprelease.plan.local import LocalPlan
from dprelease.plan.measurements import TablePlan
from dprelease.plan.margins import epsilon_for_target
from dprelease.plan.planner import Plan, plan_release, with_provenance

__all__ = ["LocalPlan", "Plan", "TablePlan", "epsilon_for_target", "plan_release", "with_provenance"]
