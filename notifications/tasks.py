"""Celery tasks of notifications: thin, take ids, safe to run twice."""

from __future__ import annotations

import random

from celery import Task, shared_task

from core.task_options import ROBUST
from notifications.channels import TemporaryDeliveryError
from notifications.models import Delivery

MAX_TRIES = Delivery.MAX_ATTEMPTS


@shared_task(bind=True, **ROBUST, soft_time_limit=60, time_limit=90)
def delivery_send_task(self: Task, delivery_id: int) -> str:
    """Send one delivery; retry temporary errors with backoff, a bounded number of times."""
    from notifications.services import delivery_send

    last_try = self.request.retries >= MAX_TRIES - 1
    try:
        return delivery_send(delivery_id=delivery_id, last_try=last_try)
    except TemporaryDeliveryError as exc:
        countdown = min(300, 2 ** (self.request.retries + 1)) * random.uniform(0.5, 1.0)  # noqa: S311
        raise self.retry(exc=exc, countdown=countdown, max_retries=MAX_TRIES) from exc


@shared_task(**ROBUST, soft_time_limit=60, time_limit=90)
def deliveries_stuck_task() -> list[int]:
    """Periodic (beat): send again the deliveries a worker died while sending."""
    from notifications.services import deliveries_stuck_release

    return deliveries_stuck_release()
