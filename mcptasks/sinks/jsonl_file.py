"""A JSON Lines file under the sinks directory: the embedded default's SIEM
(docs/destinations.md, "JSONL file").

Each message is one line (the envelope, or for audit events optionally its OCSF rendering); a
batch is appended with one write under an exclusive lock and fsynced before ``send`` returns, so
a delivery marked done is on disk. The path is relative to ``MCPTASKS_SINKS_DIR``; ``..``,
absolute paths and a symlink leading out of that directory are refused.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from django.conf import settings

from mcptasks.sinks import ConfigError, DeliveryError, Message, Sink
from mcptasks.sinks._common import (
    check_fields,
    choice,
    dumps,
    recheck,
    relative_path,
    structured,
    under,
)

FIELDS = ("path", "format")
# Errors another try cannot fix: the place is wrong, not busy or full.
PERMANENT = {errno.EACCES, errno.EPERM, errno.EISDIR, errno.ENOTDIR, errno.EROFS, errno.ELOOP}


def _path(config: Mapping[str, Any]) -> str:
    path = relative_path(config, "path")
    if path is None:
        raise ConfigError("path", "is required")
    return path


def sinks_dir() -> Path:
    return Path(settings.MCPTASKS_SINKS_DIR)


def resolve(relative: str) -> Path:
    """The file ``relative`` names under the sinks directory; a symlink that leads out of it is
    a non-retryable :class:`DeliveryError`."""
    target = under(sinks_dir(), relative)
    if target is None:
        raise DeliveryError(f"{relative}: leads out of the sinks directory", retryable=False)
    return target


class JsonlFileSink(Sink):
    kind = "jsonl_file"
    label = "JSON Lines file (under the sinks directory)"
    secret_label = None
    secret_required = False
    max_batch = 500

    def clean_config(self, config: Mapping[str, Any]) -> dict[str, Any]:
        check_fields(config, FIELDS)
        return {
            "path": _path(config),
            "format": choice(config, "format", ("json", "ocsf"), default="json"),
        }

    def send(
        self,
        config: Mapping[str, Any],
        secret: str | None,
        messages: Sequence[Message],
        *,
        timeout: float,
    ) -> None:
        config = recheck(self.clean_config, config)
        lines = "".join(dumps(structured(message, config["format"])) + "\n" for message in messages)
        relative = config["path"]
        try:
            target = resolve(relative)
            created = not target.exists()
            target.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(
                target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o640
            )
            try:
                # Two workers appending to one file: one batch's lines never interleave.
                fcntl.flock(descriptor, fcntl.LOCK_EX)
                data = lines.encode()
                while data:
                    written = os.write(descriptor, data)
                    data = data[written:]
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
            if created:  # the new directory entry is durable too
                directory = os.open(target.parent, os.O_RDONLY)
                try:
                    os.fsync(directory)
                finally:
                    os.close(directory)
        except OSError as error:
            raise DeliveryError(
                f"{relative}: {error.strerror or type(error).__name__}",
                retryable=error.errno not in PERMANENT,
            ) from None


SINK = JsonlFileSink()
