"""Check that the services a command needs answer, and say how to start those that don't.

Usage: python scripts/preflight.py [--db] [--redis] [--sqlite-fallback PATH]
Prints `export NAME=value` lines for the caller to eval (e.g. the SQLite fallback).
Standard library only: it runs before the virtualenv is trusted.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from urllib.parse import urlparse

PG_START = "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"
PG_INSTALL = "sudo apt-get install -y postgresql && sudo " + PG_START
REDIS_START = "redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' --appendonly no"
REDIS_INSTALL = "sudo apt-get install -y redis-server && " + REDIS_START


def reachable(url: str, default_port: int) -> tuple[bool, str]:
    parsed = urlparse(url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or default_port
    try:
        with socket.create_connection((host, port), timeout=2):
            return True, f"{host}:{port}"
    except OSError as exc:
        return False, f"{host}:{port} ({exc.strerror or exc})"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", action="store_true")
    parser.add_argument("--redis", action="store_true")
    parser.add_argument("--sqlite-fallback", metavar="PATH")
    args = parser.parse_args()
    failed = False
    if args.db:
        url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpu_portal")
        if url.startswith("postgres"):
            ok, where = reachable(url, 5432)
            if not ok and args.sqlite_fallback:
                print(
                    f"PostgreSQL is not reachable at {where}; the demo falls back to SQLite "
                    f"({args.sqlite_fallback}). For PostgreSQL start it with:\n    {PG_START}\n"
                    f"or install it with:\n    {PG_INSTALL}",
                    file=sys.stderr,
                )
                print(f"export DATABASE_URL=sqlite:///{os.path.abspath(args.sqlite_fallback)}")
            elif not ok:
                print(
                    f"PostgreSQL is not reachable at {where} (DATABASE_URL). Start it with:\n"
                    f"    {PG_START}\nor install it with:\n    {PG_INSTALL}",
                    file=sys.stderr,
                )
                failed = True
    if args.redis:
        url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
        ok, where = reachable(url, 6379)
        if not ok:
            print(
                f"Redis is not reachable at {where} (REDIS_URL); Celery needs it as its broker. "
                f"Start it with:\n    {REDIS_START}\nor install it with:\n    {REDIS_INSTALL}",
                file=sys.stderr,
            )
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
