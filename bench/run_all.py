"""`make bench`: every benchmark, one printed table; JSON results in bench/results/.

B1 tasks/get and B2 tools/call (bench/hot_paths.py), B3 live streams (bench/streams.py), B4 scale
(tasks/get with 1,000 vs 100,000 tasks; dashboard page timings, bench/page_timing.py; the
operations page and /metrics, bench/operations_timing.py), B5 audit
export (bench/audit_export.py), B6 end to end (bench/hot_paths.py). Figures are ratios to floors
measured in the same run. The peer section (bench/peers.py) runs the same three workloads against
FastMCP + fastmcp-tasks; ``--only peers`` (``make bench BENCH=peers``) runs only that section.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
sys.path.insert(0, str(REPO))
from bench.common import private_redis  # noqa: E402


def run(argv: list[str]) -> bool:
    print(f"\n$ {' '.join(argv)}", flush=True)
    return subprocess.run([sys.executable, *argv], cwd=REPO).returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", choices=["peers"], help="run only this section")
    args = parser.parse_args()
    if os.environ.get("BENCH_REDIS"):
        run_all(args)
        return
    # A Redis of this run's own (the benchmarks flush their databases): another run, or the
    # tests, may use the machine's Redis meanwhile.
    with private_redis():
        run_all(args)


def run_all(args: argparse.Namespace) -> None:
    started = time.monotonic()
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.only == "peers":
        ok = run(["bench/peers.py"])
        if ok:
            print_peers()
        sys.exit(0 if ok else 1)
    ok = {
        "hot": run(["bench/hot_paths.py"]),
        "streams": run(["bench/streams.py"]),
    }
    ok["audit_export"] = run(["bench/audit_export.py"])
    # B4 pages: the same pages on 1,000 tasks / 10,000 events and on 100,000 / 1,000,000.
    ok["pages_small"] = run(
        [
            "bench/page_timing.py",
            "--tasks",
            "1000",
            "--events",
            "10000",
            "--out",
            "page_timing_1000.json",
        ]
    )
    ok["pages_large"] = run(["bench/page_timing.py"])
    # B4 operations page: the same work shown with 1,000 and with 100,000 tasks in the table.
    ok["operations"] = run(["bench/operations_timing.py"])
    print("\n== mcptasks benchmarks")
    print(
        f"python {platform.python_version()}, uvicorn {metadata.version('uvicorn')}, "
        f"daphne {metadata.version('daphne')}, django {metadata.version('django')}, "
        f"celery {metadata.version('celery')}"
    )
    hot_file = RESULTS / "hot_paths.json"
    if ok["hot"] and hot_file.exists():
        hot = json.loads(hot_file.read_text())
        b1 = hot["B1"]["tasks_1000"]
        print(
            f"B1 tasks/get          {b1['ours']['rps']:8.0f} req/s vs floor "
            f"{b1['floor']['rps']:8.0f} → {b1['ratio']:.0%} (target ≥ 50%); at 50% load "
            f"p50 {b1['open_loop_50pct']['p50_ms']:.1f} ms, "
            f"p99 {b1['open_loop_50pct']['p99_ms']:.1f} ms (target < 25 ms); "
            f"answered by {b1.get('answered_by')}"
        )
        if "B2" in hot:
            b2 = hot["B2"]
            print(
                f"B2 tools/call→task    {b2['ours']['rps']:8.0f} req/s vs floor "
                f"{b2['floor']['rps']:8.0f} → {b2['ratio']:.0%} (target ≥ 25%); "
                f"{b2['tasks_created']} tasks committed for {b2['ours']['ok_200']} answers"
            )
        b4 = hot["B4_tasks_get"]
        print(
            f"B4 tasks/get at scale {b4['slowdown']:.2f}× slower at 100,000 tasks than 1,000 "
            f"(target ≤ 1.2×)"
        )
        if "B6" in hot:
            b6 = hot["B6"]
            print(
                f"B6 end to end         {b6['tasks_per_s']:8.1f} tasks/s vs raw drain "
                f"{b6['raw_drain_per_s']:8.1f}/s → {b6['ratio']:.0%} (target ≥ 50%)"
            )
    streams_file = RESULTS / "streams.json"
    if ok["streams"] and streams_file.exists():
        for kind, data in json.loads(streams_file.read_text())["servers"].items():
            for row in data["rows"]:
                print(
                    f"B3 {kind:8} {row['streams']:5} streams: p50 {row['p50_ms']:7.1f} ms, "
                    f"p99 {row['p99_ms']:7.1f} ms, {row['rss_per_stream_kib']:.1f} KiB/stream, "
                    f"{row['threads']} threads"
                )
            if data.get("leak"):
                print(
                    f"B3 {kind:8} leak check: "
                    f"{'pass' if data['leak']['within_10_percent'] else 'FAIL'}"
                )
    export_file = RESULTS / "audit_export.json"
    if ok["audit_export"] and export_file.exists():
        for fmt, row in json.loads(export_file.read_text()).items():
            print(
                f"B5 audit export {fmt:5} {row['events_per_s']:8.0f} events/s (target ≥ 50,000), "
                f"peak RSS {row['peak_rss_mb']:.0f} MB (target < 150 MB) for "
                f"{row['events']:,} events"
            )
    small_file, large_file = RESULTS / "page_timing_1000.json", RESULTS / "page_timing.json"
    if ok["pages_small"] and ok["pages_large"]:
        small = {p["page"]: p for p in json.loads(small_file.read_text())["pages"]}
        for page in json.loads(large_file.read_text())["pages"]:
            base = small.get(page["page"])
            if base is None:
                continue
            print(
                f"B4 page {page['page']:38} {page['median_ms']:6.1f} ms at 100,000 tasks vs "
                f"{base['median_ms']:6.1f} ms at 1,000 → {page['median_ms'] / base['median_ms']:.2f}× "
                "(target ≤ 1.2×)"
            )
    operations_file = RESULTS / "operations_timing.json"
    if operations_file.exists():
        ops = json.loads(operations_file.read_text())
        for page, ratio in ops["ratio"].items():
            print(
                f"B4 /{page:12} {ops['large'][page]['median_ms']:6.1f} ms at "
                f"{ops['large']['tasks']:,} tasks vs {ops['small'][page]['median_ms']:6.1f} ms at "
                f"{ops['small']['tasks']:,} → {ratio:.2f}× (target ≤ 1.2×)"
            )
    ok["peers"] = run(["bench/peers.py"])
    if ok["peers"]:
        print_peers()
    print(
        f"total {time.monotonic() - started:.0f} s; failed: "
        f"{[name for name, passed in ok.items() if not passed] or 'none'}"
    )
    sys.exit(0 if all(ok.values()) else 1)


def print_peers() -> None:
    """The peer section's ratios (bench/peers.py prints its whole table)."""
    peers_file = RESULTS / "peers.json"
    if not peers_file.exists():
        return
    report = json.loads(peers_file.read_text())
    for name, ratio in report["ratio"].items():
        print(
            f"peers {name:16} vs FastMCP: tasks/get {ratio['get']:.2f}× (target ≥ "
            f"{report['targets']['get']}×), creation {ratio['create']:.2f}× (≥ "
            f"{report['targets']['create']}×), end to end {ratio['e2e']:.2f}× (≥ "
            f"{report['targets']['e2e']}×)"
        )


if __name__ == "__main__":
    main()
