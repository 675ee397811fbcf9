"""Planning: spec + ledger state → Plan, before any data is read."""

from dprelease.plan.planner import Plan, TablePlan, epsilon_for_target, plan_release, with_provenance

__all__ = ["Plan", "TablePlan", "epsilon_for_target", "plan_release", "with_provenance"]
