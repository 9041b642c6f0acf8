"""The adapter against a real slurmctld with typed fake GPUs (``deploy/slurm-dev/up``, testbed layout).

Resource use per test keeps tests independent when xdist runs them side by side: only the snapshot
test uses the K80 nodes, only the start-order test uses the M40 node, the rest keep their jobs
pending with ``--begin`` (a job waiting for its begin time is pending, and not held).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.adapter_slurm.commands import SlurmCommandError
from services.adapter_slurm.model import SlurmJob
from services.adapter_slurm.outcomes import OutcomeTracker
from shared.domain.cluster import load_cluster_spec
from shared.schemas import (
    JobOutcome,
    JobPlacement,
    PlacementDecision,
    Placements,
    QueueSnapshot,
    snapshot_views,
)
from tests.adapter_slurm.conftest import SlurmCluster, start_cluster, wait_for

LATER = "--begin=now+3600"


@pytest.fixture
def jobs(slurm: SlurmCluster) -> Iterator[list[str]]:
    """Job ids a test submits; all cancelled at the end whatever happened."""
    submitted: list[str] = []
    yield submitted
    slurm.cancel(*submitted)


def decision_for(snapshot: QueueSnapshot, order: list[str]) -> PlacementDecision:
    return PlacementDecision(
        cluster=snapshot.cluster,
        correlation_id=snapshot.correlation_id,
        snapshot_time=snapshot.time,
        sequence=snapshot.sequence,
        policy="test",
        placements=Placements.of(
            JobPlacement(job_id=j, rank=r, priority=float(-r)) for r, j in enumerate(order)
        ),
    )


def squeue_priorities(slurm: SlurmCluster, job_ids: list[str]) -> dict[str, int]:
    out = slurm.run("squeue", "-h", "-t", "all", "-j", ",".join(job_ids), "-o", "%i %Q")
    return {line.split()[0]: int(line.split()[1]) for line in out.splitlines() if line.strip()}


def test_snapshot_reflects_submitted_jobs(slurm: SlurmCluster, jobs: list[str]) -> None:
    start = time.time()
    p100 = slurm.submit("-p", "gpu", "--gres=gpu:p100:2", "-c", "8", "--mem=32G", "-t", "30", LATER)
    untyped = slurm.submit("-p", "gpu", "--gres=gpu:3", "-t", "1-00:00:00", LATER)
    debug = slurm.submit("-p", "debug", "--gres=gpu:k80:1", "-t", "5", LATER)
    runner = slurm.submit("-p", "gpu", "--gres=gpu:k80:2", "-w", "k80-1", "-t", "10", command="sleep 120")
    jobs.extend([p100, untyped, debug, runner])
    adapter = slurm.adapter()
    wait_for(
        lambda: "RUNNING" in slurm.run("squeue", "-h", "-j", runner, "-o", "%T"), 30, f"job {runner} to run"
    )

    result = adapter.poll()
    snap = result.snapshot
    assert result.layout == "v0.0.38"  # Debian 12's Slurm 22.05
    pending = {p.job_id: p for p in snap.pending}
    job = pending[p100]
    assert (job.gpus, job.gpu_types, job.partition) == (2, ("P100",), "gpu")
    assert (job.cpus_milli, job.mem_mib, job.est_runtime_s) == (8000, 32 * 1024, 30 * 60.0)
    assert job.user == "root" and start - 5 <= job.submit_s <= time.time() + 1
    job = pending[untyped]
    assert (job.gpus, job.gpu_types, job.est_runtime_s) == (3, (), 86_400.0)
    assert (pending[debug].partition, pending[debug].gpu_types) == ("debug", ("K80",))
    running = {r.job_id: r for r in snap.running}
    assert running[runner].nodes == ("k80-1",) and running[runner].gpus == 2
    nodes = {n.name: n for n in snap.nodes}
    assert sorted(nodes) == ["k80-0", "k80-1", "m40-0", "p100-0", "p100-1"]
    assert {n: s.group for n, s in nodes.items()} == {
        "k80-0": "k80-2gpu",
        "k80-1": "k80-2gpu",
        "m40-0": "m40-1gpu",
        "p100-0": "p100-4gpu",
        "p100-1": "p100-4gpu",
    }
    assert nodes["k80-1"].free_gpus == 0
    # the runner asked 1 CPU and DefMemPerCPU=4096
    assert (nodes["k80-1"].free_cpus_milli, nodes["k80-1"].free_mem_mib) == (27_000, 65536 - 4096)
    # the snapshot is usable by the featurizer with the spec up wrote
    views = snapshot_views(snap, load_cluster_spec(slurm.spec))
    assert {p100, untyped, debug} <= set(views.job_ids)

    # only managed partitions reach the snapshot; the text fallback agrees with JSON
    text = slurm.adapter(slurm_partitions=("gpu",), slurm_output="text").poll()
    assert text.layout == "text"
    text_pending = {p.job_id: p for p in text.snapshot.pending}
    assert debug not in text_pending
    assert text_pending[p100].model_dump(exclude={"mem_mib"}) == pending[p100].model_dump(exclude={"mem_mib"})
    assert {r.job_id: r.nodes for r in text.snapshot.running}[runner] == ("k80-1",)


def test_priorities_are_written_and_jobs_start_in_that_order(slurm: SlurmCluster, jobs: list[str]) -> None:
    blocker = slurm.submit("-p", "gpu", "--gres=gpu:m40:1", "-t", "5", command="sleep 300")
    jobs.append(blocker)
    wait_for(
        lambda: "RUNNING" in slurm.run("squeue", "-h", "-j", blocker, "-o", "%T"), 30, "the blocker to run"
    )
    queued = [slurm.submit("-p", "gpu", "--gres=gpu:m40:1", "-t", "1", command="sleep 1") for _ in range(4)]
    jobs.extend(queued)
    adapter = slurm.adapter(slurm_partitions=("gpu",), slurm_priority_top=500_000, slurm_priority_step=10)
    snap = adapter.poll().snapshot
    assert set(queued) <= {p.job_id for p in snap.pending}
    order = [queued[2], queued[0], queued[3], queued[1]]  # not the submission order
    result = adapter.apply(decision_for(snap, order))
    assert result.report.sent == {order[0]: 500_000, order[1]: 499_990, order[2]: 499_980, order[3]: 499_970}
    # squeue shows exactly what was written
    assert squeue_priorities(slurm, order) == result.report.sent
    # the same decision again sends nothing
    again = adapter.apply(decision_for(snap, order))
    assert again.report.sent == {} and again.unchanged == 4

    slurm.cancel(blocker)
    wait_for(
        lambda: all(
            s in ("COMPLETED",)
            for s in slurm.run("squeue", "-h", "-t", "all", "-j", ",".join(queued), "-o", "%T").split()
        ),
        90,
        "the four jobs to complete",
    )
    out = slurm.run("squeue", "-h", "-t", "all", "-j", ",".join(queued), "-o", "%i %S")
    starts = {line.split()[0]: int(line.split()[1]) for line in out.splitlines()}
    assert [starts[j] for j in order] == sorted(starts[j] for j in order)
    assert len(set(starts.values())) == 4  # strictly one after the other on the single M40

    # their outcomes come from the queue's final states
    outcomes = {o.job_id: o for o in adapter.poll().outcomes}
    assert set(queued) <= set(outcomes)
    for j in queued:
        o = outcomes[j]
        assert o.status == "completed" and o.start_s == starts[j] and o.end_s >= o.start_s
        assert o.correlation_id == snap.correlation_id  # the decision that set its priority


def test_unmanaged_partition_and_held_jobs_untouched(slurm: SlurmCluster, jobs: list[str]) -> None:
    managed = slurm.submit("-p", "gpu", "--gres=gpu:p100:1", "-t", "5", LATER)
    other = slurm.submit("-p", "debug", "--gres=gpu:p100:1", "-t", "5", LATER)
    held = slurm.submit("-p", "gpu", "--gres=gpu:p100:1", "-t", "5", "--hold")
    jobs.extend([managed, other, held])
    before = squeue_priorities(slurm, [other, held])
    assert before[held] == 0
    adapter = slurm.adapter(slurm_partitions=("gpu",))
    snap = adapter.poll().snapshot
    # a decision that (wrongly) ranks every job: only the managed one may be written
    result = adapter.apply(decision_for(snap, [other, held, managed]))
    assert result.report.sent == {managed: 1_000_000}
    assert dict(result.skipped) == {
        other: "partition 'debug' is not managed",
        held: "held (a priority would release it)",
    }
    after = squeue_priorities(slurm, [managed, other, held])
    assert after[managed] == 1_000_000
    assert after[other] == before[other] and after[held] == 0


def test_job_names_full_of_shell_metacharacters_are_harmless(
    slurm: SlurmCluster, jobs: list[str], tmp_path: Path
) -> None:
    canary = tmp_path / "pwned"
    name = f"x; touch {canary}; $(touch {canary}) `touch {canary}` | & > {canary} \" ' \\ %i |"
    job = slurm.submit("-p", "gpu", "-J", name, "--gres=gpu:p100:1", "-t", "5", LATER)
    jobs.append(job)
    for output in ("json", "text"):
        adapter = slurm.adapter(slurm_output=output)
        snap = adapter.poll().snapshot
        assert job in {p.job_id for p in snap.pending}, output
        result = adapter.apply(decision_for(snap, [job]))
        assert job in result.report.sent or result.unchanged == 1
    assert not canary.exists()
    assert squeue_priorities(slurm, [job])[job] == 1_000_000


def test_job_gone_between_poll_and_update_is_logged_not_an_error(
    slurm: SlurmCluster, jobs: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    job = slurm.submit("-p", "gpu", "--gres=gpu:p100:1", "-t", "5", LATER)
    keep = slurm.submit("-p", "gpu", "--gres=gpu:p100:1", "-t", "5", LATER)
    jobs.extend([job, keep])
    adapter = slurm.adapter()
    snap = adapter.poll().snapshot
    slurm.cancel(job)
    wait_for(
        lambda: "CANCELLED" in slurm.run("squeue", "-h", "-t", "all", "-j", job, "-o", "%T"), 15, "cancel"
    )
    with caplog.at_level("INFO"):
        result = adapter.apply(decision_for(snap, [job, keep]))
    assert result.report.gone == [job] and result.report.failed == []
    assert result.report.sent == {keep: 999_999}
    assert any(f"job {job} left the queue" in r.getMessage() for r in caplog.records)
    # it never ran: no outcome, although Slurm stamps it with start = end = cancel time
    assert job not in {o.job_id for o in adapter.poll().outcomes}


def test_dry_run_logs_and_changes_nothing(slurm: SlurmCluster, jobs: list[str]) -> None:
    job = slurm.submit("-p", "gpu", "--gres=gpu:p100:1", "-t", "5", LATER)
    jobs.append(job)
    before = squeue_priorities(slurm, [job])[job]
    adapter = slurm.adapter(slurm_dry_run=True)
    snap = adapter.poll().snapshot
    result = adapter.apply(decision_for(snap, [job]))
    assert result.report.dry_run and result.report.sent == {job: 1_000_000}
    assert adapter.runner.would_run == [("scontrol", "update", f"JobId={job}", "Priority=1000000")]
    assert squeue_priorities(slurm, [job])[job] == before != 1_000_000


def test_controller_stopped_and_restarted(private_slurm: SlurmCluster) -> None:
    """slurmctld down: the poll fails naming the command, the last good state stays; back: resumes.

    On a cluster of its own: stopping the shared controller would fail other workers' tests.
    """
    slurm = private_slurm
    job = slurm.submit("-p", "gpu", "--gres=gpu:p100:1", "-t", "5", LATER)
    adapter = slurm.adapter(slurm_command_timeout_s=15.0)
    good = adapter.poll().snapshot
    assert [p.job_id for p in good.pending] == [job]
    pid = int((slurm.state_dir / "run" / "slurmctld.pid").read_text())
    slurm.run("scontrol", "shutdown", "slurmctld")
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), 30, "slurmctld to stop")
    with pytest.raises(SlurmCommandError) as err:
        adapter.poll()
    assert err.value.unreachable and err.value.command.startswith("squeue")
    assert adapter.last_snapshot is good and job in adapter.jobs
    start_cluster(slurm.state_dir, "--layout", "small", "--ctld-port", "7217", "--slurmd-port-base", "7230")
    back = adapter.poll().snapshot
    assert [p.job_id for p in back.pending] == [job]  # the job survived the restart (state saved)
    assert back.sequence > good.sequence


def test_excluded_qos_untouched(slurm: SlurmCluster, jobs: list[str]) -> None:
    sla = slurm.submit("-p", "gpu", "--qos=sla", "--gres=gpu:p100:1", "-t", "5", LATER)
    normal = slurm.submit("-p", "gpu", "--gres=gpu:p100:1", "-t", "5", LATER)
    jobs.extend([sla, normal])
    before = squeue_priorities(slurm, [sla])[sla]
    adapter = slurm.adapter(slurm_excluded_qos=("sla",))
    snap = adapter.poll().snapshot
    pending = {p.job_id: p for p in snap.pending}
    assert sla not in pending and pending[normal].qos == "normal"
    # even a decision that names the SLA job leaves it to Slurm
    result = adapter.apply(decision_for(snap, [sla, normal]))
    assert result.report.sent == {normal: 1_000_000}
    assert dict(result.skipped) == {sla: "QOS 'sla' is excluded"}
    assert squeue_priorities(slurm, [sla])[sla] == before
    # without the exclusion the same job is Hylo's: its QOS reaches the snapshot
    assert {p.job_id: p.qos for p in slurm.adapter().poll().snapshot.pending}[sla] == "sla"


def test_outcome_of_a_job_that_left_unseen_comes_from_sacct(slurm: SlurmCluster, jobs: list[str]) -> None:
    job = slurm.submit("-p", "gpu", "--gres=gpu:p100:1", "-t", "1", command="sleep 1")
    jobs.append(job)
    wait_for(
        lambda: "COMPLETED" in slurm.run("squeue", "-h", "-t", "all", "-j", job, "-o", "%T"), 60, "completion"
    )
    submit, start, end = (
        int(x) for x in slurm.run("squeue", "-h", "-t", "all", "-j", job, "-o", "%V %S %e").split()
    )
    adapter = slurm.adapter()
    tracker = OutcomeTracker("slurm-test", adapter.runner, accounting="auto")
    # the tracker last saw the job running; the next poll no longer lists it (as after MinJobAge)
    tracker.active[job] = SlurmJob(
        job_id=job, state="RUNNING", priority=1, partition="gpu", qos="normal", user="root",
        submit_s=float(submit), start_s=float(start), end_s=None, time_limit_s=60.0, cpus=1,
        mem_mib=4096, node_count=1, nodes=("p100-0",), gpus=1, gpu_types=("p100",),
    )  # fmt: skip
    tracker.correlation[job] = "decision-1"
    # slurmdbd may lag the controller (it may still list the job running): the tracker asks again
    # at the next polls, as the adapter's loop would
    got: list[JobOutcome] = []
    for _ in range(20):
        got = tracker.update([], time.time(), "later-snapshot")
        if got or job not in tracker.active:
            break
        time.sleep(0.5)
    (outcome,) = got
    assert not tracker.completion_file  # slurmdbd answered
    assert (outcome.job_id, outcome.status, outcome.gpus) == (job, "completed", 1)
    assert (outcome.submit_s, outcome.start_s, outcome.end_s) == (submit, start, end)
    assert outcome.correlation_id == "decision-1"


def test_testbed_layout_matches_the_slurm_testbed_preset(slurm: SlurmCluster) -> None:
    """``up``'s default layout is the preset's cluster: same groups, GPUs, CPUs and memory."""
    written = load_cluster_spec(slurm.spec)
    preset = load_cluster_spec("slurm-testbed")
    assert written.node_groups == preset.node_groups
    assert written.defaults == preset.defaults
    # and slurmd agrees: every node's CPUs, memory and GPUs are its group's
    adapter = slurm.adapter(clusters={"slurm-test": "slurm-testbed"})
    groups = {g.name: g for g in preset.node_groups}
    lines = slurm.run("sinfo", "-h", "-N", "-o", "%N %c %m %G").split("\n")
    group_of = {n.name: n.group for n in adapter.poll().snapshot.nodes}
    seen = set()
    for line in filter(None, lines):
        name, cpus, mem, gres = line.split()
        group = groups[group_of[name]]
        assert (int(cpus), int(mem), gres) == (
            group.cpus,
            group.mem_mib,
            f"gpu:{group.gpu_type.lower()}:{group.gpus}",
        )
        seen.add(name)
    assert len(seen) == preset.total_nodes == 5


def test_node_choice_and_handing_jobs_back(slurm: SlurmCluster, jobs: list[str]) -> None:
    job = slurm.submit("-p", "gpu", "--gres=gpu:p100:1", "-t", "5", LATER)
    jobs.append(job)
    adapter = slurm.adapter(slurm_apply_nodes=True)
    snap = adapter.poll().snapshot
    placed = decision_for(snap, [job]).model_copy(
        update={"placements": (JobPlacement(job_id=job, rank=0, priority=1.0, nodes=("p100-1",)),)}
    )
    assert adapter.apply(placed).report.sent == {job: 1_000_000}
    shown = slurm.run("scontrol", "show", "job", job)
    assert "ReqNodeList=p100-1 " in shown and "Priority=1000000 " in shown and "NumNodes=1 " in shown
    # on shutdown (when configured) the job goes back to Slurm's own priority, still pending, not held
    adapter.poll()
    assert adapter.release_all() == 1
    state, priority = slurm.run("squeue", "-h", "-j", job, "-o", "%T %Q").split()
    assert state == "PENDING" and 0 < int(priority) < 1_000_000


def test_a_spec_that_fits_no_node_is_a_clear_error(
    slurm: SlurmCluster, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = slurm.adapter(clusters={"slurm-test": "philly"})  # Philly's GPU types, not P100/K80/M40
    with caplog.at_level("WARNING"), pytest.raises(SlurmCommandError) as err:
        adapter.poll()
    assert str(err.value).startswith("squeue/sinfo -> QueueSnapshot:") and "nodes" in str(err.value)
    assert adapter.last_snapshot is None and adapter.jobs == {}
    assert any("node 'p100-0' (GRES p100 x4" in r.getMessage() for r in caplog.records)
