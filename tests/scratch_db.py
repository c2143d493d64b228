"""A PostgreSQL database of a test's own, and Django processes run against it: the migration
tests migrate it part of the way, write rows with the code of then, and migrate the rest, as
``manage.py migrate`` runs in production."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from django.db import connection

REPO = Path(__file__).resolve().parents[1]


@contextmanager
def scratch_database(suffix: str) -> Iterator[str]:
    """A database named after the test database and ``suffix``, dropped after; its URL."""
    settings = connection.settings_dict
    name = f"{settings['NAME']}_{suffix}"[:63]
    admin = {
        "host": settings.get("HOST") or "127.0.0.1",
        "port": settings.get("PORT") or 5432,
        "user": settings.get("USER") or "postgres",
        "password": settings.get("PASSWORD") or None,
        "dbname": "postgres",
        "autocommit": True,
    }
    with psycopg.connect(**admin) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    auth = admin["user"] + (f":{admin['password']}" if admin["password"] else "")
    try:
        yield f"postgres://{auth}@{admin['host']}:{admin['port']}/{name}"
    finally:
        with psycopg.connect(**admin) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run_django(url: str, tmp_path: Path, *args: str, stdin: str = "", **env: str) -> str:
    """``python *args`` in the repository against the database ``url`` (events sealed inline,
    no app-role grants, ``env`` on top); its output. Fails the test on a non-zero exit."""
    environment = {
        **os.environ,
        "DATABASE_URL": url,
        "MCPTASKS_VAR_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "mcptasks.settings",
        "MCPTASKS_AUDIT_SEAL_DELAY_MS": "0",
        **env,
    }
    environment.pop("MCPTASKS_DB_APP_ROLE", None)
    result = subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=environment,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout
