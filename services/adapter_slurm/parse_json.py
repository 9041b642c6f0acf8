"""``squeue --json`` and ``sinfo --json`` in both layouts Slurm has printed.

- **v0.0.38** (Slurm 22.05, ``meta.plugin.type = "openapi/v0.0.38"``): plain numbers (absent ones
  ``null``), ``job_state`` a string, node ``state`` a lower-case string plus ``state_flags``,
  ``sinfo`` gives a ``nodes`` list.
- **data_parser** (23.02+, ``meta.plugin.data_parser``): numbers wrapped as ``{"set", "infinite",
  "number"}``, states as lists of flags (``["PENDING"]``, ``["IDLE", "DRAIN"]``); ``sinfo`` gives a
  ``nodes`` list (23.02) or, from 23.11, a ``sinfo`` list of (node set, partition) entries.

Why one tolerant reader per command and not one per version: the two layouts share field names and
differ in wrapping; ``values.number``/``values.states`` absorb the wrapping, and a field missing in
the layout at hand is an error naming the command, the job or node and the field. Only what Hylo
needs is read; anything else may change without breaking the adapter.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from services.adapter_slurm import values as v
from services.adapter_slurm.commands import SlurmCommandError
from services.adapter_slurm.model import Layout, SlurmJob, SlurmNode, SlurmNodes, SlurmQueue

#: base job states (data_parser lists them with flags such as COMPLETING, REQUEUED)
_BASE_STATES = (
    "PENDING",
    "RUNNING",
    "SUSPENDED",
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
)


def _object(value: Any) -> dict[str, Any]:
    """An optional sub-object: absent or not an object reads as empty."""
    return value if isinstance(value, dict) else {}


def _document(command: str, raw: str, key: str) -> tuple[dict[str, Any], Layout]:
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as err:
        raise SlurmCommandError(command, f"output is not JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(doc, dict):
        raise SlurmCommandError(command, "output is not a JSON object")
    errors = doc.get("errors") or []
    if errors:
        described = "; ".join(
            str(e.get("description") or e.get("error") or e) if isinstance(e, dict) else str(e)
            for e in errors[:5]
        )
        raise SlurmCommandError(command, f"Slurm reported errors: {described}", unreachable=True)
    if key not in doc and not (key == "nodes" and "sinfo" in doc):
        raise SlurmCommandError(command, f"output has no {key!r} list (keys: {sorted(doc)[:10]})")
    meta = _object(doc.get("meta"))
    plugin = _object(meta.get("plugin"))
    layout: Layout = "data_parser"
    if str(plugin.get("type", "")).startswith("openapi/v0.0.3") and not plugin.get("data_parser"):
        layout = "v0.0.38"
    return doc, layout


def _get(record: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in record:
        raise ValueError(f"{where}: field {key!r} missing")
    return record[key]


def _job_state(value: Any, where: str) -> str:
    flags = v.states(value, f"{where}.job_state")
    if "COMPLETING" in flags:
        return "COMPLETING"
    if "CONFIGURING" in flags:
        return "CONFIGURING"
    for flag in flags:
        if flag in _BASE_STATES:
            return flag
    return flags[0] if flags else "UNKNOWN"


def _job_id(record: Mapping[str, Any], where: str) -> str:
    job_id = v.integer(_get(record, "job_id", where), f"{where}.job_id")
    if job_id is None or job_id <= 0:
        raise ValueError(f"{where}.job_id: expected a positive job id, got {record.get('job_id')!r}")
    array_job = v.integer(record.get("array_job_id"), f"{where}.array_job_id")
    task = v.integer(record.get("array_task_id"), f"{where}.array_task_id")
    if array_job and task is not None:
        return f"{array_job}_{task}"
    return str(job_id)


def _job_gpus(record: Mapping[str, Any], state: str, node_count: int, where: str) -> v.Gpus:
    if state != "PENDING":
        # allocated GPUs: gres_detail has one entry per allocated node
        detail = record.get("gres_detail") or []
        if isinstance(detail, list) and detail:
            found = [v.gpus(str(d), f"{where}.gres_detail") for d in detail]
            return v.Gpus(sum(g.count for g in found), tuple(sorted({t for g in found for t in g.types})))
        alloc = v.gpus(
            v.text(record.get("tres_alloc_str"), f"{where}.tres_alloc_str"), f"{where}.tres_alloc_str"
        )
        if alloc.count:
            return alloc
    per_job = v.gpus(v.text(record.get("tres_per_job"), f"{where}.tres_per_job"), f"{where}.tres_per_job")
    if per_job.count:
        return per_job
    per_node = v.gpus(v.text(record.get("tres_per_node"), f"{where}.tres_per_node"), f"{where}.tres_per_node")
    if per_node.count:
        return v.Gpus(per_node.count * max(1, node_count), per_node.types)
    per_task = v.gpus(v.text(record.get("tres_per_task"), f"{where}.tres_per_task"), f"{where}.tres_per_task")
    if per_task.count:
        tasks = v.integer(record.get("tasks"), f"{where}.tasks") or 1
        return v.Gpus(per_task.count * tasks, per_task.types)
    return v.gpus(v.text(record.get("tres_req_str"), f"{where}.tres_req_str"), f"{where}.tres_req_str")


def _node_list(value: Any, where: str) -> str:
    """A job's nodes: a host list string; tolerate an object with a ``list`` (as job_resources has)."""
    if isinstance(value, dict):
        value = value.get("list", value.get("nodes", ""))
    if isinstance(value, list):
        return ",".join(str(x) for x in value)
    return v.text(value, where)


def _job(record: Any, index: int) -> SlurmJob:
    if not isinstance(record, dict):
        raise ValueError(f"jobs[{index}]: expected an object")
    where = f"jobs[{index}] (job {record.get('job_id')!r})"
    job_id = _job_id(record, where)
    state = _job_state(_get(record, "job_state", where), where)
    node_count = v.integer(record.get("node_count"), f"{where}.node_count") or 1
    cpus = v.integer(record.get("cpus"), f"{where}.cpus")
    per_node = v.integer(record.get("memory_per_node"), f"{where}.memory_per_node")
    per_cpu = v.integer(record.get("memory_per_cpu"), f"{where}.memory_per_cpu")
    if per_node:
        mem: int | None = per_node * node_count
    elif per_cpu and cpus:
        mem = per_cpu * cpus
    else:
        mem = None
    limit_min = v.number(record.get("time_limit"), f"{where}.time_limit")
    submit = v.number(_get(record, "submit_time", where), f"{where}.submit_time")
    if submit is None:
        raise ValueError(f"{where}.submit_time: missing")
    start = v.number(record.get("start_time"), f"{where}.start_time") or None
    end = v.number(record.get("end_time"), f"{where}.end_time") or None
    gpus = _job_gpus(record, state, node_count, where)
    priority = v.integer(record.get("priority"), f"{where}.priority")
    user = v.text(record.get("user_name"), f"{where}.user_name") or str(record.get("user_id", "unknown"))
    return SlurmJob(
        job_id=job_id,
        state=state,
        priority=priority,
        partition=v.text(_get(record, "partition", where), f"{where}.partition"),
        qos=v.text(record.get("qos"), f"{where}.qos"),
        user=user,
        submit_s=submit,
        start_s=start,
        end_s=end,
        time_limit_s=None if limit_min is None else limit_min * 60.0,
        cpus=cpus,
        mem_mib=mem,
        node_count=node_count,
        nodes=v.hostlist(_node_list(record.get("nodes"), f"{where}.nodes"), f"{where}.nodes"),
        gpus=gpus.count,
        gpu_types=gpus.types,
        reason=v.text(record.get("state_reason"), f"{where}.state_reason"),
    )


def parse_squeue_json(raw: str, command: str = "squeue --json") -> SlurmQueue:
    """Jobs of ``squeue --json`` (either layout); raises SlurmCommandError naming the command."""
    doc, layout = _document(command, raw, "jobs")
    records = doc["jobs"]
    if not isinstance(records, list):
        raise SlurmCommandError(command, "'jobs' is not a list")
    try:
        jobs = tuple(_job(r, i) for i, r in enumerate(records))
    except ValueError as err:
        raise SlurmCommandError(command, str(err)) from None
    return SlurmQueue(jobs=jobs, layout=layout)


def _split_list(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, list):
        return tuple(str(x) for x in value if str(x))
    return tuple(p for p in v.text(value, where).split(",") if p)


def _node_v38(record: Mapping[str, Any], where: str) -> SlurmNode:
    """A ``nodes`` entry (v0.0.38, and 23.02's data_parser with wrapped numbers and state lists)."""
    name = v.text(_get(record, "name", where), f"{where}.name")
    state = v.states(_get(record, "state", where), f"{where}.state")
    flags = record.get("state_flags") or []
    state = state + v.states(flags, f"{where}.state_flags") if flags else state
    gres = v.gpus(v.text(record.get("gres"), f"{where}.gres"), f"{where}.gres")
    used = v.gpus(v.text(record.get("gres_used"), f"{where}.gres_used"), f"{where}.gres_used")
    return SlurmNode(
        name=name,
        states=state,
        cpus=v.integer(_get(record, "cpus", where), f"{where}.cpus") or 0,
        alloc_cpus=v.integer(record.get("alloc_cpus"), f"{where}.alloc_cpus") or 0,
        mem_mib=v.integer(_get(record, "real_memory", where), f"{where}.real_memory") or 0,
        alloc_mem_mib=v.integer(record.get("alloc_memory"), f"{where}.alloc_memory") or 0,
        gpus=gres.count,
        gpus_used=used.count,
        gpu_types=gres.types,
        features=_split_list(record.get("active_features", record.get("features")), f"{where}.features"),
        partitions=_split_list(record.get("partitions"), f"{where}.partitions"),
    )


def _section(record: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = _get(record, key, where)
    if not isinstance(value, dict):
        raise ValueError(f"{where}.{key}: expected an object")
    return value


def _node_sinfo(record: Mapping[str, Any], where: str) -> SlurmNode:
    """An entry of 23.11+'s ``sinfo`` list (one node with ``sinfo -N``, one partition)."""
    nodes = _section(record, "nodes", where)
    names = nodes.get("nodes") or []
    if not isinstance(names, list) or len(names) != 1:
        raise ValueError(
            f"{where}.nodes.nodes: expected exactly one node per entry (sinfo -N), got {names!r}"
        )
    name = str(names[0])
    where = f"{where} (node {name!r})"
    cpus = _section(record, "cpus", where)
    memory = _section(record, "memory", where)
    gres = _object(record.get("gres"))
    features = _object(record.get("features"))
    node = _section(record, "node", where)
    partition = _object(record.get("partition"))
    total = v.gpus(v.text(gres.get("total"), f"{where}.gres.total"), f"{where}.gres.total")
    used = v.gpus(v.text(gres.get("used"), f"{where}.gres.used"), f"{where}.gres.used")
    return SlurmNode(
        name=name,
        states=v.states(_get(node, "state", where), f"{where}.node.state"),
        cpus=v.integer(_get(cpus, "total", f"{where}.cpus"), f"{where}.cpus.total") or 0,
        alloc_cpus=v.integer(cpus.get("allocated"), f"{where}.cpus.allocated") or 0,
        mem_mib=v.integer(_get(memory, "maximum", f"{where}.memory"), f"{where}.memory.maximum") or 0,
        alloc_mem_mib=v.integer(memory.get("allocated"), f"{where}.memory.allocated") or 0,
        gpus=total.count,
        gpus_used=used.count,
        gpu_types=total.types,
        features=_split_list(features.get("active", features.get("total")), f"{where}.features"),
        partitions=(v.text(partition.get("name"), f"{where}.partition.name"),) if partition else (),
    )


def parse_sinfo_json(raw: str, command: str = "sinfo -N --json") -> SlurmNodes:
    """Nodes of ``sinfo -N --json`` (v0.0.38 ``nodes``, 23.02 ``nodes``, 23.11+ ``sinfo``)."""
    doc, layout = _document(command, raw, "nodes")
    key = "sinfo" if "sinfo" in doc else "nodes"
    records = doc[key]
    if not isinstance(records, list):
        raise SlurmCommandError(command, f"{key!r} is not a list")
    by_name: dict[str, SlurmNode] = {}
    try:
        for i, r in enumerate(records):
            if not isinstance(r, dict):
                raise ValueError(f"{key}[{i}]: expected an object")
            node = _node_sinfo(r, f"{key}[{i}]") if key == "sinfo" else _node_v38(r, f"{key}[{i}]")
            seen = by_name.get(node.name)
            if seen is not None:  # one entry per partition: merge the partition lists
                node = SlurmNode(**{**node.__dict__, "partitions": seen.partitions + node.partitions})
            by_name[node.name] = node
    except ValueError as err:
        raise SlurmCommandError(command, str(err)) from None
    return SlurmNodes(nodes=tuple(by_name.values()), layout=layout)
