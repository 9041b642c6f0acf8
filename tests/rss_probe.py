"""Run a snippet in a fresh interpreter and report how much it raised the peak RSS and how long it took.

Why a subprocess: the peak resident set size (``ru_maxrss``) only ever grows, so it measures one
action only in a process that did nothing big before it; and it counts what ``tracemalloc`` misses
(zlib's and torch's own buffers). The imports and the payload are built first (``setup``), then the
peak is read, the action runs (its exception, if any, is caught and reported), and the peak is read
again.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_TEMPLATE = """
import json, resource, time
{setup}
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
error = None
try:
{action}
except Exception as err:
    error = f"{{type(err).__name__}}: {{err}}"
seconds = time.perf_counter() - started
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"rss_mib": (after - before) / 1024, "seconds": seconds, "error": error}}))
"""


@dataclass(frozen=True)
class Probe:
    """What the action cost: the rise of the peak RSS (MiB), its time (s), and the error it raised."""

    rss_mib: float
    seconds: float
    error: str | None


def probe(setup: str, action: str, timeout_s: float = 120.0) -> Probe:
    """Run ``setup`` then ``action`` (Python source; the action's names come from the setup) in a
    fresh interpreter at the repository root, and measure the action."""
    script = _TEMPLATE.format(
        setup=textwrap.dedent(setup), action=textwrap.indent(textwrap.dedent(action), "    ")
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"probe failed ({done.returncode}):\n{done.stderr[-4000:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return Probe(rss_mib=found["rss_mib"], seconds=found["seconds"], error=found["error"])
