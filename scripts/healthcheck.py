"""The web container's healthcheck: ``python scripts/healthcheck.py [PORT]`` exits 0 when
``/readyz`` on 127.0.0.1:PORT (default 8000) answers 200.

It asks with the Host header of the first entry of ``ALLOWED_HOSTS`` (the same variable the
server reads, so the check always matches the settings) and ``X-Forwarded-Proto: https``, as the
TLS-terminating proxy in front of the server does. Standard library only: it runs every few
seconds and must not boot Django.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request


def host_header(allowed_hosts: str) -> str:
    """A Host value the server accepts: the first entry of ALLOWED_HOSTS."""
    hosts = [entry.strip() for entry in allowed_hosts.split(",") if entry.strip()]
    first = hosts[0] if hosts else "127.0.0.1"
    if first == "*":
        return "127.0.0.1"
    return f"healthcheck{first}" if first.startswith(".") else first


def main(argv: list[str]) -> int:
    port = int(argv[1]) if len(argv) > 1 else 8000
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/readyz",
        headers={
            "Host": host_header(os.environ.get("ALLOWED_HOSTS", "")),
            "X-Forwarded-Proto": "https",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=3) as response:  # noqa: S310 - http, fixed
            status = response.status
    except urllib.error.HTTPError as error:
        status = error.code
    except OSError as error:
        print(f"healthcheck: /readyz unreachable: {error}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"healthcheck: /readyz answered {status}", file=sys.stderr)
    return 0 if status == 200 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
