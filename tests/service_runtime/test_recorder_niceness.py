"""The recorder's lower CPU priority (``services.niceness``, ``HYLO_RECORDER_NICE``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.placer.settings import PlacerServiceSettings

ROOT = Path(__file__).resolve().parents[2]


def _nice_in_child(code: str, env: dict[str, str] | None = None) -> list[int]:
    """Run ``code`` in a fresh interpreter (a nice value cannot be lowered again) and read the ints
    it prints."""
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return [int(x) for x in out.stdout.split()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_lower_priority_reaches_every_thread() -> None:
    code = (
        "import os, threading\n"
        "from services.niceness import lower_priority\n"
        "ready, stop, tid = threading.Event(), threading.Event(), []\n"
        "def side():\n"
        "    tid.append(threading.get_native_id()); ready.set(); stop.wait()\n"
        "t = threading.Thread(target=side); t.start(); ready.wait()\n"
        "before = os.getpriority(os.PRIO_PROCESS, 0)\n"
        "after = lower_priority(3)\n"
        "print(before, after, os.getpriority(os.PRIO_PROCESS, tid[0]), lower_priority(0))\n"
        "stop.set(); t.join()\n"
    )
    before, after, thread, unchanged = _nice_in_child(code)
    assert after == min(19, before + 3) == thread == unchanged


def test_recorder_nice_setting() -> None:
    assert PlacerServiceSettings().recorder_nice == 10
    assert _nice_in_child(
        "from services.placer.settings import PlacerServiceSettings\n"
        "print(PlacerServiceSettings().recorder_nice)\n",
        {"HYLO_RECORDER_NICE": "0"},
    ) == [0]
