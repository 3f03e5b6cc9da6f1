"""Activities: what runs first. A queue's records are split by activity (named by the feeder, else the first
activity whose globs fit the path, else ``default``); strict activities are served first, the others share the
claims by weight (:mod:`.plan`). The store's scripts keep one active list per activity and choose between them."""

from dataq.activities.plan import Activity, Plan, plan_for

__all__ = ["Activity", "Plan", "plan_for"]
