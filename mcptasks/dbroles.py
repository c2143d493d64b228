"""The application's PostgreSQL role: what web, worker and beat may do (docs/operations.md).

Production runs two roles. The **owner** (``DATABASE_URL`` of ``manage.py migrate``) owns every
table and runs migrations. The **app role** (``DATABASE_URL`` of web, worker and beat) may read
and write the application's tables, but on the append-only audit tables only INSERT and SELECT:
no UPDATE, DELETE or TRUNCATE, and, not owning them, no ``ALTER TABLE … DISABLE TRIGGER``.
Retention deletes through ``audit_purge_prefix`` (audit migration 0004) and drops whole
partitions through ``audit_drop_partition`` (0008), the sealer seals through
``audit_seal_events`` (0007) and the sweep creates partitions ahead through
``audit_ensure_partitions`` (0008), which it may EXECUTE; likewise for the task table's day
partitions (mcptasks migration 0016): ``mcptasks_task_ensure_partitions`` and
``mcptasks_task_partition_purge``. The partitions of the audit events and of the tasks grant the
role nothing: it reaches their rows through the partitioned table only (those created later
belong to the owner and grant nothing either).

With ``MCPTASKS_DB_APP_ROLE`` set, every ``manage.py migrate`` run by the owner ends by granting
exactly that to the role (:func:`grant_app_role`), so tables added by later migrations are
covered too. The role itself is created once by whoever administers the server
(``deploy/postgres/init-app-role.sh`` in the compose stack).
"""

from __future__ import annotations

import re
import sys
from typing import Any

from django.core.exceptions import ImproperlyConfigured

ROLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
PURGE_FUNCTION = "audit_purge_prefix(varchar, bigint, timestamptz)"
SEAL_FUNCTION = "audit_seal_events(bigint[], bigint[], varchar[], varchar[])"
ENSURE_PARTITIONS_FUNCTION = "audit_ensure_partitions(integer)"
DROP_PARTITION_FUNCTION = "audit_drop_partition(text, varchar[], bigint[], timestamptz[])"
TASK_ENSURE_PARTITIONS_FUNCTION = "mcptasks_task_ensure_partitions(integer)"
TASK_PURGE_PARTITION_FUNCTION = "mcptasks_task_partition_purge(text, timestamptz, boolean)"


def _append_only_tables() -> list[str]:
    from audit.models import AuditDigest, AuditEvent, RetentionCheckpoint

    return [
        AuditEvent._meta.db_table,
        RetentionCheckpoint._meta.db_table,
        AuditDigest._meta.db_table,
    ]


def grant_app_role(connection: Any, role: str) -> None:
    """Grant ``role`` the application's rights on ``connection``'s database (PostgreSQL)."""
    if not ROLE_NAME.match(role):
        raise ImproperlyConfigured(f"MCPTASKS_DB_APP_ROLE must be a plain role name, got {role!r}")
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT rolsuper, rolname = current_user FROM pg_roles WHERE rolname = %s", [role]
        )
        row = cursor.fetchone()
        if row is None:
            raise ImproperlyConfigured(
                f"MCPTASKS_DB_APP_ROLE: PostgreSQL has no role {role!r}; create it first "
                "(docs/operations.md, 'Database roles')"
            )
        if row[0] or row[1]:
            raise ImproperlyConfigured(
                f"MCPTASKS_DB_APP_ROLE: {role!r} is a superuser or the role running the "
                "migrations; the application role must be neither"
            )
        cursor.execute("SELECT current_schema()")
        schema = quote(cursor.fetchone()[0])
        who = quote(role)
        append_only = ", ".join(quote(table) for table in _append_only_tables())
        cursor.execute("SELECT to_regprocedure('audit_partitions()') IS NOT NULL")
        partitioned = bool(cursor.fetchone()[0])  # audit migration 0008 applied
        partitions = []
        if partitioned:
            cursor.execute("SELECT name FROM audit_partitions()")
            partitions = [quote(row[0]) for row in cursor.fetchall()]
        cursor.execute("SELECT to_regprocedure('mcptasks_task_partitions()') IS NOT NULL")
        tasks_partitioned = bool(cursor.fetchone()[0])  # mcptasks migration 0016 applied
        if tasks_partitioned:
            cursor.execute("SELECT name FROM mcptasks_task_partitions()")
            partitions += [quote(row[0]) for row in cursor.fetchall()]
        statements = [
            f"GRANT USAGE ON SCHEMA {schema} TO {who}",
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {who}",
            f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {who}",
            f"REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON django_migrations FROM {who}",
            f"REVOKE UPDATE, DELETE, TRUNCATE ON {append_only} FROM {who}",
            f"GRANT EXECUTE ON FUNCTION {PURGE_FUNCTION} TO {who}",
            f"GRANT EXECUTE ON FUNCTION {SEAL_FUNCTION} TO {who}",
        ]
        if partitioned:
            statements += [
                f"GRANT EXECUTE ON FUNCTION {ENSURE_PARTITIONS_FUNCTION} TO {who}",
                f"GRANT EXECUTE ON FUNCTION {DROP_PARTITION_FUNCTION} TO {who}",
            ]
        if tasks_partitioned:
            statements += [
                f"GRANT EXECUTE ON FUNCTION {TASK_ENSURE_PARTITIONS_FUNCTION} TO {who}",
                f"GRANT EXECUTE ON FUNCTION {TASK_PURGE_PARTITION_FUNCTION} TO {who}",
            ]
        if partitions:  # of both tables, granted by ALL TABLES above: rows go through the parents
            statements.append(f"REVOKE ALL ON {', '.join(partitions)} FROM {who}")
        for statement in statements:
            cursor.execute(statement)


def on_post_migrate(sender: Any, using: str = "default", **kwargs: Any) -> None:
    """After ``migrate`` (as the owner): grant ``MCPTASKS_DB_APP_ROLE`` its rights, if set."""
    from django.conf import settings
    from django.db import connections

    role = settings.MCPTASKS_DB_APP_ROLE
    connection = connections[using]
    if not role or connection.vendor != "postgresql":
        return
    grant_app_role(connection, role)
    if kwargs.get("verbosity", 1) >= 1:
        stdout = kwargs.get("stdout") or sys.stdout
        stdout.write(f"Granted the application role {role!r} its rights (mcptasks.dbroles).\n")
