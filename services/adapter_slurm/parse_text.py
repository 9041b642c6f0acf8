"""The parsable text fallback: ``squeue -h -o ...`` and ``sinfo -h -N -O ...`` with ``|`` separators.

Why a fallback: ``--json`` needs Slurm built with the JSON serializer plugin (and older sites lack it);
the text formats below exist in every Slurm since 20.x. Times come as epoch seconds because the
runner sets ``SLURM_TIME_FORMAT=%s``. The job name is never requested: it is the one free-text field
a user controls and the only one that could contain the separator.

Known approximation: squeue's ``%m`` is the job's minimum memory, per node or per CPU as the job
asked; the text path takes it as per node (the JSON path knows which it is).
"""

from __future__ import annotations

from services.adapter_slurm import values as v
from services.adapter_slurm.commands import SlurmCommandError
from services.adapter_slurm.model import SlurmJob, SlurmNode, SlurmNodes, SlurmQueue

SEP = "|"
#: job id, state, priority, partition, QOS, user, submit, start, end, time limit, CPUs, min memory,
#: node count, GRES per node, nodes, reason
SQUEUE_FIELDS = (
    "%i",
    "%T",
    "%Q",
    "%P",
    "%q",
    "%u",
    "%V",
    "%S",
    "%e",
    "%l",
    "%C",
    "%m",
    "%D",
    "%b",
    "%N",
    "%r",
)
SQUEUE_FORMAT = SEP.join(SQUEUE_FIELDS)
SQUEUE_ARGS = ("squeue", "-h", "-r", "-t", "all", "-o", SQUEUE_FORMAT)

SINFO_FIELDS = (
    "NodeList",
    "StateLong",
    "CPUsState",
    "Memory",
    "AllocMem",
    "Gres",
    "GresUsed",
    "Features",
    "Partition",
)
SINFO_FORMAT = ",".join(f"{f}:{SEP}" for f in SINFO_FIELDS)
SINFO_ARGS = ("sinfo", "-h", "-N", "-O", SINFO_FORMAT)


def _int(value: str, field: str) -> int | None:
    value = value.strip()
    if value.lower() in ("", "n/a", "none", "(null)"):
        return None
    if not value.isdigit():
        raise ValueError(f"{field}: expected a whole number, got {value!r}")
    return int(value)


def _job_line(line: str, number: int) -> SlurmJob:
    cols = line.split(SEP)
    if len(cols) != len(SQUEUE_FIELDS):
        raise ValueError(
            f"line {number}: expected {len(SQUEUE_FIELDS)} '|'-separated fields, got {len(cols)}"
        )
    (
        job_id,
        state,
        prio,
        part,
        qos,
        user,
        submit,
        start,
        end,
        limit,
        cpus,
        mem,
        count,
        gres,
        nodes,
        reason,
    ) = (c.strip() for c in cols)
    where = f"line {number} (job {job_id!r})"
    submit_s = v.epoch(submit, f"{where} submit time")
    if submit_s is None:
        raise ValueError(f"{where} submit time: missing")
    node_count = _int(count, f"{where} node count") or 1
    per_node = v.gpus(gres, f"{where} GRES")
    state_flags = v.states(state, f"{where} state")
    return SlurmJob(
        job_id=job_id,
        state=state_flags[0] if state_flags else "UNKNOWN",
        priority=_int(prio, f"{where} priority"),
        partition=part,
        qos=v.text(qos, f"{where} QOS"),
        user=user,
        submit_s=submit_s,
        start_s=v.epoch(start, f"{where} start time"),
        end_s=v.epoch(end, f"{where} end time"),
        time_limit_s=v.duration_s(limit, f"{where} time limit"),
        cpus=_int(cpus, f"{where} CPUs"),
        mem_mib=(lambda m: None if m is None else m * node_count)(v.memory_mib(mem, f"{where} memory")),
        node_count=node_count,
        nodes=v.hostlist(nodes, f"{where} nodes"),
        gpus=per_node.count * node_count,
        gpu_types=per_node.types,
        reason=reason,
    )


def parse_squeue_text(raw: str, command: str = " ".join(SQUEUE_ARGS)) -> SlurmQueue:
    jobs = []
    try:
        for number, line in enumerate(raw.splitlines(), start=1):
            if line.strip():
                jobs.append(_job_line(line, number))
    except ValueError as err:
        raise SlurmCommandError(command, str(err)) from None
    return SlurmQueue(jobs=tuple(jobs), layout="text")


def _node_line(line: str, number: int) -> SlurmNode:
    cols = line.split(SEP)
    if cols and cols[-1] == "":
        cols = cols[:-1]  # every field ends with the separator
    if len(cols) != len(SINFO_FIELDS):
        raise ValueError(
            f"line {number}: expected {len(SINFO_FIELDS)} '|'-terminated fields, got {len(cols)}"
        )
    name, state, cpu_state, mem, alloc_mem, gres, gres_used, features, partition = (c.strip() for c in cols)
    where = f"line {number} (node {name!r})"
    cpu_parts = cpu_state.split("/")
    if len(cpu_parts) != 4 or not all(p.isdigit() for p in cpu_parts):
        raise ValueError(f"{where} CPUs: expected allocated/idle/other/total, got {cpu_state!r}")
    total = v.gpus(gres, f"{where} GRES")
    return SlurmNode(
        name=name,
        states=v.states(state, f"{where} state"),
        cpus=int(cpu_parts[3]),
        alloc_cpus=int(cpu_parts[0]),
        mem_mib=_int(mem, f"{where} memory") or 0,
        alloc_mem_mib=_int(alloc_mem, f"{where} allocated memory") or 0,
        gpus=total.count,
        gpus_used=v.gpus(gres_used, f"{where} GRES used").count,
        gpu_types=total.types,
        features=tuple(f for f in features.split(",") if f and f != "(null)"),
        partitions=(partition.rstrip("*"),) if partition else (),
    )


def parse_sinfo_text(raw: str, command: str = " ".join(SINFO_ARGS)) -> SlurmNodes:
    by_name: dict[str, SlurmNode] = {}
    try:
        for number, line in enumerate(raw.splitlines(), start=1):
            if not line.strip():
                continue
            node = _node_line(line, number)
            seen = by_name.get(node.name)
            if seen is not None:
                node = SlurmNode(**{**node.__dict__, "partitions": seen.partitions + node.partitions})
            by_name[node.name] = node
    except ValueError as err:
        raise SlurmCommandError(command, str(err)) from None
    return SlurmNodes(nodes=tuple(by_name.values()), layout="text")
