"""The audit stream end to end to SIEM receivers (issue 24, Tests, second point): destinations
of kind ``syslog`` (CEF over TCP, and over TLS) and ``splunk_hec`` (OCSF bodies), subscribed to
``audit`` through ``destinations.create``; audit events made by running real tasks; delivered by
the outbox's jobs to real local collectors (tests/sinks/conftest.py). At the receivers: every
event of the chain from the subscription's start, in chain order, sequences continuous and
links matching the stored rows; each CEF line parses and carries chain, sequence and hashes;
each OCSF event has its class's required fields; a receiver-side continuity check finds a
dropped frame, and the gap a dead-lettered batch leaves (filled again by its redelivery)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings

from audit import ocsf
from audit.chain import BODY_FIELDS, GENESIS_HASH, link_hash
from audit.models import AuditEvent, ChainHead
from audit.record import Actor
from mcptasks.models import Delivery, DeliveryState
from mcptasks.outbox import delivery, destinations
from mcptasks.outbox.models import Destination
from mcptasks.runner import run_task
from mcptasks.sinks import syslog as syslog_sink
from tests.sinks import conftest as sink_fixtures
from tests.sinks.test_syslog import parse_5424, parse_cef

pytestmark = pytest.mark.django_db(transaction=True)
syslog_receivers = sink_fixtures.syslog_receivers
http_receivers = sink_fixtures.http_receivers

CHAIN = "tenant:acme"
HEC_TOKEN = "0f9c2b3e-5a61-4c0e-9d7a-2b1f3c4d5e6f"
# Characters a CEF extension value must escape (\ = and line breaks), and a pipe, in what the
# trail records of a destination's creation: its name.
AWKWARD = "a=b|c\\d\nsecond line"


# ---------------------------------------------------------------- a receiver's continuity check


@dataclass(frozen=True)
class Link:
    """What a receiver knows of one streamed audit event: its position and its links."""

    sequence: int
    prev_hash: str
    hash: str


def continuity_problems(links: Iterable[Link], *, after_seq: int, after_hash: str) -> list[str]:
    """What a receiver checks of a stream that started after ``after_seq`` (hash
    ``after_hash``): each event's sequence is the last one plus one, and its ``prev_hash`` is
    the last one's hash (docs/audit.md, "Streaming to a SIEM"). Returns the problems, in
    order; empty when the stream is whole."""
    problems = []
    last_seq, last_hash = after_seq, after_hash
    for link in links:
        if link.sequence != last_seq + 1:
            missing = (
                f"{last_seq + 1}"
                if link.sequence == last_seq + 2
                else f"{last_seq + 1}–{link.sequence - 1}"
            )
            problems.append(f"gap: expected seq {last_seq + 1}, got {link.sequence} (missing {missing})")  # fmt: skip
        elif link.prev_hash != last_hash:
            problems.append(f"seq {link.sequence}: prev_hash is not seq {last_seq}'s hash")
        last_seq, last_hash = link.sequence, link.hash
    return problems


# ---------------------------------------------------------------- setting up


def create_destination(
    cast: dict[str, dict[str, Any]], name: str, kind: str, config: dict[str, Any], secret: str = ""
) -> Destination:
    amy = cast["amy"]["user"]
    return destinations.create(
        tenant=cast["amy"]["tenant"],
        actor=Actor.for_user(amy),
        created_by=amy,
        name=name,
        kind=kind,
        config=config,
        secret=secret,
        events=["audit"],
    )


def run_tasks(make_task: Callable[..., Any], run_jobs: Callable[[], int]) -> None:
    """Audit events from real tasks (created, started, completed …)."""
    for n in range(4):
        task = make_task(arguments={"text": f"n{n}"})
        run_jobs()
        run_task(task.pk)
    run_jobs()


def catch_up(run_jobs: Callable[[], int], streams: list[Destination]) -> None:
    """The outbox's jobs and sweeps until every stream has taken the chain up to its head and
    no delivery is left open (pending or delivering)."""
    for _ in range(50):
        delivery.sweep(grace_s=0)  # events no task change woke (the destinations' creation)
        run_jobs()
        head = ChainHead.objects.get(chain=CHAIN).seq
        cursors = {d.pk: Destination.objects.get(pk=d.pk).audit_cursor for d in streams}
        if (
            set(cursors.values()) == {head}
            and not Delivery.objects.filter(state__in=delivery.OPEN_STATES).exists()
        ):
            return
    raise AssertionError(f"streams did not catch up: head {head}, cursors {cursors}")


def run_tasks_and_deliver(
    make_task: Callable[..., Any], run_jobs: Callable[[], int], streams: list[Destination]
) -> None:
    run_tasks(make_task, run_jobs)
    catch_up(run_jobs, streams)
    assert not Delivery.objects.exclude(state=DeliveryState.DELIVERED).exists()


def expected_rows(stream: Destination) -> tuple[list[AuditEvent], str]:
    """The chain's events after the stream's start, in order, and the hash before the first."""
    start = stream.audit_cursor
    before = AuditEvent.objects.filter(chain=CHAIN, seq=start).first()
    rows = list(AuditEvent.objects.filter(chain=CHAIN, seq__gt=start).order_by("seq"))
    return rows, before.hash if before is not None else GENESIS_HASH


# ---------------------------------------------------------------- checking what arrived


def check_cef_frames(frames: list[bytes], rows: list[AuditEvent]) -> list[Link]:
    """Each frame an RFC 5424 message whose MSG is one CEF:0 line of the row at its place."""
    assert len(frames) == len(rows), (len(frames), [r.seq for r in rows])
    links = []
    escaped_somewhere = False
    for frame, row in zip(frames, rows, strict=True):
        message = parse_5424(frame)
        assert message["msgid"] == row.action[:32]
        known = syslog_sink.cef_event(row.action)
        facility = syslog_sink.FACILITIES["local0"]
        assert int(message["pri"]) == facility * 8 + syslog_sink.syslog_severity(known.severity)
        header, values = parse_cef(message["msg"])
        assert header == [
            "CEF:0",
            "mcptasks",
            "mcptasks",
            django_settings.MCPTASKS_VERSION,
            known.signature_id,
            known.name,
            str(known.severity),
        ]
        assert 0 <= int(header[6]) <= 10
        assert (values["cs1Label"], values["cs1"]) == ("chain", CHAIN)
        assert (values["cn1Label"], values["cn1"]) == ("seq", str(row.seq))
        assert (values["cs2Label"], values["cs2"]) == ("hash", row.hash)
        assert (values["cs3Label"], values["cs3"]) == ("prevHash", row.prev_hash)
        assert values["act"] == row.action and values["cat"] == "audit.event"
        assert values["externalId"] == f"audit:{CHAIN}:{row.seq}"
        assert values["cs5"] == "acme"
        assert int(values["rt"]) == int(row.created_at.timestamp() * 1000)
        if row.task_id:
            assert (values["cs4Label"], values["cs4"]) == ("taskId", row.task_id)
        if len(values["msg"]) < syslog_sink.CEF_MSG_MAX:
            # The escaped extension value reads back as the recorded data, byte for byte.
            assert json.loads(values["msg"]) == row.data
            if AWKWARD in str(row.data.get("name")):
                assert "a\\=b|c\\\\\\\\d\\\\nsecond" in message["msg"]  # JSON, then CEF escapes
                escaped_somewhere = True
        links.append(Link(int(values["cn1"]), values["cs3"], values["cs2"]))
    assert escaped_somewhere, "no event carried a value with = | \\ and a line break"
    return links


def check_hec_requests(requests: list[Any], rows: list[AuditEvent]) -> list[Link]:
    """Each POST authorized with the token; its HEC event objects, in order, are the OCSF
    renderings of the rows, valid against their class's required fields."""
    assert requests, "the HEC endpoint got nothing"
    events = []
    for request in requests:
        assert request.path == "/services/collector/event"
        assert request.headers["Authorization"] == f"Splunk {HEC_TOKEN}"
        events += [json.loads(line) for line in request.body.decode().split("\n")]
    assert len(events) == len(rows), (len(events), [r.seq for r in rows])
    links = []
    for hec, row in zip(events, rows, strict=True):
        assert hec["source"] == "mcptasks" and hec["sourcetype"] == "_json"
        assert hec["time"] == round(row.created_at.timestamp(), 3)
        rendered = hec["event"]
        assert ocsf.missing_required(rendered) == [], (row.action, ocsf.missing_required(rendered))
        assert rendered["class_uid"] in ocsf.CLASS_REQUIRED
        for name in (*ocsf.BASE_REQUIRED, *ocsf.CLASS_REQUIRED[rendered["class_uid"]]):
            assert rendered.get(name) not in (None, "", {}), (row.action, name)
        assert rendered["type_uid"] == rendered["class_uid"] * 100 + rendered["activity_id"]
        assert rendered["metadata"]["version"] == ocsf.OCSF_VERSION
        assert rendered["metadata"]["sequence"] == row.seq
        assert rendered["metadata"]["uid"] == f"{CHAIN}:{row.seq}"
        assert rendered["metadata"]["event_id"] == f"audit:{CHAIN}:{row.seq}"
        assert rendered["time"] == int(row.created_at.timestamp() * 1000)
        stored = rendered["unmapped"]["mcptasks_audit"]
        assert (stored["chain"], stored["seq"], stored["action"]) == (CHAIN, row.seq, row.action)
        assert (stored["prev_hash"], stored["hash"]) == (row.prev_hash, row.hash)
        # The receiver can recompute the hash from what it got.
        body = {name: stored[name] for name in BODY_FIELDS}
        assert link_hash(stored["prev_hash"], body) == stored["hash"]
        # and the OCSF part is the rendering of that stored event
        assert ocsf.to_ocsf(stored) == {
            **rendered,
            "metadata": {k: v for k, v in rendered["metadata"].items() if k != "event_id"},
        }
        links.append(Link(stored["seq"], stored["prev_hash"], stored["hash"]))
    return links


# ---------------------------------------------------------------- the tests


@pytest.fixture
def collectors(
    cast: dict[str, dict[str, Any]],
    syslog_receivers: Callable[..., Any],
    http_receivers: Callable[..., Any],
    tmp_path: Path,
    settings: Any,
) -> dict[str, Any]:
    """A plain TCP syslog collector, a TLS one (a throwaway certificate, its bundle in the CA
    directory) and a fake HEC endpoint; a destination of acme's for each, subscribed to audit."""
    settings.MCPTASKS_SINKS_CA_DIR = tmp_path
    certificate = sink_fixtures.make_certificate(tmp_path)
    tcp = syslog_receivers()
    tls = syslog_receivers(tls=certificate)
    hec = http_receivers(lambda request: (200, b'{"text":"Success","code":0}'))
    host = {"host": "127.0.0.1", "format": "cef", "facility": "local0"}
    return {
        "tcp": (
            tcp,
            create_destination(
                cast, "siem-tcp", "syslog", {**host, "port": tcp.port, "tls": False}
            ),
        ),
        "tls": (
            tls,
            create_destination(
                cast,
                "siem-tls",
                "syslog",
                {**host, "port": tls.port, "tls": True, "ca_bundle": certificate.cert.name},
            ),
        ),
        "hec": (
            hec,
            create_destination(
                cast,
                f"splunk {AWKWARD}",
                "splunk_hec",
                {"url": hec.url, "format": "ocsf"},
                HEC_TOKEN,
            ),
        ),
    }


def test_every_audit_event_reaches_syslog_and_hec_in_chain_order_with_continuous_sequences(
    collectors: dict[str, Any], make_task: Callable[..., Any], run_jobs: Callable[[], int], settings
) -> None:
    settings.MCPTASKS_OUTBOX_AUDIT_BATCH = 5  # several batches: order holds across them
    streams = [destination for _, destination in collectors.values()]
    run_tasks_and_deliver(make_task, run_jobs, streams)
    head = ChainHead.objects.get(chain=CHAIN).seq
    for name in ("tcp", "tls"):
        receiver, stream = collectors[name]
        rows, start_hash = expected_rows(stream)
        assert rows[-1].seq == head and len(rows) > 10
        assert not receiver.errors, receiver.errors
        assert receiver.connections >= 3, "batches of 5 come over several connections"
        links = check_cef_frames(receiver.messages, rows)
        assert [link.sequence for link in links] == [row.seq for row in rows]
        assert continuity_problems(links, after_seq=stream.audit_cursor, after_hash=start_hash) == []  # fmt: skip
    receiver, stream = collectors["hec"]
    rows, start_hash = expected_rows(stream)
    assert rows[-1].seq == head
    assert len(receiver.requests) >= 3
    links = check_hec_requests(receiver.requests, rows)
    assert [link.sequence for link in links] == [row.seq for row in rows]
    assert continuity_problems(links, after_seq=stream.audit_cursor, after_hash=start_hash) == []
    # Each stream starts after the head at its creation: the later destinations' creation is
    # in the earlier streams, the first event of each is the next one's creation or later.
    tcp_rows, _ = expected_rows(collectors["tcp"][1])
    assert [r.action for r in tcp_rows[:3]] == ["destination.created"] * 2 + [tcp_rows[2].action]
    assert {"task.created", "task.started", "task.completed"} <= {r.action for r in tcp_rows}


def test_a_frame_lost_between_sender_and_collector_shows_as_a_gap_in_the_sequence(
    collectors: dict[str, Any], make_task: Callable[..., Any], run_jobs: Callable[[], int]
) -> None:
    streams = [destination for _, destination in collectors.values()]
    run_tasks_and_deliver(make_task, run_jobs, streams)
    receiver, stream = collectors["tcp"]
    rows, start_hash = expected_rows(stream)
    links = check_cef_frames(receiver.messages, rows)
    lost = len(links) // 2
    survivors = links[:lost] + links[lost + 1 :]
    problems = continuity_problems(survivors, after_seq=stream.audit_cursor, after_hash=start_hash)
    missing = links[lost].sequence
    assert problems == [f"gap: expected seq {missing}, got {missing + 1} (missing {missing})"]
    # Two in a row, and the first of the stream: named as a range / from the start.
    problems = continuity_problems(
        links[:lost] + links[lost + 2 :], after_seq=stream.audit_cursor, after_hash=start_hash
    )
    assert problems == [f"gap: expected seq {missing}, got {missing + 2} (missing {missing}–{missing + 1})"]  # fmt: skip
    first = links[0].sequence
    assert continuity_problems(links[1:], after_seq=stream.audit_cursor, after_hash=start_hash) == [
        f"gap: expected seq {first}, got {first + 1} (missing {first})"
    ]
    # A frame whose links do not match (a forged or reordered event) is named too.
    hec_receiver, hec_stream = collectors["hec"]
    hec_rows, hec_start = expected_rows(hec_stream)
    hec_links = check_hec_requests(hec_receiver.requests, hec_rows)
    forged = Link(hec_links[2].sequence, "f" * 64, hec_links[2].hash)
    tampered = [*hec_links[:2], forged, *hec_links[3:]]
    assert continuity_problems(
        tampered, after_seq=hec_stream.audit_cursor, after_hash=hec_start
    ) == [f"seq {forged.sequence}: prev_hash is not seq {forged.sequence - 1}'s hash"]


def test_a_dead_lettered_batch_leaves_a_gap_the_receiver_sees_and_redelivery_fills(
    cast: dict[str, dict[str, Any]],
    http_receivers: Callable[..., Any],
    make_task: Callable[..., Any],
    run_jobs: Callable[[], int],
    settings: Any,
) -> None:
    """The product's own gap: HEC refuses one batch for good (400), the batch is dead-lettered
    and the stream goes on after it (docs/audit.md); the receiver's check names the missing
    sequences; an admin's redelivery sends them, and the stream is whole again."""
    settings.MCPTASKS_OUTBOX_AUDIT_BATCH = 3
    refused: list[int] = []
    accepted: list[bytes] = []

    def respond(request: Any) -> tuple[int, bytes]:
        sequences = [
            json.loads(line)["event"]["metadata"]["sequence"]
            for line in request.body.decode().split("\n")
        ]
        if not refused and target in sequences:
            refused.extend(sequences)
            return 400, b'{"text":"Invalid data format","code":6,"invalid-event-number":0}'
        accepted.append(request.body)
        return 200, b'{"text":"Success","code":0}'

    hec = http_receivers(respond)
    stream = create_destination(
        cast, "splunk", "splunk_hec", {"url": hec.url, "format": "ocsf"}, HEC_TOKEN
    )
    target = stream.audit_cursor + 5  # in a later batch of at most three
    run_tasks(make_task, run_jobs)
    catch_up(run_jobs, [stream])
    [dead] = Delivery.objects.filter(destination=stream, state=DeliveryState.DEAD)
    assert "Splunk HEC answered 400: Invalid data format" in dead.last_error
    # (batches are cut as events come: where this one starts depends on the wake-ups)
    assert target in refused and refused == list(range(refused[0], refused[0] + len(refused)))

    def links() -> list[Link]:
        """What the receiver accepted, as it reads it from the OCSF events."""
        stored = [
            json.loads(line)["event"]["unmapped"]["mcptasks_audit"]
            for body in accepted
            for line in body.decode().split("\n")
        ]
        return [Link(event["seq"], event["prev_hash"], event["hash"]) for event in stored]

    rows, start_hash = expected_rows(stream)
    got = links()
    assert [link.sequence for link in got] == [r.seq for r in rows if r.seq not in refused]
    first, last = refused[0], refused[-1]
    missing = f"{first}–{last}" if last > first else f"{first}"
    assert continuity_problems(got, after_seq=stream.audit_cursor, after_hash=start_hash) == [
        f"gap: expected seq {first}, got {last + 1} (missing {missing})"
    ]
    amy = cast["amy"]["user"]
    delivery.redeliver(delivery=dead, user=amy, actor=Actor.for_user(amy), reason="HEC fixed")
    catch_up(run_jobs, [stream])
    assert not Delivery.objects.exclude(state=DeliveryState.DELIVERED).exists()
    # At least once, in any order after a redelivery: the receiver orders by sequence and
    # de-duplicates on the event id; the stream is then whole, up to the redelivery's own event.
    by_seq = {link.sequence: link for link in links()}
    rows, start_hash = expected_rows(stream)
    assert sorted(by_seq) == [r.seq for r in rows]
    whole = [by_seq[seq] for seq in sorted(by_seq)]
    assert continuity_problems(whole, after_seq=stream.audit_cursor, after_hash=start_hash) == []
    assert rows[-1].action == "destination.redelivered"
