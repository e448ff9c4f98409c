"""Page a queryset for an API view with the project's default paginator."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer
from rest_framework.views import APIView


def paginate(
    *,
    request: Request,
    queryset: QuerySet[Any],
    serializer_class: type[BaseSerializer[Any]],
    view: APIView,
) -> Response:
    paginator = PageNumberPagination()
    page = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response(serializer_class(page, many=True).data)
