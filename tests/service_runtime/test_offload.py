"""Stage work runs on the event loop for ordinary snapshots and in a worker thread for large ones."""

from __future__ import annotations

import threading

import pytest

from shared.service.offload import INLINE_MAX_ROWS, run_stage, snapshot_rows
from tests.schemas.message_factories import snapshot

pytestmark = pytest.mark.asyncio


async def test_small_work_runs_on_the_loop_thread_and_large_work_in_a_worker() -> None:
    loop_thread = threading.get_ident()

    def where(tag: str) -> tuple[str, int]:
        return tag, threading.get_ident()

    assert await run_stage(INLINE_MAX_ROWS, where, "small") == ("small", loop_thread)
    tag, thread = await run_stage(INLINE_MAX_ROWS + 1, where, tag="large")
    assert tag == "large" and thread != loop_thread


async def test_a_snapshot_counts_its_pending_and_running_jobs_and_nodes() -> None:
    snap = snapshot(n_jobs=5)
    assert snapshot_rows(snap) == 5 + 1 + 4
    with pytest.raises(ZeroDivisionError):  # errors surface on both paths
        await run_stage(1, lambda: 1 // 0)
