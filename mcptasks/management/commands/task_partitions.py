"""``manage.py task_partitions [--ensure] [--days-ahead N] [--purge]``: the task table's
partitions."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from mcptasks import lifecycle, task_partitions


class Command(BaseCommand):
    help = (
        "List the partitions of the task table (PostgreSQL) and how many tasks each holds; "
        "--ensure first creates today's and the next N days' partitions (the periodic sweep "
        "does this hourly); --purge drops every ended day whose tasks are all due (the sweep "
        "does this too)."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--ensure", action="store_true", help="create the missing ones")
        parser.add_argument(
            "--days-ahead",
            type=int,
            default=task_partitions.DAYS_AHEAD,
            help=f"days after today (0-60, default {task_partitions.DAYS_AHEAD})",
        )
        parser.add_argument(
            "--purge", action="store_true", help="drop the ended days whose tasks are all due"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not task_partitions.partitioned():
            self.stdout.write("tasks are one table here (SQLite): no partitions")
            return
        days = options["days_ahead"]
        if options["ensure"]:
            if not 0 <= days <= 60:
                raise CommandError("--days-ahead must be 0 to 60")
            for name in task_partitions.ensure_partitions(days):
                self.stdout.write(f"created {name}")
        if options["purge"]:
            if not task_partitions.purging():
                raise CommandError(
                    "MCPTASKS_TASK_PARTITION_PURGE is off: tasks are purged row by row"
                )
            for name, tasks in lifecycle.task_purge_days():
                self.stdout.write(f"dropped {name} ({tasks} tasks purged)")
        for part, tasks in task_partitions.sizes():
            kind = "DEFAULT" if part.is_default else f"{part.lower or '-'} .. {part.upper}"
            self.stdout.write(f"{part.name}\t{kind}\t{tasks} tasks")
