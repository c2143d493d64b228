"""Dashboard views: each action goes through access.py and a lifecycle verb, lands in the audit
trail, and shows on the page; other tenants' objects answer 404; auditors see no buttons."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from django.test import Client
from django.urls import reverse

from audit.export import verify_export
from audit.models import AuditEvent
from mcptasks import lifecycle
from mcptasks.models import ApiToken, Effect, EffectState, InputRequest, Task, TaskState
from mcptasks.task_ids import distinctive

pytestmark = pytest.mark.django_db

ACTION_BUTTONS = ("Cancel…", "Force cancel…", "Reconcile", ">Grant<", ">Answer<", "Revoke")


def events(task: Task, action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(task_id=task.pk, action=action).order_by("seq"))


def page_text(response) -> str:
    return response.content.decode()


# ---------------------------------------------------------------- sign-in, CSP, CSRF
def test_anonymous_users_are_sent_to_the_login_page(cast):
    response = Client().get(reverse("dashboard:tasks"))
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=/tasks/")


def test_login_page_has_a_strict_content_security_policy_and_no_inline_script(cast):
    response = Client().get(reverse("dashboard:login"))
    policy = response["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert "unsafe-eval" not in policy
    html = page_text(response)
    assert "<script>" not in html and " on" + "click=" not in html and "style=" not in html


def test_login_and_logout_with_the_cast_credentials(cast):
    client = Client(enforce_csrf_checks=True)
    page = client.get(reverse("dashboard:login"))
    token = page.cookies["csrftoken"].value
    response = client.post(
        reverse("dashboard:login"),
        {"username": "olga", "password": cast["olga"]["password"], "csrfmiddlewaretoken": token},
    )
    assert response.status_code == 302
    inbox = client.get(reverse("dashboard:inbox"))
    assert inbox.status_code == 200 and "olga" in page_text(inbox)
    assert client.post(reverse("dashboard:logout")).status_code == 403  # no CSRF token
    token = client.cookies["csrftoken"].value
    response = client.post(reverse("dashboard:logout"), {"csrfmiddlewaretoken": token})
    assert response["Location"] == reverse("dashboard:login")
    assert client.get(reverse("dashboard:inbox")).status_code == 302


def test_actions_refuse_a_post_without_csrf_token(cast, users, awaiting):
    task = awaiting("alice")
    client = Client(enforce_csrf_checks=True)
    client.force_login(users["olga"])
    response = client.post(
        reverse("dashboard:force_cancel", args=[task.pk]), {"reason": "x", "confirm": "on"}
    )
    assert response.status_code == 403
    assert Task.objects.get(pk=task.pk).state == TaskState.AWAITING_OPERATOR


def test_navigation_is_role_aware(cast, client_for):
    for name, sees_audit in (("alice", False), ("amy", True), ("olga", True), ("carl", True)):
        html = page_text(client_for(name).get(reverse("dashboard:inbox")))
        assert ('href="/audit/"' in html) is sees_audit, name
    olga = page_text(client_for("olga").get(reverse("dashboard:inbox")))
    assert 'name="tenant"' in olga  # the tenant switcher: olga works in two tenants
    assert 'name="tenant"' not in page_text(client_for("alice").get(reverse("dashboard:inbox")))


def test_tenant_switcher_changes_the_default_tenant_of_the_lists(cast, client_for, make_task):
    make_task("alice", arguments={"which": "acme"})
    globex = make_task("bob")
    olga = client_for("olga")
    rows = olga.get(reverse("dashboard:tasks")).context["page"].rows
    assert all(task.tenant.slug == "acme" for task in rows)
    olga.post(reverse("dashboard:switch_tenant"), {"tenant": "globex", "next": "/tasks/"})
    rows = olga.get(reverse("dashboard:tasks")).context["page"].rows
    assert [task.pk for task in rows] == [globex.pk]
    olga.post(reverse("dashboard:switch_tenant"), {"tenant": "nope"})
    assert olga.get(reverse("dashboard:tasks")).context["page"].rows[0].pk == globex.pk


# ---------------------------------------------------------------- inbox
def test_operator_inbox_lists_approvals_unknown_effects_and_stuck_cancels(
    cast, client_for, awaiting, unknown_effect, running, users
):
    approval = awaiting("alice")
    effect_task = unknown_effect("bob")
    stuck = running("alice")
    lifecycle.task_request_cancel(
        task_id=stuck.pk, actor=lifecycle.Actor.for_user(users["amy"]), reason="wrong branch"
    )
    Task.objects.filter(pk=stuck.pk).update(
        cancel_requested_at=Task.objects.get(pk=stuck.pk).cancel_requested_at.replace(year=2020)
    )
    olga = client_for("olga")
    inbox = olga.get(reverse("dashboard:inbox"), {"tenant": ""}).context["inbox"]  # all tenants
    assert [r.task_id for r in inbox.inputs] == [approval.pk]
    assert [e.task_id for e in inbox.unknown_effects] == [effect_task.pk]
    assert [t.pk for t in inbox.stuck_cancels] == [stuck.pk]
    counts = olga.get(reverse("dashboard:inbox_counts"))  # in her tenant, acme
    assert 'data-total="2"' in page_text(counts)
    olga.post(reverse("dashboard:switch_tenant"), {"tenant": "globex"})
    assert 'data-total="1"' in page_text(olga.get(reverse("dashboard:inbox_counts")))


def test_inbox_shows_the_oldest_items_and_says_there_are_more(
    cast, client_for, awaiting, monkeypatch
):
    from mcptasks import queries

    monkeypatch.setattr(queries.waiting, "INBOX_LIMIT", 2)
    made = [awaiting("alice").pk for _ in range(3)]
    response = client_for("olga").get(reverse("dashboard:inbox"))
    inbox = response.context["inbox"]
    assert [r.task_id for r in inbox.inputs] == made[:2] and inbox.more == {"inputs"}
    assert '<span class="pill">2+</span>' in page_text(response)
    assert 'data-total="3"' in page_text(response)  # the badge counts them all


def test_requester_and_other_members_do_not_get_the_approval_in_their_inbox(
    cast, client_for, awaiting, unknown_effect
):
    awaiting("alice")
    unknown_effect("alice")
    for name in ("alice", "adam", "amy", "carl", "bob"):
        inbox = client_for(name).get(reverse("dashboard:inbox")).context["inbox"]
        assert inbox.total == 0, name


def test_any_audience_requests_reach_their_owner_but_not_a_self_approval_gate(
    cast, client_for, awaiting
):
    mine = awaiting("alice", audience="any", forbid_self_approval=False, key="choice")
    awaiting("alice", audience="any", forbid_self_approval=True, key="gate")
    inbox = client_for("alice").get(reverse("dashboard:inbox")).context["inbox"]
    assert [(r.task_id, r.key) for r in inbox.inputs] == [(mine.pk, "choice")]


# ---------------------------------------------------------------- answering input
def test_operator_approves_through_the_generated_form(cast, client_for, awaiting):
    task = awaiting("alice")
    olga = client_for("olga")
    form_page = olga.get(reverse("dashboard:answer", args=[task.pk, "approval"]))
    html = page_text(form_page)
    assert 'name="content-approve"' in html and 'type="checkbox"' in html
    assert 'name="content-comment"' in html and 'value="accept"' in html
    response = olga.post(
        reverse("dashboard:answer", args=[task.pk, "approval"]),
        {
            "content-approve": "on",
            "content-comment": "ship it",
            "decision-comment": "checked the change log",
            "decision-action": "accept",
        },
    )
    assert response.status_code == 302
    request = InputRequest.objects.get(task=task, key="approval")
    assert request.state == "answered" and request.answered_via == "dashboard"
    assert request.response["content"] == {"approve": True, "comment": "ship it"}
    assert request.response["_meta"] == {"io.mcptasks/comment": "checked the change log"}
    assert Task.objects.get(pk=task.pk).state == TaskState.QUEUED
    [event] = events(task, "task.input_answered")
    assert event.actor_display == "olga" and event.actor_kind == "operator"
    assert event.data["via"] == "dashboard" and event.data["action"] == "accept"
    detail = page_text(olga.get(reverse("dashboard:task", args=[task.pk])))
    assert "checked the change log" in detail and "approval: accept via dashboard" in detail


def test_a_sampling_request_for_operators_is_answered_as_json(cast, client_for, running):
    task = running("alice")
    lifecycle.task_request_input(
        task_id=task.pk,
        attempt=task.attempt,
        requests=[
            lifecycle.InputSpec(
                key="draft",
                method="sampling/createMessage",
                audience="operator",
                params={"messages": [], "maxTokens": 10},
            )
        ],
    )
    olga = client_for("olga")
    url = reverse("dashboard:answer", args=[task.pk, "draft"])
    assert "Send response" in page_text(olga.get(url))
    refused = olga.post(url, {"response": '{"text": "no role"}', "decision-action": "accept"})
    assert refused.status_code == 422 and "role and content" in page_text(refused)
    olga.post(
        url,
        {
            "response": '{"role": "assistant", "content": {"type": "text", '
            '"text": "hi"}, "model": "human"}',
            "decision-action": "accept",
        },
    )
    assert InputRequest.objects.get(task=task).response["model"] == "human"


def test_decline_needs_no_content(cast, client_for, awaiting):
    task = awaiting("alice")
    response = client_for("olga").post(
        reverse("dashboard:answer", args=[task.pk, "approval"]), {"decision-action": "decline"}
    )
    assert response.status_code == 302
    assert InputRequest.objects.get(task=task).response == {"action": "decline"}


def test_an_answer_that_does_not_fit_the_schema_is_refused_and_stays_pending(
    cast, client_for, awaiting
):
    schema = {
        "type": "object",
        "properties": {"replicas": {"type": "integer", "minimum": 1}},
        "required": ["replicas"],
    }
    task = awaiting("alice", schema=schema)
    response = client_for("olga").post(
        reverse("dashboard:answer", args=[task.pk, "approval"]),
        {"content-replicas": "0", "decision-action": "accept"},
    )
    assert response.status_code == 422
    assert "greater than or equal to 1" in page_text(response)
    assert InputRequest.objects.get(task=task).state == "pending"


def test_requester_cannot_approve_their_own_deployment_and_the_page_says_why(
    cast, client_for, awaiting
):
    task = awaiting("alice")
    alice = client_for("alice")
    page = alice.get(reverse("dashboard:answer", args=[task.pk, "approval"]))
    assert page.status_code == 403
    html = page_text(page)
    assert "forbids self-approval" in html and 'name="content-approve"' not in html
    response = alice.post(
        reverse("dashboard:answer", args=[task.pk, "approval"]),
        {"content-approve": "on", "decision-action": "accept"},
    )
    assert response.status_code == 403
    assert InputRequest.objects.get(task=task).state == "pending"
    detail = page_text(alice.get(reverse("dashboard:task", args=[task.pk])))
    assert "forbids self-approval" in detail and ">Answer<" not in detail


def test_a_member_who_is_not_named_cannot_answer(cast, client_for, awaiting):
    task = awaiting("alice")
    adam = client_for("adam")
    assert adam.get(reverse("dashboard:task", args=[task.pk])).status_code == 404
    assert (
        adam.post(
            reverse("dashboard:answer", args=[task.pk, "approval"]), {"decision-action": "accept"}
        ).status_code
        == 404
    )


def test_answering_twice_is_refused_with_a_message(cast, client_for, awaiting):
    task = awaiting("alice")
    url = reverse("dashboard:answer", args=[task.pk, "approval"])
    olga = client_for("olga")
    olga.post(url, {"content-approve": "on", "decision-action": "accept"})
    page = olga.get(url)
    assert "no longer waiting" in page_text(page)
    assert len(events(task, "task.input_answered")) == 1


# ---------------------------------------------------------------- cancel, force cancel
def test_cancel_needs_a_reason_and_is_audited(cast, client_for, running):
    task = running("alice")
    alice = client_for("alice")
    url = reverse("dashboard:cancel", args=[task.pk])
    alice.post(url, {"reason": "  "})
    assert Task.objects.get(pk=task.pk).cancel_requested_at is None
    response = alice.post(url, {"reason": "wrong version"}, follow=True)
    assert "Cancel requested" in page_text(response)
    [event] = events(task, "task.cancel_requested")
    assert event.data["reason"] == "wrong version" and event.actor_display == "alice"
    assert "reason: wrong version" in page_text(response)  # the timeline, at once


def test_force_cancel_needs_reason_and_confirmation(cast, client_for, running):
    task = running("alice")
    olga = client_for("olga")
    url = reverse("dashboard:force_cancel", args=[task.pk])
    olga.post(url, {"reason": "stuck"})
    assert Task.objects.get(pk=task.pk).state == TaskState.RUNNING
    response = olga.post(url, {"reason": "stuck on a dead host", "confirm": "on"}, follow=True)
    assert Task.objects.get(pk=task.pk).state == TaskState.CANCELLED
    [event] = events(task, "task.force_cancelled")
    assert event.actor_kind == "operator" and event.data["reason"] == "stuck on a dead host"
    assert "Force-cancelled" in page_text(response)


def test_members_cannot_force_cancel(cast, client_for, running):
    task = running("alice")
    response = client_for("alice").post(
        reverse("dashboard:force_cancel", args=[task.pk]), {"reason": "mine", "confirm": "on"}
    )
    assert response.status_code == 403
    assert Task.objects.get(pk=task.pk).state == TaskState.RUNNING


def test_force_cancel_mid_effect_leaves_it_in_the_reconciliation_queue(cast, client_for, running):
    task = running("alice")
    lifecycle.task_effect_intended(
        task_id=task.pk, attempt=task.attempt, step="rollout", idempotency_key="k", idempotent=False
    )
    olga = client_for("olga")
    olga.post(
        reverse("dashboard:force_cancel", args=[task.pk]), {"reason": "runaway", "confirm": "on"}
    )
    inbox = olga.get(reverse("dashboard:inbox")).context["inbox"]
    [effect] = inbox.unknown_effects
    assert effect.task_id == task.pk
    olga.post(
        reverse("dashboard:reconcile", args=[effect.pk]),
        {"decision": "applied", "external_ref": "rollout-42", "note": "saw it live"},
    )
    assert Effect.objects.get(pk=effect.pk).state == EffectState.RECONCILED_APPLIED
    assert Task.objects.get(pk=task.pk).state == TaskState.CANCELLED  # terminal stays


# ---------------------------------------------------------------- reconcile
def test_reconcile_not_applied_requeues_the_task_and_shows_in_the_timeline(
    cast, client_for, unknown_effect
):
    task = unknown_effect("alice")
    effect = Effect.objects.get(task=task)
    olga = client_for("olga")
    detail = page_text(olga.get(reverse("dashboard:task", args=[task.pk])))
    assert "Reconcile rollout" in detail
    url = reverse("dashboard:reconcile", args=[effect.pk])
    assert olga.post(url, {"decision": "not_applied", "note": ""}).status_code == 422
    response = olga.post(
        url, {"decision": "not_applied", "note": "no trace downstream"}, follow=True
    )
    assert Task.objects.get(pk=task.pk).state == TaskState.QUEUED
    assert "rollout: not applied" in page_text(response)
    [event] = events(task, "effect.reconciled")
    assert event.data["decision"] == "not_applied" and event.actor_display == "olga"
    again = olga.post(url, {"decision": "fail", "note": "again"}, follow=True)
    assert "Nothing changed" in page_text(again)
    assert len(events(task, "effect.reconciled")) == 1


def test_reconcile_applied_needs_the_external_reference(cast, client_for, unknown_effect):
    task = unknown_effect("alice")
    effect = Effect.objects.get(task=task)
    response = client_for("olga").post(
        reverse("dashboard:reconcile", args=[effect.pk]), {"decision": "applied", "note": "seen"}
    )
    assert response.status_code == 422
    assert Effect.objects.get(pk=effect.pk).state == EffectState.UNKNOWN


def test_members_and_auditors_cannot_reconcile(cast, client_for, unknown_effect):
    task = unknown_effect("alice")
    effect = Effect.objects.get(task=task)
    url = reverse("dashboard:reconcile", args=[effect.pk])
    for name, status in (("alice", 403), ("carl", 403), ("adam", 404), ("bob", 404)):
        response = client_for(name).post(url, {"decision": "fail", "note": "x"})
        assert response.status_code == status, name
    assert Effect.objects.get(pk=effect.pk).state == EffectState.UNKNOWN


# ---------------------------------------------------------------- delegations
def test_named_approver_gets_the_approval_and_answers_it(cast, client_for, awaiting, users):
    task = awaiting("alice")
    olga = client_for("olga")
    response = olga.post(
        reverse("dashboard:grant", args=[task.pk]),
        {"grantee": str(users["adam"].pk), "delegation": "answer"},
        follow=True,
    )
    assert "adam as approver" in page_text(response)  # the timeline
    [granted] = events(task, "delegation.granted")
    assert granted.data["grantee"] == "adam"
    adam = client_for("adam")
    inbox = adam.get(reverse("dashboard:inbox")).context["inbox"]
    assert [r.task_id for r in inbox.inputs] == [task.pk]
    adam.post(
        reverse("dashboard:answer", args=[task.pk, "approval"]),
        {"content-approve": "on", "decision-action": "accept"},
    )
    request = InputRequest.objects.get(task=task)
    assert request.answered_by == users["adam"] and request.state == "answered"
    olga.post(
        reverse("dashboard:revoke", args=[task.pk]),
        {"grantee": str(users["adam"].pk), "delegation": "answer"},
    )
    assert events(task, "delegation.revoked")
    assert adam.get(reverse("dashboard:task", args=[task.pk])).status_code == 404


def test_delegations_go_only_to_members_of_the_tasks_tenant(cast, client_for, awaiting, users):
    task = awaiting("alice")
    response = client_for("olga").post(
        reverse("dashboard:grant", args=[task.pk]),
        {"grantee": str(users["bob"].pk), "delegation": "answer"},
    )
    assert response.status_code == 302
    assert not events(task, "delegation.granted")


# ---------------------------------------------------------------- tenancy and auditors
def test_other_tenants_urls_answer_404(cast, client_for, awaiting, unknown_effect):
    globex_task = awaiting("bob")
    globex_effect = Effect.objects.get(task=unknown_effect("bob"))
    alice = client_for("alice")
    for url in (
        reverse("dashboard:task", args=[globex_task.pk]),
        reverse("dashboard:task", args=[globex_task.pk]) + "?fragment=live",
        reverse("dashboard:answer", args=[globex_task.pk, "approval"]),
        reverse("dashboard:reconcile", args=[globex_effect.pk]),
        reverse("dashboard:task", args=["no-such-task"]),
    ):
        assert alice.get(url).status_code == 404, url
    for name in ("cancel", "force_cancel", "grant", "revoke"):
        response = alice.post(
            reverse(f"dashboard:{name}", args=[globex_task.pk]), {"reason": "x", "confirm": "on"}
        )
        assert response.status_code == 404, name
    assert alice.get(reverse("dashboard:task_row", args=[globex_task.pk])).status_code == 204
    assert Task.objects.get(pk=globex_task.pk).state == TaskState.AWAITING_OPERATOR


def test_members_see_only_their_own_tasks(cast, client_for, make_task):
    own = make_task("alice")
    make_task("adam")
    make_task("bob")
    rows = client_for("alice").get(reverse("dashboard:tasks"), {"tenant": ""}).context["page"]
    assert [task.pk for task in rows.rows] == [own.pk]


def test_auditor_sees_tasks_and_no_action_buttons(cast, client_for, awaiting, unknown_effect):
    approval = awaiting("alice")
    reconcile = unknown_effect("bob")
    carl = client_for("carl")
    for task in (approval, reconcile):
        html = page_text(carl.get(reverse("dashboard:task", args=[task.pk])))
        for button in ACTION_BUTTONS:
            assert button not in html, (task.tool_name, button)
    assert carl.get(reverse("dashboard:inbox")).context["inbox"].total == 0


# ---------------------------------------------------------------- tasks list
def test_task_list_filters_and_searches(cast, client_for, make_task, running):
    echo = make_task("alice", tool_name="echo_task")
    other = make_task("alice", tool_name="ask_twice")
    job = running("alice")
    lifecycle.task_record_job(task_id=job.pk, attempt=job.attempt, backend_job_id="job-7781")
    olga = client_for("olga")

    def ids(**params) -> list[str]:
        return [t.pk for t in olga.get(reverse("dashboard:tasks"), params).context["page"].rows]

    assert set(ids()) == {echo.pk, other.pk, job.pk}
    assert ids(tool="ask_twice") == [other.pk]
    assert ids(state="running") == [job.pk]
    assert set(ids(principal="alice")) == {echo.pk, other.pk, job.pk}
    assert ids(principal="adam") == []
    assert ids(q=echo.pk) == [echo.pk]
    # What the pages show of an id (after the day prefix its day's tasks share) finds it.
    assert ids(q=distinctive(echo.pk)[:8]) == [echo.pk]
    assert ids(q=echo.pk[:12]) == [echo.pk]
    assert ids(q="job-7781") == [job.pk]
    assert ids(tenant="globex") == []
    today = echo.created_at.date().isoformat()
    assert len(ids(created_from=today, created_to=today)) == 3
    assert ids(created_to="2000-01-01") == []


def test_a_search_over_several_tenants_reads_the_id_candidates_once(cast, make_task, users):
    """olga's list merges a query per tenant and counts the matches: all of them name the
    candidate ids of the id search, read once (the index of the id after its day prefix)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from mcptasks import queries

    make_task("alice")
    globex = make_task("bob")
    term = distinctive(globex.pk)[:8]
    with CaptureQueriesContext(connection) as captured:
        page = queries.task_page(users["olga"], queries.TaskFilters(search=term), with_total=True)
    assert [t.pk for t in page.rows] == [globex.pk] and page.total == 1
    assert len([q for q in captured if "SUBSTR" in q["sql"].upper()]) == 1


def test_task_list_pages_with_cursors(cast, client_for, make_task, users):
    from mcptasks import queries

    made = [make_task("alice").pk for _ in range(7)]
    newest_first = list(reversed(made))
    filters = queries.TaskFilters()
    first = queries.task_page(users["olga"], filters, limit=3)
    assert [t.pk for t in first.rows] == newest_first[:3] and first.newer is None
    second = queries.task_page(users["olga"], filters, older_than=first.older, limit=3)
    assert [t.pk for t in second.rows] == newest_first[3:6]
    third = queries.task_page(users["olga"], filters, older_than=second.older, limit=3)
    assert [t.pk for t in third.rows] == newest_first[6:] and third.older is None
    back = queries.task_page(users["olga"], filters, newer_than=third.newer, limit=3)
    assert [t.pk for t in back.rows] == newest_first[3:6]
    page = client_for("olga").get(reverse("dashboard:tasks"), {"older": "garbage"})
    assert page.status_code == 200 and len(page.context["page"].rows) == 7


def test_all_tenants_list_merges_each_tenants_newest_in_order(cast, make_task, users):
    from audit.record import Actor
    from mcptasks import queries
    from mcptasks.models import Membership, Role, Tenant

    initech = Tenant.objects.create(slug="initech", name="Initech")
    Membership.objects.create(user=users["carl"], tenant=initech, role=Role.MEMBER)
    made = []
    for number in range(7):
        made.append(make_task("alice" if number % 2 else "bob").pk)
        if number == 3:  # carl's own task, in a tenant where he is only a member
            own, _ = lifecycle.task_create(
                spec=lifecycle.NewTask(
                    tenant_id=initech.pk,
                    principal_id=users["carl"].pk,
                    tool_name="echo_task",
                    arguments={},
                    policy_revision="test",
                ),
                actor=Actor.for_user(users["carl"]),
            )
            made.append(own.pk)
    newest_first = list(reversed(made))
    # olga (staff, operator of acme and globex) holds no role in initech: not carl's own task.
    olga_sees = [pk for pk in newest_first if pk != own.pk]
    for viewer, expected in (("olga", olga_sees), ("carl", newest_first)):
        seen, cursor = [], None
        while True:
            page = queries.task_page(
                users[viewer], queries.TaskFilters(), older_than=cursor, limit=3
            )
            seen += [task.pk for task in page.rows]
            if page.older is None:
                break
            cursor = page.older
        assert seen == expected, viewer
    back = queries.task_page(
        users["carl"],
        queries.TaskFilters(),
        newer_than=encode(Task.objects.get(pk=newest_first[5])),
        limit=3,
    )
    assert [task.pk for task in back.rows] == newest_first[2:5]


def encode(task: Task) -> str:
    from mcptasks.queries import encode_cursor

    return encode_cursor(task.created_at, task.pk)


def test_htmx_requests_get_the_results_alone(cast, client_for, make_task):
    make_task("alice")
    response = client_for("olga").get(
        reverse("dashboard:tasks"), headers={"HX-Request": "true", "HX-Target": "task-results"}
    )
    html = page_text(response)
    assert html.lstrip().startswith('<div id="task-results"') and "<header" not in html


def test_live_row_respects_the_lists_filters(cast, client_for, make_task):
    task = make_task("alice", tool_name="echo_task")
    olga = client_for("olga")
    url = reverse("dashboard:task_row", args=[task.pk])
    assert olga.get(url).status_code == 200
    assert olga.get(url, {"filtered": "1", "tool": "ask_twice"}).status_code == 204
    assert olga.get(url, {"filtered": "1", "tool": "echo_task"}).status_code == 200


def test_detail_shows_redacted_arguments_binding_and_result(cast, client_for, make_task):
    task = make_task("alice", arguments={"service": "web", "db_password": "hunter2-very-secret"})
    html = page_text(client_for("alice").get(reverse("dashboard:task", args=[task.pk])))
    assert "hunter2-very-secret" not in html and "[REDACTED]" in html
    assert task.argument_digest in html and task.server_build in html
    assert "Created" in html and "tool echo_task" in html


# ---------------------------------------------------------------- audit
def test_audit_pages_for_auditors_operators_and_tenant_admins_only(cast, client_for, make_task):
    make_task("alice")
    make_task("bob")
    for name, status in (("alice", 403), ("bob", 403), ("amy", 200), ("carl", 200), ("olga", 200)):
        assert client_for(name).get(reverse("dashboard:audit")).status_code == status, name
    amy = client_for("amy").get(reverse("dashboard:audit"), {"tenant": "*"})
    assert {e.chain for e in amy.context["page"].rows} == {"tenant:acme"}
    carl = client_for("carl").get(reverse("dashboard:audit"), {"tenant": "*"})
    assert {e.chain for e in carl.context["page"].rows} >= {"tenant:acme", "tenant:globex"}


def test_audit_event_of_another_tenant_answers_404(cast, client_for, make_task):
    globex = make_task("bob")
    event = AuditEvent.objects.filter(task_id=globex.pk).first()
    address = [event.chain, event.seq]
    assert client_for("amy").get(reverse("dashboard:audit_event", args=address)).status_code == 404
    page = client_for("carl").get(reverse("dashboard:audit_event", args=address))
    assert page.status_code == 200 and event.hash in page_text(page)


def test_audit_list_filters_by_action_task_and_actor(cast, client_for, make_task, running):
    task = running("alice")
    make_task("adam")
    carl = client_for("carl")

    def actions(**params) -> list[str]:
        response = carl.get(reverse("dashboard:audit"), {"tenant": "acme", **params})
        return [event.action for event in response.context["page"].rows]

    assert actions(task=task.pk) == ["task.started", "task.created"]
    assert set(actions(action="task.created")) == {"task.created"}
    assert len(actions(action="task.created")) == 2
    assert actions(actor="adam") == ["task.created"]
    assert actions(since="2999-01-01T00:00") == []


def test_audit_export_downloads_events_with_a_signed_manifest_that_verifies(
    cast, client_for, make_task
):
    make_task("alice")
    make_task("bob")
    carl = client_for("carl")
    response = carl.post(reverse("dashboard:audit_export"), {"tenant": "acme", "format": "jsonl"})
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    with pytest.warns(Warning, match="asynchronous iterators"):  # served async under ASGI
        body = b"".join(response)
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        names = sorted(archive.namelist())
        data_name, manifest_name = names[0], names[1]
        manifest = json.loads(archive.read(manifest_name))
        rows = archive.read(data_name).decode().splitlines()
        check = verify_export(io.BytesIO(archive.read(data_name)), manifest)
    assert manifest_name == data_name + ".manifest.json"
    assert check.ok, check.problems
    assert manifest["filters"]["chain"] == "tenant:acme" and manifest["count"] == len(rows)
    assert all(json.loads(row)["chain"] == "tenant:acme" for row in rows)
    assert AuditEvent.objects.filter(action="audit.exported", actor_display="carl").exists()
    verified = carl.post(
        reverse("dashboard:audit_verify"), {"archive": _upload(body, "export.zip")}
    )
    assert 'data-export-verdict="ok"' in page_text(verified)
    refused = carl.post(
        reverse("dashboard:audit_verify"), {"archive": _upload(_edited(body, data_name), "bad.zip")}
    )
    assert 'data-export-verdict="bad"' in page_text(refused)


def _edited(archive_bytes: bytes, data_name: str) -> bytes:
    """The archive with one byte of its events changed."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(archive_bytes)) as source, zipfile.ZipFile(out, "w") as target:
        for name in source.namelist():
            content = source.read(name)
            if name == data_name:
                content = content.replace(b"task.created", b"task.crEated", 1)
            target.writestr(name, content)
    return out.getvalue()


def _upload(content: bytes, name: str):
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile(name, content, content_type="application/zip")


def test_tenant_admin_cannot_export_another_tenant(cast, client_for, make_task):
    make_task("bob")
    amy = client_for("amy")
    response = amy.post(reverse("dashboard:audit_export"), {"tenant": "globex", "format": "csv"})
    assert response.status_code == 422  # globex is not one of amy's choices
    assert not AuditEvent.objects.filter(action="audit.exported").exists()


def test_verify_view_reports_each_readable_chain(cast, client_for, make_task):
    make_task("alice")
    make_task("bob")
    amy = client_for("amy")
    page = amy.post(reverse("dashboard:audit_verify"))
    rows = page.context["rows"]
    assert [row["chain"] for row in rows] == ["tenant:acme"]
    assert rows[0]["report"].ok
    assert "intact" in page_text(page)
    assert (
        amy.post(reverse("dashboard:audit_verify"), {"chain": "tenant:globex"}).status_code == 404
    )


# ---------------------------------------------------------------- API tokens
def test_tenant_admin_issues_a_token_shown_once_and_it_is_audited(cast, client_for, users):
    amy = client_for("amy")
    response = amy.post(
        reverse("dashboard:tokens"),
        {
            "name": "ci bot",
            "owner": str(users["alice"].pk),
            "scopes": ["mcp", "api"],
            "expires_in_days": "30",
        },
    )
    assert response.status_code == 200 and response["Cache-Control"] == "no-store"
    secret = response.context["issued"]["plaintext"]
    assert secret.startswith("mcpt_") and secret in page_text(response)
    token = ApiToken.objects.get(name="ci bot")
    assert token.user == users["alice"] and token.scopes == ["mcp", "api"]
    assert secret not in page_text(amy.get(reverse("dashboard:tokens")))
    assert AuditEvent.objects.filter(action="token.issued", actor_display="amy").exists()
    assert "ci bot" in page_text(client_for("alice").get(reverse("dashboard:tokens")))


def test_members_do_not_issue_tokens_and_revoke_only_their_own(cast, client_for, users):
    alice = client_for("alice")
    response = alice.post(
        reverse("dashboard:tokens"),
        {
            "name": "mine",
            "owner": str(users["alice"].pk),
            "scopes": ["mcp"],
            "expires_in_days": "30",
        },
    )
    assert response.status_code == 403
    adams = ApiToken.objects.get(user=users["adam"])
    assert alice.post(reverse("dashboard:token_revoke", args=[adams.pk])).status_code == 404
    own = ApiToken.objects.get(user=users["alice"])
    alice.post(reverse("dashboard:token_revoke", args=[own.pk]), {"reason": "rotated"})
    assert ApiToken.objects.get(pk=own.pk).revoked_at is not None
    assert AuditEvent.objects.filter(action="token.revoked", actor_display="alice").exists()
    bobs = ApiToken.objects.get(user=users["bob"])
    assert (
        client_for("amy").post(reverse("dashboard:token_revoke", args=[bobs.pk])).status_code == 404
    )


def test_the_reconcile_form_says_when_not_applied_becomes_possible_and_refuses_it_before(
    cast, client_for, running, users
):
    """Force-cancelled mid-effect: its attempt may still be in the downstream call until its
    lease has run out for MCPTASKS_RECONCILE_MARGIN_S (issue 20, point 2)."""
    from audit.record import Actor

    task = running("alice")
    lifecycle.task_effect_intended(
        task_id=task.pk,
        attempt=task.attempt,
        step="rollout",
        idempotency_key=f"{task.pk}:rollout",
        idempotent=False,
    )
    lifecycle.task_force_cancel(
        task_id=task.pk, actor=Actor.for_user(users["olga"], kind="operator"), reason="stop"
    )
    effect = Effect.objects.get(task=task)
    olga = client_for("olga")
    url = reverse("dashboard:reconcile", args=[effect.pk])
    form = page_text(olga.get(url))
    assert "<em>Not applied</em> can be recorded from" in form
    assert f"{effect.not_applied_from:%Y-%m-%d %H:%M:%S} UTC" in form

    refused = olga.post(url, {"decision": "not_applied", "note": "nothing downstream"})
    assert refused.status_code == 409
    assert "MCPTASKS_RECONCILE_MARGIN_S" in page_text(refused)
    assert Effect.objects.get(pk=effect.pk).state == EffectState.UNKNOWN
    olga.post(url, {"decision": "applied", "note": "seen", "external_ref": "r-1"})
    assert Effect.objects.get(pk=effect.pk).state == EffectState.RECONCILED_APPLIED
