"""The path to a new job's priority, without a cluster: updates sent a few at a time, new jobs' first,
squeue and sinfo read side by side, and the path's timing lines (``services/adapter_slurm/timing.py``)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from services.adapter_slurm.adapter import SlurmAdapter
from services.adapter_slurm.apply import apply_plan
from services.adapter_slurm.commands import CommandResult, CommandRunner, SlurmCommandError
from services.adapter_slurm.priorities import Plan, Update
from services.adapter_slurm.settings import SlurmAdapterSettings
from services.adapter_slurm.timing import PathTiming
from shared.domain.cluster import load_cluster_spec
from tests.adapter_slurm.test_slurm_rules import decision, job

FIXTURES = Path(__file__).parent / "fixtures"


class SlowRunner(CommandRunner):
    """Every command takes ``delay`` seconds and succeeds (or fails as ``fail`` says); records overlap."""

    def __init__(self, delay: float, fail: dict[str, str] | None = None) -> None:
        super().__init__()
        self.delay = delay
        self.fail = fail or {}
        self.running = 0
        self.most = 0
        self.started: list[str] = []
        self._lock = threading.Lock()

    def mutate(self, argv: Sequence[str]) -> CommandResult | None:
        return self.run(argv, check=False)

    def run(self, argv: Sequence[str], *, check: bool = True) -> CommandResult:
        with self._lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.started.append(argv[2] if argv[0] == "scontrol" else argv[0])
        time.sleep(self.delay)
        with self._lock:
            self.running -= 1
        job_id = argv[2].removeprefix("JobId=") if argv[0] == "scontrol" else ""
        if job_id in self.fail:
            return CommandResult(tuple(argv), "", self.fail[job_id], 1)
        out = ""
        if argv[0] in ("squeue", "sinfo"):
            out = (FIXTURES / f"{argv[0]}-22.05-v0.0.38.json").read_text(encoding="utf-8")
        return CommandResult(tuple(argv), out, "", 0)


def test_updates_run_a_few_at_a_time_and_each_has_its_time() -> None:
    runner = SlowRunner(0.05)
    plan = Plan(updates=[Update(str(i), 100 - i) for i in range(1, 9)])
    report = apply_plan(runner, plan, workers=4)
    assert report.sent == {str(i): 100 - i for i in range(1, 9)}
    assert runner.most == 4  # overlapping, not one after another
    assert set(report.done_at) == set(report.sent)
    assert runner.started[:4] == [f"JobId={i}" for i in range(1, 5)]  # started in the plan's order


def test_one_at_a_time_with_one_worker() -> None:
    runner = SlowRunner(0.01)
    apply_plan(runner, Plan(updates=[Update(str(i), 10 - i) for i in range(1, 5)]), workers=1)
    assert runner.most == 1 and runner.started == [f"JobId={i}" for i in range(1, 5)]


def test_an_unreachable_controller_stops_the_updates_not_yet_started() -> None:
    runner = SlowRunner(
        0.2, fail={"2": "Unable to contact slurm controller", "3": "Invalid job id specified"}
    )
    with pytest.raises(SlurmCommandError) as err:
        apply_plan(runner, Plan(updates=[Update(str(i), 10 - i) for i in range(1, 9)]), workers=2)
    assert err.value.unreachable
    # 1 and 2 ran together; 2's answer stopped the rest but for one already started beside it
    assert runner.started[:2] == ["JobId=1", "JobId=2"] and len(runner.started) <= 3
    assert runner.running == 0  # raised only once the calls in flight returned


def _adapter(tmp_path: Path, **settings: object) -> SlurmAdapter:
    values: dict[str, object] = {
        "slurm_cluster": "slurm",
        "clusters": {"slurm": "slurm-testbed"},
        "slurm_failsafe_lease": tmp_path / "lease.json",
        **settings,
    }
    s = SlurmAdapterSettings(**values)  # type: ignore[arg-type]
    return SlurmAdapter(s, load_cluster_spec("slurm-testbed"), CommandRunner(dry_run=True))


def test_new_jobs_priorities_are_sent_before_the_reranked_ones(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path)
    adapter.jobs = {j: job(j) for j in ("1", "2", "3")}
    adapter.apply(decision("1", "2", "3"))
    adapter.jobs = {j: job(j, priority=adapter.current_priorities()[j]) for j in ("1", "2", "3")}
    adapter.jobs["4"] = job("4")
    adapter.sent = {}
    adapter.runner.would_run.clear()
    adapter.apply(decision("3", "2", "1", "4"))  # reversed, and a new job last
    sent = [argv[2] for argv in adapter.runner.would_run]
    assert sent[0] == "JobId=4" and set(sent[1:]) <= {"JobId=1", "JobId=2", "JobId=3"} and len(sent) >= 2


def test_rank_order_kept_when_new_first_is_off(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path, slurm_first_priorities_first=False)
    adapter.jobs = {j: job(j) for j in ("1", "2")}
    adapter.apply(decision("1", "2"))
    adapter.jobs = {j: job(j, priority=adapter.current_priorities()[j]) for j in ("1", "2")}
    adapter.jobs["3"] = job("3")
    adapter.sent = {}
    adapter.runner.would_run.clear()
    adapter.apply(decision("2", "1", "3"))
    assert [argv[2] for argv in adapter.runner.would_run][-1] == "JobId=3"


@pytest.mark.parametrize("parallel", [True, False])
def test_squeue_and_sinfo_side_by_side(tmp_path: Path, parallel: bool) -> None:
    adapter = _adapter(tmp_path, slurm_parallel_reads=parallel)
    runner = SlowRunner(0.1)
    adapter.runner = runner
    adapter.tracker.runner = runner
    result = adapter.poll()
    assert len(result.snapshot.pending) > 0
    assert runner.most == (2 if parallel else 1)


def test_timing_lines_follow_a_job_from_event_to_scontrol(caplog: pytest.LogCaptureFixture) -> None:
    timing = PathTiming(enabled=True)
    timing.event(100.0)
    timing.event(100.5)  # a second event before the poll: the first one counts
    event, started = timing.poll_started()
    assert event == 100.0
    assert timing.poll_started()[0] is None  # that event was answered
    with caplog.at_level(logging.INFO, logger="services.adapter_slurm.timing"):
        timing.polled("c1", event, started, started + 0.05)
        timing.published("c1")
        timing.received("c1")
        timing.applied("c1", started + 0.2, started + 0.21, 3, {"42": started + 0.25})
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("timing snapshot c1 event=100.0000 poll_start=")
    assert lines[1].startswith("timing decision c1 received=") and lines[1].endswith(
        f"42:{started + 0.25:.4f}"
    )
    off = PathTiming(enabled=False)
    off.event(1.0)
    assert off.poll_started()[0] is None
