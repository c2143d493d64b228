"""Serve mcptasks with Daphne; on the embedded default also run the worker and beat threads."""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

log = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Command(BaseCommand):
    help = "Serve HTTP (Daphne); with the embedded default, also the in-process worker and beat."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--workers", type=int, default=2, help="worker threads on the embedded default"
        )
        parser.add_argument(
            "--no-worker", action="store_true", help="do not start the in-process worker and beat"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        host, port = options["host"], options["port"]
        if settings.MCPTASKS_CONFORMANCE_MODE:
            if not is_loopback(host):
                raise CommandError(
                    "MCPTASKS_CONFORMANCE_MODE serves tokenless requests and is "
                    f"refused on the non-loopback address {host!r}"
                )
            log.warning(
                "CONFORMANCE MODE: tokenless requests to /mcp act as the conformance "
                "principal. Never use this outside a test run."
            )
        if settings.MCPTASKS_EMBEDDED_WORKER and not options["no_worker"]:
            from mcptasks import embedded

            embedded.start(workers=options["workers"])
            self.stdout.write(f"In-process worker ({options['workers']} threads) and beat started.")
        from daphne.cli import CommandLineInterface

        # No --proxy-headers: Daphne would take X-Forwarded-For from any client as its
        # address; mcptasks.client_ip believes it only from MCPTASKS_TRUSTED_PROXIES.

        self.stdout.write(f"Serving on http://{host}:{port}/ (MCP endpoint /mcp)")
        CommandLineInterface().run(["-b", host, "-p", str(port), "mcptasks.asgi:application"])
