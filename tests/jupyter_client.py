"""A Jupyter Server client for the tests: start a kernel and run a cell over its channels
WebSocket, as JupyterLab does (the legacy JSON framing), with whatever headers the caller
must present (a token directly, or the portal's session cookie through the proxy)."""

from __future__ import annotations

import json
import urllib.request
import uuid

import websocket


def run_cell(base: str, code: str, headers: dict[str, str]) -> str:
    """``base`` is the server's base URL (``…/workspaces/7``, no trailing slash): the
    cell's result, as text."""
    request = urllib.request.Request(
        f"{base}/api/kernels",
        data=b"{}",
        method="POST",
        headers={**headers, "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        kernel = json.load(response)["id"]
    session = uuid.uuid4().hex
    ws = websocket.create_connection(
        f"{base.replace('http', 'ws', 1)}/api/kernels/{kernel}/channels?session_id={session}",
        header=[f"{k}: {v}" for k, v in headers.items() if k.lower() != "origin"],
        origin=headers.get("Origin"),
        timeout=30,
    )
    msg_id = uuid.uuid4().hex
    ws.send(json.dumps({
        "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "",
                   "session": session, "date": "", "version": "5.3"},
        "parent_header": {}, "metadata": {}, "channel": "shell",
        "content": {"code": code, "silent": False, "store_history": True,
                    "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
    }))  # fmt: skip
    result = ""
    try:
        while True:
            message = json.loads(ws.recv())
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            if message["msg_type"] == "execute_result":
                result = message["content"]["data"]["text/plain"]
            if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
                return result
    finally:
        ws.close()
