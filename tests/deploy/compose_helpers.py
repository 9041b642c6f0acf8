"""Reading docker-compose.yml the way Compose does, for tests that run without Docker Compose.

Why our own interpolation: the test must resolve ``${VAR:-default}`` to check host ports without the
compose binary; only the forms the file uses are supported, and an unsupported form fails loudly.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"

_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?-)(?P<default>[^}]*))?\}|\$\$")


def interpolate(value: str, env: dict[str, str] | None = None) -> str:
    """``${X}``, ``${X:-d}``, ``${X-d}`` and ``$$`` as Compose resolves them (empty env by default)."""
    env = env or {}

    def repl(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name, op, default = m.group("name"), m.group("op"), m.group("default") or ""
        if op == ":-":
            return env.get(name) or default
        if op == "-":
            return env.get(name, default)
        return env.get(name, "")

    out = _VAR.sub(repl, value)
    if "${" in out:
        raise ValueError(f"unsupported interpolation in {value!r}")
    return out


def load() -> dict[str, Any]:
    doc = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(doc, dict)
    return doc


def services() -> dict[str, dict[str, Any]]:
    svc = load()["services"]
    assert isinstance(svc, dict)
    return svc


def published_ports(service: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(host ip, host port, container port) of each short-syntax ``ports`` entry, interpolated."""
    out = []
    for entry in service.get("ports", []):
        parts = interpolate(str(entry)).split(":")
        assert len(parts) == 3, f"ports entry {entry!r}: expected ip:host:container"
        out.append((parts[0], int(parts[1]), int(parts[2].split("/")[0])))
    return out
