"""A cluster that does not answer is reported in words an operator can act on: where the
portal tried to connect and why it failed (the cluster page and the job pages show them)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster import kube


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port nothing listens on (bound, never listened: connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_an_unreachable_cluster_is_named_by_its_address_and_the_failure(
    tmp_path: Path, settings: Any, closed_port: int
) -> None:
    # Given a kubeconfig whose API server does not answer
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": f"https://127.0.0.1:{closed_port}",
                            "insecure-skip-tls-verify": True,
                        },
                    }
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    settings.KUBECONFIG, settings.KUBE_CONTEXT = str(kubeconfig), ""
    kube.reset_client()
    # When the portal lists from it, and when it watches it
    failures = []
    for call in (
        lambda: list(kube.list_all("Pod")),
        lambda: list(kube.watch("Pod", resource_version="1")),
    ):
        with pytest.raises(kube.TemporaryClusterError) as caught:
            call()
        failures.append(caught.value.message)
    kube.reset_client()
    # Then the words say where and why, and nothing of the client's insides
    for message in failures:
        assert message.startswith(f"Cluster unreachable: 127.0.0.1:{closed_port}: "), message
        assert "Connection refused" in message, message
        assert "object at 0x" not in message, message
