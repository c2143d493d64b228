"""Signed, chained audit digests: anchors outside the database (DESIGN §7, CloudTrail style).

Every ``MCPTASKS_AUDIT_DIGEST_INTERVAL_S`` (an hour) :func:`write_digests` writes, for each chain
whose head moved since its last digest, a JSON file into the ``audit_digests`` Django storage::

    {"digest_version": 1, "chain": "tenant:acme", "created_at": "...",
     "head": {"seq": 42, "hash": "..."}, "checkpoint": {"seq": 0, "hash": "000…"},
     "previous_digest": {"name": "...", "sha256": "...", "head_seq": 17} | null,
     "signing": {...}, "signature": "..."}

signed with Ed25519 (:mod:`audit.signing`, key from ``MCPTASKS_AUDIT_DIGEST_SIGNING_KEY``) and
chained: each names the SHA-256 of the previous digest *file's bytes*. The database keeps an
index row per digest (:class:`~audit.models.AuditDigest`), but the files are the anchor:
:func:`verify_digests` reads them, so someone who rewrites the audit table and its hashes
consistently (and the index) is caught by the first digest whose attested head no longer
matches, and a deleted or altered digest file breaks the chain of digests.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import Storage, storages
from django.db import IntegrityError, transaction
from django.utils import timezone

from audit import signing
from audit.chain import known_chains, latest_checkpoint
from audit.models import AuditDigest, AuditEvent, ChainHead

log = logging.getLogger(__name__)
DIGEST_VERSION = 1
STORAGE_ALIAS = "audit_digests"


def storage() -> Storage:
    return storages[STORAGE_ALIAS]


def digest_key() -> signing.SigningKey:
    return signing.derive_key(settings.MCPTASKS_AUDIT_DIGEST_SIGNING_KEY)


def trusted_digest_keys() -> dict[str, str]:
    """The digest key, the export key, and the retired keys of ``..._TRUSTED_PUBLIC_KEYS``."""
    key = digest_key()
    return {**signing.trusted_public_keys(), key.key_id: key.public_key_b64}


def chain_dir(chain: str) -> str:
    """``tenant:acme`` → ``tenant/acme``; ``system`` → ``system``."""
    return chain.replace(":", "/")


def digest_name(chain: str, created_at: datetime, head_seq: int) -> str:
    """Names sort in writing order: UTC time, then the head sequence."""
    return f"{chain_dir(chain)}/{created_at:%Y%m%dT%H%M%S}Z-{head_seq:012d}.json"


def hour_of(document: dict[str, Any]) -> str:
    """The hour a digest belongs to, as reports name it (``2026-12-01T10:00Z``)."""
    try:
        moment = datetime.fromisoformat(str(document.get("created_at")))
    except ValueError:
        return "an unknown hour"
    return f"{moment:%Y-%m-%dT%H}:00Z"


def dump(document: dict[str, Any]) -> bytes:
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()


# ---------------------------------------------------------------- writing
@dataclass(frozen=True)
class Written:
    chain: str
    name: str
    head_seq: int


def write_digests(*, now: datetime | None = None) -> list[Written]:
    """Write a digest for every chain whose head moved since its last digest."""
    written = []
    for chain in known_chains():
        result = write_digest(chain, now=now)
        if result is not None:
            written.append(result)
    return written


def write_digest(chain: str, *, now: datetime | None = None) -> Written | None:
    """Write one chain's digest; None if its head has not moved since the last one.

    The index row is inserted before the file is written, in one transaction: two writers
    racing for the same chain collide on ``(chain, number)`` and the loser writes nothing."""
    now = now or timezone.now()
    head = ChainHead.objects.filter(chain=chain).values_list("seq", "hash").first()
    if head is None or head[0] == 0:
        return None
    previous = AuditDigest.objects.filter(chain=chain).order_by("-number").first()
    if previous is not None and previous.head_seq == head[0] and previous.head_hash == head[1]:
        return None
    checkpoint_seq, checkpoint_hash = latest_checkpoint(chain)
    document = signing.sign(
        {
            "digest_version": DIGEST_VERSION,
            "chain": chain,
            "created_at": now.isoformat(),
            "head": {"seq": head[0], "hash": head[1]},
            "checkpoint": {"seq": checkpoint_seq, "hash": checkpoint_hash},
            "previous_digest": None
            if previous is None
            else {"name": previous.name, "sha256": previous.sha256, "head_seq": previous.head_seq},
        },
        digest_key(),
    )
    content = dump(document)
    name = digest_name(chain, now, head[0])
    try:
        with transaction.atomic():
            AuditDigest.objects.create(
                chain=chain,
                number=(previous.number if previous else 0) + 1,
                name=name,
                sha256=hashlib.sha256(content).hexdigest(),
                head_seq=head[0],
                head_hash=head[1],
                created_at=now,
            )
            files = storage()
            if files.exists(name):
                raise IntegrityError(f"digest file {name} exists already")
            saved = files.save(name, ContentFile(content))
            if saved != name:  # a storage that renamed it: the index would point elsewhere
                raise IntegrityError(f"the digest storage saved {name} as {saved}")
    except IntegrityError as exc:
        log.warning("audit digest of %s not written: %s", chain, exc)
        return None
    log.info("audit digest written", extra={"chain": chain, "digest": name, "seq": head[0]})
    return Written(chain=chain, name=name, head_seq=head[0])


# ---------------------------------------------------------------- verification
@dataclass(frozen=True)
class Anchor:
    """What one verified digest attests: chain ``seq`` had ``hash`` by ``hour``."""

    name: str
    hour: str
    seq: int
    hash: str
    previous_seq: int


@dataclass
class DigestReport:
    chain: str
    digests: int = 0
    anchors: list[Anchor] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def digest_chains() -> list[str]:
    """Every chain the digest storage holds digests of (a chain deleted from the database
    entirely still has its digests)."""
    files = storage()
    chains = []
    try:
        top, _ = files.listdir("")
        if "system" in top:
            chains.append("system")
        if "tenant" in top:
            chains.extend(f"tenant:{slug}" for slug in files.listdir("tenant")[0])
    except FileNotFoundError:
        return []
    return sorted(chains)


def _files_of(chain: str) -> list[str]:
    directory = chain_dir(chain)
    try:
        _, names = storage().listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(f"{directory}/{name}" for name in names if name.endswith(".json"))


def read_digests(chain: str, report: DigestReport) -> None:
    """Check the chain's digest files (signatures, the chain of digests, the index) and
    collect their anchors in ``report``."""
    files = storage()
    trusted = trusted_digest_keys()
    previous: tuple[str, str, int] | None = None  # name, sha256, head seq
    seen: dict[str, str] = {}
    for name in _files_of(chain):
        with files.open(name, "rb") as handle:
            content = handle.read()
        sha256 = hashlib.sha256(content).hexdigest()
        seen[name] = sha256
        report.digests += 1
        try:
            document = json.loads(content)
            if not isinstance(document, dict):
                raise ValueError("not a JSON object")
            signing.check_signature(document, trusted)
        except (ValueError, signing.SignatureError) as exc:
            report.problems.append(f"digest {name}: does not verify ({exc})")
            previous = (name, sha256, previous[2] if previous else 0)
            continue
        hour = hour_of(document)
        if document.get("chain") != chain:
            report.problems.append(f"digest {name} ({hour}): names chain {document.get('chain')}")
        pointer = document.get("previous_digest")
        expected = None if previous is None else {"name": previous[0], "sha256": previous[1]}
        got = None if pointer is None else {k: pointer.get(k) for k in ("name", "sha256")}
        if got != expected:
            if expected is None:
                report.problems.append(
                    f"digest {name} ({hour}): the digest before it ({got and got['name']}) "
                    "is missing: the chain of digests is broken"
                )
            elif got is None or got["name"] != expected["name"]:
                report.problems.append(
                    f"digest {name} ({hour}): follows {got and got['name']}, but the digest "
                    f"before it is {expected['name']}: a digest was deleted or added"
                )
            else:
                report.problems.append(
                    f"digest {name} ({hour}): the previous digest {expected['name']} was "
                    "altered (its SHA-256 is not the one recorded)"
                )
        head = document.get("head") or {}
        report.anchors.append(
            Anchor(
                name=name,
                hour=hour,
                seq=int(head.get("seq", 0)),
                hash=str(head.get("hash", "")),
                previous_seq=previous[2] if previous else 0,
            )
        )
        previous = (name, sha256, int(head.get("seq", 0)))
    for name, sha256 in AuditDigest.objects.filter(chain=chain).values_list("name", "sha256"):
        if name not in seen:
            report.problems.append(f"digest {name}: the file is missing from the digest storage")
        elif seen[name] != sha256:
            report.problems.append(f"digest {name}: the file differs from the one written")


def verify_digests(chain: str) -> DigestReport:
    """Check a chain's stored events against its digest files: every digest verifies and
    links to the one before, and each attested head is still the stored event (unless
    retention purged it), so a rewrite after a digest names that digest's hour."""
    report = DigestReport(chain=chain)
    read_digests(chain, report)
    checkpoint_seq, checkpoint_hash = latest_checkpoint(chain)
    for anchor in report.anchors:
        if anchor.seq < checkpoint_seq:
            continue
        stored = (
            checkpoint_hash
            if anchor.seq == checkpoint_seq
            else AuditEvent.objects.filter(chain=chain, seq=anchor.seq)
            .values_list("hash", flat=True)
            .first()
        )
        if stored != anchor.hash:
            what = "is gone" if stored is None else "has a different hash"
            report.problems.append(
                f"{chain}: the digest of {anchor.hour} ({anchor.name}) attests seq {anchor.seq} "
                f"{anchor.hash[:12]}…, but the stored event {what}: events after seq "
                f"{anchor.previous_seq} up to {anchor.seq} were rewritten after {anchor.hour}"
            )
            break  # later digests fail for the same rewrite
    purged = sum(1 for anchor in report.anchors if anchor.seq < checkpoint_seq)
    if purged:
        report.notes.append(f"{chain}: {purged} digests attest events purged by retention")
    return report


def anchors_by_chain(chains: list[str]) -> tuple[dict[str, dict[int, Anchor]], list[str]]:
    """The verified anchors of ``chains`` (chain → seq → anchor) and the digest problems
    (for ``verify_export --digests``)."""
    anchors: dict[str, dict[int, Anchor]] = {}
    problems: list[str] = []
    for chain in chains:
        report = DigestReport(chain=chain)
        read_digests(chain, report)
        anchors[chain] = {anchor.seq: anchor for anchor in report.anchors}
        problems.extend(report.problems)
    return anchors, problems
