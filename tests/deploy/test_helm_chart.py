"""The Helm chart (``deploy/helm/gpu-portal``), rendered and linted by a real helm 4.

Every object it renders, with the default values and with every option set
(``ci/full-values.yaml``), must be valid Kubernetes (kubernetes-validate, strict), and every
pod must pass the portal's own pod-security policy (restricted).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs.manifests import validate_manifests
from jobs.manifests.security import check_manifest

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "gpu-portal"
FULL = CHART / "ci" / "full-values.yaml"
HELM = Path(sys.executable).parent / "helm"
NAMESPACE = "gpu-portal"
KUBERNETES_VERSION = "1.33"
# The portal's pods that talk to the Kubernetes API (with the chart's service account).
USE_THE_API = {"web", "proxy", "worker", "tracker", "cluster-sync"}


def helm(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    assert HELM.exists(), "make test installs helm (scripts/install_kube_tools.py)"
    done = subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=60)
    if ok:
        assert done.returncode == 0, done.stderr
    return done


def render(*values: str, **sets: str) -> list[dict[str, Any]]:
    args = ["template", "rel", str(CHART), "-n", NAMESPACE]
    for path in values:
        args += ["-f", path]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    return [d for d in yaml.safe_load_all(helm(*args).stdout) if d]


def named(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


@pytest.mark.parametrize("values", [[], [str(FULL)]], ids=["defaults", "full"])
def test_helm_lint_passes(values: list[str]) -> None:
    args = ["lint", str(CHART), "--strict"]
    for path in values:
        args += ["-f", path]
    out = helm(*args).stdout
    assert "0 chart(s) failed" in out
    assert "[WARNING]" not in out and "[ERROR]" not in out


@pytest.mark.parametrize("values", [[], [str(FULL)]], ids=["defaults", "full"])
def test_every_rendered_object_is_valid_and_every_pod_restricted(values: list[str]) -> None:
    docs = render(*values)
    assert validate_manifests(docs, KUBERNETES_VERSION) == []
    pods = [d for d in docs if d["kind"] in ("Deployment", "Job")]
    # web, proxy, worker, beat, tracker; migrate and cluster-sync hooks
    assert len(pods) == 7
    for manifest in pods:
        name = manifest["metadata"]["name"].removeprefix("rel-gpu-portal-")
        broken = {v.rule for v in check_manifest(manifest, namespace=NAMESPACE)}
        pod = manifest["spec"]["template"]["spec"]
        if name in USE_THE_API:
            # The one rule for users' jobs the portal's own pods are exempt from.
            assert broken == {"automount-service-account-token"}, name
            assert pod["serviceAccountName"]
        else:
            assert broken == set(), name
            assert pod["automountServiceAccountToken"] is False
        (container,) = pod["containers"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["resources"]["limits"] and container["resources"]["requests"]
    for doc in docs:
        if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["metadata"]["name"]


def test_the_chart_runs_what_the_portal_needs_with_defaults() -> None:
    docs = render()
    kinds = sorted({d["kind"] for d in docs})
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "Job",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
    ]  # no Ingress unless asked for
    web = named(docs, "Deployment", "rel-gpu-portal-web")
    container = web["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][:2] == ["gunicorn", "portal.wsgi:application"]
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # Secrets come from the operator's Secret, never from values.
    secret_env = {
        e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e
    }
    assert secret_env == {
        "SECRET_KEY": {"name": "gpu-portal", "key": "secret-key"},
        "DATABASE_URL": {"name": "gpu-portal", "key": "database-url"},
        "REDIS_URL": {"name": "gpu-portal", "key": "redis-url"},
    }
    # The workspace proxy: an ASGI process, in the release's namespace, whose pods alone
    # reach workspace pods (the team NetworkPolicy admits the portal's namespace).
    proxy = named(docs, "Deployment", "rel-gpu-portal-proxy")
    args = proxy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["uvicorn", "workspaces.proxy.asgi:application"]
    # ...on wsproto, which refuses a WebSocket handshake without logging an error
    assert args[args.index("--ws") + 1] == "wsproto"
    assert named(docs, "ConfigMap", "rel-gpu-portal")["data"]["PORTAL_NAMESPACE"] == NAMESPACE
    # Exactly one beat, never two at a rollout.
    beat = named(docs, "Deployment", "rel-gpu-portal-beat")
    assert beat["spec"]["replicas"] == 1 and beat["spec"]["strategy"] == {"type": "Recreate"}
    # Migrations before install and upgrade; the cluster mirror after, with the account.
    migrate = named(docs, "Job", "rel-gpu-portal-migrate")
    assert migrate["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert migrate["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    migrate_env = {
        e["name"]: e.get("value")
        for e in migrate["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    config = named(docs, "ConfigMap", "rel-gpu-portal")["data"]
    assert {k: migrate_env[k] for k in config} == config  # the same settings, inline
    sync = named(docs, "Job", "rel-gpu-portal-cluster-sync")
    assert sync["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    assert sync["spec"]["template"]["spec"]["containers"][0]["args"][-1] == "cluster_sync"
    assert sync["spec"]["template"]["spec"]["serviceAccountName"] == "rel-gpu-portal"
    assert config["PORTAL_ENV"] == "production" and config["KUBE_IN_CLUSTER"] == "true"
    assert "OIDC_ISSUER" not in config and "OIDC_CLIENT_SECRET" not in secret_env
    assert config["ALLOWED_HOSTS"] == (
        "gpu-portal.example.com,rel-gpu-portal,rel-gpu-portal.gpu-portal.svc"
    )


def test_full_values_reach_the_objects() -> None:
    docs = render(str(FULL))
    config = named(docs, "ConfigMap", "rel-gpu-portal")["data"]
    assert config["ACCOUNTING_CURRENCY"] == "EUR" and config["IDLE_GPU_THRESHOLD_PERCENT"] == "3"
    assert config["TEAM_NETWORK_POLICY_EGRESS_CIDRS"] == "10.0.0.0/8,203.0.113.0/24"
    assert config["CSRF_TRUSTED_ORIGINS"] == "https://gpu.example.com"
    assert config["OIDC_ISSUER"] == "https://keycloak.example.com/realms/ml"
    assert config["LOCAL_LOGIN_ENABLED"] == "false"
    ingress = named(docs, "Ingress", "rel-gpu-portal")
    assert ingress["spec"]["tls"] == [
        {"hosts": ["gpu.example.com"], "secretName": "gpu-portal-tls"}
    ]
    # Workspaces (HTTP and WebSocket) go to the workspace proxy, the rest to web.
    routes = {
        p["path"]: p["backend"]["service"]["name"]
        for p in ingress["spec"]["rules"][0]["http"]["paths"]
    }
    assert routes == {"/workspaces/": "rel-gpu-portal-proxy", "/": "rel-gpu-portal"}
    web = named(docs, "Deployment", "rel-gpu-portal-web")
    pod = web["spec"]["template"]["spec"]
    oidc_secret = next(e for e in pod["containers"][0]["env"] if e["name"] == "OIDC_CLIENT_SECRET")
    assert oidc_secret["valueFrom"]["secretKeyRef"] == {
        "name": "portal-secrets",
        "key": "keycloak-client-secret",
    }
    assert web["spec"]["replicas"] == 3
    assert pod["containers"][0]["image"] == "registry.example.com/ml/gpu-portal:2026.11.24"
    assert pod["imagePullSecrets"] == [{"name": "registry-credentials"}]
    assert pod["tolerations"][0]["key"] == "dedicated"
    assert pod["serviceAccountName"] == "gpu-portal"
    assert named(docs, "PodDisruptionBudget", "rel-gpu-portal-web")["spec"]["minAvailable"] == 2


def test_the_cluster_role_is_deploy_rbac_yaml_s() -> None:
    chart_role = named(render(), "ClusterRole", "rel-gpu-portal")
    (plain_role,) = [
        d
        for d in yaml.safe_load_all((REPO / "deploy" / "rbac.yaml").read_text())
        if d["kind"] == "ClusterRole"
    ]
    assert chart_role["rules"] == plain_role["rules"]


@pytest.mark.parametrize(
    ("setting", "named_in_error"),
    [
        ("portal.url=gpu.example.com", "/portal/url"),
        ("web.replicas=0", "/web/replicas"),
        ("teamNetworkPolicy.egressCidrs[0]=everywhere", "/teamNetworkPolicy/egressCidrs/0"),
        ("webb.replicas=2", "webb"),
    ],
)
def test_values_outside_the_schema_are_refused_naming_the_field(
    setting: str, named_in_error: str
) -> None:
    done = helm("template", "rel", str(CHART), "--set", setting, ok=False)
    assert done.returncode != 0
    assert named_in_error in done.stderr
