"""factory_boy factories for the portal's models."""

from __future__ import annotations

from typing import Any

import factory
from django.contrib.auth.models import User

from jobs.models import Job
from teams.models import GpuQuota, Membership, Team


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")

    @factory.post_generation
    def password(self, create: bool, extracted: Any, **kwargs: Any) -> None:
        self.set_password(extracted or "pw-for-tests-1")
        if create:
            self.save()


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"team{n}")
    name = factory.LazyAttribute(lambda t: t.slug.title())
    namespace = factory.LazyAttribute(lambda t: f"team-{t.slug}")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    team = factory.SubFactory(TeamFactory)
    role = Membership.Role.MEMBER


class GpuQuotaFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GpuQuota

    team = factory.SubFactory(TeamFactory)
    resource = "nvidia.com/gpu"
    limit = 8


class JobFactory(factory.django.DjangoModelFactory):
    """A stored job row (bypassing the submit service: for read-side tests)."""

    class Meta:
        model = Job

    team = factory.SubFactory(TeamFactory)
    owner = factory.SubFactory(UserFactory)
    name = factory.Sequence(lambda n: f"job{n}")
    kind = "training"
    namespace = factory.LazyAttribute(lambda j: j.team.namespace)
    spec = factory.LazyAttribute(
        lambda j: {
            "team": j.team.slug,
            "name": j.name,
            "kind": j.kind,
            "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "gpu": {"count": 1, "sharing": "exclusive", "product": None, "mig_profile": None},
        }
    )
    gpu_count = 1
