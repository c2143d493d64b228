"""audit.actions is the one table of audit actions: what the code records is in it, and the
dashboard's filter and labels and the syslog destination's CEF signatures are read from it."""

from __future__ import annotations

from audit import ocsf
from audit.actions import ACTIONS, LABELS, LISTED
from dashboard.templatetags.dashboard_tags import ACTION_LABELS, action_label
from mcptasks import queries
from mcptasks.sinks import syslog
from tests.audit.test_coverage import recorded_actions, table_actions


def test_every_action_the_code_records_is_in_the_actions_table() -> None:
    recorded = set().union(*recorded_actions().values())
    assert {"task.created", "delegation.revoked", "token.issued", "audit.purged"} <= recorded
    assert recorded - set(ACTIONS) == set(), "recorded but not in audit/actions.py"


def test_the_actions_table_lists_only_actions_the_code_records_or_documents() -> None:
    known = set().union(*recorded_actions().values()) | set(table_actions())
    assert set(ACTIONS) - known == set()


def test_the_dashboards_filter_and_labels_are_the_tables() -> None:
    assert queries.AUDIT_ACTIONS == LISTED
    assert queries.AUDIT_ACTIONS[:2] == ("task.created", "task.started")
    assert "delegation.revoked" in queries.AUDIT_ACTIONS
    assert ACTION_LABELS == LABELS
    assert action_label("task.requeued") == "Requeued (lease expired)"
    assert action_label("auth.login") == "auth.login"  # no label: the action itself


def test_every_actions_cef_signature_is_the_tables() -> None:
    for row in ACTIONS.values():
        event = syslog.cef_event(row.action)
        assert (event.signature_id, event.name, event.severity) == (
            str(row.cef_id),
            row.cef_name,
            row.severity,
        ), row.action
    numbers = [int(event.signature_id) for event in syslog.CEF_EVENTS.values()]
    assert numbers == sorted(numbers)  # the order docs/destinations.md lists them in


def test_every_action_in_the_table_has_an_ocsf_mapping() -> None:
    assert set(ACTIONS) - set(ocsf.MAPPING) == set()
