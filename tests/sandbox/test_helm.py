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
