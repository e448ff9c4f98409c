"""The portal's REST API, and its errors as exit codes.

Errors are printed as the API words them (``detail``, then each field's messages) and end
the command with a code a script can tell apart:

====  =======================================================================
0     done (with ``--wait``: the job succeeded)
1     the job failed or was cancelled (``--wait``), or another error
2     usage error (a missing option, a bad ``--set``, an unreadable file)
3     the portal refused the input (400, 409, 413, 415)
4     not found (404)
5     the portal could not be reached, or is unavailable (502, 503, 504)
6     not logged in, or not allowed (401, 403)
====  =======================================================================
"""

from __future__ import annotations

from typing import Any, NoReturn

import click
import httpx

from gpuportal import __version__
from gpuportal.config import TOKEN_ENV, URL_ENV, Config

EXIT_JOB_FAILED = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_NOT_FOUND = 4
EXIT_UNREACHABLE = 5
EXIT_AUTH = 6

TIMEOUT = httpx.Timeout(30.0, connect=10.0)


class CliError(click.ClickException):
    """An error with its own exit code, printed to stderr as ``error: …`` lines."""

    def __init__(self, message: str, *, code: int, details: list[str] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.details = details or []

    def show(self, file: Any = None) -> None:
        click.secho(f"error: {self.message}", err=True, fg="red")
        for line in self.details:
            click.echo(f"  {line}", err=True)


def _code_for(status: int) -> int:
    if status == 404:
        return EXIT_NOT_FOUND
    if status in (401, 403):
        return EXIT_AUTH
    if status in (502, 503, 504):
        return EXIT_UNREACHABLE
    if 400 <= status < 500:
        return EXIT_REFUSED
    return 1


class Api:
    def __init__(self, config: Config) -> None:
        if not config.url:
            raise CliError(
                f"No portal URL: run `gpuportal login --url URL` or set {URL_ENV}.",
                code=EXIT_USAGE,
            )
        if not config.token:
            raise CliError(
                f"Not logged in: run `gpuportal login --url {config.url}` or set {TOKEN_ENV}.",
                code=EXIT_AUTH,
            )
        self.url = config.url
        self._http = httpx.Client(
            base_url=f"{config.url}/api/v1/",
            headers={
                "Authorization": f"Bearer {config.token}",
                "Accept": "application/json",
                "User-Agent": f"gpuportal/{__version__}",
            },
            timeout=TIMEOUT,
        )

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise CliError(
                f"Cannot reach the portal at {self.url}: {exc or type(exc).__name__}",
                code=EXIT_UNREACHABLE,
            ) from exc
        if response.status_code >= 400:
            fail(response)
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v})

    def post(self, path: str, body: Any = None, **params: Any) -> Any:
        return self.request("POST", path, json=body, params={k: v for k, v in params.items() if v})


def fail(response: httpx.Response) -> NoReturn:
    """Raise the API's error as it words it: ``detail``, then each refused field."""
    try:
        body = response.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    detail = str(body.get("detail") or f"HTTP {response.status_code} {response.reason_phrase}")
    details = [
        f"{field}: {message}"
        for field, messages in (body.get("errors") or {}).items()
        for message in (messages if isinstance(messages, list) else [messages])
    ]
    raise CliError(detail, code=_code_for(response.status_code), details=details)
