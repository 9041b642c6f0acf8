"""No function in shared/ or services/ is longer than 150 lines, numba kernels included (issue 18,
item 4), except any listed below, which may only shrink (the list is empty today).

Why a test: a function a newcomer cannot read in one sitting is where behaviour drifts unseen
(the placer's second EASY walk hid in such code). Functions still over the limit, if any, are
listed with their length today; the list is the work left, and the test fails when one of them
grows, when a new one appears, or when one has been split and should leave the list. Nested
functions count on their own and inside their parent.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 150

#: "path::Qualified.name" -> its length in lines today (it may only shrink)
#: (Simulator.run, its cycle and class_heads_cycle, and the compiled simulate left it once split)
KNOWN_LONG: dict[str, int] = {}


def function_lengths() -> dict[str, int]:
    """Every function and method of shared/ and services/ -> its length in lines."""
    out: dict[str, int] = {}

    def walk(node: ast.AST, path: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                assert child.end_lineno is not None
                out[f"{path}::{name}"] = child.end_lineno - child.lineno + 1
                walk(child, path, name + ".")
            elif isinstance(child, ast.ClassDef):
                walk(child, path, prefix + child.name + ".")

    for top in ("shared", "services"):
        for file in sorted((ROOT / top).rglob("*.py")):
            rel = file.relative_to(ROOT).as_posix()
            walk(ast.parse(file.read_text(encoding="utf-8"), filename=rel), rel, "")
    return out


def test_no_function_is_longer_than_the_limit() -> None:
    lengths = function_lengths()
    assert len(lengths) > 1000, "the walk found too few functions: wrong root?"
    too_long = [
        f"{name}: {n} lines (limit {LIMIT}{'' if name not in KNOWN_LONG else f', listed at {KNOWN_LONG[name]}'})"
        for name, n in sorted(lengths.items())
        if n > max(LIMIT, KNOWN_LONG.get(name, 0))
    ]
    assert not too_long, "split these functions:\n" + "\n".join(too_long)


def test_the_list_of_long_functions_only_shrinks() -> None:
    lengths = function_lengths()
    stale = [
        f"{name}: now {lengths.get(name, 'gone')}, listed at {n}"
        for name, n in KNOWN_LONG.items()
        if lengths.get(name, 0) <= LIMIT or lengths[name] < n
    ]
    assert not stale, "update KNOWN_LONG (lower the length, or remove the entry):\n" + "\n".join(stale)
