"""The two engines that may admit a job against its team's quota (docs/queueing.md): one
set of choices for the job's field and the API, so the OpenAPI schema has one enum."""

from __future__ import annotations

from django.db import models


class Queueing(models.TextChoices):
    PORTAL = "portal", "The portal's admission"
    KUEUE = "kueue", "Kueue"
