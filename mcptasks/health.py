"""/healthz (alive), /readyz (dependencies reachable, migrations applied), /metrics."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse, JsonResponse


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def _check_database() -> str:
    connection = connections[DEFAULT_DB_ALIAS]
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    return "ok" if not plan else f"{len(plan)} migrations not applied"


def _check_redis(url: str) -> str:
    import redis

    client = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
    try:
        client.ping()
    finally:
        client.close()
    return "ok"


def readyz(request: HttpRequest) -> JsonResponse:
    checks: dict[str, str] = {}
    targets: dict[str, Any] = {"database": _check_database}
    if not settings.MCPTASKS_EMBEDDED_WORKER:
        targets["broker"] = lambda: _check_redis(settings.CELERY_BROKER_URL)
        targets["channel_layer"] = lambda: _check_redis(settings.CHANNEL_REDIS_URL)
    for name, check in targets.items():
        try:
            checks[name] = check()
        except Exception as exc:
            checks[name] = f"unavailable: {type(exc).__name__}"
    ready = all(value == "ok" for value in checks.values())
    return JsonResponse(
        {"status": "ready" if ready else "unavailable", "checks": checks},
        status=200 if ready else 503,
    )


def metrics(request: HttpRequest) -> HttpResponse:
    from mcptasks.metrics import render

    body, content_type = render()
    return HttpResponse(body, content_type=content_type)
