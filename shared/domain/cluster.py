"""Cluster spec files: node groups of identical nodes, validated by pydantic.

A cluster is a list of node groups. A group is ``count`` identical nodes of one GPU type with the
same GPUs, CPUs and memory per node, belonging to a set of partitions (VCs). Keeping groups (not
single nodes) in the spec keeps the 1,213-node Alibaba cluster a 15-line file, and lets the
simulator and the placer aggregate identical nodes.

Specs are TOML (or YAML) files. The presets shipped with Hylo live in ``shared/presets/`` and are
addressed by name (``philly``, ``alibaba-openb`` ...); anything else is a path.
"""

from __future__ import annotations

import tomllib
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class SpecError(ValueError):
    """A cluster spec that cannot be used; the message names the file and the field."""


class NodeGroup(BaseModel):
    """``count`` identical nodes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    gpu_type: str = Field(min_length=1, description="GPU model, e.g. V100M32; matches trace types")
    count: int = Field(ge=1, description="number of nodes")
    gpus: int = Field(ge=0, le=64, description="GPUs per node")
    cpus: float = Field(gt=0, description="CPU cores per node")
    mem_gib: float = Field(gt=0, description="memory per node, GiB")
    partitions: tuple[str, ...] = Field(
        default=(), description="partitions/VCs the nodes belong to; empty = every partition"
    )

    @property
    def cpus_milli(self) -> int:
        return round(self.cpus * 1000)

    @property
    def mem_mib(self) -> int:
        return round(self.mem_gib * 1024)


class JobDefaults(BaseModel):
    """Requests assumed for jobs whose trace gives none (Philly has no CPU or memory columns)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpus_per_gpu: float = Field(default=4.0, ge=0, description="as the paper's Slurm testbed")
    mem_gib_per_gpu: float = Field(default=16.0, ge=0)
    cpus_cpu_only: float = Field(default=1.0, gt=0, description="CPUs of a job with no GPU")
    mem_gib_cpu_only: float = Field(default=4.0, gt=0)


class OfferedLoad(BaseModel):
    """How busy a trace keeps this cluster: mean busy GPUs / GPU capacity over the trace span."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: float = Field(ge=0)
    trace: str = Field(description="trace file the load was measured on")
    method: str = Field(default="sum(gpus x runtime) / (capacity x (last submit - first submit))")


class Partition(BaseModel):
    """Slurm-style partition factor input (PriorityJobFactor)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    priority_job_factor: int = Field(default=1, ge=0)


class Qos(BaseModel):
    """Slurm-style QOS priority (normalized by the largest QOS priority)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    priority: int = Field(default=0, ge=0)


class ClusterSpec(BaseModel):
    """A whole cluster: node groups, request defaults, and the offered load of its reference trace."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    description: str = ""
    node_groups: tuple[NodeGroup, ...] = Field(min_length=1)
    defaults: JobDefaults = JobDefaults()
    offered_load: OfferedLoad | None = None
    partitions: dict[str, Partition] = Field(default_factory=dict)
    qos: dict[str, Qos] = Field(default_factory=dict)
    cpu_only_jobs: Literal["exclude", "run"] = Field(
        default="exclude",
        description="jobs asking for 0 GPUs: excluded (GPU clusters) or run on CPU/memory only",
    )

    @model_validator(mode="after")
    def _unique_group_names(self) -> ClusterSpec:
        names = [g.name for g in self.node_groups]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"node group names must be unique, repeated: {dupes}")
        return self

    @cached_property
    def total_gpus(self) -> int:
        return sum(g.count * g.gpus for g in self.node_groups)

    @cached_property
    def total_nodes(self) -> int:
        return sum(g.count for g in self.node_groups)

    @cached_property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(sorted({g.gpu_type for g in self.node_groups}))

    def gpus_of_type(self, gpu_type: str) -> int:
        return sum(g.count * g.gpus for g in self.node_groups if g.gpu_type == gpu_type)


PRESET_PACKAGE = "shared.presets"


def preset_names() -> list[str]:
    """Names of the cluster presets shipped with Hylo."""
    files = resources.files(PRESET_PACKAGE).iterdir()
    return sorted(p.name[: -len(".toml")] for p in files if p.name.endswith(".toml"))


def _format_validation_error(origin: str, err: ValidationError) -> str:
    lines = [f"invalid cluster spec {origin}:"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        lines.append(f"  {loc}: {e['msg']}")
    return "\n".join(lines)


def parse_cluster_spec(data: dict[str, Any], origin: str) -> ClusterSpec:
    """Validate a parsed spec document; errors name the origin file and each bad field."""
    try:
        return ClusterSpec.model_validate(data)
    except ValidationError as err:
        raise SpecError(_format_validation_error(origin, err)) from None


def _read_document(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    if path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise SpecError(f"cluster spec {path}: not valid YAML: {err}") from None
        if not isinstance(doc, dict):
            raise SpecError(f"cluster spec {path}: expected a mapping at the top level")
        return doc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise SpecError(f"cluster spec {path}: not valid TOML: {err}") from None


def load_cluster_spec(name_or_path: str | Path) -> ClusterSpec:
    """Load a preset by name (see ``preset_names()``) or a spec file by path."""
    key = str(name_or_path)
    if key in preset_names():
        ref = resources.files(PRESET_PACKAGE) / f"{key}.toml"
        return parse_cluster_spec(tomllib.loads(ref.read_text(encoding="utf-8")), f"preset {key!r}")
    path = Path(key)
    if not path.exists():
        raise SpecError(
            f"cluster spec {key!r}: no such file and no such preset (presets: {', '.join(preset_names())})"
        )
    return parse_cluster_spec(_read_document(path), str(path))
