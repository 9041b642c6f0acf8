"""The fail-safe against a real slurmctld: Hylo stops deciding, Slurm's own priorities come back.

Two scenes. On the shared test cluster, an adapter writes priorities and stops (as if killed), the
watchdog (``python -m services.adapter_slurm.failsafe --once``, its own process) leaves them while
the lease is fresh, hands them back once it is stale (a user's hold untouched), and a new adapter
takes Hylo's order back. On a cluster of its own, started by ``deploy/slurm-dev/up`` with the
watchdog it installs, the whole of Hylo runs as separate processes (NATS, featurizer, prioritizer,
placer, adapter) and is SIGKILLed at once in the middle of the run; squeue must show Slurm's own
priorities again within the limit plus one watchdog period.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.adapter_sim.stack import PIPELINE, LocalStack
from services.adapter_slurm.lease import LeaseError, read_lease
from shared.schemas import JobPlacement, PlacementDecision, Placements, QueueSnapshot
from tests.adapter_slurm.conftest import (
    ROOT,
    SlurmCluster,
    _skip_reason,
    start_cluster,
    stop_cluster,
    wait_for,
)

LATER = "--begin=now+3600"
#: the shared cluster's scene: long enough for the watchdog's start (a Python import) within it
AFTER_S = 10.0
#: the private cluster's watchdog (deploy/slurm-dev/up --failsafe-after/--failsafe-every)
KILL_AFTER_S = 8
KILL_EVERY_S = 1
#: Hylo's priorities in these scenes (the band's top is 1,000,000; multifactor's are ~1,000-3,000)
HYLOS = 990_000


@pytest.fixture
def jobs(slurm: SlurmCluster) -> Iterator[list[str]]:
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


def queue(cluster: SlurmCluster, job_ids: list[str]) -> dict[str, tuple[str, int, str]]:
    """Job id -> (state, priority, reason) as squeue shows them."""
    out = cluster.run("squeue", "-h", "-t", "all", "-j", ",".join(job_ids), "-o", "%i|%T|%Q|%r")
    rows = (line.split("|") for line in out.splitlines() if line.strip())
    return {r[0]: (r[1], int(r[2]), r[3]) for r in rows}


def watchdog_once(cluster: SlurmCluster, lease: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "HYLO_CONFIG": str(lease.parent / "no-such-hylo.toml"),
        "HYLO_SLURM_CLUSTER": "slurm-test",
        "HYLO_SLURM_CONF": str(cluster.conf),
        "HYLO_SLURM_POLL_INTERVAL_S": "1",
        "HYLO_SLURM_FAILSAFE_LEASE": str(lease),
        "HYLO_SLURM_FAILSAFE_AFTER_S": str(AFTER_S),
    }
    argv = [sys.executable, "-m", "services.adapter_slurm.failsafe", "--once"]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_watchdog_hands_back_a_silent_adapters_priorities_and_a_new_adapter_takes_over(
    slurm: SlurmCluster, jobs: list[str]
) -> None:
    ours = [slurm.submit("-p", "gpu", "--gres=gpu:p100:1", "-t", str(5 * (i + 1)), LATER) for i in range(3)]
    held = slurm.submit("-p", "gpu", "--gres=gpu:p100:1", "-t", "5", LATER)
    control = slurm.submit("-p", "debug", "--gres=gpu:p100:1", "-t", "5", LATER)  # never Hylo's
    jobs.extend([*ours, held, control])
    adapter = slurm.adapter(slurm_partitions=("gpu",), slurm_failsafe_after_s=AFTER_S)
    assert adapter.lease_path is not None
    sent = adapter.apply(decision_for(adapter.poll().snapshot, [*reversed(ours), held])).report.sent
    assert set(sent) == {*ours, held} and min(sent.values()) >= HYLOS
    lease = read_lease(adapter.lease_path, "slurm-test")
    assert lease is not None and lease.jobs == {j: frozenset({p}) for j, p in sent.items()}
    slurm.run("scontrol", "hold", held)  # held after Hylo set it: a release would undo the hold

    # the lease is fresh: the watchdog leaves Hylo's priorities alone
    done = watchdog_once(slurm, adapter.lease_path)
    assert done.returncode == 0, done.stderr
    assert {j: queue(slurm, ours)[j][1] for j in ours} == {j: sent[j] for j in ours}

    # the adapter decides no more; once the lease is older than the limit, they go back to Slurm
    time.sleep(max(0.0, lease.renewed_at + AFTER_S - time.time()) + 0.2)
    done = watchdog_once(slurm, adapter.lease_path)
    assert done.returncode == 0, done.stderr
    assert "3 released, 0 gone, 0 failed" in done.stderr, done.stderr
    now = queue(slurm, [*ours, held, control])
    own = now[control][1]
    assert 0 < own < HYLOS
    assert {j: now[j][:2] for j in ours} == {j: ("PENDING", own) for j in ours}  # Slurm's own value
    assert now[held][1] == 0 and now[held][2] == "JobHeldAdmin"  # the hold survived
    # again: nothing is Hylo's any more, nothing is released
    done = watchdog_once(slurm, adapter.lease_path)
    assert done.returncode == 0 and "released" not in done.stderr, done.stderr

    # an adapter comes back on the same lease: it takes the record over, sees that the priorities
    # are Slurm's now, and writes Hylo's order again
    again = slurm.adapter(
        slurm_partitions=("gpu",), slurm_failsafe_after_s=AFTER_S, slurm_failsafe_lease=adapter.lease_path
    )
    assert set(again.written) == {*ours, held}
    snap = again.poll().snapshot
    assert again.written == {}
    resent = again.apply(decision_for(snap, list(reversed(ours)))).report.sent
    assert set(resent) == set(ours)
    assert all(p >= HYLOS for _, p, _ in queue(slurm, ours).values())
    done = watchdog_once(slurm, adapter.lease_path)  # renewed: left alone
    assert done.returncode == 0, done.stderr
    assert {j: queue(slurm, ours)[j][1] for j in ours} == resent


def test_no_priority_is_written_that_the_lease_does_not_cover(
    slurm: SlurmCluster, jobs: list[str], tmp_path: Path
) -> None:
    job = slurm.submit("-p", "gpu", "--gres=gpu:p100:1", "-t", "5", LATER)
    jobs.append(job)
    not_a_dir = tmp_path / "a-file"
    not_a_dir.write_text("", encoding="utf-8")
    adapter = slurm.adapter(slurm_failsafe_lease=not_a_dir / "lease.json")  # cannot be written
    snap = adapter.poll().snapshot
    before = queue(slurm, [job])[job][1]
    with pytest.raises(LeaseError, match="cannot write"):  # the bus redelivers the decision later
        adapter.apply(decision_for(snap, [job]))
    assert queue(slurm, [job])[job][1] == before < HYLOS


# -- the whole pipeline killed mid-run --------------------------------------------------------------


@pytest.fixture
def watched_slurm() -> Iterator[SlurmCluster]:
    """A small cluster of this test's own, with the fail-safe watchdog ``up`` installs."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    # a short path: slurmd's unix sockets live under it
    state_dir = Path(f"/tmp/hylo-fs-{os.getpid()}")
    cluster = start_cluster(
        state_dir,
        "--layout",
        "small",
        "--ctld-port",
        "7517",
        "--slurmd-port-base",
        "7530",
        "--poll-interval",
        "1",
        "--failsafe-after",
        str(KILL_AFTER_S),
        "--failsafe-every",
        str(KILL_EVERY_S),
    )
    try:
        yield cluster
    finally:
        stop_cluster(state_dir)


def sprio_partition_factor(cluster: SlurmCluster, job_ids: list[str]) -> dict[str, int]:
    """Each job's weighted partition factor: multifactor's, 0 for a priority fixed by hand."""
    out = cluster.run("sprio", "-h", "-j", ",".join(job_ids), "-o", "%i|%P")
    rows = (line.strip().split("|") for line in out.splitlines() if line.strip())
    return {r[0]: int(r[1]) for r in rows}


@pytest.mark.slow
def test_killing_the_whole_pipeline_gives_slurm_its_priorities_back(
    watched_slurm: SlurmCluster, tmp_path: Path
) -> None:
    from shared.store.migrate import upgrade_url

    cluster = watched_slurm
    assert (cluster.state_dir / "run" / "hylo-failsafe.pid").exists()  # up installed the watchdog
    blocker = cluster.submit("-p", "gpu", "--gres=gpu:p100:2", "-t", "30", command="sleep 600")
    wait_for(lambda: "RUNNING" in cluster.run("squeue", "-h", "-j", blocker, "-o", "%T"), 30, "the blocker")
    ours = [cluster.submit("-p", "gpu", "--gres=gpu:p100:1", "-t", str(m)) for m in (30, 10, 20)]
    control = cluster.submit("-p", "debug", "--gres=gpu:p100:1", "-t", "30")  # a partition Hylo leaves
    stack = LocalStack(tmp_path / "stack")
    try:
        db_url = f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}"
        upgrade_url(db_url)
        env = {
            "HYLO_CONFIG": str(cluster.state_dir / "hylo.toml"),  # what up wrote, the watchdog reads it
            "HYLO_NATS_URL": stack.start_nats(),
            "HYLO_DATABASE_URL": db_url,
            "HYLO_SUBJECT_ROOT": f"failsafe{uuid.uuid4().hex[:6]}",
            "HYLO_BASE_POLICY": "sjf",
        }
        stack.start_services(env, names=(*PIPELINE, "adapter_slurm"))
        stack.wait_ready(300.0)
        wait_for(
            lambda: all(p >= HYLOS for _, p, _ in queue(cluster, ours).values()), 120, "Hylo's priorities"
        )

        # mid-run, all of Hylo dies at once: NATS, the pipeline, the adapter
        killed_at = time.time()
        for child in stack.children:
            os.kill(child.proc.pid, signal.SIGKILL)
        for child in stack.children:
            child.proc.wait(timeout=30)
        while True:
            if all(p < HYLOS for _, p, _ in queue(cluster, ours).values()):
                restored_at = time.time()
                break
            assert time.time() - killed_at < KILL_AFTER_S + KILL_EVERY_S + 30, "priorities never came back"
            time.sleep(0.05)
        lease = read_lease(cluster.state_dir / "hylo" / "slurm-dev.lease.json", "slurm-dev")
        assert lease is not None
        elapsed = restored_at - killed_at
        print(
            f"\nkill -> Slurm's priorities: {elapsed:.2f} s (last decision {killed_at - lease.renewed_at:.2f} s before the kill)"
        )
        # not before the lease ran out, and at most one watchdog period (plus the squeue/scontrol
        # calls on a loaded machine) after
        assert restored_at >= lease.renewed_at + KILL_AFTER_S - 0.1
        assert elapsed <= KILL_AFTER_S + KILL_EVERY_S + 2.0, elapsed

        # Slurm's own: the untouched control job's value, and multifactor computes it again
        now = queue(cluster, [*ours, control])
        assert all(state == "PENDING" for state, _, _ in now.values())
        assert all(abs(now[j][1] - now[control][1]) <= 2 for j in ours), now
        assert all(f > 0 for f in sprio_partition_factor(cluster, ours).values())
        log = (cluster.state_dir / "log" / "hylo-failsafe.log").read_text(encoding="utf-8")
        assert "3 released, 0 gone, 0 failed" in log
    finally:
        cluster.cancel(blocker, *ours, control)
        stack.stop()
