"""Reading the environment for ``mcptasks.settings``: typed variables, keys, URLs, databases.

Free of Django settings (it is imported while they are being built). Every function raises
``ImproperlyConfigured`` naming the variable when a value is malformed (STYLE rule 10).
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlparse

from django.core.exceptions import ImproperlyConfigured


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default).strip()


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false), got {raw!r}")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_json_object(name: str, default: dict[str, Any]) -> dict[str, Any]:
    """A JSON object from ``name`` (``default`` when unset or empty)."""
    raw = env_str(name)
    if not raw:
        return default
    try:
        value = json.loads(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a JSON object") from None
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object")
    return value


def local_key(var_dir: Path, filename: str) -> str:
    """Return a key kept under var/ for the embedded default, creating it on first use."""
    path = var_dir / filename
    if path.exists():
        return path.read_text().strip()
    var_dir.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(48)
    path.write_text(key)
    path.chmod(0o600)
    return key


def secret(name: str, filename: str, *, production: bool, var_dir: Path) -> str:
    """The key in ``name``; required in production, else generated once under ``var_dir``."""
    value = env_str(name)
    if value:
        return value
    if production:
        raise ImproperlyConfigured(f"{name} must be set when DATABASE_URL or REDIS_URL is set")
    return local_key(var_dir, filename)


def parse_redis_url(name: str, raw: str) -> tuple[str, int]:
    """Validate a redis:// URL and return (url without db, db number)."""
    parsed = urlparse(raw)
    if parsed.scheme not in {"redis", "rediss"} or not parsed.hostname:
        raise ImproperlyConfigured(
            f"{name} must look like redis://host:6379/0, got {raw!r} (scheme or host missing)"
        )
    try:
        parsed.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ImproperlyConfigured(f"{name} has an invalid port: {raw!r}") from None
    path = parsed.path.strip("/")
    if path and not path.isdigit():
        raise ImproperlyConfigured(f"{name} database must be a number, got {path!r} in {raw!r}")
    base = raw.split("?")[0]
    base = base[: len(base) - len(parsed.path)] if parsed.path else base
    return base, int(path or 0)


POOLERS = ("pgbouncer",)


def db_pooler() -> str:
    """``MCPTASKS_DB_POOLER``: the pooler between every process and PostgreSQL — ``""`` (none,
    also ``none``) or ``pgbouncer`` (PgBouncer in transaction mode, or any pooler that may hand
    each transaction a different server connection)."""
    value = env_str("MCPTASKS_DB_POOLER").lower()
    if value in {"", "none"}:
        return ""
    if value not in POOLERS:
        raise ImproperlyConfigured(
            f"MCPTASKS_DB_POOLER must be one of none, {', '.join(POOLERS)}; got {value!r}"
        )
    return value


# Executions of one statement on one connection after which psycopg prepares it (its default).
PREPARE_THRESHOLD = 5


def postgres_database(database_url: str, pooler: str = "") -> dict[str, Any]:
    """The ``default`` database of ``DATABASE_URL`` (PostgreSQL only), with psycopg's pool
    unless ``DATABASE_POOL`` is off (``DATABASE_POOL_MIN`` / ``_MAX`` size it).

    Parameters are bound server-side (``server_side_binding``: psycopg sends each statement and
    its values apart, where Django's default merges them on the client) and a statement a
    connection runs ``PREPARE_THRESHOLD`` times is prepared on it: PostgreSQL then skips its parse
    and plan, which were half of its CPU per no-op task (issue 23; ``bench/PROFILE-23.md``).

    Behind a transaction pooler (``pooler``, see ``db_pooler``) nothing may outlive a transaction
    on its server connection: no server-side prepared statements (psycopg's and its pool's
    ``prepare_threshold`` None; values are still bound server-side, in unnamed statements) and no
    server-side cursors (``.iterator()`` declares a cursor its later fetches might not find)."""
    import dj_database_url

    parsed_db = urlparse(database_url)
    if parsed_db.scheme not in {"postgres", "postgresql", "pgsql"} or not parsed_db.path.strip("/"):
        raise ImproperlyConfigured(
            "DATABASE_URL must look like postgres://user@host:5432/dbname, "
            f"got {database_url!r} (only PostgreSQL is supported)"
        )
    try:
        db = cast("dict[str, Any]", dj_database_url.parse(database_url, conn_max_age=0))
    except Exception as exc:
        raise ImproperlyConfigured(f"DATABASE_URL is malformed: {exc}") from None
    options: dict[str, Any] = {
        "server_side_binding": True,
        "prepare_threshold": None if pooler else PREPARE_THRESHOLD,
    }
    if env_bool("DATABASE_POOL", default=True):
        options["pool"] = {
            "min_size": env_int("DATABASE_POOL_MIN", 1),
            "max_size": env_int("DATABASE_POOL_MAX", 20),
            "timeout": 10,
        }
    if pooler:
        db["DISABLE_SERVER_SIDE_CURSORS"] = True
    db["OPTIONS"] = options
    return db


def sqlite_database(var_dir: Path) -> dict[str, Any]:
    """The embedded default's ``default`` database: a SQLite file under ``var_dir``
    (``SQLITE_PATH`` overrides it), in WAL mode."""
    var_dir.mkdir(parents=True, exist_ok=True)
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": env_str("SQLITE_PATH", str(var_dir / "mcptasks.sqlite3")),
        # Keep each thread's connection: opening one (and its PRAGMAs) costs milliseconds.
        "CONN_MAX_AGE": None,
        "OPTIONS": {
            # WAL lets readers run beside the single writer; IMMEDIATE takes the write lock
            # at BEGIN so two writers queue on the busy timeout instead of failing with
            # "database is locked" when a read transaction tries to upgrade.
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
        },
        # A file, not :memory:, so tests exercise WAL and concurrent writers like production;
        # one per test process, so concurrent test runs never share it.
        "TEST": {"NAME": str(var_dir / f"test-mcptasks-{os.getpid()}.sqlite3")},
    }
