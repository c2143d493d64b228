"""``manage.py audit_partitions [--ensure] [--months-ahead N]``: the audit events' partitions."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from audit import partitions


class Command(BaseCommand):
    help = (
        "List the partitions of the audit events (PostgreSQL) and how many events each holds; "
        "--ensure first creates the current month's and the next N months' partitions "
        "(the periodic sweep does this hourly)."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--ensure", action="store_true", help="create the missing ones")
        parser.add_argument(
            "--months-ahead",
            type=int,
            default=partitions.MONTHS_AHEAD,
            help=f"months after the current one (0-24, default {partitions.MONTHS_AHEAD})",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not partitions.partitioned():
            self.stdout.write("audit events are one table here (SQLite): no partitions")
            return
        months = options["months_ahead"]
        if options["ensure"]:
            if not 0 <= months <= 24:
                raise CommandError("--months-ahead must be 0 to 24")
            for name in partitions.ensure_partitions(months):
                self.stdout.write(f"created {name}")
        for part, events in partitions.sizes():
            lower = part.lower.isoformat() if part.lower else "-"
            upper = part.upper.isoformat() if part.upper else "-"
            kind = "DEFAULT" if part.is_default else f"{lower} .. {upper}"
            self.stdout.write(f"{part.name}\t{kind}\t{events} events")
