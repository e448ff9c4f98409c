"""Real receivers for notifications: an SMTP server (aiosmtpd) and an HTTP server for
webhooks, both in the test process on free local ports."""

from __future__ import annotations

import email
import email.policy
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Inbox:
    def __init__(self) -> None:
        self.messages: list[EmailMessage] = []

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        raw = envelope.original_content or envelope.content or b""
        message = email.message_from_bytes(
            raw if isinstance(raw, bytes) else raw.encode(), policy=email.policy.default
        )
        self.messages.append(message)  # type: ignore[arg-type]
        return "250 Message accepted for delivery"


@dataclass
class SmtpReceiver:
    port: int
    inbox: _Inbox
    controller: Controller

    @property
    def messages(self) -> list[EmailMessage]:
        return self.inbox.messages


def smtp_receiver() -> Iterator[SmtpReceiver]:
    inbox = _Inbox()
    port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield SmtpReceiver(port=port, inbox=inbox, controller=controller)
    finally:
        controller.stop()


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class WebhookReceiver:
    port: int
    requests: list[Received] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)  # answers to give, in order; then 200
    # The first ``stall`` requests are held, unanswered, until ``release`` is set (a sender
    # caught mid-send).
    stall: int = 0
    release: threading.Event = field(default_factory=threading.Event)

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"


def webhook_receiver() -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver(port=free_port())

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            receiver.requests.append(
                Received(path=self.path, headers=dict(self.headers.items()), body=body)
            )
            if len(receiver.requests) <= receiver.stall:
                receiver.release.wait(timeout=60)
            status = receiver.statuses.pop(0) if receiver.statuses else 200
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"ok" if status < 300 else b"no_service")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", receiver.port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
