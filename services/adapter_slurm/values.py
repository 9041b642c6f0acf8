"""Slurm's value notations: GRES strings, memory sizes, durations, host lists, wrapped numbers.

Why one module of small pure functions: the JSON layouts of 22.05 and 23.02+ and the text output
all carry the same notations (``gres:gpu:p100:4``, ``4G``, ``1-00:00:00``, ``p100-[0-1]``), only
wrapped differently; parsing them once, strictly, keeps the three parsers consistent. Every function
raises ``ValueError`` with the offending text, which the parsers turn into an error naming the
command and field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

#: sentinels Slurm prints for "no value": NO_VAL and INFINITE of 32 and 64 bits
_SENTINELS = {0xFFFFFFFE, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFE, 0xFFFFFFFFFFFFFFFF}
_NONE_TEXT = {"", "n/a", "none", "(null)", "unlimited", "infinite", "not_set", "unknown"}


def number(value: Any, field: str) -> float | None:
    """A number as either layout gives it: plain (v0.0.38) or ``{set, infinite, number}``.

    None, unset, infinite and Slurm's NO_VAL/INFINITE sentinels all mean "no value".
    """
    if value is None:
        return None
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")
        if value is None:
            return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{field}: expected a number, got {value!r}")
    if not math.isfinite(value) or value in _SENTINELS:
        return None
    return float(value)


def integer(value: Any, field: str) -> int | None:
    found = number(value, field)
    return None if found is None else int(found)


def text(value: Any, field: str) -> str:
    """A string field; None and Slurm's ``(null)`` become ''."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{field}: expected a string, got {value!r}")
    return "" if value == "(null)" else value


def states(value: Any, field: str) -> tuple[str, ...]:
    """A state as a string (v0.0.38: ``"RUNNING"``, text: ``mixed+drain``) or a list (data_parser)."""
    if isinstance(value, str):
        parts = re.split(r"[+,\s]+", value.strip())
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        parts = list(value)
    else:
        raise ValueError(f"{field}: expected a state string or a list of states, got {value!r}")
    # sinfo marks states with suffixes: * not responding, ~ powered off, # powering up, ! ...
    return tuple(p.rstrip("*~#!%$@^-").upper() for p in parts if p.strip("*~#!%$@^-"))


def _split_top(value: str) -> Iterator[str]:
    """Split on commas outside parentheses (``gpu:p100:2(IDX:0,2),shard:1``)."""
    depth, start = 0, 0
    for i, ch in enumerate(value):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            yield value[start:i]
            start = i + 1
    yield value[start:]


@dataclass(frozen=True)
class Gpus:
    """GPUs in a GRES/TRES string: the count and the types named (empty = any type)."""

    count: int
    types: tuple[str, ...]


_GRES_ITEM = re.compile(r"^(?:gres[:/])?(?P<name>[A-Za-z0-9_.-]+)(?P<rest>(?::[^:=()]+)*)(?:=(?P<eq>\d+))?$")


def gpus(value: str, field: str) -> Gpus:
    """GPUs of a GRES or TRES string, any of the notations Slurm prints.

    ``gres:gpu:p100:4`` (22.05 tres_per_node), ``gres/gpu:p100:4`` (23.11+), ``gpu:k80:2(IDX:0-1)``
    (sinfo gres, gres_used), ``gpu:4``, ``gpu`` (one), ``gres/gpu=2`` and ``gres/gpu:p100=2``
    (TRES strings). Other resources (``cpu=4``, ``shard:2``) are ignored; typed and untyped entries of
    the same GPUs (``gres/gpu=2,gres/gpu:p100=2``) count once.
    """
    value = value.strip()
    if value.lower() in _NONE_TEXT:
        return Gpus(0, ())
    untyped = 0
    typed: dict[str, int] = {}
    for raw in _split_top(value):
        item = re.sub(r"\(.*\)$", "", raw.strip())
        if not item:
            continue
        m = _GRES_ITEM.match(item)
        if m is None:
            if "=" in item:  # cpu=4, mem=4G, billing=1: not GRES
                continue
            raise ValueError(f"{field}: cannot read GRES entry {raw!r} of {value!r}")
        if m.group("name").lower() != "gpu":
            continue
        parts = [p for p in m.group("rest").split(":") if p]
        count = 1
        gpu_type = ""
        if m.group("eq") is not None:
            count = int(m.group("eq"))
            if parts:
                gpu_type = parts[0]
        elif parts and parts[-1].isdigit():
            count = int(parts[-1])
            if len(parts) > 1:
                gpu_type = parts[0]
        elif parts:
            gpu_type = parts[0]
        if len(parts) > 2 or (len(parts) == 2 and not parts[-1].isdigit()):
            raise ValueError(f"{field}: cannot read GRES entry {raw!r} of {value!r}")
        if gpu_type:
            typed[gpu_type] = typed.get(gpu_type, 0) + count
        else:
            untyped += count
    total = sum(typed.values()) if typed else untyped
    return Gpus(total, tuple(sorted(typed)))


_MEM = re.compile(r"^(?P<n>\d+(?:\.\d+)?)(?P<unit>[KMGTP]?)(?:B|iB)?$", re.IGNORECASE)
_MEM_FACTOR = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}


def memory_mib(value: str, field: str) -> int | None:
    """``4G``, ``500M``, ``128800`` (MiB, Slurm's default unit) -> MiB; ``N/A`` etc. -> None."""
    value = value.strip()
    if value.lower() in _NONE_TEXT or value == "0":
        return None if value != "0" else 0
    m = _MEM.match(value)
    if m is None:
        raise ValueError(f"{field}: expected a memory size like 4096, 4G or 500M, got {value!r}")
    return round(float(m.group("n")) * _MEM_FACTOR[m.group("unit").upper()])


def duration_s(value: str, field: str) -> float | None:
    """Slurm's ``[days-]hours:minutes:seconds`` (``10:00`` is ten minutes); UNLIMITED -> None."""
    value = value.strip()
    if value.lower() in _NONE_TEXT:
        return None
    m = re.match(r"^(?:(?P<d>\d+)-)?(?P<hms>\d+(?::\d+){0,2})$", value)
    if m is None:
        raise ValueError(f"{field}: expected a duration like 1-00:00:00 or 10:00, got {value!r}")
    parts = [int(p) for p in m.group("hms").split(":")]
    if m.group("d") is not None:
        # with days the rest is hours[:minutes[:seconds]]
        parts += [0] * (3 - len(parts))
        h, mi, s = parts
    elif len(parts) == 3:
        h, mi, s = parts
    elif len(parts) == 2:
        h, mi, s = 0, parts[0], parts[1]
    else:
        h, mi, s = 0, parts[0], 0  # a bare number is minutes, as in sbatch -t
    days = int(m.group("d") or 0)
    return float(((days * 24 + h) * 60 + mi) * 60 + s)


def epoch(value: str, field: str) -> float | None:
    """A time printed with ``SLURM_TIME_FORMAT=%s``; ``N/A``/``NONE``/``Unknown``/0 -> None."""
    value = value.strip()
    if value.lower() in _NONE_TEXT or value == "0":
        return None
    if not value.isdigit():
        raise ValueError(f"{field}: expected epoch seconds (SLURM_TIME_FORMAT=%s), got {value!r}")
    return float(value)


_BRACKET = re.compile(r"\[([^\[\]]*)\]")


def hostlist(value: str, field: str) -> tuple[str, ...]:
    """Expand a Slurm host list: ``p100-[0-1],k80-0``, ``n[01-03,7]``, ``r[1-2]-n[1-2]``."""
    value = value.strip()
    if value.lower() in _NONE_TEXT:
        return ()
    out: list[str] = []
    for part in _split_brackets(value):
        out.extend(_expand_one(part, field, value))
    return tuple(out)


def _split_brackets(value: str) -> Iterator[str]:
    depth, start = 0, 0
    for i, ch in enumerate(value):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            yield value[start:i]
            start = i + 1
    yield value[start:]


def _expand_one(item: str, field: str, whole: str) -> list[str]:
    m = _BRACKET.search(item)
    if m is None:
        if not item or "[" in item or "]" in item:
            raise ValueError(f"{field}: cannot read host list {whole!r}")
        return [item]
    head, tail = item[: m.start()], item[m.end() :]
    names: list[str] = []
    for rng in m.group(1).split(","):
        lo, _, hi = rng.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"{field}: cannot read host list {whole!r}")
        width = len(lo)
        end = int(hi) if hi else int(lo)
        if end < int(lo) or end - int(lo) > 100_000:
            raise ValueError(f"{field}: bad range {rng!r} in host list {whole!r}")
        for k in range(int(lo), end + 1):
            names.extend(_expand_one(f"{head}{k:0{width}d}{tail}", field, whole))
    return names
