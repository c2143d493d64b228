"""A task's INSERT built once (lifecycle/creation.py, issue 23): the row is what the ORM's
``create`` would have written, and a task call canonicalises its arguments once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db.models import signals

from mcptasks import canonical
from mcptasks.lifecycle import creation
from mcptasks.mcp import tools_call
from mcptasks.models import Task
from tests.protocol.conftest import McpClient

pytestmark = pytest.mark.django_db

ARGUMENTS = {"text": "naïve ☃", "nested": {"list": [1, 2.5, None, True]}, "n": 2**40}


def test_the_inserted_row_is_the_task_returned(make_task: Callable[..., Task]) -> None:
    task = make_task(arguments=ARGUMENTS, ttl_ms=60_000, creation_key="idem:k1")
    stored = Task.objects.get(pk=task.pk)
    for field in Task._meta.concrete_fields:
        assert getattr(stored, field.attname) == getattr(task, field.attname), field.name
    assert stored.arguments == ARGUMENTS
    assert stored.expires_at is not None and stored.version == 1
    assert list(stored.creation_keys.values_list("key", flat=True)) == ["idem:k1"]


def test_the_returned_task_saves_as_an_update(make_task: Callable[..., Task]) -> None:
    task = make_task()
    task.status_message = "changed"
    task.save(update_fields=["status_message"])  # an UPDATE: the row exists and is known to
    assert Task.objects.get(pk=task.pk).status_message == "changed"
    assert Task.objects.count() == 1


def test_with_a_save_signal_connected_the_orm_saves_the_task(
    make_task: Callable[..., Task],
) -> None:
    saved: list[tuple[str, bool]] = []

    def receiver(sender: Any, instance: Task, created: bool, **_: Any) -> None:
        saved.append((instance.pk, created))

    signals.post_save.connect(receiver, sender=Task)
    try:
        task = make_task()
    finally:
        signals.post_save.disconnect(receiver, sender=Task)
    assert saved == [(task.pk, True)]


@pytest.mark.django_db(transaction=True)  # the request runs on a thread of its own
def test_a_task_call_canonicalises_its_arguments_once(
    cast: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    digested: list[Any] = []

    def counting(value: Any) -> str:
        digested.append(value)
        return canonical.digest(value)

    monkeypatch.setattr(tools_call, "digest", counting)
    monkeypatch.setattr(creation, "digest", counting)
    reply = McpClient(cast["alice"]["token"]).tool("echo_task", {"text": "once"})
    task = Task.objects.get(pk=reply.result["taskId"])
    assert digested == [{"text": "once"}]
    assert task.argument_digest == canonical.digest({"text": "once"})
