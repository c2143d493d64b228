"""The totals of one `scripts/conformance` run, read from the suite's checks.json files.

Prints the scored set of the protocol revision (its frozen requirements file) and the tasks
extension scenarios separately, and judges every scenario against the baseline with the suite's
own rule (a FAILURE or WARNING check is a failure; per check it is the worst status of that id):
a failure the baseline does not list, or a baseline entry whose check now passes (stale), fails
the run. Last line: ``conformance: N passed, M failed`` (scenarios). Exit 1 on any such failure.

Usage: conformance_report.py RESULTS_DIR BASELINE_YML REQUIREMENTS_YML [SUITE_EXIT_CODE]
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

RANK = {"FAILURE": 3, "WARNING": 2, "SUCCESS": 1, "SKIPPED": 0}
FAILING = ("FAILURE", "WARNING")
STAMP = re.compile(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$")


@dataclass
class Scenario:
    name: str
    checks: dict[str, str]  # check id → worst status (what the baseline judges)
    statuses: list[str]  # every check's status (what the suite counts)
    expected: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)

    @property
    def passed(self) -> int:
        return self.statuses.count("SUCCESS")

    @property
    def failed(self) -> int:
        return self.statuses.count("FAILURE")

    @property
    def warnings(self) -> int:
        return self.statuses.count("WARNING")

    @property
    def clean(self) -> bool:
        """Passed as the suite scores it: no FAILURE and at least one SUCCESS."""
        return self.failed == 0 and self.passed > 0

    @property
    def skipped(self) -> bool:
        """Only SKIPPED checks (a placeholder scenario of the suite)."""
        return bool(self.statuses) and set(self.statuses) == {"SKIPPED"}

    @property
    def ok(self) -> bool:
        return not self.unexpected and not self.stale


def load_results(results: Path) -> dict[str, Scenario]:
    scenarios: dict[str, Scenario] = {}
    for path in sorted(results.glob("server-*/checks.json")):
        name = STAMP.sub("", path.parent.name.removeprefix("server-"))
        worst: dict[str, str] = {}
        statuses: list[str] = []
        for check in json.loads(path.read_text()):
            status = check["status"]
            statuses.append(status)
            if status == "INFO":
                continue
            if RANK.get(status, 0) >= RANK.get(worst.get(check["id"], ""), -1):
                worst[check["id"]] = status
        scenarios[name] = Scenario(name, worst, statuses)
    return scenarios


def judge(scenarios: dict[str, Scenario], baseline: list[str]) -> None:
    whole = {entry for entry in baseline if ":" not in entry}
    per_check: dict[str, set[str]] = {}
    for entry in baseline:
        if ":" in entry:
            name, check_id = entry.split(":", 1)
            per_check.setdefault(name, set()).add(check_id)
    for scenario in scenarios.values():
        failing = [c for c, status in scenario.checks.items() if status in FAILING]
        if scenario.name in whole:
            scenario.expected = failing
            if not failing:
                scenario.stale.append(scenario.name)
            continue
        listed = per_check.get(scenario.name, set())
        for check in failing:
            (scenario.expected if check in listed else scenario.unexpected).append(check)
        scenario.stale += [
            f"{scenario.name}:{c}" for c in sorted(listed) if scenario.checks.get(c) == "SUCCESS"
        ]


def line(scenario: Scenario) -> str:
    mark = "ok  " if scenario.ok else "FAIL"
    text = f"  {mark}  {scenario.name}: {scenario.passed} passed, {scenario.failed} failed"
    if scenario.warnings:
        text += f", {scenario.warnings} warnings"
    if scenario.skipped:
        text += " (skipped by the suite: a placeholder)"
    if scenario.expected and scenario.ok:
        text += f" (baselined: {', '.join(scenario.expected)})"
    if scenario.unexpected:
        text += f" (NOT in the baseline: {', '.join(scenario.unexpected)})"
    if scenario.stale:
        text += f" (stale baseline entries, now passing: {', '.join(scenario.stale)})"
    return text


def totals(label: str, group: list[Scenario]) -> str:
    clean = sum(s.clean for s in group)
    skipped = sum(s.skipped for s in group)
    passed = sum(s.passed for s in group)
    failed = sum(s.failed for s in group)
    text = f"conformance: {label}: {clean} of {len(group)} scenarios pass"
    if skipped:
        text += f", {skipped} skipped by the suite (placeholder)"
    return text + f" ({passed} checks passed, {failed} failed)"


def main(argv: list[str]) -> int:
    results, baseline_file, requirements_file = (Path(a) for a in argv[1:4])
    suite_exit = int(argv[4]) if len(argv) > 4 else 0
    baseline_doc: dict[str, Any] = yaml.safe_load(baseline_file.read_text()) or {}
    requirements: dict[str, Any] = yaml.safe_load(requirements_file.read_text())
    scored_names: list[str] = requirements["server"]
    not_scored = {
        entry["scenario"]: entry["reason"]
        for entry in requirements.get("not_scored", [])
        if entry.get("leg") == "server"
    }
    scenarios = load_results(results)
    if not scenarios:
        print("conformance: the suite wrote no results")
        print("conformance: 0 passed, 1 failed")
        return 1
    judge(scenarios, [str(e) for e in baseline_doc.get("server") or []])

    scored = [scenarios[n] for n in scored_names if n in scenarios]
    tasks = [s for n, s in scenarios.items() if not_scored.get(n) == "extension"]
    other = [s for n, s in scenarios.items() if n not in scored_names and s not in tasks]
    for title, group in (
        (f"scored set (requirements {requirements_file.stem})", scored),
        ("tasks extension (run, not scored)", tasks),
        ("pending (run, not scored)", other),
    ):
        if group:
            print(f"{title}:")
            print("\n".join(line(s) for s in group))
    if scored:
        print(totals(f"scored set {requirements_file.stem}", scored))
        missing = [n for n in scored_names if n not in scenarios]
        if missing:
            print(f"conformance:   not run: {', '.join(missing)}")
    if tasks:
        print(totals("tasks extension", tasks))
    if other:
        print(totals("pending, not scored", other))
    bad = [s.name for s in scenarios.values() if not s.ok]
    disagrees = 1 if suite_exit and not bad else 0
    if disagrees:
        print(f"conformance: the suite itself exited {suite_exit} (see its log)")
    print(f"conformance: {len(scenarios) - len(bad)} passed, {len(bad) + disagrees} failed")
    return 1 if bad or disagrees else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
