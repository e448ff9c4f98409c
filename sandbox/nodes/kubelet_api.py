"""The kubelet's HTTPS API on each simulated node's address: what the API server calls for
``kubectl logs`` (``GET /containerLogs/{namespace}/{pod}/{container}`` with ``follow``,
``previous``, ``tailLines``, ``timestamps``, ``sinceSeconds``/``sinceTime``, ``limitBytes``).

The API server dials the node's InternalIP (a loopback address of its own) and the port its
status names (``daemonEndpoints.kubeletEndpoint.Port``); it does not verify the kubelet's
certificate unless ``--kubelet-certificate-authority`` is set, and authenticates itself
with its kubelet client certificate. A node that is down does not answer, as a dead
kubelet would not.
"""

from __future__ import annotations

import logging
import ssl
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from sandbox import logs
from sandbox.errors import ApiError
from sandbox.nodes.container_logs import pod_log
from sandbox.state import Cluster

log = logging.getLogger("sandbox.nodes")
FOLLOW_SECONDS = 0.5


class KubeletServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        node: str,
        cluster: Cluster,
        tls: ssl.SSLContext,
        down: Callable[[str], bool],
    ) -> None:
        super().__init__(address, KubeletHandler)
        self.node = node
        self.cluster = cluster
        self.down = down
        self.socket = tls.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (ssl.SSLError, ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class KubeletHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: KubeletServer

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("kubelet %s: " + format, self.server.node, *args)

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(30)
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()

    def _send(self, status: int, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.server.down(self.server.node):
            self.close_connection = True  # a dead kubelet answers nothing
            return
        split = urlsplit(self.path)
        parts = [unquote(p) for p in split.path.strip("/").split("/")]
        if parts == ["healthz"]:
            self._send(200, "ok")
            return
        if len(parts) != 4 or parts[0] != "containerLogs":
            self._send(404, "404 page not found\n")
            return
        _, ns, name, container = parts
        query = dict(parse_qsl(split.query))
        query["container"] = container
        try:
            with self.server.cluster.store.lock:
                full = pod_log(self.server.cluster, ns, name, query)
        except ApiError as exc:
            self._send(exc.code, exc.message)
            return
        if query.get("follow", "").lower() not in ("true", "1"):
            self._send(200, logs.first_part(full, query))
            return
        self._follow(ns, name, query, full)

    def _follow(self, ns: str, name: str, query: dict[str, str], full: str) -> None:
        """The log so far (from one read), then each new line until the container stops
        or the pod is gone."""
        cluster = self.server.cluster
        follow = {k: v for k, v in query.items() if k not in ("tailLines", "limitBytes")}
        text, sent = logs.first_part(full, query), len(full)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def send(chunk: str) -> None:
            data = chunk.encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        try:
            if text:
                send(text)
            while not self.server.down(self.server.node):
                time.sleep(FOLLOW_SECONDS)
                with cluster.store.lock:
                    pod = cluster.store.get("pods", ns, name)
                    if pod is None:
                        break
                    try:
                        full = pod_log(cluster, ns, name, follow)
                    except ApiError:
                        break
                    finished = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                if len(full) > sent:
                    send(full[sent:])
                    sent = len(full)
                if finished:
                    break
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, TimeoutError):
            pass


# How often each node's server loop looks whether it is asked to stop: with hundreds of nodes
# (the large profile's 540), every wake-up of every loop takes the interpreter's lock from
# the kubelets' work.
POLL_SECONDS = 2.0


def serve(servers: list[KubeletServer]) -> list[threading.Thread]:
    threads = [
        threading.Thread(
            target=s.serve_forever,
            kwargs={"poll_interval": POLL_SECONDS},
            name=f"kubelet-{s.node}",
            daemon=True,
        )
        for s in servers
    ]
    for thread in threads:
        thread.start()
    return threads


def stop(servers: list[KubeletServer]) -> None:
    """Stop every node's kubelet API at once: each loop notices within ``POLL_SECONDS``, so
    stopped one after another the large profile's 540 took minutes (past a SIGTERM's
    patience)."""
    stoppers = [threading.Thread(target=s.shutdown, daemon=True) for s in servers]
    for thread in stoppers:
        thread.start()
    for thread in stoppers:
        thread.join(timeout=4 * POLL_SECONDS)
    for server in servers:
        server.server_close()
