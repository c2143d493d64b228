"""``manage.py verify_export FILE MANIFEST``: signature, content digest, consistency with chains."""

from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from audit import signing
from audit.digests import anchors_by_chain
from audit.export import verify_export


class Command(BaseCommand):
    help = (
        "Verify an audit export against its signed manifest and the stored chains; exits 1 "
        "listing what does not match."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("file")
        parser.add_argument("manifest")
        parser.add_argument(
            "--public-key",
            action="append",
            default=[],
            help="also trust this base64 Ed25519 public key (a retired key); repeatable",
        )
        parser.add_argument(
            "--digests",
            action="store_true",
            help="also check the exported events against the signed digest files",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        trusted = signing.trusted_public_keys()
        for public_key in options["public_key"]:
            try:
                trusted[signing.key_id_of(base64.b64decode(public_key, validate=True))] = public_key
            except (binascii.Error, ValueError):
                raise CommandError(f"not a base64 public key: {public_key!r}") from None
        try:
            manifest = json.loads(Path(options["manifest"]).read_text())
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot read the manifest: {exc}") from None
        if not isinstance(manifest, dict):
            raise CommandError("the manifest is not a JSON object")
        anchors = None
        digest_problems: list[str] = []
        if options["digests"]:
            chains = sorted({*(manifest.get("chain_heads") or {}), *(manifest.get("chains") or {})})
            anchors, digest_problems = anchors_by_chain(chains)
        try:
            with Path(options["file"]).open("rb") as export:
                check = verify_export(export, manifest, trusted_keys=trusted, anchors=anchors)
            check.problems.extend(digest_problems)
        except OSError as exc:
            raise CommandError(f"cannot read the export: {exc}") from None
        for note in check.notes:
            self.stdout.write(f"note    {note}")
        for problem in check.problems:
            self.stdout.write(f"FAIL    {problem}")
        if not check.ok:
            raise CommandError(f"the export does not verify ({len(check.problems)} problem(s))")
        self.stdout.write(
            self.style.SUCCESS(
                f"export verified: {check.count} events, signed by key {check.key_id[:16]}…"
            )
        )
