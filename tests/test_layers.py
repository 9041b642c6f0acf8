"""Hylo's packages import only downward, and never in a cycle (issue 18, item 5).

Why a test: the layering is what lets a newcomer read the code bottom up (docs/architecture.md)
and lets a lower layer change without reading the ones above; without a check, a convenient
import upward is one line away. The test reads every module's imports with ``ast`` (those under
``if TYPE_CHECKING:`` included: they are dependencies of the code's meaning, if not of its start-up)
and checks each against the layer table below.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: each package's layer, lowest first: a module may import from its own layer or below
LAYERS: dict[str, int] = {
    # 0 base: configuration, the domain model (jobs, cluster specs), numeric helpers, tracing
    "shared.config": 0,
    "shared.domain": 0,
    "shared.npz_files": 0,
    "shared.pairwise_sum": 0,
    "shared.presets": 0,
    "shared.telemetry": 0,
    # 1 data: trace loaders, the seeded workload generator, runtime prediction from a trace
    "shared.traces": 1,
    "shared.prediction": 1,
    "shared.workload": 1,
    # 2 scheduling core: cluster state, binding, node placers, reservations, a schedule
    "shared.scheduling": 2,
    # 3 what decides on that core: base policies, the CP-SAT placer; metrics of a schedule
    "shared.policies": 3,
    "shared.placement": 3,
    "shared.metrics": 3,
    # 4 the simulator (Python loop and compiled core) and its evaluation harness
    "shared.sim": 4,
    # 5 learning: features, the actor-critic, PPO, imitation
    "shared.features": 5,
    "shared.model": 5,
    "shared.rl": 5,
    "shared.imitation": 5,
    # 6 pipeline: messages, bus, store, service runtime, registry, retraining, report, query API
    "shared.schemas": 6,
    "shared.bus": 6,
    "shared.store": 6,
    "shared.service": 6,
    "shared.registry": 6,
    "shared.retrain": 6,
    "shared.report": 6,
    "shared.query": 6,
    # 7 apps: the command line and the services
    "shared.cli": 7,
    "services": 7,
}

#: imports still against the layering, each with why; the list only shrinks
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}


def package_of(module: str) -> str | None:
    """The LAYERS key that ``module`` (dotted) belongs to, or None outside shared/ and services/."""
    parts = module.split(".")
    if parts[0] == "services":
        return "services"
    if parts[0] != "shared" or len(parts) < 2:
        return None
    return f"shared.{parts[1]}"


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path) -> list[str]:
    """Absolute module names imported by the file (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = module_name(path).split(".")
    is_pkg = path.name == "__init__.py"
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here if is_pkg else here[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append(mod)
            # ``from shared import sim`` names a subpackage
            if mod in ("shared", "services"):
                out += [f"{mod}.{a.name}" for a in node.names]
    return out


def package_edges() -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package) -> the files where it happens."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for top in ("shared", "services"):
        for path in sorted((ROOT / top).rglob("*.py")):
            src = package_of(module_name(path))
            if src is None:
                continue
            for mod in imports_of(path):
                dst = package_of(mod)
                if dst is not None and dst != src:
                    edges[src, dst].append(str(path.relative_to(ROOT)))
    return edges


def test_every_package_has_a_layer() -> None:
    """A new package must be placed in the table (and so in docs/architecture.md) on purpose."""
    found = {package_of(module_name(p)) for top in ("shared", "services") for p in (ROOT / top).rglob("*.py")}
    missing = sorted(p for p in found if p is not None and p not in LAYERS)
    assert not missing, f"packages without a layer in tests/test_layers.py: {missing}"


def test_imports_only_go_downward() -> None:
    bad = [
        f"{src} (layer {LAYERS[src]}) imports {dst} (layer {LAYERS[dst]}) in {sorted(set(files))}"
        for (src, dst), files in package_edges().items()
        if LAYERS.get(dst, 0) > LAYERS.get(src, 0) and (src, dst) not in KNOWN_EXCEPTIONS
    ]
    assert not bad, "imports upward:\n" + "\n".join(bad)


def test_no_import_cycles_between_packages() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for src, dst in package_edges():
        graph[src].add(dst)
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        path.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                return [*path[path.index(w) :], w]
            if w not in state:
                found = visit(w)
                if found:
                    return found
        path.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state:
            cycle = visit(v)
            assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_only_the_command_line_imports_services() -> None:
    """shared/ is what services share; the one app that lives in it, the ``hylo`` command line,
    starts services (``hylo run``, ``hylo retrain``) and so may import them; nothing else may."""
    bad = sorted(
        {src for src, dst in package_edges() if dst == "services" and src.startswith("shared.")}
        - {"shared.cli"}
    )
    assert not bad, f"shared packages importing services/: {bad}"


def test_known_exceptions_still_exist() -> None:
    """An exception that no longer happens must leave the list (it only shrinks)."""
    edges = package_edges()
    gone = [pair for pair in KNOWN_EXCEPTIONS if pair not in edges]
    assert not gone, f"remove from KNOWN_EXCEPTIONS: {gone}"
