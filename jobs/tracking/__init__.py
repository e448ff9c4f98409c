"""Following the cluster: the watch tracker, the periodic reconcile (the safety net), the
pure functions that turn what the cluster says into a job's state, and the reconcile's
timings."""
