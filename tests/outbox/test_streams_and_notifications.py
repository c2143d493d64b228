"""The audit stream (every event of the tenant's chain, in chain order, with its sequence and
hashes), reviewer notifications of approval gates (issue 21 point 5), and the secret corpus of
the security tests, which never appears in anything delivered."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.urls import reverse

from audit.chain import GENESIS_HASH, link_hash
from audit.models import AuditEvent, ChainHead
from audit.record import Actor
from mcptasks import access, lifecycle
from mcptasks.models import Delivery, DeliveryState, InputRequest, Task
from mcptasks.outbox import delivery
from mcptasks.runner import run_task
from mcptasks.sinks.webhook import verify
from tests.approvals import conftest as approval_fixtures
from tests.security import corpus
from tests.security import corpus_pack as _registers_the_corpus_tools  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)
start = approval_fixtures.start
mcp_for = approval_fixtures.mcp_for
fake_cloud_file = approval_fixtures.fake_cloud_file
plain_http = approval_fixtures.plain_http


def received(receiver: Any, secret: str) -> list[dict[str, Any]]:
    return [verify(secret, r.headers, r.body) for r in receiver.ok()]


def test_an_audit_stream_arrives_in_chain_order_with_continuous_sequences(
    webhook, make_task, run_jobs, receiver, secret
):
    hook = webhook(events=["audit"])
    start_seq = hook.audit_cursor
    for n in range(3):
        task = make_task(arguments={"text": f"n{n}"})
        run_jobs()
        run_task(task.pk)
    run_jobs()
    delivery.sweep(grace_s=0)  # events no task change woke (the destination's own creation)
    run_jobs()
    events = [b["data"] for b in received(receiver, secret)]
    head = ChainHead.objects.get(chain="tenant:acme")
    assert [e["sequence"] for e in events] == list(range(start_seq + 1, head.seq + 1))
    before = AuditEvent.objects.filter(chain="tenant:acme", seq=start_seq).first()
    previous = before.hash if before is not None else GENESIS_HASH
    for event in events:
        assert event["chain"] == "tenant:acme"
        assert event["prev_hash"] == previous  # continuity: each links to the one before
        assert link_hash(event["prev_hash"], event["event"]) == event["hash"]  # recomputable
        previous = event["hash"]
    assert events[0]["event"]["action"] == "destination.created"
    ids = [b["id"] for b in received(receiver, secret)]
    assert ids[0] == f"audit:tenant:acme:{start_seq + 1}" and len(set(ids)) == len(ids)
    assert (
        Delivery.objects.filter(ordering_key="audit").exclude(state=DeliveryState.DELIVERED).count()
        == 0
    )


def test_a_stopped_audit_stream_resumes_in_order(
    webhook, make_task, run_jobs, receiver, secret, settings
):
    settings.MCPTASKS_OUTBOX_BACKOFF_BASE_S = 0.01
    settings.MCPTASKS_OUTBOX_BACKOFF_MAX_S = 0.02
    hook = webhook(events=["audit"])
    receiver.stop()
    make_task()
    run_jobs()
    receiver.start()
    for _ in range(50):
        delivery.sweep(grace_s=0)
        run_jobs()
        hook.refresh_from_db()
        head = ChainHead.objects.get(chain="tenant:acme").seq
        if (
            hook.audit_cursor == head
            and not Delivery.objects.exclude(state=DeliveryState.DELIVERED).exists()
        ):
            break
    sequences = [b["data"]["sequence"] for b in received(receiver, secret)]
    assert sequences == sorted(set(sequences))
    assert sequences[-1] == ChainHead.objects.get(chain="tenant:acme").seq


def test_an_opened_approval_gate_notifies_its_eligible_reviewers_with_a_link(
    webhook, start: Callable[..., str], run_jobs, receiver, secret, users, settings
):
    settings.MCPTASKS_PUBLIC_URL = "https://tasks.example.com"
    webhook(events=["approval.requested", "approval.decided"])
    task_id = start()
    run_jobs()
    [requested] = received(receiver, secret)
    gate = InputRequest.objects.get(task_id=task_id, key="approval")
    task = Task.objects.get(pk=task_id)
    eligible = access.eligible_reviewers(gate, task)
    assert eligible, "the demo's production deploy has reviewers"
    assert requested["type"] == "approval.requested"
    assert requested["url"] == "https://tasks.example.com" + reverse(
        "dashboard:answer", args=[task_id, "approval"]
    )
    assert requested["recipients"] == sorted(u.email for u in eligible)
    assert "alice@example.com" not in requested["recipients"]  # never the requester
    assert requested["data"]["approval"]["summary"]["environment"] == "production"
    lifecycle.task_decide_approval(
        task_id=task_id,
        key="approval",
        reviewer=users["olga"],
        verdict="reject",
        comment="CAB said no",
        actor=Actor.for_user(users["olga"], kind="operator"),
        via="dashboard",
    )
    run_jobs()
    decided = received(receiver, secret)[-1]
    assert decided["type"] == "approval.decided"
    assert decided["data"]["approval"]["comment"] == "CAB said no"
    assert {d.task_id for d in Delivery.objects.all()} == {task_id}


def test_the_secret_corpus_never_appears_in_a_delivered_payload(
    webhook, make_task, run_jobs, receiver, secret, settings
):
    settings.MCPTASKS_TOOL_PACKS = [*settings.MCPTASKS_TOOL_PACKS, "tests.security.corpus_pack"]
    seeded = corpus.build()
    webhook(events=[*approval_fixtures_events(), "audit"])
    kinds = {
        "corpus_roundtrip": {
            "payload": seeded.payload,
            "prose": seeded.prose,
            "deploy_pin": seeded.deploy_pin,
        },
        "corpus_tool_error": {"payload": seeded.payload, "prose": seeded.prose},
        "corpus_crash": {"payload": seeded.payload, "prose": seeded.prose},
    }
    # As tools/call creates them: with the tool's declared sensitive argument names.
    tasks = [
        make_task(tool_name=tool, arguments=args, sensitive_keys=frozenset({"deploy_pin"}))
        for tool, args in kinds.items()
    ]
    run_jobs()
    for task in tasks:
        run_task(task.pk)
    roundtrip = tasks[0]
    lifecycle.task_answer_input(
        task_id=roundtrip.pk,
        key="confirm",
        response={"action": "accept", "content": {"note": seeded.answer_note}},
        actor=Actor.system("test"),
        via="mcp",
    )
    run_jobs()
    run_task(roundtrip.pk)
    run_jobs()
    delivery.sweep(grace_s=0)
    run_jobs()
    # The secrets went through: the owner's own result holds them.
    assert seeded.hits(json.dumps(Task.objects.get(pk=roundtrip.pk).result))
    bodies = [r.body.decode() for r in receiver.ok()]
    types = {json.loads(b)["type"] for b in bodies}
    assert {"task.created", "task.input_requested", "task.completed", "task.failed"} <= types
    assert "audit.event" in types
    assert seeded.hits("\n".join(bodies)) == []
    assert seeded.hits(json.dumps(list(Delivery.objects.values_list("messages", flat=True)))) == []


def approval_fixtures_events() -> list[str]:
    from mcptasks.outbox.subscriptions import TASK_EVENTS

    return list(TASK_EVENTS)
