"""The proxy's one HTTP client, shared by every request to the portal and to every workspace
server, keeps no cookie from one answer for the next request (see
tests/security/test_front_door_sessions.py for the same through the real processes)."""

from __future__ import annotations

import asyncio

import httpx

from workspaces.proxy.app import cookieless_client


def test_a_cookie_set_by_one_answer_is_never_sent_with_another_request() -> None:
    # Given a server (the portal, or one workspace's) that sets a session cookie
    seen: list[str | None] = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("cookie"))
        return httpx.Response(200, headers={"set-cookie": "sessionid=alices; Path=/"})

    async def visit() -> list[httpx.Response]:
        async with cookieless_client(transport=httpx.MockTransport(server)) as client:
            first = await client.get("http://127.0.0.1:8001/login/")
            # When the next request (another person's, another server's) has no cookie
            second = await client.get("http://127.0.0.1:8001/api/v1/me/")
            other = await client.get("http://127.0.0.1:8002/workspaces/7/")
            # and one has its own
            own = await client.get("http://127.0.0.1:8001/", headers={"cookie": "x=1"})
            return [first, second, other, own]

    answers = asyncio.run(visit())

    # Then each carried only what its own client sent, and the answer still reaches it
    assert seen == [None, None, None, "x=1"]
    assert answers[0].headers["set-cookie"] == "sessionid=alices; Path=/"
