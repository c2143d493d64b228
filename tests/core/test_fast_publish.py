"""Jobs pushed to the Redis broker in one LPUSH (mcptasks/publish.py, issue 23): the message is
the one ``apply_async`` sends, and whatever Celery would send differently goes through it."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from celery import Celery, signals

from mcptasks import dispatch
from mcptasks.publish import Publisher
from tests.faults import harness

pytestmark = pytest.mark.redis

RUN_TASK = "mcptasks.run_task"
# What differs between two messages of the same job: fresh ids.
FRESH = {"id", "root_id", "correlation_id", "delivery_tag"}


def celery_app(url: str, **conf: Any) -> Celery:
    """A Celery app configured as the project's (its settings), on broker ``url``."""
    app = Celery("mcptasks-publish-test", set_as_current=False)  # the project's stays current
    app.config_from_object("django.conf:settings", namespace="CELERY")
    app.conf.broker_url = url
    app.conf.update(conf)
    return app


def pop_all(url: str, key: str = "celery") -> list[dict[str, Any]]:
    client = harness.redis_client(url)
    messages = []
    while (raw := client.rpop(key)) is not None:
        messages.append(json.loads(raw))
    return messages


def without_fresh_ids(message: dict[str, Any]) -> dict[str, Any]:
    return {
        **message,
        "headers": {k: v for k, v in message["headers"].items() if k not in FRESH},
        "properties": {k: v for k, v in message["properties"].items() if k not in FRESH},
    }


def test_a_job_pushed_in_one_lpush_is_the_message_apply_async_sends(
    private_redis: harness.PrivateRedis,
) -> None:
    app = celery_app(private_redis.url(0))
    app.tasks[RUN_TASK].apply_async(kwargs={"task_id": "t-1"})
    [celerys] = pop_all(private_redis.url(0))

    task_id = Publisher(app).publish(RUN_TASK, {"task_id": "t-1"})

    [ours] = pop_all(private_redis.url(0))
    assert without_fresh_ids(ours) == without_fresh_ids(celerys)
    assert ours["headers"]["id"] == ours["headers"]["root_id"] == task_id
    assert ours["properties"]["correlation_id"] == task_id
    assert ours["properties"]["delivery_tag"] != celerys["properties"]["delivery_tag"]
    body = json.loads(base64.b64decode(ours["body"]))
    assert body[:2] == [[], {"task_id": "t-1"}]
    assert ours["headers"]["kwargsrepr"] == "{'task_id': 't-1'}"  # Celery's saferepr of it


def test_long_arguments_keep_celerys_truncated_kwargsrepr(
    private_redis: harness.PrivateRedis,
) -> None:
    app = celery_app(private_redis.url(0))
    kwargs = {"task_id": "x" * 5000}
    app.tasks[RUN_TASK].apply_async(kwargs=kwargs)
    Publisher(app).publish(RUN_TASK, kwargs)
    celerys, ours = pop_all(private_redis.url(0))
    assert ours["headers"]["kwargsrepr"] == celerys["headers"]["kwargsrepr"]
    assert len(ours["headers"]["kwargsrepr"]) < 5000


def test_each_job_is_one_redis_command_once_the_queue_is_declared(
    private_redis: harness.PrivateRedis,
) -> None:
    publisher = Publisher(celery_app(private_redis.url(0)))
    publisher.publish(RUN_TASK, {"task_id": "first"})  # connects and declares the queue
    client = harness.redis_client(private_redis.url(0))

    def commands() -> dict[str, int]:
        stats = client.info("commandstats")
        return {name: int(row["calls"]) for name, row in stats.items()}

    before = commands()
    for n in range(5):
        publisher.publish(RUN_TASK, {"task_id": f"t-{n}"})
    after = commands()
    sent = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    sent.pop("cmdstat_info", None)  # the reading of the stats itself
    assert sent == {"cmdstat_lpush": 5}
    assert client.llen("celery") == 6


def test_a_changed_broker_url_gets_the_jobs_that_follow(tmp_path: Path) -> None:
    first, second = harness.PrivateRedis(tmp_path), harness.PrivateRedis(tmp_path)
    first.start()
    second.start()
    try:
        app = celery_app(first.url(0))
        publisher = Publisher(app)
        publisher.publish(RUN_TASK, {"task_id": "to-first"})
        app.conf.broker_url = second.url(0)
        publisher.publish(RUN_TASK, {"task_id": "to-second"})
        assert [m["headers"]["kwargsrepr"] for m in pop_all(first.url(0))] == [
            "{'task_id': 'to-first'}"
        ]
        assert [m["headers"]["kwargsrepr"] for m in pop_all(second.url(0))] == [
            "{'task_id': 'to-second'}"
        ]
    finally:
        first.stop()
        second.stop()


def _receiver(**_: Any) -> None:
    pass


@pytest.mark.parametrize(
    "conf",
    [
        {"task_always_eager": True},
        {"task_routes": {RUN_TASK: {"queue": "elsewhere"}}},
        {"task_default_priority": 5},
        {"task_compression": "gzip"},
        {"task_send_sent_event": True},
    ],
    ids=["eager", "routed", "priority", "compressed", "sent-events"],
)
def test_a_job_celery_would_send_differently_is_left_to_apply_async(
    private_redis: harness.PrivateRedis, conf: dict[str, Any]
) -> None:
    publisher = Publisher(celery_app(private_redis.url(0), **conf))
    assert publisher.publish(RUN_TASK, {"task_id": "t"}) is None
    assert (
        harness.redis_client(private_redis.url(0)).keys("*") == []
    )  # nothing sent, nothing declared


def test_with_a_publish_signal_connected_jobs_are_left_to_apply_async(
    private_redis: harness.PrivateRedis,
) -> None:
    publisher = Publisher(celery_app(private_redis.url(0)))
    signals.before_task_publish.connect(_receiver)
    try:
        assert publisher.publish(RUN_TASK, {"task_id": "t"}) is None
    finally:
        signals.before_task_publish.disconnect(_receiver)
    assert publisher.publish(RUN_TASK, {"task_id": "t"}) is not None


def test_a_broker_other_than_redis_is_left_to_apply_async() -> None:
    assert Publisher(celery_app("memory://")).publish(RUN_TASK, {"task_id": "t"}) is None


@pytest.fixture
def project_app_on(private_redis: harness.PrivateRedis, settings: Any) -> Iterator[str]:
    """The project's Celery app sends to ``private_redis`` (database 0), as with Redis configured."""
    settings.MCPTASKS_EMBEDDED_WORKER = False
    with harness.producer_broker(private_redis.url(0)):
        yield private_redis.url(0)


def test_a_delivery_with_an_eta_goes_through_apply_async(project_app_on: str) -> None:
    eta = datetime.now(UTC) + timedelta(minutes=5)
    dispatch.deliver("wake_task", {"task_id": "t"}, eta=eta)
    [message] = pop_all(project_app_on)
    assert message["headers"]["task"] == "mcptasks.wake_task"
    assert datetime.fromisoformat(message["headers"]["eta"]) == eta


def test_a_delivery_is_one_lpush_of_the_project_job(project_app_on: str) -> None:
    dispatch.deliver("run_task", {"task_id": "t-9"})
    [message] = pop_all(project_app_on)
    assert message["headers"]["task"] == RUN_TASK
    assert message["headers"]["kwargsrepr"] == "{'task_id': 't-9'}"


def test_a_delivery_the_broker_refuses_is_logged_for_the_sweeps(
    private_redis: harness.PrivateRedis, project_app_on: str, caplog: pytest.LogCaptureFixture
) -> None:
    dispatch.deliver("run_task", {"task_id": "before"})  # the plan is made while Redis is up
    private_redis.stop()
    with caplog.at_level(logging.WARNING, logger="mcptasks.dispatch"):
        dispatch.deliver("run_task", {"task_id": "lost"})
    assert [r.getMessage() for r in caplog.records] == [
        "job delivery failed; the sweeps will recover it"
    ]
    private_redis.start()  # a restart: the pooled connection is stale, the retry makes a new one
    dispatch.deliver("run_task", {"task_id": "after"})
    [message] = pop_all(project_app_on)
    assert message["headers"]["kwargsrepr"] == "{'task_id': 'after'}"


def test_arguments_the_job_does_not_take_are_refused_before_anything_is_sent(
    private_redis: harness.PrivateRedis,
) -> None:
    app = celery_app(private_redis.url(0))
    with pytest.raises(TypeError):
        app.tasks[RUN_TASK].apply_async(kwargs={"task": "t"})  # what Celery does
    with pytest.raises(TypeError):
        Publisher(app).publish(RUN_TASK, {"task": "t"})
    assert pop_all(private_redis.url(0)) == []
