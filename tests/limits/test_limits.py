"""Each limit of the README's limits table, enforced with a clear error."""

from __future__ import annotations

import json
import re
import threading
from datetime import timedelta
from pathlib import Path

import pytest
import time_machine
from django.conf import settings
from django.db import IntegrityError, connection
from django.utils import timezone

from audit.record import Actor
from mcptasks import lifecycle, limits, runner
from mcptasks.lifecycle import creation
from mcptasks.models import Task, TaskCreationKey, TaskState
from tests.protocol.conftest import McpClient

pytestmark = pytest.mark.django_db(transaction=True)
IDEM = "dev.mcptasks/idempotencyKey"
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {
        "elicitation": {},
        "extensions": {"io.modelcontextprotocol/tasks": {}},
    },
}


@pytest.fixture(autouse=True)
def fresh_buckets():
    limits.buckets.cache_clear()
    limits.buckets().reset()
    yield
    limits.buckets().reset()
    limits.buckets.cache_clear()


def call_with_key(client: McpClient, key: str, text: str = "hi"):
    return client.call(
        "tools/call",
        {"name": "echo_task", "arguments": {"text": text}, "_meta": {**META, IDEM: key}},
    )


def test_same_idempotency_key_and_arguments_return_the_same_task(mcp):
    first = call_with_key(mcp, "k-1").result
    second = call_with_key(mcp, "k-1").result
    assert first["taskId"] == second["taskId"]
    assert Task.objects.count() == 1


def test_idempotency_key_with_other_arguments_is_a_named_conflict(mcp):
    original = call_with_key(mcp, "k-2", "one").result["taskId"]
    reply = call_with_key(mcp, "k-2", "two")
    assert reply.error["code"] == -32602
    assert "Idempotency key conflict" in reply.error["message"]
    assert Task.objects.get(pk=original).arguments == {"text": "one"}
    assert Task.objects.count() == 1


def test_idempotency_keys_are_per_principal(mcp_for):
    first = call_with_key(mcp_for("alice"), "shared").result["taskId"]
    second = call_with_key(mcp_for("adam"), "shared").result["taskId"]
    assert first != second


def test_idempotency_key_expires_after_the_window(mcp):
    with time_machine.travel("2026-01-01 00:00:00+00:00", tick=False) as clock:
        first = call_with_key(mcp, "k-3").result["taskId"]
        clock.shift(settings.MCPTASKS_IDEMPOTENCY_WINDOW_S + 1)
        second = call_with_key(mcp, "k-3").result["taskId"]
    assert first != second


def test_an_expired_key_is_released_to_the_task_created_after_it(mcp):
    with time_machine.travel("2026-01-01 00:00:00+00:00", tick=False) as clock:
        first = call_with_key(mcp, "k-4").result["taskId"]
        clock.shift(settings.MCPTASKS_IDEMPOTENCY_WINDOW_S + 1)
        second = call_with_key(mcp, "k-4", "other arguments").result["taskId"]  # no conflict
        third = call_with_key(mcp, "k-4", "other arguments").result["taskId"]
    assert second == third != first
    [claim] = TaskCreationKey.objects.all()
    assert (claim.key, claim.task_id) == ("idem:k-4", second)
    assert Task.objects.filter(pk=first).exists()  # the old task stays, without its key


def test_one_task_per_principal_and_key_is_enforced_by_the_database(mcp, cast):
    task_id = call_with_key(mcp, "k-5").result["taskId"]
    with pytest.raises(IntegrityError):
        TaskCreationKey.objects.create(
            principal=cast["alice"]["user"], key="idem:k-5", task_id=task_id
        )
    TaskCreationKey.objects.create(principal=cast["adam"]["user"], key="idem:k-5", task_id=task_id)


def _keyed_spec(entry, key):
    return lifecycle.NewTask(
        tenant_id=entry["tenant"].pk,
        principal_id=entry["user"].pk,
        tool_name="echo_task",
        arguments={"text": "hi"},
        policy_revision="test",
        creation_key=key,
    )


def test_a_creation_that_loses_the_key_race_gets_the_winner_back(cast, monkeypatch):
    alice = cast["alice"]
    winner, _ = lifecycle.task_create(spec=_keyed_spec(alice, "k-6"), actor=Actor.system("test"))
    looked_up = creation._existing_for_key
    calls = []

    def first_misses(spec, now):
        calls.append(1)
        return None if len(calls) == 1 else looked_up(spec, now)  # the race: not there yet

    monkeypatch.setattr(creation, "_existing_for_key", first_misses)
    task, created = lifecycle.task_create(
        spec=_keyed_spec(alice, "k-6"), actor=Actor.system("test")
    )
    assert (task.pk, created) == (winner.pk, False)
    assert Task.objects.count() == 1 and TaskCreationKey.objects.count() == 1


def test_a_deleted_task_takes_its_key_with_it(mcp):
    first = call_with_key(mcp, "k-7").result["taskId"]
    Task.objects.filter(pk=first).delete()
    assert not TaskCreationKey.objects.exists()
    assert call_with_key(mcp, "k-7").result["taskId"] != first


def test_invalid_idempotency_key_is_invalid_params(mcp):
    reply = call_with_key(mcp, "x" * 200)
    assert reply.error["code"] == -32602
    assert Task.objects.count() == 0


@pytest.mark.pg
def test_fifty_concurrent_identical_requests_create_one_task(cast):
    token = cast["alice"]["token"]
    ids: list[str] = []
    barrier = threading.Barrier(50)

    def worker() -> None:
        client = McpClient(token)
        barrier.wait()
        try:
            ids.append(call_with_key(client, "burst").result["taskId"])
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(ids) == 50 and len(set(ids)) == 1
    assert Task.objects.count() == 1
    assert list(TaskCreationKey.objects.values_list("key", "task_id")) == [("idem:burst", ids[0])]


def test_active_tasks_per_principal_limit_refuses_creation(mcp, settings):
    settings.MCPTASKS_MAX_ACTIVE_TASKS_PER_PRINCIPAL = 2
    for _ in range(2):
        assert mcp.tool("echo_task").result["resultType"] == "task"
    refused = mcp.tool("echo_task").result
    assert refused["isError"] is True
    assert "MCPTASKS_MAX_ACTIVE_TASKS_PER_PRINCIPAL" in refused["content"][0]["text"]
    assert Task.objects.count() == 2


def test_active_tasks_per_tenant_limit_refuses_creation(mcp_for, settings):
    settings.MCPTASKS_MAX_ACTIVE_TASKS_PER_TENANT = 1
    assert mcp_for("alice").tool("echo_task").result["resultType"] == "task"
    refused = mcp_for("adam").tool("echo_task").result
    assert "MCPTASKS_MAX_ACTIVE_TASKS_PER_TENANT" in refused["content"][0]["text"]
    assert mcp_for("bob").tool("echo_task").result["resultType"] == "task"


def test_result_over_the_size_limit_fails_the_task(make_task, settings):
    settings.MCPTASKS_MAX_RESULT_BYTES = 100
    task = make_task(tool_name="echo_task", arguments={"text": "x" * 500})
    assert runner.run_task(task.pk) == TaskState.FAILED
    task.refresh_from_db()
    assert task.error["code"] == -32603
    assert "MCPTASKS_MAX_RESULT_BYTES" in task.error["message"]


def test_request_body_over_the_limit_is_413(mcp, settings):
    settings.MCPTASKS_MAX_REQUEST_BYTES = 1000
    reply = mcp.tool("echo_task", {"text": "x" * 2000})
    assert reply.status == 413
    assert Task.objects.count() == 0


def test_attempts_over_the_limit_fail_the_task(make_task, settings):
    settings.MCPTASKS_MAX_ATTEMPTS = 2
    task = make_task(tool_name="echo_task")
    Task.objects.filter(pk=task.pk).update(lost_attempts=2)  # two workers died
    assert runner.run_task(task.pk) == TaskState.FAILED
    task.refresh_from_db()
    assert "MCPTASKS_MAX_ATTEMPTS" in task.error["message"]


def test_input_wait_beyond_its_limit_times_out(make_task, settings):
    from mcptasks import sweeps

    settings.MCPTASKS_MAX_INPUT_WAIT_S = 60
    task = make_task(tool_name="ask_twice")
    runner.run_task(task.pk)
    with time_machine.travel(timezone.now() + timedelta(seconds=61), tick=False):
        assert sweeps.timeout_inputs() == 1
    task.refresh_from_db()
    assert task.state == TaskState.FAILED
    assert "timed out" in task.error["message"]


def test_polling_faster_than_interval_beyond_burst_is_429(mcp, settings):
    settings.MCPTASKS_POLL_BURST = 3
    task_id = mcp.tool("echo_task").result["taskId"]
    statuses = [mcp.call("tasks/get", {"taskId": task_id}).status for _ in range(5)]
    # the first poll sees a new version (free), then 3 tokens, then throttled
    assert statuses[:4] == [200, 200, 200, 200]
    assert statuses[4] == 429
    throttled = mcp.call("tasks/get", {"taskId": task_id})
    assert throttled.status == 429
    assert int(throttled.headers["retry-after"]) >= 1


def test_first_poll_after_a_state_change_is_never_throttled(mcp, settings):
    settings.MCPTASKS_POLL_BURST = 1
    task_id = mcp.tool("echo_task").result["taskId"]
    assert mcp.call("tasks/get", {"taskId": task_id}).status == 200
    assert mcp.call("tasks/get", {"taskId": task_id}).status == 200
    assert mcp.call("tasks/get", {"taskId": task_id}).status == 429
    runner.run_task(task_id)  # the task completes: a new version
    assert mcp.call("tasks/get", {"taskId": task_id}).result["status"] == "completed"


def test_default_burst_covers_the_conformance_suites_fast_polls(mcp):
    task_id = mcp.tool("echo_task").result["taskId"]
    # 100 ms polls for 5 s against a 1000 ms interval: 50 polls, none throttled.
    assert all(mcp.call("tasks/get", {"taskId": task_id}).status == 200 for _ in range(50))


def test_guessing_task_ids_is_throttled_and_logged_per_principal(mcp_for, settings, caplog):
    settings.MCPTASKS_UNKNOWN_TASK_BURST = 3
    alice, bob = mcp_for("alice"), mcp_for("bob")
    codes = [alice.call("tasks/get", {"taskId": f"guess-{n}"}).status for n in range(5)]
    assert codes[:3] == [200, 200, 200] and codes[4] == 429
    assert any(r.name == "mcptasks.security" for r in caplog.records)
    assert bob.call("tasks/get", {"taskId": "guess-x"}).status == 200  # others unaffected


def test_readme_limits_table_matches_the_settings():
    readme = (Path(settings.BASE_DIR) / "README.md").read_text()
    section = readme.split("## Limits", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(MCPTASKS_[A-Z_]+)` \| ([^|]+) \|", section, re.M)
    assert rows, "README has a Limits table"
    documented = {name: default.strip() for name, default in rows}
    for name, default in documented.items():
        assert hasattr(settings, name), f"{name} is in the README but not a setting"
        assert json.loads(default.replace("_", "")) == getattr(settings, name), name
    expected = {
        "MCPTASKS_MAX_ACTIVE_TASKS_PER_PRINCIPAL",
        "MCPTASKS_MAX_ACTIVE_TASKS_PER_TENANT",
        "MCPTASKS_MAX_RESULT_BYTES",
        "MCPTASKS_MAX_REQUEST_BYTES",
        "MCPTASKS_MAX_INPUT_WAIT_S",
        "MCPTASKS_MAX_ATTEMPTS",
        "MCPTASKS_LEASE_S",
        "MCPTASKS_LEASE_RENEW_S",
        "MCPTASKS_POLL_BURST",
        "MCPTASKS_UNKNOWN_TASK_BURST",
        "MCPTASKS_UNKNOWN_TASK_RATE",
        "MCPTASKS_IDEMPOTENCY_WINDOW_S",
        "MCPTASKS_MAX_LISTEN_STREAMS_PER_PRINCIPAL",
        "MCPTASKS_STREAM_IDLE_TIMEOUT_S",
        "MCPTASKS_STREAM_ACCESS_CHECK_S",
        "MCPTASKS_LOGIN_FAILURE_LIMIT",
        "MCPTASKS_LOGIN_LOCKOUT_S",
        "MCPTASKS_LOGIN_FAILED_AUDIT_WINDOW_S",
        "MCPTASKS_LOGIN_FAILED_AUDIT_SYSTEM_MAX",
        "MCPTASKS_AUDIT_VERIFY_MAX_UPLOAD_BYTES",
        "MCPTASKS_AUDIT_VERIFY_MAX_UNCOMPRESSED_BYTES",
    }
    assert expected <= set(documented)


def test_input_timeout_can_be_answered_to_the_tool(make_task, settings):
    from mcptasks import sweeps

    task = make_task(tool_name="ask_with_timeout_answer")
    runner.run_task(task.pk)
    with time_machine.travel(timezone.now() + timedelta(seconds=31), tick=False):
        assert sweeps.timeout_inputs() == 1
    task.refresh_from_db()
    assert task.state == TaskState.QUEUED
    assert runner.run_task(task.pk) == TaskState.COMPLETED
    task.refresh_from_db()
    assert task.result["content"][0]["text"] == "timeout"


@pytest.mark.redis
def test_redis_bucket_is_shared_by_the_event_loop_and_thread_callers():
    import asyncio

    bucket = limits.RedisBuckets(settings.MCPTASKS_LIMITS_REDIS_URL)
    bucket.reset()
    key, rate, burst = "poll:test-shared", 0.001, 3
    assert bucket.take(key, rate, burst) == 0  # 2 tokens left
    assert asyncio.run(bucket.take_async(key, rate, burst)) == 0  # 1 left
    assert bucket.take(key, rate, burst) == 0  # 0 left
    assert asyncio.run(bucket.take_async(key, rate, burst)) > 0  # throttled, across both
    assert asyncio.run(bucket.take_async(key, rate, burst, version="2")) == 0  # new version
    bucket.reset()


@pytest.mark.redis
def test_the_event_loop_bucket_survives_a_redis_that_forgot_the_script():
    import asyncio

    bucket = limits.RedisBuckets(settings.MCPTASKS_LIMITS_REDIS_URL)
    bucket.reset()

    async def twice() -> list[float]:
        first = await bucket.take_async("poll:test-noscript", 0.001, 1)
        bucket._client.script_flush()  # as after a Redis restart
        return [first, await bucket.take_async("poll:test-noscript", 0.001, 1)]

    first, second = asyncio.run(twice())
    assert first == 0 and second > 0  # the second call ran the script and was throttled
    bucket.reset()


def test_memory_bucket_answers_the_event_loop_caller_from_the_same_state():
    import asyncio

    bucket = limits.MemoryBuckets()
    assert bucket.take("k", 0.001, 1) == 0
    assert asyncio.run(bucket.take_async("k", 0.001, 1)) > 0


def _redis_tokens(bucket: limits.RedisBuckets, key: str) -> float:
    return float(bucket._client.hget(f"mcptasks:rl:{key}", "tokens"))


@pytest.mark.redis
def test_a_poll_lease_spends_its_tokens_here_without_a_round_trip():
    bucket = limits.RedisBuckets(settings.MCPTASKS_LIMITS_REDIS_URL)
    bucket.reset()
    key, rate, burst = "poll:test-lease", 0.001, 10
    assert bucket.take(key, rate, burst, lease=4) == 0
    assert _redis_tokens(bucket, key) == pytest.approx(6, abs=0.01)  # four taken at once
    bucket._client.delete(f"mcptasks:rl:{key}")  # proof that the next three never ask Redis
    assert [bucket.take(key, rate, burst, lease=4) for _ in range(3)] == [0, 0, 0]
    assert not bucket._client.exists(f"mcptasks:rl:{key}")
    assert bucket.take(key, rate, burst, lease=4) == 0  # the lease is spent: Redis again
    assert _redis_tokens(bucket, key) == pytest.approx(6, abs=0.01)
    bucket.reset()


@pytest.mark.redis
def test_leases_of_two_processes_never_allow_more_than_the_burst():
    import asyncio

    first = limits.RedisBuckets(settings.MCPTASKS_LIMITS_REDIS_URL)
    second = limits.RedisBuckets(settings.MCPTASKS_LIMITS_REDIS_URL)
    first.reset()
    key, rate, burst = "poll:test-two", 0.001, 10
    allowed = 0
    for _ in range(12):  # alternating, one on the event loop: each spends its own lease
        allowed += first.take(key, rate, burst, lease=4) == 0
        allowed += asyncio.run(second.take_async(key, rate, burst, lease=4)) == 0
    assert allowed == burst
    first.reset()


@pytest.mark.redis
def test_a_lease_lasts_as_long_as_the_bucket_takes_to_earn_it_back(monkeypatch):
    bucket = limits.RedisBuckets(settings.MCPTASKS_LIMITS_REDIS_URL)
    bucket.reset()
    now = [1000.0]
    monkeypatch.setattr(limits.time, "monotonic", lambda: now[0])
    key, rate, burst = "poll:test-expiry", 0.5, 10  # four tokens are earned in 8 s
    assert bucket.take(key, rate, burst, lease=4) == 0
    now[0] += 7.9
    assert bucket._stock.spend(key, "")  # still held
    now[0] += 0.2
    assert not bucket._stock.spend(key, "")  # past 8 s the rest is dropped
    bucket.reset()


@pytest.mark.redis
def test_a_new_version_is_never_answered_from_a_lease_of_the_old_one():
    bucket = limits.RedisBuckets(settings.MCPTASKS_LIMITS_REDIS_URL)
    bucket.reset()
    key, rate, burst = "poll:test-version", 0.001, 10
    assert bucket.take(key, rate, burst, version="1", lease=4) == 0  # a new version: free
    assert bucket.take(key, rate, burst, version="1", lease=4) == 0  # four taken
    assert _redis_tokens(bucket, key) == pytest.approx(6, abs=0.01)
    assert bucket.take(key, rate, burst, version="2", lease=4) == 0  # asked of Redis: free
    assert bucket._client.hget(f"mcptasks:rl:{key}", "version") == b"2"
    assert _redis_tokens(bucket, key) == pytest.approx(6, abs=0.01)
    assert not bucket._stock.spend(key, "1")  # the old version's lease is gone
    bucket.reset()


# The child only reads the stock (its lock made anew at fork) and writes to a pipe.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_process_holds_none_of_its_parents_lease():
    import os

    stock = limits.Stock()
    stock.keep("poll:k", "", 5, rate=1.0)
    assert stock.spend("poll:k", "")
    reading, writing = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        os.write(writing, b"held" if stock.spend("poll:k", "") else b"none")
        os._exit(0)
    os.close(writing)
    os.waitpid(child, 0)
    assert os.read(reading, 4) == b"none"
    assert stock.spend("poll:k", "")  # the parent still holds its own
