"""``manage.py verify_audit [--chain C]``: prove each chain intact or name its first broken event."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from audit.chain import chain_for_tenant, known_chains, verify_chains


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

    def handle(self, *args: Any, **options: Any) -> None:
        chains = [*options["chain"], *(chain_for_tenant(slug) for slug in options["tenant"])]
        unknown = sorted(set(chains) - set(known_chains()))
        if unknown:
            raise CommandError(f"no such chain: {', '.join(unknown)}")
        broken = 0
        for report in verify_chains(chains or None):
            if report.ok:
                start = f" after checkpoint seq {report.start_seq}" if report.start_seq else ""
                self.stdout.write(
                    f"ok      {report.chain}: {report.events} events{start}, "
                    f"head seq {report.last_seq} {report.last_hash[:16]}…"
                )
            else:
                broken += 1
                self.stdout.write(f"BROKEN  {report.broken}")
        if broken:
            raise CommandError(f"{broken} chain(s) broken")
        self.stdout.write(self.style.SUCCESS("audit chains intact"))
