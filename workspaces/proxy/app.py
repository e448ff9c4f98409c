"""The workspace proxy as a pure ASGI application (run by uvicorn: ``workspaces.proxy.asgi``).

``/workspaces/<id>/…`` (HTTP and WebSocket):

1. The portal's session cookie names the user (``access.session_user_id``); the user must
   be allowed to open that workspace (its owner; a lead where the team allows it). Anyone
   else, signed in or not, gets 404, as for another team's job, on HTTP and on the
   WebSocket handshake alike.
2. A request that changes something (not GET/HEAD/OPTIONS) or opens a WebSocket must come
   from the portal's own origin: the server trusts the proxy's token and so skips its own
   XSRF and Origin checks, and this is where a cross-site request is stopped.
3. The request goes to the workspace's pod (its IP and container port), path unchanged (the
   server is served under the same prefix), with the server's token in ``Authorization``
   and without the portal's session and CSRF cookies. The response streams back as it
   comes; WebSocket frames are passed both ways until either side closes.

Any other path goes to ``upstream`` (the portal's web process) unchanged, streamed, when
one is set (``make run`` and compose put the proxy in front); without one it is 404 (the
Helm chart's ingress routes only ``/workspaces/`` here).

Decisions are cached for a few seconds per session and workspace: JupyterLab loads about
a hundred files when it opens, and each would otherwise read the session, the job and the
cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.cookiejar
import logging
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from html import escape
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import urlsplit

import httpx
import websockets
from asgiref.sync import sync_to_async
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from workspaces.proxy.access import CODE_SERVER_COOKIE, Target, session_user_id, workspace_target

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

WORKSPACE_ROUTE = re.compile(r"^/workspaces/(\d{1,12})(/.*)?$")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Hop-by-hop headers (RFC 9110 7.6.1) are the connection's, never forwarded.
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"host",
    }
)
NOT_FOUND = b"<!doctype html><title>Not found</title><h1>Not found</h1>"
DECISION_SECONDS = 5.0
JUPYTER_SUBPROTOCOL = "v1.kernel.websocket.jupyter.org"


class _RefuseEveryCookie(http.cookiejar.CookiePolicy):
    """The proxy's HTTP client keeps no cookies: it speaks for many people at once.

    httpx stores every response's ``Set-Cookie`` in its client's jar and adds the jar's
    cookies to any later request without a ``Cookie`` header of its own, so one shared client
    with a jar sent the first user's session for every later visitor. With this policy
    (the standard library's documented hook, which httpx's jar honours) nothing is stored
    and nothing is added: each request carries only the cookies its own client sent, and a
    ``Set-Cookie`` goes back to the one client whose request caused it.
    """

    netscape = True
    rfc2965 = False
    hide_cookie2 = False

    def set_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        return False

    def return_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        return False

    def domain_return_ok(self, domain: str, request: Any) -> bool:
        return False

    def path_return_ok(self, path: str, request: Any) -> bool:
        return False


def cookieless_client(**options: Any) -> httpx.AsyncClient:
    """An HTTP client that never stores or adds a cookie (``_RefuseEveryCookie``)."""
    return httpx.AsyncClient(
        cookies=http.cookiejar.CookieJar(policy=_RefuseEveryCookie()), **options
    )


@dataclass
class _Decision:
    target: Target | None
    expires: float


def _headers(scope: Scope) -> dict[bytes, bytes]:
    return {k.lower(): v for k, v in scope.get("headers") or []}


def _raw_path(scope: Scope) -> str:
    """The path as the client sent it (still %-encoded)."""
    return str(scope.get("raw_path", scope["path"].encode()).decode("latin-1"))


def _cookie(scope: Scope, name: str) -> str | None:
    raw = _headers(scope).get(b"cookie", b"").decode("latin-1")
    try:
        jar = SimpleCookie(raw)
    except CookieError:
        return None
    morsel = jar.get(name)
    return morsel.value if morsel is not None else None


def _without_cookies(raw: bytes, names: frozenset[str]) -> bytes:
    """The Cookie header without the portal's own cookies (its session and CSRF token)."""
    kept = [
        part.strip()
        for part in raw.decode("latin-1").split(";")
        if part.strip() and part.split("=", 1)[0].strip() not in names
    ]
    return "; ".join(kept).encode("latin-1")


def _same_origin(scope: Scope) -> bool:
    """Whether the request comes from the page's own origin: its Origin header (or, with
    none, its Sec-Fetch-Site) against the Host it was sent to."""
    headers = _headers(scope)
    origin = headers.get(b"origin")
    if origin is None:
        return headers.get(b"sec-fetch-site", b"same-origin") in (b"same-origin", b"none")
    parts = urlsplit(origin.decode("latin-1"))
    return parts.netloc.lower() == headers.get(b"host", b"").decode("latin-1").lower()


class WorkspaceProxy:
    def __init__(
        self,
        *,
        upstream: str = "",
        session_cookie: str = "sessionid",
        portal_cookies: frozenset[str] = frozenset({"sessionid", "csrftoken"}),
        connect_timeout: float = 5.0,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.session_cookie = session_cookie
        self.portal_cookies = portal_cookies
        self._decisions: dict[tuple[str, int], _Decision] = {}
        self._client: httpx.AsyncClient | None = None
        self._timeout = httpx.Timeout(connect=connect_timeout, read=None, write=60, pool=30)

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            # One client (and connection pool) for every request, to the portal and to the
            # workspace servers alike; it holds no state of any user (no cookie jar).
            self._client = cookieless_client(
                timeout=self._timeout,
                follow_redirects=False,
                limits=httpx.Limits(max_connections=1000, max_keepalive_connections=100),
            )
        return self._client

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        match = WORKSPACE_ROUTE.match(scope.get("path", ""))
        if match is None:
            if scope["type"] == "http" and self.upstream:
                await self._forward_http(scope, receive, send, self.upstream, None)
            elif scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
            else:
                await _respond(send, 404, NOT_FOUND)
            return
        job_id = int(match.group(1))
        target = await self._decide(scope, job_id)
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send, target)
        else:
            await self._workspace_http(scope, receive, send, target, match.group(2))

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._client is not None:
                    await self._client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _decide(self, scope: Scope, job_id: int) -> Target | None:
        session = _cookie(scope, self.session_cookie) or ""
        key = (session, job_id)
        now = time.monotonic()
        cached = self._decisions.get(key)
        if cached is not None and cached.expires > now:
            return cached.target
        target = await sync_to_async(_target, thread_sensitive=False)(session, job_id)
        if len(self._decisions) > 10_000:
            self._decisions = {k: v for k, v in self._decisions.items() if v.expires > now}
        # A workspace that is not ready yet is asked again on the next request.
        ttl = DECISION_SECONDS if target is None or target.endpoint is not None else 0.0
        self._decisions[key] = _Decision(target, now + ttl)
        return target

    def forget(self, job_id: int) -> None:
        """Drop the cached decisions about one workspace (its server stopped answering)."""
        for key in [k for k in self._decisions if k[1] == job_id]:
            self._decisions.pop(key, None)

    async def _workspace_http(
        self, scope: Scope, receive: Receive, send: Send, target: Target | None, rest: str | None
    ) -> None:
        if target is None:
            await _respond(send, 404, NOT_FOUND)
            return
        if rest is None:  # /workspaces/7 → /workspaces/7/
            await _respond(send, 308, b"", [(b"location", target.base_path.encode())])
            return
        if scope["method"] not in SAFE_METHODS and not _same_origin(scope):
            await _respond(send, 403, b"Cross-origin request refused by the workspace proxy.")
            return
        if target.endpoint is None:
            await _respond(send, 503, _waiting_page(target), [(b"refresh", b"5")])
            return
        origin = f"http://{target.endpoint.ip}:{target.endpoint.port}"
        await self._forward_http(scope, receive, send, origin, target)

    async def _forward_http(
        self, scope: Scope, receive: Receive, send: Send, origin: str, target: Target | None
    ) -> None:
        """Stream the request to ``origin`` and the response back."""
        headers = [(k, v) for k, v in scope.get("headers") or [] if k.lower() not in HOP_BY_HOP]
        path = _raw_path(scope)
        if target is not None:
            headers = self._signed_in(headers, target)
            path = target.upstream_path(path)
            if target.refused(path):
                await _respond(send, 404, NOT_FOUND)
                return
        else:
            client = scope.get("client")
            if client:
                headers.append((b"x-forwarded-for", client[0].encode()))
        query = scope.get("query_string") or b""
        url = origin + path
        if query:
            url += "?" + query.decode("latin-1")
        sent = _headers(scope)
        has_body = b"content-length" in sent or b"transfer-encoding" in sent
        request = self.client.build_request(
            scope["method"], url, headers=headers, content=_body(receive) if has_body else b""
        )
        if target is None and sent.get(b"host"):
            # The portal sees the Host its client asked for (its URLs, its CSRF checks).
            request.headers["host"] = sent[b"host"].decode("latin-1")
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            if target is not None:
                self.forget(target.job_id)
            logger.warning("proxy: %s did not answer: %s", origin, exc)
            await _respond(send, 502, b"The server behind the portal did not answer; try again.")
            return
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": [
                        (k, v) for k, v in response.headers.raw if k.lower() not in HOP_BY_HOP
                    ],
                }
            )
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()

    def _signed_in(
        self, headers: list[tuple[bytes, bytes]], target: Target
    ) -> list[tuple[bytes, bytes]]:
        """The request's headers for the workspace's server: without the portal's cookies
        (its session and CSRF token) or anything the browser sent to sign in itself, with
        the proxy's credentials instead (``Target.credential``)."""
        name, value = target.credential
        drop = self.portal_cookies | {CODE_SERVER_COOKIE}
        kept, cookies = [], []
        for k, v in headers:
            if k.lower() == b"cookie":
                cookies.append(_without_cookies(v, drop))  # HTTP/2 may send several
            elif k.lower() != b"authorization":
                kept.append((k, v))
        if name == b"cookie":
            cookies.append(value)
        else:
            kept.append((name, value))
        joined = b"; ".join(c for c in cookies if c)
        if joined:
            kept.append((b"cookie", joined))
        return kept

    async def _websocket(
        self, scope: Scope, receive: Receive, send: Send, target: Target | None
    ) -> None:
        message = await receive()  # websocket.connect
        if message["type"] != "websocket.connect":
            return
        if target is None or not _same_origin(scope):
            # 404, as over HTTP: the handshake is refused with that status where the server
            # supports it (the ASGI denial response), else closed.
            await _deny(scope, send, 404 if target is None else 403)
            return
        if target.endpoint is None:
            await _deny(scope, send, 503)
            return
        path = target.upstream_path(_raw_path(scope))
        if target.refused(path):
            await _deny(scope, send, 404)
            return
        query = (scope.get("query_string") or b"").decode("latin-1")
        url = f"ws://{target.endpoint.ip}:{target.endpoint.port}{path}" + (
            f"?{query}" if query else ""
        )
        wanted = list(scope.get("subprotocols") or [])
        signed_in = self._signed_in(
            [(k, v) for k, v in scope.get("headers") or [] if k.lower() == b"cookie"], target
        )
        try:
            upstream = await websockets.connect(
                url,
                additional_headers=[(k.decode(), v.decode("latin-1")) for k, v in signed_in],
                subprotocols=wanted or None,
                max_size=None,
                open_timeout=10,
                ping_interval=None,
                compression=None,
            )
        except (OSError, InvalidHandshake, InvalidStatus, TimeoutError) as exc:
            self.forget(target.job_id)
            logger.warning("proxy: websocket %s refused: %s", url, exc)
            await _deny(scope, send, 502)
            return
        await send({"type": "websocket.accept", "subprotocol": upstream.subprotocol})
        await _pump(receive, send, upstream)


async def _pump(receive: Receive, send: Send, upstream: Any) -> None:
    """Frames both ways until either side closes; the other is then closed too.

    Either side may go away in the middle of a frame: the browser's tab closes while the
    server is sending (uvicorn's ``send`` raises ``ClientDisconnected``, an ``OSError``), or
    the server stops while the browser is sending (``ConnectionClosed``). Both are the end
    of the session, not errors."""

    async def client_to_server() -> None:
        try:
            while True:
                message = await receive()
                if message["type"] == "websocket.disconnect":
                    return
                if message.get("bytes") is not None:
                    await upstream.send(message["bytes"])
                elif message.get("text") is not None:
                    await upstream.send(message["text"])
        except ConnectionClosed:
            return

    async def server_to_client() -> None:
        try:
            async for frame in upstream:
                if isinstance(frame, bytes):
                    await send({"type": "websocket.send", "bytes": frame})
                else:
                    await send({"type": "websocket.send", "text": frame})
        except (ConnectionClosed, OSError):
            return
        with contextlib.suppress(OSError):
            await send({"type": "websocket.close", "code": upstream.close_code or 1000})

    tasks = [asyncio.create_task(client_to_server()), asyncio.create_task(server_to_client())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for outcome in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(outcome, Exception):
                logger.warning("proxy: websocket pump failed: %r", outcome)
        await upstream.close()


def _target(session_key: str, job_id: int) -> Target | None:
    user_id = session_user_id(session_key)
    return None if user_id is None else workspace_target(user_id=user_id, job_id=job_id)


async def _body(receive: Receive) -> Any:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body = message.get("body", b"")
        if body:
            yield body
        if not message.get("more_body"):
            return


async def _respond(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/html; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _deny(scope: Scope, send: Send, status: int) -> None:
    if "websocket.http.response" in (scope.get("extensions") or {}):
        await send(
            {
                "type": "websocket.http.response.start",
                "status": status,
                "headers": [(b"content-type", b"text/html; charset=utf-8")],
            }
        )
        await send({"type": "websocket.http.response.body", "body": NOT_FOUND})
    else:
        await send({"type": "websocket.close", "code": 1008})


def _waiting_page(target: Target) -> bytes:
    return (
        "<!doctype html><meta charset=utf-8><title>Workspace not ready</title>"
        f"<h1>Workspace not ready</h1><p>{escape(target.problem)}</p>"
        f'<p><a href="/jobs/{target.job_id}/">Its page in the portal</a></p>'
    ).encode()
