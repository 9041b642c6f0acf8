#!/usr/bin/env python3
"""Container healthcheck: exit 0 when the service in this container answers 200 on its health path.

Why a script and not curl: python:3.11-slim has no curl or wget, and every Hylo image has Python. It
reads the port the service was given (``HYLO_HTTP_PORT``) so one command fits every service.

Usage: ``hylo-healthcheck [path]`` (default ``/healthz``; ``/readyz`` for readiness).
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request


def main(argv: list[str]) -> int:
    path = argv[1] if len(argv) > 1 else "/healthz"
    port = os.environ.get("HYLO_HTTP_PORT", "")
    if not port.isdigit():
        print(f"hylo-healthcheck: HYLO_HTTP_PORT must be a port number, got {port!r}", file=sys.stderr)
        return 2
    url = f"http://127.0.0.1:{port}{path}"
    try:
        timeout = float(os.environ.get("HYLO_HEALTHCHECK_TIMEOUT_S", "3"))
        with urllib.request.urlopen(url, timeout=timeout) as r:
            status = r.status
    except urllib.error.HTTPError as err:
        status = err.code
    except (OSError, ValueError) as err:
        print(f"hylo-healthcheck: {url}: {err}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"hylo-healthcheck: {url}: HTTP {status}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
