"""Writes: people's notification settings, publishing a notice, and sending one delivery.

A notice becomes one ``Delivery`` row per destination that wants its event, unique on
(destination, key): publishing the same notice twice (a task that ran twice, a transition
seen by both the tracker and the reconcile) adds nothing. Each new row is sent by a thin
task queued on commit; a delivery is claimed with a conditional UPDATE before it is sent,
so two runs of the task never send it twice.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from core.errors import ApplicationError, PermissionDenied
from notifications import channels
from notifications.events import DEFAULT_EVENTS, EVENT_KEYS
from notifications.models import Channel, Delivery, Destination
from notifications.tasks import delivery_send_task
from teams.models import Membership, Team
from teams.selectors import membership_role
from teams.services import audit_record

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Notice:
    """What happened, in words a person reads, for a user (a job's owner, a team's lead)
    and their team."""

    key: str  # unique per (job, event, timeline entry), or (event, team, month): the dedupe key
    event: str
    user_id: int
    team_id: int | None  # None: for the user alone (a platform admin's notice)
    subject: str
    body: str
    payload: dict[str, Any] = field(default_factory=dict)


# --- settings ------------------------------------------------------------------------


def _field_error(name: str, message: str) -> ApplicationError:
    return ApplicationError(f"{name}: {message}", field_errors={name: [message]})


def _check_events(events: Any, name: str) -> list[str]:
    if not isinstance(events, list) or not all(isinstance(e, str) for e in events):
        raise _field_error(name, f"A list of event names, from: {', '.join(EVENT_KEYS)}.")
    unknown = sorted(set(events) - set(EVENT_KEYS))
    if unknown:
        raise _field_error(
            name, f"Unknown event {', '.join(unknown)}; use any of: {', '.join(EVENT_KEYS)}."
        )
    return [key for key in EVENT_KEYS if key in events]  # the registry's order, no repeats


def _check_url(url: str, name: str) -> str:
    """An http(s) URL the workers may post to.

    Refuses link-local addresses (cloud metadata endpoints) always, and loopback or private
    addresses unless ``NOTIFY_ALLOW_PRIVATE_URLS`` (on in development, where the receivers
    are local; off in production, where a user-given URL must not reach internal services).
    The same check runs again at every send (``channels.url_address``): a name may resolve
    elsewhere later.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _field_error(name, "An http:// or https:// URL, e.g. https://hooks.example.com/gpu.")
    if settings.PRODUCTION and parts.scheme != "https":
        raise _field_error(name, "Use an https:// URL: notices carry job details.")
    try:
        channels.url_address(url)
    except channels.AddressRefused as exc:
        raise _field_error(name, str(exc)) from None
    except channels.TemporaryDeliveryError:
        raise _field_error(name, f"The host {parts.hostname} cannot be resolved.") from None
    return url


def _check_address(address: str, name: str) -> str:
    try:
        validate_email(address)
    except ValidationError:
        raise _field_error(name, f"'{address[:80]}' is not an email address.") from None
    return address


def _destination(*, user: User | None, team: Team | None, channel: str) -> Destination:
    found = Destination.objects.filter(user=user, team=team, channel=channel).first()
    if found is not None:
        return found
    events = list(DEFAULT_EVENTS) if channel == Channel.EMAIL else []
    return Destination(user=user, team=team, channel=channel, events=events)


@dataclass(frozen=True)
class ChannelSettings:
    channel: str
    target: str | None = None  # None: unchanged
    events: list[str] | None = None
    rotate_secret: bool = False  # a webhook's new signing secret (the old one stops working)


def _apply(destination: Destination, change: ChannelSettings, prefix: str) -> dict[str, Any]:
    before = {"target": destination.target, "events": list(destination.events)}
    if change.events is not None:
        destination.events = _check_events(change.events, f"{prefix}.events")
    if change.target is not None:
        target = change.target.strip()
        if target and destination.channel == Channel.EMAIL:
            _check_address(target, f"{prefix}.address")
        elif target:
            _check_url(target, f"{prefix}.url")
        elif destination.channel != Channel.EMAIL and destination.events:
            raise _field_error(f"{prefix}.url", "Give the URL to send these events to.")
        destination.target = target
    rotate = (
        destination.channel == Channel.WEBHOOK
        and destination.target
        and (change.rotate_secret or not destination.secret)
    )
    if rotate:
        destination.secret = secrets.token_hex(32)
    if destination.channel != Channel.EMAIL and destination.events and not destination.target:
        raise _field_error(f"{prefix}.url", "Give the URL to send these events to.")
    destination.save()
    after = {"target": destination.target, "events": list(destination.events)}
    diff: dict[str, Any] = {k: [before[k], after[k]] for k in before if before[k] != after[k]}
    if rotate:
        diff["secret"] = "rotated"  # noqa: S105 - that it changed, never the secret itself
    return diff


def _save_all(
    *, actor: User, owner: User | None, team: Team | None, changes: list[ChannelSettings]
) -> list[Destination]:
    saved = []
    for change in changes:
        destination = _destination(user=owner, team=team, channel=change.channel)
        diff = _apply(destination, change, change.channel)
        if diff:
            action = "notifications.team_update" if team else "notifications.update"
            audit_record(actor=actor, action=action, target=destination, changes=diff)
        saved.append(destination)
    return saved


@transaction.atomic
def user_settings_update(*, user: User, changes: list[ChannelSettings]) -> list[Destination]:
    """Which events reach the user on which channel, and where; all or nothing."""
    return _save_all(actor=user, owner=user, team=None, changes=changes)


@transaction.atomic
def team_settings_update(
    *, user: User, team: Team, changes: list[ChannelSettings]
) -> list[Destination]:
    """A team's webhook and Slack channel for the team's events: its leads set them."""
    if membership_role(user=user, team=team) != Membership.Role.LEAD:
        raise PermissionDenied(f"Only a lead of team {team.slug} sets the team's notifications.")
    if any(change.channel == Channel.EMAIL for change in changes):
        raise _field_error("email", "A team has webhook and Slack channels; email is per user.")
    return _save_all(actor=user, owner=None, team=team, changes=changes)


# --- publishing ----------------------------------------------------------------------


def _recipients(notice: Notice) -> list[Destination]:
    """The owner's destinations and the team's that want the event (the owner's email is
    on with the default events until they change it)."""
    whose = Q(user_id=notice.user_id)
    if notice.team_id is not None:
        whose |= Q(team_id=notice.team_id)
    wanted = Destination.objects.filter(whose, events__contains=[notice.event]).select_related(
        "user"
    )
    found = list(wanted)
    has_email = Destination.objects.filter(user_id=notice.user_id, channel=Channel.EMAIL).exists()
    if not has_email and notice.event in DEFAULT_EVENTS:
        owner = User.objects.filter(pk=notice.user_id).first()
        if owner is not None and owner.email:
            email, _ = Destination.objects.get_or_create(
                user=owner, channel=Channel.EMAIL, defaults={"events": list(DEFAULT_EVENTS)}
            )
            found.append(email)
    return found


def notice_publish(*, notice: Notice) -> list[int]:
    """Store one delivery per destination that wants the notice, and queue each on commit.

    Returns the ids of the deliveries this call created (none when it was published before).
    """
    created: list[int] = []
    with transaction.atomic():
        for destination in _recipients(notice):
            delivery, new = Delivery.objects.get_or_create(
                destination=destination,
                key=notice.key,
                defaults={
                    "event": notice.event,
                    "subject": notice.subject[:300],
                    "body": notice.body,
                    "payload": notice.payload,
                },
            )
            if new:
                created.append(delivery.pk)
        for delivery_id in created:
            transaction.on_commit(partial(delivery_send_task.delay, delivery_id))
    return created


# --- sending -------------------------------------------------------------------------

RETRYABLE = (Delivery.Status.QUEUED, Delivery.Status.RETRYING)


def _target(destination: Destination) -> str:
    if destination.channel == Channel.EMAIL:
        return destination.target or (destination.user.email if destination.user else "")
    return destination.target


def _record(delivery: Delivery, status: str, error: str = "") -> None:
    now = timezone.now()
    Delivery.objects.filter(pk=delivery.pk).update(
        status=status, last_error=error, sent_at=now if status == Delivery.Status.SENT else None
    )
    Destination.objects.filter(pk=delivery.destination_id).update(
        last_status=status, last_error=error, last_attempt_at=now
    )


def delivery_send(*, delivery_id: int, last_try: bool = False) -> str:
    """Send one delivery, once. Returns its status afterwards.

    1. Claim it: ``queued``/``retrying`` → ``sending`` in one conditional UPDATE. A delivery
       already sent, failed or being sent by another run is left alone (at most once).
    2. Send it over its channel, with a timeout.
    3. Record the outcome on the delivery and its destination (the settings page shows it):
       ``sent``; ``failed`` on a permanent error or when this was the last try; otherwise
       ``retrying`` and ``TemporaryDeliveryError`` is raised for the task to retry later.
    """
    claimed = Delivery.objects.filter(pk=delivery_id, status__in=RETRYABLE).update(
        status=Delivery.Status.SENDING, attempts=F("attempts") + 1, claimed_at=timezone.now()
    )
    if not claimed:
        return (
            Delivery.objects.filter(pk=delivery_id).values_list("status", flat=True).first() or ""
        )
    delivery = Delivery.objects.select_related("destination__user").get(pk=delivery_id)
    last_try = last_try or delivery.attempts >= Delivery.MAX_ATTEMPTS
    destination = delivery.destination
    target = _target(destination)
    if not target:
        _record(delivery, Delivery.Status.FAILED, "No address or URL to send to.")
        return Delivery.Status.FAILED
    outgoing = channels.Outgoing(
        delivery_id=delivery.pk,
        event=delivery.event,
        subject=delivery.subject,
        body=delivery.body,
        payload=delivery.payload,
        target=target,
        secret=destination.secret,
    )
    try:
        channels.SENDERS[destination.channel](outgoing)
    except channels.PermanentDeliveryError as exc:
        _record(delivery, Delivery.Status.FAILED, str(exc))
        return Delivery.Status.FAILED
    except channels.TemporaryDeliveryError as exc:
        if last_try:
            _record(
                delivery, Delivery.Status.FAILED, f"gave up after {delivery.attempts} tries: {exc}"
            )
            return Delivery.Status.FAILED
        _record(delivery, Delivery.Status.RETRYING, str(exc))
        raise
    _record(delivery, Delivery.Status.SENT)
    return Delivery.Status.SENT


def deliveries_stuck_release(*, now: datetime | None = None) -> list[int]:
    """Give back the deliveries whose worker died while sending them; returns those queued
    to be sent again.

    A run claims a delivery (``sending``, ``claimed_at``) and then records what happened;
    a worker killed in between leaves the claim, and the task's redelivery finds the
    delivery claimed and stops. Once a claim is older than
    ``NOTIFY_SENDING_TIMEOUT_SECONDS`` (beyond the send task's time limit: its run is
    surely gone) it is released, once (a conditional UPDATE on that claim): back to
    ``retrying`` and queued, or ``failed`` when its tries are used up.

    What this guarantees: a delivery is sent once when nothing crashes, and is not lost
    when a worker dies; a receiver may get it twice if the worker died after the receiver
    had it but before the outcome was recorded (a webhook then carries the same
    ``X-GPU-Portal-Delivery`` id both times, for the receiver to drop the repeat).
    """
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=float(settings.NOTIFY_SENDING_TIMEOUT_SECONDS))
    stuck = Delivery.objects.filter(status=Delivery.Status.SENDING).filter(
        Q(claimed_at__lt=cutoff) | Q(claimed_at__isnull=True)
    )
    released: list[int] = []
    for delivery in stuck.only("pk", "claimed_at", "attempts", "destination_id"):
        since = f"{delivery.claimed_at:%H:%M:%S} UTC" if delivery.claimed_at else "an earlier run"
        give_up = delivery.attempts >= Delivery.MAX_ATTEMPTS
        error = f"the worker sending it stopped (claimed at {since}); " + (
            f"gave up after {delivery.attempts} tries" if give_up else "sending it again"
        )
        status = Delivery.Status.FAILED if give_up else Delivery.Status.RETRYING
        same_claim = (
            Q(claimed_at=delivery.claimed_at) if delivery.claimed_at else Q(claimed_at=None)
        )
        with transaction.atomic():
            moved = Delivery.objects.filter(
                same_claim, pk=delivery.pk, status=Delivery.Status.SENDING
            ).update(status=status, last_error=error)
            if not moved:
                continue  # its run recorded an outcome, or another sweep released it
            Destination.objects.filter(pk=delivery.destination_id).update(
                last_status=status, last_error=error, last_attempt_at=now
            )
            if not give_up:
                transaction.on_commit(partial(delivery_send_task.delay, delivery.pk))
                released.append(delivery.pk)
    return released
