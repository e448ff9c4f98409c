"""The local cluster's storage: a dynamic provisioner for the default StorageClass, as
local-path-provisioner or a CSI driver's external-provisioner would be.

1. The real PV controller marks a claim of the class ``standard`` as waiting for this
   provisioner (``volume.kubernetes.io/storage-provisioner``).
2. This makes a folder under the nodes' state and a PersistentVolume for it, naming the claim
   (``claimRef``); the PV controller binds the two.
3. When the claim is deleted, the PV controller releases the volume; with the reclaim policy
   ``Delete`` this removes the folder and the PersistentVolume.

The volumes are hostPath folders with no node affinity: like network storage, a claim can be
mounted on any node, so a workspace's home folder follows it wherever it is scheduled.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from kubernetes.client.rest import ApiException

from sandbox.nodes.store import Api, NodeStore
from sandbox.servers import volume_dir
from sandbox.store import Obj

log = logging.getLogger("sandbox.nodes")
PROVISIONER = "gpu-portal.dev/local-path"
STORAGE_CLASS = "standard"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
WAITING_FOR = "volume.kubernetes.io/storage-provisioner"


def storage_class() -> dict[str, Any]:
    """The default StorageClass the control plane installs."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": STORAGE_CLASS,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    }


def reconcile(store: NodeStore, api: Api, root: Path) -> None:
    """Provision the claims waiting for us; remove the volumes their claims released."""
    for claim in list(store.iter("persistentvolumeclaims")):
        meta, spec = claim["metadata"], claim.get("spec") or {}
        waiting = (meta.get("annotations") or {}).get(WAITING_FOR) == PROVISIONER
        if waiting and not spec.get("volumeName") and not meta.get("deletionTimestamp"):
            _provision(store, api, root, claim)
    for volume in list(store.iter("persistentvolumes")):
        ours = (volume["metadata"].get("annotations") or {}).get(PROVISIONED_BY) == PROVISIONER
        if ours and (volume.get("status") or {}).get("phase") == "Released":
            _remove(store, api, volume)


def _provision(store: NodeStore, api: Api, root: Path, claim: Obj) -> None:
    meta = claim["metadata"]
    name = f"pvc-{meta['uid']}"
    if store.get("persistentvolumes", "", name) is not None:
        return
    folder = volume_dir(root, meta["namespace"], meta["name"])
    folder.mkdir(parents=True, exist_ok=True)
    size = ((claim["spec"].get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
    volume: Obj = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {PROVISIONED_BY: PROVISIONER}},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": claim["spec"].get("accessModes") or ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": claim["spec"].get("storageClassName") or STORAGE_CLASS,
            "volumeMode": claim["spec"].get("volumeMode") or "Filesystem",
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
            "hostPath": {"path": str(folder.resolve()), "type": "DirectoryOrCreate"},
        },
    }
    try:
        api.call("POST", "/api/v1/persistentvolumes", volume)
    except ApiException as exc:
        if exc.status != 409:
            log.warning(
                "volume for %s/%s not made: %s", meta["namespace"], meta["name"], exc.reason
            )


def _remove(store: NodeStore, api: Api, volume: Obj) -> None:
    path = ((volume.get("spec") or {}).get("hostPath") or {}).get("path")
    if path:
        shutil.rmtree(path, ignore_errors=True)
    store.delete("persistentvolumes", "", volume["metadata"]["name"])
