"""Where notices go (destinations, with the events each wants) and what was sent (deliveries)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from teams.models import Team


class Channel(models.TextChoices):
    EMAIL = "email", "Email"
    WEBHOOK = "webhook", "Webhook (signed JSON)"
    SLACK = "slack", "Slack"


class Destination(models.Model):
    """One channel of a user (email, webhook, Slack) or of a team (webhook, Slack), with the
    events it wants. A user has at most one per channel, and so has a team."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="notification_destinations",
    )
    team = models.ForeignKey(
        Team,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="notification_destinations",
    )
    channel = models.CharField(max_length=10, choices=Channel.choices)
    # The webhook's or Slack's URL; for email an address other than the account's (blank:
    # the account's).
    target = models.CharField(max_length=500, blank=True)
    # The webhook's HMAC-SHA256 key, shown to its owner to check signatures with.
    secret = models.CharField(max_length=64, blank=True)
    events = models.JSONField(default=list, blank=True)
    # The last delivery's outcome, shown on the settings page.
    last_status = models.CharField(max_length=10, blank=True)
    last_error = models.TextField(blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(user__isnull=False, team__isnull=True)
                | models.Q(user__isnull=True, team__isnull=False, channel__in=["webhook", "slack"]),
                name="destination_one_owner",
            ),
            models.UniqueConstraint(
                fields=["user", "channel"],
                condition=models.Q(user__isnull=False),
                name="destination_unique_user_channel",
            ),
            models.UniqueConstraint(
                fields=["team", "channel"],
                condition=models.Q(team__isnull=False),
                name="destination_unique_team_channel",
            ),
        ]

    def __str__(self) -> str:
        owner = f"team {self.team.slug}" if self.team is not None else str(self.user)
        return f"{owner} {self.channel}"


class Delivery(models.Model):
    """One notice for one destination: at most one per (destination, key), where the key
    names the job, the event and the timeline entry that triggered it."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        SENDING = "sending", "Sending"
        RETRYING = "retrying", "Retrying"
        SENT = "sent", "Sent"
        FAILED = "failed", "Failed"

    # About 15 minutes of tries (2, 4, 8 … 300 s apart, with jitter) before giving up.
    MAX_ATTEMPTS = 8

    destination = models.ForeignKey(
        Destination, on_delete=models.CASCADE, related_name="deliveries"
    )
    key = models.CharField(max_length=200)
    event = models.CharField(max_length=40)
    subject = models.CharField(max_length=300)
    body = models.TextField()
    payload = models.JSONField(default=dict)
    status = models.CharField(
        max_length=10, choices=Status.choices, default=Status.QUEUED, db_index=True
    )
    attempts = models.PositiveSmallIntegerField(default=0)
    # When the run now sending it claimed it: a claim older than NOTIFY_SENDING_TIMEOUT_SECONDS
    # belongs to a worker that died mid-send, and the sweep gives the delivery back.
    claimed_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["destination", "key"], name="delivery_unique_key")
        ]

    def __str__(self) -> str:
        return f"{self.key} → {self.destination}"
