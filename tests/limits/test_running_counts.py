"""The running tasks a claim counts under the tenant's lock (fairshare.running_counts: one
statement built once, issue 23)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from mcptasks import fairshare, lifecycle

pytestmark = pytest.mark.django_db(transaction=True)


def test_running_counts_count_the_tenants_and_the_principals_running_tasks(cast, make_task):
    alice, adam, bob = cast["alice"], cast["adam"], cast["bob"]  # adam: alice's tenant
    for owner, runs in (("alice", 2), ("adam", 1), ("bob", 1)):
        for _ in range(runs):
            lifecycle.task_claim(task_id=make_task(owner).pk, worker="w")
    make_task("alice")  # queued: not counted
    done = make_task("alice")
    claimed = lifecycle.task_claim(task_id=done.pk, worker="w")
    lifecycle.task_complete(task_id=done.pk, attempt=claimed.attempt, result={})  # not counted

    with CaptureQueriesContext(connection) as queries:
        counts = fairshare.running_counts(alice["tenant"].pk, alice["user"].pk)
    assert counts == (3, 2)
    assert len(queries) == 1
    assert fairshare.running_counts(bob["tenant"].pk, adam["user"].pk) == (1, 1)
    assert fairshare.running_counts(bob["tenant"].pk, bob["user"].pk) == (1, 1)
