"""HTTP servers: the Kubernetes API (bearer token) and the dcgm-exporter ``/metrics``.

``ThreadingHTTPServer`` serves clients concurrently; every API request holds the store lock
while it runs (controllers step aside between objects when one waits), so concurrent
clients see the same serialised history a real API server's etcd would give them.
"""

from __future__ import annotations

import json
import logging
import ssl
import sys
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from sandbox import dcgm
from sandbox.api import objects
from sandbox.api.handlers import Request, Response, handle, parse_target, resolve
from sandbox.cluster import Cluster
from sandbox.errors import ApiError, unauthorized
from sandbox.selectors import fields_match, labels_match, parse_field_selector, parse_label_selector

log = logging.getLogger("sandbox.http")
HANDSHAKE_TIMEOUT_SECONDS = 10


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, address: tuple[str, int], cluster: Cluster, tls: ssl.SSLContext | None = None
    ) -> None:
        super().__init__(address, ApiHandler)
        self.cluster = cluster
        self.tls = tls
        if tls is not None:
            # The handshake runs in each connection's own thread (``ApiHandler.setup``), so
            # a slow or refusing client never holds up the accept loop.
            self.socket = tls.wrap_socket(
                self.socket, server_side=True, do_handshake_on_connect=False
            )

    @property
    def url(self) -> str:
        host, port = str(self.server_address[0]), int(self.server_address[1])
        if ":" in host:
            host = f"[{host}]"
        return f"{'https' if self.tls else 'http'}://{host}:{port}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that does not trust our CA, or hangs up mid-handshake, is its problem.
        if isinstance(sys.exc_info()[1], (ssl.SSLError, ConnectionError, TimeoutError)):
            log.debug("connection from %s dropped: %s", client_address, sys.exc_info()[1])
            return
        super().handle_error(request, client_address)


class _Base(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sandbox-apiserver"
    # TCP_NODELAY, as Go's net/http (the API server) sets on every connection: with Nagle on,
    # a response's body waited for the client's delayed ACK of its headers, 40 ms a request.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s - %s", self.address_string(), format % args)

    def _send(
        self, status: int, body: bytes, content_type: str, headers: Sequence[tuple[str, str]] = ()
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache, private")
        for key, value in headers:
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class ApiHandler(_Base):
    server: ApiServer

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(HANDSHAKE_TIMEOUT_SECONDS)
            self.request.do_handshake()
            self.request.settimeout(None)
        super().setup()

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        cluster = self.server.cluster
        split = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if split.path in ("/healthz", "/livez", "/readyz"):
            self._send(200, b"ok", "text/plain; charset=utf-8")
            return
        try:
            auth = self.headers.get("Authorization", "")
            if auth != f"Bearer {cluster.options.token}":
                raise unauthorized()
            if self.command == "GET" and query.get("watch") in ("true", "1"):
                self._watch(split.path, query)
                return
            req = Request(
                self.command,
                split.path,
                query,
                body,
                self.headers.get("Content-Type", "application/json"),
                self.server.url,
                self.headers.get("Accept", "application/json"),
            )
            with cluster.store.serving():
                resp = handle(cluster, req)
        except ApiError as err:
            resp = Response(err.code, err.status())
        except Exception as exc:  # a sandbox bug answers like an apiserver panic would
            log.exception("request failed: %s %s", self.command, self.path)
            resp = Response(
                500, ApiError(500, "InternalError", f"Internal error occurred: {exc}").status()
            )
        headers = [("Warning", f'299 - "{w}"'.replace("\n", " ")) for w in resp.warnings]
        headers.append(("Audit-Id", cluster.new_uid()))
        if isinstance(resp.body, str):
            self._send(resp.status, resp.body.encode(), "text/plain", headers)
        elif isinstance(resp.body, bytes):  # JSON encoded under the store lock (lists)
            self._send(resp.status, resp.body, "application/json", headers)
        else:
            data = json.dumps(resp.body, separators=(",", ":")).encode()
            self._send(resp.status, data, "application/json", headers)

    def _watch(self, path: str, query: dict[str, str]) -> None:
        """A minimal watch: diff the matching objects every 100 ms, stream JSON lines."""
        cluster = self.server.cluster
        parsed = parse_target(path)
        if parsed is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        target = resolve(*parsed)
        if target.name is not None:
            query = dict(query)
            query["fieldSelector"] = f"metadata.name={target.name}"
        label_reqs = parse_label_selector(query.get("labelSelector", ""))
        field_reqs = parse_field_selector(query.get("fieldSelector", ""), target.rt.key)
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        since_rv = int(query.get("resourceVersion") or 0)

        def snapshot() -> dict[tuple[str, str], dict[str, Any]]:
            with cluster.store.serving():
                items = cluster.store.list(target.rt.key, target.namespace)
                return {
                    (o["metadata"].get("namespace", ""), o["metadata"]["name"]): json.loads(
                        json.dumps(o)
                    )
                    for o in items
                    if labels_match(label_reqs, o["metadata"].get("labels") or {})
                    and fields_match(field_reqs, o)
                }

        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def emit(kind: str, obj: dict[str, Any]) -> None:
            line = json.dumps({"type": kind, "object": obj}).encode() + b"\n"
            self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
            self.wfile.flush()

        try:
            seen = snapshot()
            for obj in seen.values():
                if since_rv == 0 or int(obj["metadata"]["resourceVersion"]) > since_rv:
                    emit("ADDED" if since_rv == 0 else "MODIFIED", obj)
            while time.monotonic() < deadline:
                time.sleep(0.1)
                now = snapshot()
                for key, obj in now.items():
                    old = seen.get(key)
                    if old is None:
                        emit("ADDED", obj)
                    elif old["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]:
                        emit("MODIFIED", obj)
                for key, obj in seen.items():
                    if key not in now:
                        obj["metadata"]["resourceVersion"] = cluster.store.current_rv()
                        emit("DELETED", obj)
                seen = now
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True


class MetricsServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], cluster: Cluster) -> None:
        super().__init__(address, MetricsHandler)
        self.cluster = cluster


class MetricsHandler(_Base):
    server: MetricsServer

    def do_GET(self) -> None:
        if urlsplit(self.path).path != "/metrics":
            self._send(404, b"404 page not found\n", "text/plain; charset=utf-8")
            return
        text = dcgm.render(self.server.cluster)
        self._send(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")


__all__ = ["ApiServer", "MetricsServer", "objects"]
