"""Reads for the GPU dashboards: the cluster (through ``cluster.kube``), the portal's own
job rows, and DCGM metrics (through ``monitoring.prometheus``).

Selectors that feed a page take ``tolerate_errors``: when true, an unreachable
Prometheus or cluster becomes an ``*_error`` text on the result (the page shows a
panel and the rest still renders); when false they raise (the API answers 503).
After the first Prometheus failure no further query is sent in the same request:
a Prometheus that hangs must not cost one timeout per panel.

One module per dashboard: ``cluster``, ``team``, ``job``, ``idle``; ``common`` holds the
time windows and device names they share.
"""
