"""Sending one notice over one channel: email (Django's email backend), a signed JSON
webhook, or a Slack incoming webhook.

Every call has a timeout. Errors are split as Kopf splits them: ``TemporaryDeliveryError``
(the server is down, busy or slow: 5xx, 429, 408, refused connections, timeouts, SMTP 4xx)
is worth retrying; ``PermanentDeliveryError`` (a 4xx, a refused recipient, a bad URL) never
succeeds by trying again.

The webhook's signature (documented in docs/notifications.md):
``X-GPU-Portal-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`` with the
Unix time in ``X-GPU-Portal-Timestamp``, so a receiver can refuse replays of old bodies.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import smtplib
import time
from dataclasses import dataclass
from typing import Any

import requests
from django.conf import settings
from django.core.mail import EmailMessage, get_connection

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
    try:
        response = requests.post(
            url,
            data=body,
            headers={"Content-Type": "application/json", "User-Agent": USER_AGENT, **headers},
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
