"""The ClusterTrainingRuntime the portal's TrainJobs run on (``TRAINJOB_RUNTIME``, docs/jobs.md
"TrainJob"), written by the team sync where the cluster runs Kubeflow Trainer.

Trainer's runtime patches reach a pod's placement, volumes and security contexts, not its
restart policy, its Job's backoff limit or its API token: those come from the runtime. The
portal's runtime is Trainer's ``torch-distributed`` with them set as the portal runs every
training pod: ``restartPolicy: Never`` and ``backoffLimit: 0`` (a failed rank fails the job,
keeping its exit code, and the portal's hardware recovery runs it again from its checkpoint
when a GPU or a node failed), no API token, no Service links. A runtime of that name the
portal did not write (a platform team's) is used as it is and never changed.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from cluster import kube
from cluster.compare import contains
from cluster.labels import MANAGED_BY_LABEL, MANAGED_BY_VALUE

Obj = dict[str, Any]
GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
DEFAULT_IMAGE = "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"  # the trainer's image replaces it


def portal_runtime(name: str) -> Obj:
    """The portal's ClusterTrainingRuntime (pure)."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ClusterTrainingRuntime",
        "metadata": {
            "name": name,
            "labels": {
                "trainer.kubeflow.org/framework": "torch",
                MANAGED_BY_LABEL: MANAGED_BY_VALUE,
            },
        },
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "metadata": {
                                    "labels": {
                                        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"
                                    }
                                },
                                "spec": {
                                    "backoffLimit": 0,
                                    "template": {
                                        "spec": {
                                            "restartPolicy": "Never",
                                            "automountServiceAccountToken": False,
                                            "enableServiceLinks": False,
                                            "containers": [
                                                {"name": "node", "image": DEFAULT_IMAGE}
                                            ],
                                        }
                                    },
                                },
                            },
                        }
                    ]
                }
            },
        },
    }


def training_runtime_sync() -> dict[str, str]:
    """Write the portal's runtime where the cluster serves Trainer's API: ``created``,
    ``updated``, ``unchanged``, or ``external`` (a runtime of that name the portal did not
    write, left alone); nothing where Trainer is not installed."""
    if "clustertrainingruntimes" not in kube.served_resources(GROUP, VERSION):
        return {}
    name = settings.TRAINJOB_RUNTIME
    key = f"ClusterTrainingRuntime/{name}"
    try:
        existing = kube.get("ClusterTrainingRuntime", name, None)
    except kube.ObjectNotFound:
        return {key: kube.ensure(portal_runtime(name), compare=_same)}
    labels = existing["metadata"].get("labels") or {}
    if labels.get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE:
        return {key: "external"}
    return {key: kube.ensure(portal_runtime(name), compare=_same)}


def _same(existing: Obj, wanted: Obj) -> bool:
    """The spec says all the portal's does (Trainer's and the schema's defaults added)."""
    return contains(existing.get("spec") or {}, wanted["spec"])
