"""Security: a webhook is posted only to an address checked at that moment. A host name that
resolved to an allowed address when the URL was saved and resolves elsewhere at send time
(DNS rebinding; cloud metadata at 169.254.169.254) is refused, and the post goes to the
address that was checked, never to one resolved again behind the check's back. The resolver
is the notifications adapter's (``channels.resolve``), swapped for one whose answer changes."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User

from jobs.services.submit import job_submit
from notifications import channels
from notifications.models import Delivery
from tests.conftest import training_spec
from tests.notifications.test_deliveries import start, subscribe
from tests.receivers import SmtpReceiver, WebhookReceiver

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]


class Resolver:
    """Answers for ``host`` from a list, one per lookup (the last one after that)."""

    def __init__(self, host: str, *answers: str) -> None:
        self.host, self.answers, self.lookups = host, list(answers), 0

    def __call__(self, host: str, port: int) -> list[Any]:
        assert host == self.host, f"{host} looked up, not {self.host}"
        answer = self.answers[min(self.lookups, len(self.answers) - 1)]
        self.lookups += 1
        return [ipaddress.ip_address(answer)]


def use(monkeypatch: pytest.MonkeyPatch, resolver: Callable[[str, int], list[Any]]) -> None:
    monkeypatch.setattr(channels, "resolve", resolver)


@pytest.mark.parametrize(
    ("later", "allow_private", "refusal"),
    [
        ("169.254.169.254", True, "resolves to 169.254.169.254, which is refused"),
        ("10.1.2.3", False, "resolves to the internal address 10.1.2.3"),
    ],
)
def test_a_name_that_resolves_elsewhere_at_send_time_is_refused(
    alice: User,
    hooks: WebhookReceiver,
    smtp: SmtpReceiver,
    monkeypatch: pytest.MonkeyPatch,
    settings: Any,
    later: str,
    allow_private: bool,
    refusal: str,
) -> None:
    # Given a webhook saved while its host resolved to a public address
    settings.NOTIFY_ALLOW_PRIVATE_URLS = allow_private
    resolver = Resolver("hooks.example.com", "93.184.216.34", later)
    use(monkeypatch, resolver)
    subscribe(
        alice,
        {
            "channel": "webhook",
            "target": "https://hooks.example.com/gpu",
            "events": ["job.running"],
        },
    )
    assert resolver.lookups == 1
    job = job_submit(user=alice, data=training_spec(name="rebound"))

    # When a notice is sent after the name was made to point elsewhere
    start(job)

    # Then the name was looked up again, the delivery is refused for good, naming the
    # address, and nothing was posted anywhere
    assert resolver.lookups == 2
    delivery = Delivery.objects.get(payload__job__id=job.pk)
    assert (delivery.status, delivery.attempts) == ("failed", 1)
    assert refusal in delivery.last_error
    assert hooks.requests == []


def test_the_post_goes_to_the_address_that_was_checked(
    alice: User,
    hooks: WebhookReceiver,
    smtp: SmtpReceiver,
    monkeypatch: pytest.MonkeyPatch,
    settings: Any,
) -> None:
    # Given a host name only the portal's check can resolve (the system resolver knows no
    # ".invalid" name): it answers with the receiver's loopback address
    settings.NOTIFY_ALLOW_PRIVATE_URLS = True
    resolver = Resolver("hooks.gpu.invalid", "127.0.0.1")
    use(monkeypatch, resolver)
    url = f"http://hooks.gpu.invalid:{hooks.port}/gpu"
    subscribe(alice, {"channel": "webhook", "target": url, "events": ["job.running"]})
    job = job_submit(user=alice, data=training_spec(name="pinned"))

    # When a notice is sent
    start(job)

    # Then it reached the checked address, for the URL's host and path
    delivery = Delivery.objects.get(payload__job__id=job.pk)
    assert delivery.status == "sent", delivery.last_error
    (request,) = hooks.requests
    assert request.path == "/gpu"
    assert request.headers["Host"] == f"hooks.gpu.invalid:{hooks.port}"
    assert resolver.lookups == 2  # once when saved, once when sent
