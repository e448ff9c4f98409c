"""The labels the portal puts on every object it creates in the cluster.

The builders set them, and the reconcile, the fit preview and the team sync find the
portal's objects by them: the keys are defined here and nowhere else.
"""

from __future__ import annotations

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "gpu-portal"
NAME_LABEL = "app.kubernetes.io/name"
COMPONENT_LABEL = "app.kubernetes.io/component"
JOB_ID_LABEL = "gpu-portal.dev/job-id"
TEAM_LABEL = "gpu-portal.dev/team"

MANAGED_BY_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"
# The ServiceAccount of every team namespace that mounts no API token: the pods of a
# workload whose pod spec the portal cannot write in full (a TrainJob's) run as it.
WORKLOAD_SERVICE_ACCOUNT = "gpu-portal-workload"
