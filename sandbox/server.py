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
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from sandbox import dcgm, faults, logs
from sandbox.api import objects, printing
from sandbox.api.handlers import Request, Response, handle, parse_target, pod_log, resolve
from sandbox.api.resources import ResourceType
from sandbox.errors import ApiError, bad_request, expired, unauthorized
from sandbox.label_selectors import (
    fields_match,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)
from sandbox.state import Cluster

log = logging.getLogger("sandbox.http")
HANDSHAKE_TIMEOUT_SECONDS = 10
# Fault injection, beside the Kubernetes API (same bearer token): see sandbox/faults.py.
FAULTS_PATH = "/sandbox/faults"
# A watch without timeoutSeconds ends after this long, as the API server's
# --min-request-timeout (30 min) does; clients reconnect from their last version.
WATCH_DEFAULT_TIMEOUT = 1800.0
BOOKMARK_SECONDS = 5.0
LOG_FOLLOW_SECONDS = 0.5


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
            if split.path in (FAULTS_PATH, FAULTS_PATH + "/log"):
                with cluster.store.serving():
                    result = faults.answer(cluster, self.command, split.path, body)
                self._send(200, json.dumps(result).encode(), "application/json")
                return
            if self.command == "GET" and query.get("watch", "").lower() in ("true", "1"):
                self._watch(split.path, query)
                return
            if (
                self.command == "GET"
                and split.path.endswith("/log")
                and query.get("follow", "").lower() in ("true", "1")
            ):
                self._follow_log(split.path, query)
                return
            req = Request(
                self.command,
                split.path,
                query,
                body,
                self.headers.get("Content-Type", "application/json"),
                self.server.url,
                self.headers.get("Accept", "application/json"),
                self.headers.get("User-Agent", ""),
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

    def _follow_log(self, path: str, query: dict[str, str]) -> None:
        """``…/log?follow=true`` (``kubectl logs -f``): the log so far, then each new line as
        the container writes it, until the container stops or the pod is gone."""
        cluster = self.server.cluster
        parsed = parse_target(path)
        target = resolve(*parsed) if parsed else None
        if target is None or target.sub != "log" or target.name is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        ns, name = target.namespace or "", target.name
        follow = {k: v for k, v in query.items() if k not in ("tailLines", "limitBytes")}
        with cluster.store.serving():
            full = pod_log(cluster, ns, name, follow)  # errors (not found, waiting) as usual
        # What is shown first is cut from that same read: two reads a moment apart could
        # differ by a line, which would then be neither shown nor followed.
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
            while True:
                time.sleep(LOG_FOLLOW_SECONDS)
                with cluster.store.serving():
                    pod = cluster.store.get("pods", ns, name)
                    if pod is None:
                        break
                    full = pod_log(cluster, ns, name, follow)
                    finished = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                if len(full) > sent:
                    send(full[sent:])
                    sent = len(full)
                if finished:
                    break
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass
        except ApiError:
            self.wfile.write(b"0\r\n\r\n")
        self.close_connection = True

    def _watch(self, path: str, query: dict[str, str]) -> None:
        """``?watch=true``: stream changes as newline-delimited JSON events, from the
        store's watch cache (``Store.changes_since``).

        1. No ``resourceVersion`` (or ``0``), or ``sendInitialEvents=true``: every
           matching object first as ``ADDED``; with ``sendInitialEvents`` a ``BOOKMARK``
           annotated ``k8s.io/initial-events-end`` marks the end of them (client-go's
           WatchList, which kubectl 1.35 uses).
        2. A ``resourceVersion`` the cache still covers: the changes after it; an older
           one: one ``ERROR`` event with a 410 ``Expired`` Status (the client relists).
        3. Then every change as it happens, ``BOOKMARK`` events every few seconds when
           ``allowWatchBookmarks`` is set, until ``timeoutSeconds``.
        """
        cluster, store = self.server.cluster, self.server.cluster.store
        watch = _WatchRequest.parse(path, query)
        with store.serving():
            since = int(store.current_rv())
            initial: list[dict[str, Any]] = []
            if watch.initial_events or watch.asked in ("", "0"):
                initial = [
                    json.loads(json.dumps(o))
                    for o in store.list(watch.rt.key, watch.namespace)
                    if watch.matches(o)
                ]
            else:
                try:
                    since = int(watch.asked)
                except ValueError:
                    raise bad_request(f'invalid resource version "{watch.asked}"') from None
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        as_table = printing.wants_table(self.headers.get("Accept", ""))
        stream = _WatchStream(self.wfile, watch.rt, cluster, as_table=as_table)
        try:
            for obj in initial:
                stream.emit("ADDED", obj)
            if watch.initial_events:
                stream.bookmark(since, {"k8s.io/initial-events-end": "true"})
            last_bookmark = time.monotonic()
            while (left := watch.deadline - time.monotonic()) > 0:
                found = store.changes_since(since, watch.rt.key, timeout=min(1.0, left))
                if found is None:
                    oldest = store.oldest_rv()
                    stream.emit(
                        "ERROR", expired(f"too old resource version: {since} ({oldest})").status()
                    )
                    break
                changes, since = found
                for change in changes:
                    obj = json.loads(change.body)
                    if watch.matches(obj):
                        stream.emit(change.type, obj)
                if watch.bookmarks and time.monotonic() - last_bookmark >= BOOKMARK_SECONDS:
                    stream.bookmark(since)
                    last_bookmark = time.monotonic()
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass
        self.close_connection = True


@dataclass(frozen=True)
class _WatchRequest:
    """What a ``?watch=true`` request asks for."""

    rt: ResourceType
    namespace: str | None
    label_reqs: Any
    field_reqs: Any
    deadline: float  # time.monotonic() at which the stream ends (timeoutSeconds)
    bookmarks: bool  # allowWatchBookmarks
    initial_events: bool  # sendInitialEvents
    asked: str  # resourceVersion

    @classmethod
    def parse(cls, path: str, query: dict[str, str]) -> _WatchRequest:
        parsed = parse_target(path)
        if parsed is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        target = resolve(*parsed)
        if target.name is not None:
            query = dict(query)
            query["fieldSelector"] = f"metadata.name={target.name}"
        timeout = float(query.get("timeoutSeconds") or WATCH_DEFAULT_TIMEOUT)
        return cls(
            rt=target.rt,
            namespace=target.namespace,
            label_reqs=parse_label_selector(query.get("labelSelector", "")),
            field_reqs=parse_field_selector(query.get("fieldSelector", ""), target.rt.key),
            deadline=time.monotonic() + timeout,
            bookmarks=query.get("allowWatchBookmarks", "").lower() in ("true", "1"),
            initial_events=query.get("sendInitialEvents", "").lower() in ("true", "1"),
            asked=query.get("resourceVersion", ""),
        )

    def matches(self, obj: dict[str, Any]) -> bool:
        meta = obj["metadata"]
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return labels_match(self.label_reqs, meta.get("labels") or {}) and fields_match(
            self.field_reqs, obj
        )


class _WatchStream:
    """Watch events written as chunks of newline-delimited JSON (as a table for kubectl
    when it asked for one)."""

    def __init__(self, wfile: Any, rt: ResourceType, cluster: Cluster, *, as_table: bool):
        self.wfile, self.rt, self.cluster, self.as_table = wfile, rt, cluster, as_table

    def emit(self, kind: str, obj: dict[str, Any]) -> None:
        if self.as_table and kind in ("ADDED", "MODIFIED", "DELETED"):
            meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
            obj = printing.table(self.rt, [obj], meta, now=self.cluster.wall_now())
        line = json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode()
        line += b"\n"
        self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
        self.wfile.flush()

    def bookmark(self, rv: int, annotations: dict[str, str] | None = None) -> None:
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if annotations:
            meta["annotations"] = annotations
        self.emit(
            "BOOKMARK", {"kind": self.rt.kind, "apiVersion": self.rt.api_version, "metadata": meta}
        )


class MetricsServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, address: tuple[str, int], cluster: Cluster, *, with_faults: bool = False
    ) -> None:
        super().__init__(address, MetricsHandler)
        self.cluster = cluster
        self.with_faults = with_faults


class MetricsHandler(_Base):
    """dcgm-exporter's ``/metrics``; with the real control plane (``with_faults``), also the
    fault injection the old API server served (``POST /sandbox/faults``, bearer token)."""

    server: MetricsServer

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path.startswith(FAULTS_PATH) and self.server.with_faults:
            self._faults(path)
            return
        if path != "/metrics":
            self._send(404, b"404 page not found\n", "text/plain; charset=utf-8")
            return
        text = dcgm.render(self.server.cluster)
        self._send(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        if not (path.startswith(FAULTS_PATH) and self.server.with_faults):
            self._send(404, b"404 page not found\n", "text/plain; charset=utf-8")
            return
        self._faults(path)

    def _faults(self, path: str) -> None:
        cluster = self.server.cluster
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


__all__ = ["ApiServer", "MetricsServer", "objects"]
