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


#: where the compose file reads its generated secrets from (deploy/secrets/generate writes them)
SECRETS_PREFIX = "./deploy/secrets/"


def generate_secrets(out: Path) -> Path:
    """Run ``deploy/secrets/generate`` with its output in ``out`` (never the repository's folder)."""
    import os
    import subprocess
    import sys

    hylo = Path(sys.executable).parent / "hylo"
    env = {**os.environ, "HYLO_SECRETS_DIR": str(out), "HYLO": str(hylo)}
    result = subprocess.run(
        ["bash", str(ROOT / "deploy" / "secrets" / "generate")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def host_file(source: str, secrets: Path) -> Path:
    """A compose file path (``./...``) on this machine, generated secrets read from ``secrets``."""
    if source.startswith(SECRETS_PREFIX):
        return secrets / source.removeprefix(SECRETS_PREFIX)
    return ROOT / source


def secret_mounts(service: dict[str, Any], secrets: Path) -> dict[str, Path]:
    """``/run/secrets/<target>`` -> the generated file, for each secret ``service`` is given."""
    declared = load()["secrets"]
    mounts: dict[str, Path] = {}
    for entry in service.get("secrets", []):
        source, target = (entry, entry) if isinstance(entry, str) else (entry["source"], entry.get("target"))
        mounts[f"/run/secrets/{target or source}"] = host_file(declared[source]["file"], secrets)
    return mounts
