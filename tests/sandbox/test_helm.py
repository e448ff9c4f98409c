"""A real helm 4 (installed by ``make test`` from PyPI) installs, upgrades and uninstalls a
chart on the sandbox with the kubeconfig it writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from kubernetes import client

from tests.sandbox.conftest import make_client
from tests.sandbox_process import SandboxProcess

HELM = Path(sys.executable).parent / "helm"


def write_chart(root: Path) -> Path:
    chart = root / "greeter"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: greeter\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text("greeting: hello\nreplicas: 1\n")
    (chart / "templates" / "config.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-cfg\n"
        "data:\n  greeting: {{ .Values.greeting | quote }}\n"
    )
    (chart / "templates" / "deployment.yaml").write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ .Release.Name }}\n"
        "spec:\n  replicas: {{ .Values.replicas }}\n  selector:\n    matchLabels:\n"
        "      app: {{ .Release.Name }}\n  template:\n    metadata:\n      labels:\n"
        "        app: {{ .Release.Name }}\n    spec:\n      containers:\n"
        "      - name: web\n        image: nginx:1.27\n"
    )
    return chart


def test_install_upgrade_and_uninstall_a_chart(
    sandbox: SandboxProcess,
    core: client.CoreV1Api,
    apps: client.AppsV1Api,
    namespace: str,
    tmp_path: Path,
) -> None:
    assert HELM.exists(), "make test installs helm (scripts/install_kube_tools.py)"
    chart, release = write_chart(tmp_path), f"g{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "KUBECONFIG": str(sandbox.kubeconfig), "HELM_CACHE_HOME": str(tmp_path)}

    def helm(*args: str) -> str:
        done = subprocess.run(
            [str(HELM), *args, "-n", namespace],
            capture_output=True,
            text=True,
            timeout=90,
            env={**env, "HELM_CONFIG_HOME": str(tmp_path), "HELM_DATA_HOME": str(tmp_path)},
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    # install, and wait for the Deployment to be ready, as helm does with --wait
    assert "STATUS: deployed" in helm("install", release, str(chart), "--wait", "--timeout=60s")
    cfg = core.read_namespaced_config_map(f"{release}-cfg", namespace)
    assert cfg.data == {"greeting": "hello"}
    assert apps.read_namespaced_deployment(release, namespace).status.ready_replicas == 1
    # upgrade with new values: the objects change, a second revision is recorded
    helm("upgrade", release, str(chart), "--set", "greeting=hi", "--set", "replicas=2", "--wait")
    assert core.read_namespaced_config_map(f"{release}-cfg", namespace).data == {"greeting": "hi"}
    assert apps.read_namespaced_deployment(release, namespace).spec.replicas == 2
    history = json.loads(helm("history", release, "-o", "json"))
    assert [h["revision"] for h in history] == [1, 2] and history[-1]["status"] == "deployed"
    # uninstall removes what the chart made
    helm("uninstall", release, "--wait")
    names = [c.metadata.name for c in core.list_namespaced_config_map(namespace).items]
    assert f"{release}-cfg" not in names


def test_the_portal_chart_installs_and_upgrades(
    sandbox: SandboxProcess,
    core: client.CoreV1Api,
    apps: client.AppsV1Api,
    namespace: str,
    tmp_path: Path,
) -> None:
    """deploy/helm/gpu-portal: its hooks run (migrations before, the cluster mirror after),
    every Deployment becomes ready, an upgrade rolls the changed settings out."""
    chart = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "gpu-portal"
    release = f"p{uuid.uuid4().hex[:6]}"
    env = {
        **os.environ,
        "KUBECONFIG": str(sandbox.kubeconfig),
        "HELM_CACHE_HOME": str(tmp_path),
        "HELM_CONFIG_HOME": str(tmp_path),
        "HELM_DATA_HOME": str(tmp_path),
    }

    def helm(*args: str) -> str:
        done = subprocess.run(
            [str(HELM), *args, "-n", namespace],
            capture_output=True,
            text=True,
            timeout=150,
            env=env,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    # The operator's Secret, which the chart only refers to.
    core.create_namespaced_secret(
        namespace,
        {
            "metadata": {"name": "gpu-portal"},
            "stringData": {
                "secret-key": "x" * 50,
                "database-url": "postgres://portal@db/portal",
                "redis-url": "redis://redis:6379/0",
            },
        },
    )
    out = helm("install", release, str(chart), "--wait", "--timeout=120s")
    assert "STATUS: deployed" in out and "createsuperuser" in out  # NOTES.txt
    full = f"{release}-gpu-portal"
    for component, replicas in (("web", 2), ("worker", 2), ("beat", 1), ("tracker", 2)):
        status = apps.read_namespaced_deployment(f"{full}-{component}", namespace).status
        assert status.ready_replicas == replicas, component
    config = core.read_namespaced_config_map(full, namespace).data
    assert config["TRACKER_LEASE_NAMESPACE"] == namespace
    rbac = client.RbacAuthorizationV1Api(make_client(sandbox))
    assert rbac.read_cluster_role(full).rules
    assert rbac.read_namespaced_role_binding(f"{full}-tracker", namespace).subjects[0].name == full
    # Upgrade with a changed setting: the ConfigMap changes and the pods roll to it.
    before = apps.read_namespaced_deployment(f"{full}-web", namespace)
    checksum = before.spec.template.metadata.annotations["checksum/settings"]
    helm(
        "upgrade",
        release,
        str(chart),
        "--set",
        "portal.env.ACCOUNTING_CURRENCY=EUR",
        "--wait",
        "--timeout=120s",
    )
    assert core.read_namespaced_config_map(full, namespace).data["ACCOUNTING_CURRENCY"] == "EUR"
    after = apps.read_namespaced_deployment(f"{full}-web", namespace)
    assert after.spec.template.metadata.annotations["checksum/settings"] != checksum
    assert after.status.ready_replicas == 2
    history = json.loads(helm("history", release, "-o", "json"))
    assert [h["status"] for h in history] == ["superseded", "deployed"]
    helm("uninstall", release, "--wait")
    assert full not in [d.metadata.name for d in apps.list_namespaced_deployment(namespace).items]
