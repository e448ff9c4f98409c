"""Sending one notice over one channel: email (Django's email backend), a signed JSON
webhook, or a Slack incoming webhook.

Every call has a timeout. Errors are split as Kopf splits them: ``TemporaryDeliveryError``
(the server is down, busy or slow: 5xx, 429, 408, refused connections, timeouts, SMTP 4xx)
is worth retrying; ``PermanentDeliveryError`` (a 4xx, a refused recipient, a bad URL) never
succeeds by trying again.

A webhook or Slack URL is posted to only at an address the portal checked at that moment:
its host name is resolved at every send, every address it resolves to must be allowed
(link-local never: cloud metadata lives there; loopback and private ones only with
``NOTIFY_ALLOW_PRIVATE_URLS``), and the connection goes to the address that was checked,
so a name that resolved to a public address when it was saved and to an internal one now
(DNS rebinding) is refused. TLS still verifies the certificate against the URL's host name.

The webhook's signature (documented in docs/notifications.md):
``X-GPU-Portal-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`` with the
Unix time in ``X-GPU-Portal-Timestamp``, so a receiver can refuse replays of old bodies.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import smtplib
import socket
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import requests
from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from requests.adapters import HTTPAdapter

SIGNATURE_HEADER = "X-GPU-Portal-Signature"
TIMESTAMP_HEADER = "X-GPU-Portal-Timestamp"
EVENT_HEADER = "X-GPU-Portal-Event"
DELIVERY_HEADER = "X-GPU-Portal-Delivery"
USER_AGENT = "gpu-portal-notifications/1"


class DeliveryError(Exception):
    pass


class TemporaryDeliveryError(DeliveryError):
    """Worth another try later."""


class PermanentDeliveryError(DeliveryError):
    """Trying again cannot help: the address, URL or content was refused."""


class AddressRefused(PermanentDeliveryError):
    """The URL's host resolves to an address the workers must not post to."""


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def resolve(host: str, port: int) -> list[IPAddress]:
    """The addresses ``host`` resolves to now (the system's resolver)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [ipaddress.ip_address(info[4][0]) for info in infos]


def url_address(url: str) -> IPAddress:
    """The address to post ``url`` to, checked now: every address its host resolves to is
    allowed, and the first is the one to connect to.

    Raises ``AddressRefused`` (link-local, multicast or unspecified always; loopback or
    private unless ``NOTIFY_ALLOW_PRIVATE_URLS``), ``TemporaryDeliveryError`` when the host
    cannot be resolved now."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        addresses = [literal] if literal else resolve(host, port)
    except (OSError, ValueError) as exc:
        raise TemporaryDeliveryError(f"The host {host} cannot be resolved: {exc}") from exc
    if not addresses:
        raise TemporaryDeliveryError(f"The host {host} cannot be resolved.")
    for address in addresses:
        if address.is_link_local or address.is_multicast or address.is_unspecified:
            raise AddressRefused(f"{host} resolves to {address}, which is refused.")
        if (address.is_loopback or address.is_private) and not settings.NOTIFY_ALLOW_PRIVATE_URLS:
            raise AddressRefused(
                f"{host} resolves to the internal address {address}; use a public "
                "URL (an operator can allow internal ones with NOTIFY_ALLOW_PRIVATE_URLS)."
            )
    return addresses[0]


class _PinnedAdapter(HTTPAdapter):
    """Connects to the checked address while TLS sends and verifies the URL's host name
    (``build_connection_pool_key_attributes`` is requests' documented hook for this)."""

    def __init__(self, hostname: str) -> None:
        self.hostname = hostname
        super().__init__(max_retries=0)

    def build_connection_pool_key_attributes(
        self, request: requests.PreparedRequest, verify: bool | str, cert: Any = None
    ) -> Any:
        host_params, pool_kwargs = super().build_connection_pool_key_attributes(
            request, verify, cert
        )
        pool: dict[str, Any] = dict(pool_kwargs)
        if host_params.get("scheme") == "https":
            pool["server_hostname"] = self.hostname
            pool["assert_hostname"] = self.hostname
        return host_params, pool


def _pinned(url: str, address: IPAddress) -> tuple[str, str]:
    """``url`` with its host replaced by ``address``, and the Host header it names."""
    parts = urlsplit(url)
    shown = f"[{address}]" if address.version == 6 else str(address)
    netloc = f"{shown}:{parts.port}" if parts.port else shown
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=netloc)), host


@dataclass(frozen=True)
class Outgoing:
    delivery_id: int
    event: str
    subject: str
    body: str
    payload: dict[str, Any]
    target: str  # address or URL
    secret: str = ""


def sign(*, secret: str, timestamp: str, body: bytes) -> str:
    """The value of ``X-GPU-Portal-Signature`` for a body sent at ``timestamp``."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


def _text(reply: bytes | str) -> str:
    return reply.decode(errors="replace") if isinstance(reply, bytes) else reply


def send_email(message: Outgoing) -> None:
    connection = get_connection(timeout=settings.EMAIL_TIMEOUT)
    email = EmailMessage(
        subject=message.subject,
        body=message.body,
        to=[message.target],
        connection=connection,
        headers={EVENT_HEADER: message.event},
    )
    try:
        email.send()
    except smtplib.SMTPRecipientsRefused as exc:
        refusals = list(exc.recipients.values())
        codes = [code for code, _ in refusals]
        text = "; ".join(f"{code} {_text(reply)}" for code, reply in refusals)
        if all(400 <= code < 500 for code in codes):
            raise TemporaryDeliveryError(f"recipient refused for now: {text}") from exc
        raise PermanentDeliveryError(f"recipient refused: {text}") from exc
    except smtplib.SMTPResponseException as exc:
        text = f"SMTP {exc.smtp_code} {_text(exc.smtp_error)}"
        if 400 <= exc.smtp_code < 500:
            raise TemporaryDeliveryError(text) from exc
        raise PermanentDeliveryError(text) from exc
    except (smtplib.SMTPException, OSError) as exc:
        # Refused or dropped connections, timeouts, DNS: the server is away for now.
        raise TemporaryDeliveryError(
            f"SMTP server {settings.EMAIL_HOST}:{settings.EMAIL_PORT} unreachable: {exc}"
        ) from exc


def _post(url: str, body: bytes, headers: dict[str, str]) -> None:
    address = url_address(url)
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT, **headers}
    try:
        with requests.Session() as session:
            if requests.utils.get_environ_proxies(url):
                # An egress proxy (HTTPS_PROXY...) connects for us and resolves the name
                # itself: the address was checked, the proxy is the operator's to trust.
                target = url
            else:
                target, headers["Host"] = _pinned(url, address)
                hostname = urlsplit(url).hostname or ""
                session.mount("http://", _PinnedAdapter(hostname))
                session.mount("https://", _PinnedAdapter(hostname))
            response = session.post(
                target,
                data=body,
                headers=headers,
                timeout=settings.NOTIFY_HTTP_TIMEOUT,
                allow_redirects=False,
            )
    except requests.exceptions.InvalidURL as exc:
        raise PermanentDeliveryError(f"invalid URL: {exc}") from exc
    except requests.RequestException as exc:
        raise TemporaryDeliveryError(f"{url}: {type(exc).__name__}: {exc}") from exc
    if response.status_code < 300:
        return
    text = f"{url} answered {response.status_code}: {response.text[:200]}"
    if response.status_code in (408, 425, 429) or response.status_code >= 500:
        raise TemporaryDeliveryError(text)
    raise PermanentDeliveryError(text)


def send_webhook(message: Outgoing) -> None:
    body = json.dumps(message.payload, separators=(",", ":"), sort_keys=True).encode()
    timestamp = str(int(time.time()))
    _post(
        message.target,
        body,
        {
            EVENT_HEADER: message.event,
            DELIVERY_HEADER: str(message.delivery_id),
            TIMESTAMP_HEADER: timestamp,
            SIGNATURE_HEADER: sign(secret=message.secret, timestamp=timestamp, body=body),
        },
    )


def slack_body(message: Outgoing) -> dict[str, Any]:
    """Slack's incoming-webhook format: ``text`` (the notification's fallback) and blocks."""
    link = message.payload.get("job", {}).get("url", "")
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{message.subject}*"}},
        {"type": "section", "text": {"type": "mrkdwn", "text": message.payload.get("summary", "")}},
    ]
    lines = message.payload.get("log_tail") or []
    if lines:
        tail = "\n".join(lines)[-2500:]
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"```{tail}```"}})
    if link:
        blocks.append(
            {"type": "context", "elements": [{"type": "mrkdwn", "text": f"<{link}|Open the job>"}]}
        )
    return {"text": message.subject, "blocks": blocks}


def send_slack(message: Outgoing) -> None:
    _post(message.target, json.dumps(slack_body(message)).encode(), {})


SENDERS = {"email": send_email, "webhook": send_webhook, "slack": send_slack}
