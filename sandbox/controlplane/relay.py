"""Byte relays between TCP on loopback and Unix sockets: how a component that insists on
listening on every interface is kept to loopback.

The training operator serves its webhooks on ``:<port>`` (every interface) and has no flag
to choose the address. It runs in a network namespace of its own, where only its own
loopback exists, so nothing outside the machine (or outside that namespace) can reach it.
Two relays join it to the cluster, through Unix sockets in the state folder:

- inside the namespace, ``127.0.0.1:<apiserver port>`` → ``api.sock`` → (this process)
  the real API server on the host's 127.0.0.1;
- on the host, ``127.0.0.1:<webhook port>`` (this process) → ``webhook.sock`` → (inside the
  namespace) the operator's webhook server.

``python -m sandbox.controlplane.relay [--ready=FILE] tcp:HOST:PORT=unix:PATH …`` runs relays
until killed, touching FILE once they listen
(the namespace side); ``Relay`` runs one in a thread (the host side).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from pathlib import Path

BUFFER = 65536


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(BUFFER):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (sink, source):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _connect(target: str) -> socket.socket:
    kind, _, where = target.partition(":")
    if kind == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(where)
        return sock
    host, _, port = where.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=10)


def _listen(address: str) -> socket.socket:
    kind, _, where = address.partition(":")
    if kind == "unix":
        Path(where).unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(where)
    else:
        host, _, port = where.rpartition(":")
        if not host.startswith("127."):
            raise ValueError(f"a relay listens on loopback only, not {host}")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, int(port)))
    sock.listen(128)
    return sock


class Relay:
    """Accept on ``listen`` and relay each connection to ``target`` (``tcp:HOST:PORT`` or
    ``unix:PATH``), in daemon threads."""

    def __init__(self, listen: str, target: str) -> None:
        self.target = target
        self.server = _listen(listen)
        self.thread = threading.Thread(target=self._accept, name=f"relay-{listen}", daemon=True)

    def start(self) -> Relay:
        self.thread.start()
        return self

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            try:
                upstream = _connect(self.target)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def main(argv: list[str]) -> int:
    if sys.platform.startswith("linux"):  # ends with the operator it serves (its parent)
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    ready = next((a.split("=", 1)[1] for a in argv if a.startswith("--ready=")), None)
    relays = [Relay(*spec.split("=", 1)).start() for spec in argv if not spec.startswith("--")]
    if not relays:
        print("usage: relay [--ready=FILE] LISTEN=TARGET …", file=sys.stderr)
        return 2
    if ready:  # listening: what the program it serves waits for
        Path(ready).touch()
    try:
        threading.Event().wait()
    finally:
        for relay in relays:
            relay.close()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main(sys.argv[1:]))
