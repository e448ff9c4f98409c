"""Print a new API token for a user; the token is the last line of the output."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.services import api_token_create


class Command(BaseCommand):
    help = "Create an API token for USERNAME and print it (shown once; only a hash is stored)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--description", default="created with manage.py")
        parser.add_argument(
            "--days",
            type=int,
            default=settings.API_TOKEN_TTL_DAYS,
            help="Days until it expires (0: never). Default: API_TOKEN_TTL_DAYS.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        try:
            user = User.objects.get(username=options["username"])
        except User.DoesNotExist:
            raise CommandError(f"No user named {options['username']!r}.") from None
        token, secret = api_token_create(
            user=user, description=options["description"], ttl_days=options["days"]
        )
        expiry = f"expires {token.expires_at:%Y-%m-%d}" if token.expires_at else "never expires"
        self.stdout.write(
            f"Token for {user.get_username()} ({expiry}). Use: Authorization: Bearer <token>"
        )
        self.stdout.write(secret)
