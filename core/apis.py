"""The API views' common base: query parameters declared once, validated and documented.

A view declares its query parameters as a serializer (``query_input``). ``ApiView``
validates them before the handler runs, so a value outside what the schema declares (an
unknown enum value, ``page_size=null``, an empty ``range=``) is a 400 naming the parameter,
never a 200 that ignored it; ``ApiSchema`` documents the same serializer in the OpenAPI
schema, so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from django.core.validators import ProhibitNullCharactersValidator, RegexValidator
from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView

READS = ("GET", "HEAD")
# "+": an empty value never reaches validators (allow_blank answers it), and the schema's
# pattern then does not overlap drf-spectacular's separate "empty string" branch.
NO_NUL = RegexValidator(r"^[^\x00]+$", message="Null characters are not allowed.")


class JsonBoolean(serializers.BooleanField):
    """A JSON ``true`` or ``false`` only: DRF's BooleanField also takes "yes", "1" or "on",
    which the schema (``type: boolean``) does not allow, so a client relying on them would
    break against a stricter server."""

    def to_internal_value(self, data: Any) -> bool:
        if isinstance(data, bool):
            return data
        self.fail("invalid", input=data)
        raise AssertionError("unreachable")  # fail() raises


class QueryText(serializers.CharField):
    """A text query parameter taken as sent, blanks included (a name of "\\n" is a name no
    object has: nothing found, not a 400), whose schema states the one character it
    refuses: NUL, which PostgreSQL cannot compare (a 400 naming the parameter)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)
        # The same refusal as DRF's, as a pattern drf-spectacular puts in the schema.
        self.validators = [
            v for v in self.validators if not isinstance(v, ProhibitNullCharactersValidator)
        ]
        self.validators.append(NO_NUL)


class ApiView(APIView):
    query_input: type[serializers.Serializer] | None = None
    query: dict[str, Any]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        # After authentication, permissions and throttling: a stranger gets a 401, not a 400.
        super().initial(request, *args, **kwargs)
        self.query = {}
        if self.query_input is not None and request.method in READS:
            # A key given twice is refused (which value was meant?), then a plain dict: DRF
            # reads an empty value of a QueryDict as "not sent", and `state=` must be
            # refused, not ignored.
            repeated = sorted(k for k, v in request.query_params.lists() if len(v) > 1)
            if repeated:
                raise serializers.ValidationError(
                    {
                        k: [f"Given {len(request.query_params.getlist(k))} times; give it once."]
                        for k in repeated
                    }
                )
            params = self.query_input(data=request.query_params.dict())
            params.is_valid(raise_exception=True)
            self.query = dict(params.validated_data)


class ApiSchema(AutoSchema):
    """drf-spectacular's schema, with each read's ``query_input`` as its query parameters."""

    def get_override_parameters(self) -> list[Any]:
        parameters = list(super().get_override_parameters())
        query_input = getattr(self.view, "query_input", None)
        if query_input is not None and self.method in READS:
            parameters.insert(0, query_input)
        return parameters


class PlatformAdminOnly(BasePermission):
    """Platform admins only. Anyone else signed in gets the 404 of a page that does not
    exist (as for another team's job): no hint that the admin's tools are there."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False  # 401: sign in first
        if not user.is_superuser:
            raise NotFound()
        return True
