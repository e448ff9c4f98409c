"""Create the PostgreSQL database named in DATABASE_URL when it does not exist yet."""

from __future__ import annotations

import os
import sys
from urllib.parse import urlparse

import psycopg
from psycopg import sql


def main() -> int:
    url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpu_portal")
    if not url.startswith("postgres"):
        return 0
    parsed = urlparse(url)
    name = parsed.path.lstrip("/")
    admin_url = parsed._replace(path="/postgres").geturl()
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            print(f"Created database {name}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
