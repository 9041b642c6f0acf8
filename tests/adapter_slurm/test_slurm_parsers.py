"""Parsers of squeue/sinfo/sacct output, from recorded (22.05) and hand-written (23.02, 23.11) fixtures.

Expected values were read off the fixture files by hand (see fixtures/README.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from services.adapter_slurm.commands import CommandResult, CommandRunner, SlurmCommandError
from services.adapter_slurm.model import SlurmJob, SlurmNode
from services.adapter_slurm.outcomes import ACCOUNTING_LAG_POLLS, OutcomeTracker, parse_sacct
from services.adapter_slurm.parse_json import parse_sinfo_json, parse_squeue_json
from services.adapter_slurm.parse_text import parse_sinfo_text, parse_squeue_text
from services.adapter_slurm.snapshot import GroupResolver, JobFilter, build_snapshot
from shared.domain.cluster import load_cluster_spec
from shared.schemas import QueueSnapshot, snapshot_views
from tests.adapter_slurm.conftest import FIXTURES

SPEC = load_cluster_spec("slurm-testbed")


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


ALL_JOBS = JobFilter()


def snapshot(
    jobs: Sequence[SlurmJob], nodes: Sequence[SlurmNode], jobs_filter: JobFilter = ALL_JOBS
) -> QueueSnapshot:
    return build_snapshot(
        cluster="slurm",
        correlation_id="c1",
        now=1795370970.0,
        sequence=1,
        jobs=jobs,
        nodes=nodes,
        resolver=GroupResolver(SPEC),
        jobs_filter=jobs_filter,
        default_runtime_s=3600.0,
        max_pending=100,
    )


# -- 22.05, v0.0.38 (recorded) --------------------------------------------------------------------


def test_squeue_v0038_recorded() -> None:
    queue = parse_squeue_json(read("squeue-22.05-v0.0.38.json"))
    assert queue.layout == "v0.0.38"
    jobs = {j.job_id: j for j in queue.jobs}
    assert sorted(jobs) == ["1", "2", "3", "4", "5", "6", "7"]
    one = jobs["1"]
    assert (one.state, one.priority, one.partition, one.qos, one.user) == ("RUNNING", 1143, "gpu", "", "root")
    assert (one.submit_s, one.start_s, one.end_s, one.time_limit_s) == (
        1795370913,
        1795370915,
        1795371515,
        600,
    )
    assert (one.cpus, one.mem_mib, one.nodes, one.gpus, one.gpu_types) == (
        16,
        65536,
        ("p100-0",),
        4,
        ("p100",),
    )
    assert (jobs["2"].cpus, jobs["2"].mem_mib) == (1, 4096)  # DefMemPerCPU=4096 x 1 CPU
    # an untyped request (--gres=gpu:2) runs on typed GPUs: gres_detail says which
    assert (jobs["4"].partition, jobs["4"].gpus, jobs["4"].gpu_types) == ("debug", 2, ("k80",))
    assert jobs["5"].time_limit_s == 525_600 * 60
    three, six, seven = jobs["3"], jobs["6"], jobs["7"]
    assert (three.state, three.gpus, three.gpu_types, three.time_limit_s) == ("PENDING", 4, ("p100",), 300)
    assert (six.time_limit_s, six.gpu_types, six.held) == (None, ("m40",), False)
    assert (seven.priority, seven.reason, seven.held) == (0, "JobHeldUser", True)


def test_sinfo_v0038_recorded() -> None:
    nodes = {n.name: n for n in parse_sinfo_json(read("sinfo-22.05-v0.0.38.json")).nodes}
    assert sorted(nodes) == ["k80-0", "k80-1", "m40-0", "p100-0", "p100-1"]
    assert nodes["k80-0"] == SlurmNode(
        name="k80-0",
        states=("MIXED",),
        cpus=28,
        alloc_cpus=1,
        mem_mib=65536,
        alloc_mem_mib=4096,
        gpus=2,
        gpus_used=2,
        gpu_types=("k80",),
        features=("k80-2gpu", "k80"),
        partitions=("gpu", "debug"),
    )
    assert (nodes["p100-0"].alloc_cpus, nodes["p100-0"].alloc_mem_mib, nodes["p100-0"].gpus_used) == (
        16,
        65536,
        4,
    )


def test_snapshot_from_recorded_v0038() -> None:
    queue = parse_squeue_json(read("squeue-22.05-v0.0.38.json"))
    nodes = parse_sinfo_json(read("sinfo-22.05-v0.0.38.json"))
    snap = snapshot(queue.jobs, nodes.nodes)
    # the held job 7 is left out (a priority would release it)
    assert [(p.job_id, p.gpus, p.gpu_types, p.est_runtime_s) for p in snap.pending] == [
        ("3", 4, ("P100",), 300.0),
        ("6", 1, ("M40",), 3600.0),  # no time limit: the configured default
    ]
    assert snap.pending[0].qos == "normal"  # no accounting: Slurm prints no QOS
    assert [(r.job_id, r.nodes, r.gpus) for r in snap.running] == [
        ("1", ("p100-0",), 4),
        ("2", ("p100-1",), 4),
        ("4", ("k80-0",), 2),
        ("5", ("m40-0",), 1),
    ]
    free = {n.name: (n.group, n.free_gpus, n.free_cpus_milli, n.free_mem_mib, n.state) for n in snap.nodes}
    assert free == {
        "k80-0": ("k80-2gpu", 0, 27_000, 61_440, "up"),
        "k80-1": ("k80-2gpu", 2, 28_000, 65_536, "up"),
        "m40-0": ("m40-1gpu", 0, 13_000, 28_672, "up"),
        "p100-0": ("p100-4gpu", 0, 40_000, 63_264, "up"),
        "p100-1": ("p100-4gpu", 0, 55_000, 124_704, "up"),
    }
    views = snapshot_views(snap, SPEC)
    assert views.job_ids == ("3", "6") and views.excluded == ()


def test_text_output_recorded() -> None:
    jobs = {j.job_id: j for j in parse_squeue_text(read("squeue-22.05.txt")).jobs}
    assert sorted(jobs) == ["1", "2", "3", "4", "5", "6", "7"]
    one = jobs["1"]
    assert (one.state, one.priority, one.qos, one.submit_s, one.start_s, one.end_s) == (
        "CANCELLED",
        1143,
        "",
        1795370913,
        1795370915,
        1795370961,
    )
    assert (one.cpus, one.mem_mib, one.gpus, one.gpu_types, one.nodes) == (
        16,
        65536,
        4,
        ("p100",),
        ("p100-0",),
    )
    assert (jobs["5"].time_limit_s, jobs["6"].time_limit_s, jobs["6"].end_s) == (31_536_000, None, None)
    assert (jobs["4"].gpus, jobs["4"].gpu_types) == (2, ())  # text has no gres_detail: the request
    assert jobs["7"].held and jobs["3"].start_s == 1795370964
    nodes = {n.name: n for n in parse_sinfo_text(read("sinfo-22.05.txt")).nodes}
    assert nodes["k80-0"].partitions == ("gpu", "debug")  # one line per partition, merged; "*" dropped
    assert (nodes["k80-0"].gpus, nodes["k80-0"].gpus_used, nodes["k80-0"].cpus) == (2, 0, 28)
    assert (nodes["p100-0"].alloc_cpus, nodes["p100-0"].alloc_mem_mib, nodes["p100-0"].gpus_used) == (
        1,
        4096,
        4,
    )
    assert nodes["m40-0"].features == ("m40-1gpu", "m40")


# -- 23.02 / 23.11, data_parser (hand-written from the documentation) -----------------------------


def test_squeue_data_parser() -> None:
    queue = parse_squeue_json(read("squeue-23.11-data_parser.json"))
    assert queue.layout == "data_parser"
    jobs = {j.job_id: j for j in queue.jobs}
    assert sorted(jobs) == ["101", "102", "103", "104", "105", "109_1"]
    a = jobs["101"]
    assert (a.state, a.priority, a.cpus, a.mem_mib, a.gpus, a.gpu_types) == (
        "RUNNING",
        1143,
        16,
        65536,
        4,
        ("p100",),
    )
    assert (a.start_s, a.end_s, a.time_limit_s, a.user, a.qos) == (
        1795370915,
        1795371515,
        600,
        "alice",
        "normal",
    )
    b = jobs["102"]  # 8 CPUs x 4096 MiB per CPU; an infinite time limit
    assert (b.mem_mib, b.time_limit_s, b.gpus, b.gpu_types, b.qos, b.partition) == (
        32768,
        None,
        2,
        ("k80",),
        "sla",
        "debug",
    )
    assert jobs["103"].held
    task = jobs["109_1"]  # array task: "<array job>_<task>"
    assert (task.gpus, task.gpu_types, task.partition, task.time_limit_s) == (3, (), "gpu,debug", 5400)
    assert (jobs["104"].state, jobs["104"].start_s, jobs["104"].end_s) == (
        "COMPLETED",
        1795370920,
        1795370980,
    )
    c = jobs["105"]
    assert (c.state, c.nodes, c.gpus, c.node_count) == ("COMPLETING", ("p100-0", "p100-1"), 4, 2)


@pytest.mark.parametrize("name", ["sinfo-23.11-data_parser.json", "sinfo-23.02-data_parser.json"])
def test_sinfo_data_parser(name: str) -> None:
    parsed = parse_sinfo_json(read(name))
    assert parsed.layout == "data_parser"
    nodes = {n.name: n for n in parsed.nodes}
    assert sorted(nodes) == ["k80-0", "k80-1", "m40-0", "p100-0", "p100-1"]
    assert sorted(nodes["k80-0"].partitions) == ["debug", "gpu"]
    assert (nodes["k80-0"].alloc_cpus, nodes["k80-0"].alloc_mem_mib, nodes["k80-0"].gpus_used) == (
        8,
        32768,
        1,
    )
    assert nodes["k80-1"].states == ("IDLE", "DRAIN")
    assert nodes["p100-1"].gpus_used == 2  # "gpu:p100:2(IDX:0,2)": a comma inside the parentheses
    snap = snapshot([], parsed.nodes)
    free = {n.name: (n.free_gpus, n.free_cpus_milli, n.free_mem_mib, n.state) for n in snap.nodes}
    assert free == {
        "k80-0": (1, 20_000, 32_768, "up"),
        "k80-1": (2, 28_000, 65_536, "drain"),
        "m40-0": (1, 14_000, 32_768, "down"),
        "p100-0": (0, 39_000, 59_168, "up"),
        "p100-1": (2, 55_000, 124_704, "up"),
    }


def test_snapshot_data_parser_filters_and_orders() -> None:
    jobs = parse_squeue_json(read("squeue-23.11-data_parser.json")).jobs
    nodes = parse_sinfo_json(read("sinfo-23.11-data_parser.json")).nodes
    snap = snapshot(jobs, nodes)
    assert [p.job_id for p in snap.pending] == ["102", "109_1"]  # by submit time; 103 is held
    assert (snap.pending[1].partition, snap.pending[0].mem_mib, snap.pending[0].cpus_milli) == (
        "gpu",
        32768,
        8000,
    )
    assert [r.job_id for r in snap.running] == ["101", "105"]
    only_gpu = snapshot(jobs, nodes, JobFilter(frozenset({"gpu"}), frozenset({"sla"})))
    assert [p.job_id for p in only_gpu.pending] == ["109_1"]


# -- malformed output: an error naming the command and the field, never a traceback ---------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("squeue: error: something\n", "squeue --json: output is not JSON"),
        ("[]", "squeue --json: output is not a JSON object"),
        ('{"meta": {}}', "squeue --json: output has no 'jobs' list"),
        ('{"jobs": [{"job_id": 5}]}', "jobs[0] (job 5): field 'job_state' missing"),
        (
            '{"jobs": [{"job_id": "x", "job_state": "PENDING"}]}',
            "jobs[0] (job 'x').job_id: expected a number",
        ),
        (
            '{"jobs": [{"job_id": 5, "job_state": 3, "partition": "p", "submit_time": 1}]}',
            "jobs[0] (job 5).job_state: expected a state string",
        ),
        (
            '{"jobs": [{"job_id": 5, "job_state": "PENDING", "partition": "p", "submit_time": 1,'
            ' "tres_per_node": "gres:gpu:a:b:c"}]}',
            "jobs[0] (job 5).tres_per_node: cannot read GRES entry",
        ),
        (
            '{"errors": [{"description": "Unable to contact slurm controller"}], "jobs": []}',
            "Unable to contact",
        ),
    ],
)
def test_malformed_squeue_json(raw: str, expected: str) -> None:
    with pytest.raises(SlurmCommandError) as err:
        parse_squeue_json(raw)
    assert expected in str(err.value)
    assert str(err.value).startswith("squeue --json")


def test_errors_list_marks_controller_unreachable() -> None:
    doc = {"errors": [{"description": "Unable to contact slurm controller (connect failure)"}], "jobs": []}
    with pytest.raises(SlurmCommandError) as err:
        parse_squeue_json(json.dumps(doc))
    assert err.value.unreachable


def test_malformed_text_names_line_and_field() -> None:
    with pytest.raises(SlurmCommandError, match=r"^squeue -h .*line 2: expected 16"):
        parse_squeue_text(read("squeue-22.05.txt").splitlines()[0] + "\nonly|three|fields\n")
    bad = read("squeue-22.05.txt").splitlines()[0].replace("3:00", "three minutes")
    with pytest.raises(SlurmCommandError, match=r"line 1 \(job '4'\) time limit: expected a duration"):
        parse_squeue_text(bad)
    with pytest.raises(SlurmCommandError, match=r"^sinfo .*CPUs: expected allocated/idle/other/total"):
        parse_sinfo_text("k80-0|idle|lots|65536|0|gpu:k80:2|gpu:k80:0|f|gpu|\n")
    with pytest.raises(
        SlurmCommandError, match=r"sinfo -N --json: sinfo\[0\].nodes.nodes: expected exactly one"
    ):
        parse_sinfo_json('{"sinfo": [{"nodes": {"nodes": ["a", "b"]}}]}')


# -- sacct and outcomes -----------------------------------------------------------------------------


def test_sacct_completion_file_recorded() -> None:
    finished = {f.job_id: f for f in parse_sacct(read("sacct-c-22.05.txt"))}
    assert set(finished) == {"1", "4", "208"}
    one = finished["1"]
    assert (one.state, one.start_s, one.end_s, one.ran) == ("CANCELLED", 1795370915, 1795370961, True)
    # cancelled while pending: Slurm stamps start = end, but no node ever ran it
    assert (finished["208"].start_s, finished["208"].end_s, finished["208"].ran) == (
        1795372127,
        1795372127,
        False,
    )
    tracker = OutcomeTracker("slurm", None, accounting="none")
    assert tracker._outcome(finished["208"], 1, "c") is None
    assert tracker._outcome(finished["4"], 2, "c") is not None
    got = parse_sacct("7|CANCELLED by 0|1|2|3|n1\n7.batch|CANCELLED|1|2|3|n1\n8|RUNNING|1|2|Unknown|n[1-2]\n")
    assert [(f.job_id, f.state, f.end_s) for f in got] == [("7", "CANCELLED", 3), ("8", "RUNNING", None)]
    with pytest.raises(SlurmCommandError, match="line 1: expected 6"):
        parse_sacct("7|COMPLETED\n")


def test_outcomes_from_queue_transitions() -> None:
    before = parse_squeue_json(read("squeue-22.05-v0.0.38.json")).jobs
    after = parse_squeue_json(read("squeue-22.05-v0.0.38-finished.json")).jobs
    tracker = OutcomeTracker("slurm", None, accounting="none")
    assert tracker.update(before, 1795370950.0, "snap-1") == []
    tracker.note_correlation(["1"], "decision-1")
    outcomes = {o.job_id: o for o in tracker.update(after, 1795370970.0, "snap-2")}
    assert set(outcomes) == {"1", "4"}
    one = outcomes["1"]
    assert (one.status, one.submit_s, one.start_s, one.end_s, one.gpus) == (
        "cancelled",
        1795370913,
        1795370915,
        1795370961,
        4,
    )
    assert (one.correlation_id, outcomes["4"].correlation_id) == ("decision-1", "snap-2")
    assert tracker.update(after, 1795370990.0, "snap-3") == []  # reported once
    # a running job that vanished unseen (no accounting): ended by the poll that missed it
    gone = tracker.update([j for j in after if j.job_id != "2"], 1795371000.0, "snap-4")
    assert [(o.job_id, o.status, o.start_s, o.end_s) for o in gone] == [
        ("2", "completed", 1795370915, 1795371000)
    ]


class _Accounting(CommandRunner):
    """sacct's answers, one per call, as slurmdbd gives them while it catches up."""

    def __init__(self, answers: list[str]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, ...]] = []

    def run(self, argv: Sequence[str], *, check: bool = True) -> CommandResult:
        self.calls.append(tuple(argv))
        out = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return CommandResult(tuple(argv), out, "", 0)


def running_job(job_id: str) -> SlurmJob:
    return SlurmJob(
        job_id=job_id, state="RUNNING", priority=1, partition="gpu", qos="normal", user="u",
        submit_s=10.0, start_s=20.0, end_s=None, time_limit_s=600.0, cpus=1, mem_mib=1024,
        node_count=1, nodes=("n1",), gpus=2, gpu_types=("p100",),
    )  # fmt: skip


def test_a_vanished_job_that_accounting_still_lists_running_is_looked_up_again() -> None:
    """slurmdbd lags the controller: the job left squeue but sacct still says RUNNING. The
    tracker asks again at the next polls and reports the real end once accounting has it."""
    runner = _Accounting(
        ["8|RUNNING|10|20|Unknown|n1\n", "8|RUNNING|10|20|Unknown|n1\n", "8|COMPLETED|10|20|95|n1\n"]
    )
    tracker = OutcomeTracker("slurm", runner, accounting="auto")
    tracker.update([running_job("8")], 50.0, "snap-1")
    assert tracker.update([], 100.0, "snap-2") == []
    assert tracker.update([], 110.0, "snap-3") == []
    (done,) = tracker.update([], 120.0, "snap-4")
    assert (done.job_id, done.status, done.start_s, done.end_s, done.gpus) == ("8", "completed", 20, 95, 2)
    assert tracker.update([], 130.0, "snap-5") == []  # reported once
    assert len(runner.calls) == 3


def test_accounting_that_never_catches_up_falls_back_to_the_transition() -> None:
    runner = _Accounting(["8|RUNNING|10|20|Unknown|n1\n"])
    tracker = OutcomeTracker("slurm", runner, accounting="auto")
    tracker.update([running_job("8")], 50.0, "snap-1")
    for k in range(ACCOUNTING_LAG_POLLS):
        assert tracker.update([], 100.0 + k, f"snap-{k}") == []
    (done,) = tracker.update([], 500.0, "snap-last")
    assert (done.status, done.start_s, done.end_s) == ("completed", 20, 500)
