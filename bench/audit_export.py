"""Benchmark: seed 1,000,000 audit events on PostgreSQL, export them, report events/s and RSS.

    .venv/bin/python bench/audit_export.py [--events 1000000] [--chains 10] [--keep] [--verify]

Creates a throwaway database on ``BENCH_PG_SERVER`` (default postgres://postgres@127.0.0.1:5432)
and drops it afterwards. Seeding precomputes each chain's hashes (one process per core, one
chain per task) and inserts them in batches, so the chains verify. Each export runs in a fresh child
process so its peak RSS (``ru_maxrss``) is the export's alone. The rows go in by COPY; Django's
``bulk_create`` (``--seed-with bulk_create``) inserts the same rows at about a tenth the speed. Targets: ≥ 50,000 events/s and
< 150 MB peak RSS.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pg import dedicated_database, migrate, setup_django

ACTIONS = (
    "task.created",
    "task.started",
    "task.input_requested",
    "task.input_answered",
    "task.completed",
    "task.failed",
    "effect.reconciled",
    "task.cancel_requested",
)
BATCH = 5000
TARGET_RATE = 50_000
TARGET_RSS_MB = 150


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------- seeding (worker processes)
def _init_worker(database_url: str) -> None:
    setup_django(database_url)


def _copy(rows: list[dict[str, Any]]) -> None:
    from django.db import connection

    columns = list(rows[0])
    with (
        connection.cursor() as cursor,
        cursor.cursor.copy(f"COPY audit_auditevent ({', '.join(columns)}) FROM STDIN") as copy,
    ):
        for row in rows:
            copy.write_row(
                [json.dumps(row["data"]) if name == "data" else row[name] for name in columns]
            )


def _bulk_create(rows: list[dict[str, Any]]) -> None:
    from audit.models import AuditEvent

    AuditEvent.objects.bulk_create([AuditEvent(**row) for row in rows])


def _seed_chain(
    chain: str, tenant_id: int, count: int, start: datetime, span_s: float, method: str
) -> tuple[str, int, str]:
    """Insert ``count`` linked events into ``chain``; return (chain, last seq, last hash).

    The hashes are the writer's (SHA-256 over prev_hash and RFC 8785 JSON). For these events —
    ASCII strings without escapes, integers, no floats — RFC 8785 is exactly sorted, compact
    ``json.dumps``, which is ten times faster than the rfc8785 package; the first events of
    each chain are checked against the package to keep that true.
    """
    import hashlib

    import rfc8785

    from audit.chain import GENESIS_HASH, event_body

    insert = _copy if method == "copy" else _bulk_create

    def link_hash(prev_hash: str, body: dict[str, Any]) -> str:
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
        if body["seq"] <= 100:
            assert canonical == rfc8785.dumps(body), "bench events must stay RFC 8785-simple"
        return hashlib.sha256(prev_hash.encode() + canonical).hexdigest()

    prev_hash = GENESIS_HASH
    step = span_s / count
    rows = []
    for seq in range(1, count + 1):
        created_at = start + timedelta(seconds=seq * step)
        task_id = f"tsk_{tenant_id:02d}{seq // 7:010d}"
        data = {
            "state": "running",
            "attempt": 1 + seq % 3,
            "tool": "deploy_service",
            "arguments": {
                "service": f"svc-{seq % 97}",
                "region": "eu-west-1",
                "replicas": seq % 5,
                "api_key": "[REDACTED]",
            },
            "note": "rolled out to canary then to the fleet",
        }
        fields = {
            "chain": chain,
            "seq": seq,
            "created_at": created_at.isoformat(),
            "tenant_id": tenant_id,
            "actor_kind": "principal",
            "actor_id": str(seq % 50),
            "actor_display": f"user{seq % 50}",
            "action": ACTIONS[seq % len(ACTIONS)],
            "task_id": task_id,
            "data": data,
            "request_id": f"req-{seq:09d}",
        }
        digest = link_hash(prev_hash, event_body(**fields))
        fields["created_at"] = created_at
        rows.append({**fields, "prev_hash": prev_hash, "hash": digest})
        prev_hash = digest
        if len(rows) >= BATCH or seq == count:
            insert(rows)
            rows = []
    return chain, count, prev_hash


def seed(database_url: str, events: int, chains: int, method: str) -> float:
    """Seed ``events`` events over ``chains`` tenant chains; return the seconds it took."""
    from audit.models import ChainHead
    from mcptasks.models import Tenant

    tenants = [
        Tenant.objects.create(slug=f"bench{index:02d}", name=f"Bench {index}")
        for index in range(chains)
    ]
    per_chain = events // chains
    start = datetime.now(UTC) - timedelta(days=400)
    began = time.perf_counter()
    with ProcessPoolExecutor(
        max_workers=os.cpu_count() or 2,
        initializer=_init_worker,
        initargs=(database_url,),
        mp_context=multiprocessing.get_context("spawn"),
    ) as pool:
        futures = [
            pool.submit(
                _seed_chain,
                f"tenant:{tenant.slug}",
                tenant.pk,
                per_chain,
                start,
                399 * 86400.0,
                method,
            )
            for tenant in tenants
        ]
        for future in futures:
            chain, seq, digest = future.result()
            ChainHead.objects.update_or_create(chain=chain, defaults={"seq": seq, "hash": digest})
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE audit_auditevent")
    return time.perf_counter() - began


# ---------------------------------------------------------------- export (child process)
def export_child(database_url: str, fmt: str, out: str, verify: bool) -> None:
    setup_django(database_url)
    from audit.export import ExportFilters, export_to_file, verify_export
    from audit.record import Actor

    baseline = _rss_mb()
    began, cpu_began = time.perf_counter(), time.process_time()
    with open(out, "wb") as stream:
        manifest = export_to_file(ExportFilters(), fmt, stream, actor=Actor.system("bench"))
    seconds, cpu_seconds = time.perf_counter() - began, time.process_time() - cpu_began
    result: dict[str, Any] = {
        "format": fmt,
        "events": manifest["count"],
        "seconds": seconds,
        "events_per_s": manifest["count"] / seconds,
        "cpu_seconds": cpu_seconds,
        "baseline_rss_mb": baseline,
        "peak_rss_mb": _rss_mb(),
        "bytes": Path(out).stat().st_size,
    }
    if verify:
        began = time.perf_counter()
        with open(out, "rb") as stream:
            check = verify_export(stream, manifest)
        result["verify_seconds"] = time.perf_counter() - began
        result["verified"] = check.ok
        result["peak_rss_after_verify_mb"] = _rss_mb()
    Path(out).unlink()
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--chains", type=int, default=10)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument(
        "--database", metavar="URL", help="export from this already seeded database (kept) instead"
    )
    parser.add_argument(
        "--seed-with",
        choices=("copy", "bulk_create"),
        default="copy",
        help="how to insert the precomputed events (COPY: ~10x faster)",
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="also time verify_export (recomputes every hash: slow)",
    )
    parser.add_argument(
        "--export-child", nargs=3, metavar=("URL", "FORMAT", "OUT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.export_child:
        export_child(*args.export_child, verify=args.verify)
        return
    if args.database:  # an already seeded database: export only
        run_exports(args.database, args.verify)
        return
    with dedicated_database(keep=args.keep) as url:
        setup_django(url)
        migrate()
        seconds = seed(url, args.events, args.chains, args.seed_with)
        from audit.models import AuditEvent

        total = AuditEvent.objects.count()
        print(
            f"seeded {total:,} events in {args.chains} chains in {seconds:.1f} s "
            f"({total / seconds:,.0f} events/s, {args.seed_with})",
            flush=True,
        )
        from django.db import connections

        connections.close_all()
        run_exports(url, args.verify)


def run_exports(url: str, verify: bool) -> None:
    """Export everything as JSONL, then CSV, each in a fresh child process; print figures and
    write them to bench/results/audit_export.json."""
    figures = {}
    for fmt in ("jsonl", "csv"):
        out = f"/tmp/audit-bench-{os.getpid()}.{fmt}"  # noqa: S108 - a scratch file, removed
        command = [sys.executable, __file__, "--export-child", url, fmt, out]
        if verify:
            command.append("--verify")
        result = json.loads(
            subprocess.run(command, check=True, capture_output=True, text=True)
            .stdout.strip()
            .splitlines()[-1]
        )
        verdict = (
            "ok"
            if result["events_per_s"] >= TARGET_RATE and result["peak_rss_mb"] < TARGET_RSS_MB
            else "MISSED TARGET"
        )
        line = (
            f"export {fmt:5}: {result['events']:,} events in {result['seconds']:.1f} s = "
            f"{result['events_per_s']:,.0f} events/s (exporter CPU "
            f"{result['cpu_seconds']:.1f} s); peak RSS {result['peak_rss_mb']:.0f} MB "
            f"(after setup {result['baseline_rss_mb']:.0f} MB); "
            f"{result['bytes'] / 1e6:,.0f} MB written [{verdict}]"
        )
        if verify:
            line += (
                f"; verify_export {result['verify_seconds']:.1f} s "
                f"({'verified' if result['verified'] else 'FAILED'})"
            )
        print(line, flush=True)
        figures[fmt] = {**result, "met": verdict == "ok"}
    results = Path(__file__).resolve().parent / "results"
    results.mkdir(exist_ok=True)
    (results / "audit_export.json").write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
