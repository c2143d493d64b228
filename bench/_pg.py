"""A throwaway PostgreSQL database for a benchmark, and Django set up against it."""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parent.parent
SERVER_URL = os.environ.get("BENCH_PG_SERVER", "postgres://postgres@127.0.0.1:5432")
# Benchmark-only values: the settings refuse to boot against PostgreSQL without them.
BENCH_ENV = {
    "SECRET_KEY": "bench-only-secret-key-not-for-production-use-000000",
    "MCPTASKS_REQUEST_STATE_KEY": "bench-only-request-state-key-000000000000000000",
    "MCPTASKS_AUDIT_SIGNING_KEY": "bench-only-audit-signing-key-0000000000000000000",
    "DATABASE_POOL": "false",
    "LOG_LEVEL": "WARNING",
}


def _admin_connection() -> object:
    import psycopg

    parsed = urlparse(SERVER_URL)
    return psycopg.connect(urlunparse(parsed._replace(path="/postgres")), autocommit=True)


@contextmanager
def dedicated_database(keep: bool = False) -> Iterator[str]:
    """Create ``audit_bench_<random>``, yield its URL, drop it afterwards (unless ``keep``)."""
    name = f"audit_bench_{secrets.token_hex(4)}"
    admin = _admin_connection()
    admin.execute(f'CREATE DATABASE "{name}"')  # type: ignore[attr-defined]
    url = urlunparse(urlparse(SERVER_URL)._replace(path=f"/{name}"))
    try:
        yield url
    finally:
        if keep:
            print(f"kept database {url}", file=sys.stderr)
        else:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')  # type: ignore[attr-defined]
        admin.close()  # type: ignore[attr-defined]


def setup_django(database_url: str) -> None:
    """Point the settings at ``database_url`` and set Django up (call once, before any model)."""
    os.environ["DATABASE_URL"] = database_url
    for name, value in BENCH_ENV.items():
        os.environ.setdefault(name, value)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcptasks.settings")
    os.environ.setdefault("MCPTASKS_VAR_DIR", str(ROOT / "var" / "bench"))
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def migrate() -> None:
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
