"""How the portal reaches one of its clusters: a value, free of the Kubernetes client, so that
the models (``cluster.models.Cluster.access_to``) can hand it to the adapter
(``cluster.kube.on_cluster``) without importing it."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings


@dataclass(frozen=True)
class ClusterAccess:
    """How to reach one cluster (``cluster.models.Cluster.access_to``): by the portal's own
    settings (the first cluster), a kubeconfig file, or in-cluster."""

    name: str
    access: str = "settings"  # "settings" | "kubeconfig" | "in_cluster"
    kubeconfig: str = ""
    context: str = ""

    def resolved(self) -> tuple[str, str, bool]:
        """(kubeconfig, context, in_cluster) as the client loads them now."""
        if self.access == "settings":
            return settings.KUBECONFIG, settings.KUBE_CONTEXT, bool(settings.KUBE_IN_CLUSTER)
        return self.kubeconfig, self.context, self.access == "in_cluster"
