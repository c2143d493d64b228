"""The coverage table of docs/audit.md matches what the code records, in both directions."""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from audit.models import AuditEvent
from mcptasks import lifecycle

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "audit.md"
PACKAGES = ("mcptasks", "audit")

# The issue's list: every auditable lifecycle verb, logins, tokens, exports, purges.
REQUIRED = {
    "task.created",
    "task.started",
    "task.requeued",
    "task.input_requested",
    "task.input_answered",
    "task.sleeping",
    "task.woken",
    "task.completed",
    "task.failed",
    "task.cancel_requested",
    "task.cancelled",
    "task.force_cancelled",
    "task.retried",
    "task.retry_of",
    "effect.unknown",
    "effect.reconciled",
    "task.expired",
    "task.purged",
    "task.input_timed_out",
    "task.binding_changed",
    "delegation.granted",
    "delegation.revoked",
    "auth.login",
    "auth.logout",
    "auth.login_failed",
    "token.issued",
    "token.revoked",
    "audit.exported",
    "audit.purged",
}
WRITER = "record"


def table_actions() -> list[str]:
    """The first cells of the table under "## Coverage"."""
    section = DOC.read_text().split("\n## Coverage", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z_]+\.[a-z_]+)` \|", section, flags=re.MULTILINE)


def source_files() -> Iterator[tuple[str, ast.Module]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            yield module.removesuffix(".__init__"), ast.parse(path.read_text())


def string_literals() -> set[str]:
    return {
        node.value
        for _, tree in source_files()
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")


def _action_arg(call: ast.Call, position: int | None) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == "action":
            return keyword.value
    if position is not None and len(call.args) > position:
        return call.args[position]
    return None


def _resolve(node: ast.expr, module: str) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return _resolve(node.body, module) | _resolve(node.orelse, module)
    if isinstance(node, ast.Name):
        value = getattr(importlib.import_module(module), node.id, None)
        if isinstance(value, str):
            return {value}
    raise AssertionError(
        f"{module}: an audit action that is not a known string: {ast.unparse(node)}"
    )


def recorded_actions() -> dict[str, set[str]]:
    """Module → the actions its calls of the writer (or of wrappers that pass an ``action``
    parameter through to it) record, read from the source."""
    files = list(source_files())
    # callee name → positional index of action; audit.record.unsealed is the writer's other
    # door (an event the caller's own statement inserts), and lifecycle's Audited(action, …)
    # names the event of a move that _audited_move records
    wrappers: dict[str, int | None] = {WRITER: None, "unsealed": None, "Audited": 0}
    changed = True
    while changed:  # find functions that forward their own parameter as the action
        changed = False
        for _, tree in files:
            for function in ast.walk(tree):
                if not isinstance(function, ast.FunctionDef) or function.name in wrappers:
                    continue
                params = [arg.arg for arg in function.args.args + function.args.kwonlyargs]
                for call in ast.walk(function):
                    if isinstance(call, ast.Call) and _callee(call) in wrappers:
                        arg = _action_arg(call, wrappers[_callee(call)])
                        if isinstance(arg, ast.Name) and arg.id in params:
                            index = params.index(arg.id)
                            wrappers[function.name] = (
                                index if index < len(function.args.args) else None
                            )
                            changed = True
    found: dict[str, set[str]] = {}
    for module, tree in files:
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef) or function.name in wrappers:
                continue
            for call in ast.walk(function):
                if isinstance(call, ast.Call) and _callee(call) in wrappers:
                    arg = _action_arg(call, wrappers[_callee(call)])
                    assert arg is not None, f"{module}.{function.name}: a call without action"
                    if isinstance(arg, ast.Attribute) and arg.attr == "action":
                        continue  # an Audited's action, collected where it was built
                    found.setdefault(module, set()).update(_resolve(arg, module))
    return found


def test_the_table_lists_the_issues_actions_once_each() -> None:
    listed = table_actions()
    assert len(listed) == len(set(listed))
    assert set(listed) >= REQUIRED, REQUIRED - set(listed)


def test_every_action_in_the_table_occurs_in_the_code() -> None:
    missing = set(table_actions()) - string_literals()
    assert not missing, f"documented but never written by the code: {missing}"


def lifecycle_recorded(recorded: dict[str, set[str]]) -> set[str]:
    """What the modules of the lifecycle package record, together."""
    return set().union(
        *(
            actions
            for module, actions in recorded.items()
            if module.startswith("mcptasks.lifecycle")
        )
    )


def test_every_action_the_code_records_is_in_the_table() -> None:
    recorded = recorded_actions()
    assert lifecycle_recorded(recorded) >= {"task.created", "delegation.revoked"}
    assert {"token.issued", "auth.login_failed", "audit.exported", "audit.purged"} <= set().union(
        *recorded.values()
    )
    unlisted = set().union(*recorded.values()) - set(table_actions())
    assert not unlisted, f"recorded but not in docs/audit.md: {unlisted}"


def test_every_lifecycle_verb_action_is_listed() -> None:
    in_lifecycle = {
        value
        for value in string_literals()
        if re.fullmatch(r"(task|effect|delegation|approval)\.[a-z_]+", value)
    }
    lifecycle_source = "".join(
        path.read_text() for path in Path(lifecycle.__file__).parent.glob("*.py")
    )
    in_lifecycle = {action for action in in_lifecycle if f'"{action}"' in lifecycle_source}
    assert in_lifecycle == lifecycle_recorded(recorded_actions())
    assert in_lifecycle <= set(table_actions())


@pytest.mark.django_db
def test_progress_messages_and_lease_renewals_are_not_audited(
    make_task: Callable[..., Any],
) -> None:
    task = lifecycle.task_claim(task_id=make_task().pk, worker="w")
    before = AuditEvent.objects.count()
    lifecycle.task_report(task_id=task.pk, attempt=task.attempt, message="50% done")
    lifecycle.task_report(task_id=task.pk, attempt=task.attempt, message="90% done")
    lifecycle.task_renew_lease(task_id=task.pk, attempt=task.attempt)
    assert AuditEvent.objects.count() == before
    lifecycle.task_complete(task_id=task.pk, attempt=task.attempt, result={"content": []})
    assert list(
        AuditEvent.objects.filter(task_id=task.pk).order_by("seq").values_list("action", flat=True)
    ) == ["task.created", "task.started", "task.completed"]
