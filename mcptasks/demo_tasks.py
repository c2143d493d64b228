"""A handful of demo tasks in different states, made through lifecycle like any other."""

from __future__ import annotations

from typing import Any

from audit.record import Actor
from mcptasks import approval_policies, lifecycle
from mcptasks.models import Task


def seed_demo_tasks(cast: dict[str, dict[str, Any]]) -> list[Task]:
    from mcptasks.tools.registry import registry

    made: list[Task] = []
    plans: list[tuple[str, str, dict[str, Any]]] = [
        (
            "alice",
            "deploy_service",
            {"service": "billing", "version": "1.4.2", "environment": "production"},
        ),
        ("adam", "run_pipeline", {"pipeline": "nightly-etl", "stages": 3}),
        ("bob", "export_dataset", {"dataset": "orders", "rows": 5000}),
    ]
    for username, tool_name, arguments in plans:
        tool = registry.get(tool_name)
        if tool is None:
            continue
        entry = cast[username]
        task, _ = lifecycle.task_create(
            spec=lifecycle.NewTask(
                tenant_id=entry["tenant"].pk,
                principal_id=entry["user"].pk,
                tool_name=tool_name,
                arguments=arguments,
                policy_revision=approval_policies.bound_revision(
                    tool, tenant_id=entry["tenant"].pk, arguments=arguments
                ),
                ttl_ms=tool.ttl_ms,
                poll_interval_ms=tool.effective_poll_interval_ms(),
                client_capabilities={
                    "elicitation": {},
                    "extensions": {"io.modelcontextprotocol/tasks": {}},
                },
                sensitive_keys=frozenset(tool.sensitive),
            ),
            actor=Actor.for_user(entry["user"], kind="principal"),
        )
        made.append(task)
    return made
