"""``manage.py verify_audit [--chain C]``: prove each chain intact or name its first broken event.

Each chain's unsealed tail (events recorded but not yet sealed, audit/seal.py) is reported; it
fails the check only when its oldest event waited longer than the seal bound (the seal delay,
a sweep interval and a grace: :func:`audit.seal.seal_bound_s`)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from audit.chain import chain_for_tenant, known_chains, verify_chains
from audit.digests import digest_chains, verify_digests
from audit.seal import seal_bound_s


class Command(BaseCommand):
    help = (
        "Verify the audit hash chains (all, or one with --chain / --tenant); exits 1 naming "
        "the first broken event of each broken chain."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--chain",
            action="append",
            default=[],
            help="a chain (tenant:<slug> or system); repeatable",
        )
        parser.add_argument(
            "--tenant", action="append", default=[], help="a tenant slug (its chain); repeatable"
        )
        parser.add_argument(
            "--digests",
            action="store_true",
            help="also check each chain against its signed digest files (audit/digests.py)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        chains = [*options["chain"], *(chain_for_tenant(slug) for slug in options["tenant"])]
        unknown = sorted(set(chains) - set(known_chains()))
        if unknown:
            raise CommandError(f"no such chain: {', '.join(unknown)}")
        broken = late = 0
        checked = []
        bound = seal_bound_s()
        for report in verify_chains(chains or None):
            checked.append(report.chain)
            if report.ok:
                start = f" after checkpoint seq {report.start_seq}" if report.start_seq else ""
                self.stdout.write(
                    f"ok      {report.chain}: {report.events} events{start}, "
                    f"head seq {report.last_seq} {report.last_hash[:16]}…"
                )
            else:
                broken += 1
                self.stdout.write(f"BROKEN  {report.broken}")
            if report.unsealed and report.oldest_unsealed is not None:
                stalled = report.late(bound)
                late += stalled
                self.stdout.write(
                    f"{'LATE   ' if stalled else 'sealing'} {report.chain}: {report.unsealed} "
                    f"unsealed event(s), oldest recorded {report.oldest_unsealed.isoformat()}"
                    + (f", past the seal bound of {bound:g} s" if stalled else "")
                )
        if options["digests"]:
            if not chains:  # also chains whose events are gone but whose digests remain
                checked = sorted({*checked, *digest_chains()})
            broken += self._check_digests(checked)
        if broken or late:
            raise CommandError(
                ", ".join(
                    part
                    for part in (
                        f"{broken} chain(s) broken" if broken else "",
                        f"{late} chain(s) with events unsealed past the bound" if late else "",
                    )
                    if part
                )
            )
        self.stdout.write(
            self.style.SUCCESS(
                "audit chains intact"
                + (" and consistent with their digests" if options["digests"] else "")
            )
        )

    def _check_digests(self, chains: list[str]) -> int:
        """Print each chain's digest check; how many chains failed it."""
        failed = 0
        for chain in chains:
            report = verify_digests(chain)
            for note in report.notes:
                self.stdout.write(f"note    {note}")
            if report.ok:
                self.stdout.write(f"ok      {chain}: {report.digests} digests")
                continue
            failed += 1
            for problem in report.problems:
                self.stdout.write(f"DIGEST  {problem}")
        return failed
