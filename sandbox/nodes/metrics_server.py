"""The simulated nodes' HTTP endpoint on ``--metrics-port``: dcgm-exporter's ``/metrics``
(what Prometheus scrapes) and fault injection (``POST /sandbox/faults``, the cluster's bearer
token; ``sandbox.faults``), which a real cluster has no API for."""

from __future__ import annotations

import json
import logging
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from sandbox import dcgm, faults
from sandbox.errors import ApiError, unauthorized
from sandbox.state import Cluster

log = logging.getLogger("sandbox.http")
FAULTS_PATH = "/sandbox/faults"


class MetricsServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], cluster: Cluster | None) -> None:
        """``cluster`` is the simulated nodes' state; None when KWOK runs the nodes: no GPU
        to report, no fault to inject."""
        super().__init__(address, MetricsHandler)
        self.cluster = cluster


class MetricsHandler(BaseHTTPRequestHandler):
    server: MetricsServer
    protocol_version = "HTTP/1.1"
    server_version = "sandbox-nodes"
    # TCP_NODELAY: with Nagle on, a response's body waits for the client's delayed ACK of its
    # headers, 40 ms a request.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s - %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        cluster = self.server.cluster
        if path.startswith(FAULTS_PATH):
            self._faults(path)
        elif path == "/metrics":
            text = dcgm.render(cluster) if cluster else "# the nodes are KWOK's: no GPU metrics\n"
            self._send(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._send(404, b"404 page not found\n", "text/plain; charset=utf-8")

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        if path.startswith(FAULTS_PATH):
            self._faults(path)
        else:
            self._send(404, b"404 page not found\n", "text/plain; charset=utf-8")

    def _faults(self, path: str) -> None:
        cluster = self.server.cluster
        if cluster is None:
            self._send(404, b"the nodes are KWOK's: no faults to inject\n", "text/plain")
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        try:
            if self.headers.get("Authorization", "") != f"Bearer {cluster.options.token}":
                raise unauthorized()
            with cluster.store.lock:
                result = faults.answer(cluster, self.command, path, body)
            self._send(200, json.dumps(result).encode(), "application/json")
        except ApiError as exc:
            self._send(exc.code, json.dumps(exc.status()).encode(), "application/json")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
