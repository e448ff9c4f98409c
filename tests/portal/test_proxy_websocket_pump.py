"""The proxy's WebSocket pump ends a session quietly when either side goes away mid-stream:
a browser tab closed while the notebook server is still sending is the end of a session, not
an error in the proxy's log (see tests/integration/test_workspaces.py for the whole proxy)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import MutableMapping
from typing import Any

import pytest
import websockets
from uvicorn.protocols.utils import ClientDisconnected

from workspaces.proxy.app import _pump


async def chatty_server(connection: Any) -> None:
    """A notebook kernel's channel: it keeps sending until its peer is gone."""
    with contextlib.suppress(websockets.ConnectionClosed):
        while True:
            await connection.send('{"msg_type": "status"}')
            await asyncio.sleep(0.01)


def test_a_browser_that_leaves_while_the_server_sends_ends_the_session_without_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    delivered: list[MutableMapping[str, Any]] = []

    async def session() -> bool:
        async with websockets.serve(chatty_server, "127.0.0.1", 0) as server:
            port = next(iter(server.sockets)).getsockname()[1]
            upstream = await websockets.connect(f"ws://127.0.0.1:{port}")

            # Given a browser that takes three frames and then closes its tab
            async def send(message: MutableMapping[str, Any]) -> None:
                if len(delivered) == 3:
                    raise ClientDisconnected()
                delivered.append(message)

            async def receive() -> MutableMapping[str, Any]:
                await asyncio.Event().wait()  # the browser never sends nor says goodbye
                return {}

            # When the pump runs, Then it ends on its own
            await asyncio.wait_for(_pump(receive, send, upstream), timeout=10)
            return upstream.state is websockets.protocol.State.CLOSED

    with caplog.at_level(logging.DEBUG):
        closed = asyncio.run(session())
        gc.collect()  # a task whose exception nobody retrieved is reported when collected

    # ...the server's side is closed, and nothing reads as an error or a lost task
    assert closed
    assert [m["type"] for m in delivered] == ["websocket.send"] * 3
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
