"""Slurm notations, the command runner, and the priority band and update plan (no cluster needed)."""

from __future__ import annotations

import itertools
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.adapter_slurm import values as v
from services.adapter_slurm.apply import apply_plan, update_argv
from services.adapter_slurm.commands import CommandRunner, SlurmCommandError, SlurmValueError, validate_job_id
from services.adapter_slurm.handback import release_argv
from services.adapter_slurm.model import SlurmJob, SlurmNode
from services.adapter_slurm.priorities import Plan, PriorityBand, Update, plan_updates
from services.adapter_slurm.settings import SlurmAdapterSettings
from services.adapter_slurm.snapshot import GroupResolver, JobFilter, NodeGroupError
from shared.domain.cluster import load_cluster_spec
from shared.schemas import JobPlacement, PlacementDecision, Placements

# -- notations --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "count", "types"),
    [
        ("gres:gpu:p100:4", 4, ("p100",)),  # 22.05 tres_per_node
        ("gres/gpu:p100:4", 4, ("p100",)),  # 23.11+
        ("gpu:k80:2(IDX:0-1)", 2, ("k80",)),  # sinfo gres_used
        ("gpu:p100:2(IDX:0,2)", 2, ("p100",)),  # a comma inside the parentheses
        ("gpu:4", 4, ()),
        ("gpu", 1, ()),
        ("gres:gpu:2", 2, ()),
        ("gres/gpu=2,gres/gpu:p100=2", 2, ("p100",)),  # TRES: typed and untyped count once
        ("cpu=16,mem=64G,node=1,billing=16", 0, ()),
        ("gpu:l40s:4(S:0-1),tmpsize:7T", 4, ("l40s",)),
        ("gpu:a100:1,gpu:v100:2", 3, ("a100", "v100")),
        ("N/A", 0, ()),
        ("(null)", 0, ()),
        ("", 0, ()),
    ],
)
def test_gpus(text: str, count: int, types: tuple[str, ...]) -> None:
    assert v.gpus(text, "f") == v.Gpus(count, types)


def test_gpus_refuses_what_it_cannot_read() -> None:
    with pytest.raises(ValueError, match=r"f: cannot read GRES entry 'gpu:a:b:c'"):
        v.gpus("gpu:a:b:c", "f")


@pytest.mark.parametrize(
    ("text", "mib"),
    [("4G", 4096), ("500M", 500), ("128800", 128800), ("1T", 1048576), ("2048K", 2), ("N/A", None)],
)
def test_memory(text: str, mib: int | None) -> None:
    assert v.memory_mib(text, "f") == mib


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("10:00", 600.0),  # minutes:seconds
        ("1:00:00", 3600.0),
        ("365-00:00:00", 31_536_000.0),
        ("1-12", 129_600.0),  # days-hours
        ("5", 300.0),  # bare minutes, as sbatch -t
        ("UNLIMITED", None),
        ("INFINITE", None),
    ],
)
def test_duration(text: str, seconds: float | None) -> None:
    assert v.duration_s(text, "f") == seconds


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("p100-[0-1],k80-0", ("p100-0", "p100-1", "k80-0")),
        ("n[01-03,7]", ("n01", "n02", "n03", "n7")),
        ("r[1-2]-n[1-2]", ("r1-n1", "r1-n2", "r2-n1", "r2-n2")),
        ("", ()),
    ],
)
def test_hostlist(text: str, names: tuple[str, ...]) -> None:
    assert v.hostlist(text, "f") == names


@pytest.mark.parametrize("bad", ["n[1-", "n[a-b]", "n[5-2]"])
def test_hostlist_refuses_garbage(bad: str) -> None:
    with pytest.raises(ValueError, match=r"host list|bad range"):
        v.hostlist(bad, "f")


def test_numbers_of_both_layouts() -> None:
    assert v.number(7, "f") == 7.0
    assert v.number({"set": True, "infinite": False, "number": 7}, "f") == 7.0
    assert v.number({"set": False, "infinite": False, "number": 0}, "f") is None
    assert v.number({"set": True, "infinite": True, "number": 0}, "f") is None
    assert v.number(4294967294, "f") is None  # NO_VAL
    with pytest.raises(ValueError, match="f: expected a number"):
        v.number("7", "f")


# -- commands ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("good", ["1", "1234", "1234_7", "12+1", "4294967294"])
def test_job_ids_accepted(good: str) -> None:
    assert validate_job_id("scontrol update", good) == good


@pytest.mark.parametrize("bad", ["0", "-1", "1;rm -rf /", "$(id)", "1 2", "12_", "abc", "1234_[1-5]", ""])
def test_job_ids_refused(bad: str) -> None:
    with pytest.raises(SlurmValueError, match=r"^scontrol update: JobId .* is not a Slurm job id"):
        validate_job_id("scontrol update", bad)


def test_update_argv_validates_every_value() -> None:
    assert update_argv(Update("12", 5)) == ["scontrol", "update", "JobId=12", "Priority=5"]
    assert update_argv(Update("12_3", 9, ("p100-0", "p100-1")))[-2:] == [
        "ReqNodeList=p100-0,p100-1",
        "NumNodes=2",
    ]
    with pytest.raises(SlurmValueError, match=r"Priority 0 must be an integer in 1\.\.4294967293"):
        update_argv(Update("12", 0))
    with pytest.raises(SlurmValueError, match="Priority True"):
        update_argv(Update("12", True))
    with pytest.raises(SlurmValueError, match="node name 'n1 Priority=9'"):
        update_argv(Update("12", 5, ("n1 Priority=9",)))
    # one call hands jobs back (a hold first would restart their age): handback.py
    assert release_argv(["12", "13_2"]) == ["scontrol", "release", "12,13_2"]
    with pytest.raises(SlurmValueError, match="JobId '12,13'"):
        release_argv(["12,13"])


def test_runner_passes_arguments_literally_and_names_failures() -> None:
    runner = CommandRunner(timeout_s=5)
    tricky = "$(touch /tmp/x); `id` | cat > /tmp/y & ' \""
    assert runner.run(["echo", tricky]).stdout == tricky + "\n"
    with pytest.raises(SlurmCommandError, match=r"^false: exit status 1"):
        runner.run(["false"])
    with pytest.raises(SlurmCommandError, match=r"program 'no-such-slurm-tool' not found"):
        runner.run(["no-such-slurm-tool", "-h"])
    with pytest.raises(SlurmValueError):
        runner.run(["echo", "nul\x00byte"])


def test_runner_timeout_is_an_unreachable_error() -> None:
    started = time.monotonic()
    with pytest.raises(SlurmCommandError) as err:
        CommandRunner(timeout_s=0.3).run(["sleep", "5"])
    assert time.monotonic() - started < 3
    assert err.value.unreachable and str(err.value) == "sleep 5: no answer within 0.3 s"


def test_runner_sets_slurm_conf_and_epoch_times(tmp_path) -> None:  # type: ignore[no-untyped-def]
    conf = tmp_path / "slurm.conf"
    out = CommandRunner(slurm_conf=conf).run(["sh", "-c", 'echo "$SLURM_CONF $SLURM_TIME_FORMAT"']).stdout
    assert out == f"{conf} %s\n"


def test_dry_run_mutates_nothing() -> None:
    runner = CommandRunner(dry_run=True)
    assert runner.mutate(["touch", "/nonexistent-dir/x"]) is None
    assert runner.would_run == [("touch", "/nonexistent-dir/x")]


# -- priority band and plan -------------------------------------------------------------------------


def test_band() -> None:
    assert PriorityBand(100, 1, 10).priorities(3) == [100, 90, 80]
    # too many jobs for the step: the step shrinks (width 9 over 2 gaps -> 4), the order holds
    assert PriorityBand(100, 91, 10).priorities(3) == [100, 96, 92]
    # more jobs than the band has values: the tail shares the bottom
    assert PriorityBand(10, 8).priorities(5) == [10, 9, 8, 8, 8]
    assert PriorityBand(10, 8).priorities(0) == []
    with pytest.raises(ValueError, match="1 <= bottom < top"):
        PriorityBand(5, 5)
    with pytest.raises(ValueError, match="must be below"):
        SlurmAdapterSettings(slurm_priority_top=10, slurm_priority_bottom=10)


def job(
    job_id: str, *, state: str = "PENDING", partition: str = "gpu", qos: str = "normal", priority: int = 1100
) -> SlurmJob:
    return SlurmJob(
        job_id=job_id, state=state, priority=priority, partition=partition, qos=qos, user="u",
        submit_s=1.0, start_s=None, end_s=None, time_limit_s=60.0, cpus=1, mem_mib=None,
        node_count=1, nodes=(), gpus=1, gpu_types=(),
    )  # fmt: skip


def decision(*order: str, nodes: dict[str, tuple[str, ...]] | None = None) -> PlacementDecision:
    nodes = nodes or {}
    return PlacementDecision(
        cluster="slurm",
        correlation_id="c",
        snapshot_time=1.0,
        sequence=1,
        policy="test",
        placements=Placements.of(
            JobPlacement(job_id=j, rank=r, priority=0.0, nodes=nodes.get(j, ())) for r, j in enumerate(order)
        ),
    )


def test_plan_writes_only_managed_pending_jobs_in_rank_order() -> None:
    jobs = {
        "1": job("1"),
        "2": job("2", partition="debug"),
        "3": job("3", qos="sla"),
        "4": job("4", priority=0),
        "5": job("5", state="RUNNING"),
        "6": job("6"),
        "7": job("7", partition="debug,gpu"),
    }
    plan = plan_updates(
        decision("6", "2", "3", "4", "5", "gone", "1", "7"),
        jobs,
        {"1": 1100},
        PriorityBand(1000, 1, 10),
        JobFilter(frozenset({"gpu"}), frozenset({"sla"})),
    )
    # managed, in rank order: 6, 1, 7 -> 1000, 990, 980
    assert plan.updates == [Update("6", 1000), Update("1", 990), Update("7", 980)]
    assert dict(plan.skipped) == {
        "2": "partition 'debug' is not managed",
        "3": "QOS 'sla' is excluded",
        "4": "held (a priority would release it)",
        "5": "not pending any more (RUNNING)",
        "gone": "no longer in the queue",
    }


def test_assign_keeps_priorities_already_in_order_and_fills_the_gaps() -> None:
    band = PriorityBand(1000, 1, 10)
    # nothing known: laid out afresh from the top
    assert band.assign([None, None, None]) == [1000, 990, 980]
    # a new job at the head of a queue already in order: only the new job is written (top)
    assert band.assign([None, 990, 980, 970]) == [1000, 990, 980, 970]
    # a job moved up from the tail: it alone changes; no step below 1000 is free, so halfway to 990
    assert band.assign([1000, 970, 990, 980]) == [1000, 995, 990, 980]
    # a longest run in rank order (900, 400, 300, 100) is kept; 500 goes to the top, the new job a
    # step below its upper neighbour
    assert band.assign([500, 900, 400, 300, None, 100]) == [1000, 900, 400, 300, 290, 100]
    # values outside the band are never kept
    assert band.assign([5000, 0]) == [1000, 990]


def test_assign_renumbers_when_a_gap_is_too_narrow() -> None:
    band = PriorityBand(1000, 1, 10)
    # 999 and 998 keep their order but no value fits between them for the new job
    assert band.assign([999, None, 998]) == band.priorities(3) == [1000, 990, 980]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.integers(min_value=0, max_value=120)), min_size=0, max_size=40),
    st.integers(min_value=1, max_value=7),
)
def test_assign_orders_strictly_and_writes_no_more_than_a_renumbering(
    current: list[int | None], step: int
) -> None:
    band = PriorityBand(100, 1, step)
    got = band.assign(current)
    assert len(got) == len(current) and all(band.bottom <= v <= band.top for v in got)
    if len(current) <= band.top - band.bottom + 1:
        assert all(a > b for a, b in itertools.pairwise(got))  # the rank order holds
    writes = sum(g != c for g, c in zip(got, current, strict=True))
    fresh = sum(g != c for g, c in zip(band.priorities(len(current)), current, strict=True))
    assert writes <= fresh


def test_plan_skips_unchanged_priorities_and_sends_nodes_when_configured() -> None:
    jobs = {"1": job("1"), "2": job("2")}
    band = PriorityBand(1000, 1)
    plan = plan_updates(decision("1", "2"), jobs, {"1": 1000, "2": 5}, band, JobFilter())
    assert plan.updates == [] and plan.unchanged == 2  # already in rank order: nothing to write
    # a priority Slurm computed (job 2 was never written by Hylo) is not kept: Slurm would change it
    plan = plan_updates(decision("1", "2"), jobs, {"1": 1000, "2": 5}, band, JobFilter(), hylo_set={"1"})
    assert plan.updates == [Update("2", 999)] and plan.unchanged == 1
    # swapped: no value fits above 1000 for job 2, so both are laid out afresh
    plan = plan_updates(decision("2", "1"), jobs, {"1": 1000, "2": 5}, band, JobFilter())
    assert plan.updates == [Update("2", 1000), Update("1", 999)] and plan.unchanged == 0
    placed = decision("1", "2", nodes={"1": ("p100-0",)})
    plan = plan_updates(placed, jobs, {"1": 1000, "2": 999}, band, JobFilter(), apply_nodes=True)
    assert plan.updates == [Update("1", 1000, ("p100-0",))] and plan.unchanged == 1
    plan = plan_updates(placed, jobs, {"1": 1000, "2": 999}, band, JobFilter(), apply_nodes=False)
    assert plan.updates == [] and plan.unchanged == 2


# -- node groups ------------------------------------------------------------------------------------


def node(name: str, gpu_type: str, gpus: int, features: tuple[str, ...] = ()) -> SlurmNode:
    return SlurmNode(
        name=name, states=("IDLE",), cpus=8, alloc_cpus=0, mem_mib=1024, alloc_mem_mib=0, gpus=gpus,
        gpus_used=0, gpu_types=(gpu_type,), features=features, partitions=("gpu",),
    )  # fmt: skip


def test_group_rules() -> None:
    spec = load_cluster_spec("slurm-testbed")
    resolver = GroupResolver(spec, {"odd-name-7": "m40-1gpu"})

    def group(n: SlurmNode) -> str | None:
        found = resolver.group_of(n)
        return None if found is None else found.name

    assert group(node("odd-name-7", "p100", 4)) == "m40-1gpu"  # configured map first
    assert group(node("a", "xyz", 9, ("k80-2gpu",))) == "k80-2gpu"  # then a feature
    assert group(node("b", "P100", 4)) == "p100-4gpu"  # then GRES type and count
    assert resolver.group_of(node("c", "p100", 2)) is None  # no group has 2 P100 per node
    assert (resolver.gpu_type("k80"), resolver.gpu_type("a100")) == ("K80", "a100")
    with pytest.raises(
        NodeGroupError, match="maps node 'x' to group 'nope', which spec 'slurm-testbed' lacks"
    ):
        GroupResolver(spec, {"x": "nope"})


def test_apply_refuses_invalid_values_without_running_anything() -> None:
    runner = CommandRunner(dry_run=True)
    report = apply_plan(runner, Plan(updates=[Update("1;id", 5), Update("7", 5)]))
    assert report.sent == {"7": 5}
    assert report.failed == [
        ("1;id", "scontrol update: JobId '1;id' is not a Slurm job id (expected e.g. 1234 or 1234_7)")
    ]
    assert runner.would_run == [("scontrol", "update", "JobId=7", "Priority=5")]
