"""The README's commands work as printed (issue 21, item 6).

Every ```bash block of ``README.md`` carries a tag on the line before its fence:
``<!-- readme-test: run -->`` (this test runs it) or ``<!-- readme-test: not-run (REASON) -->``
(it needs root, the public traces, minutes, or is the test suite itself; the reason is said).
A block without a tag fails the test, so a new example has to be either run or excused.

Each run-tagged block runs with bash (``-euo pipefail``: every line must succeed) in a new
temporary folder holding a link to the checkout's ``.venv`` and ``docs`` (the README's commands
are written from the checkout's root), so it writes nothing into the checkout. The run blocks are
kept small (seconds each); the whole test takes about 40 s on two cores.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
#: what a run-tagged block may take (the README's run examples take about 10 s each)
TIMEOUT_S = 180

_TAG = re.compile(r"^<!-- readme-test: (run|not-run \((?P<reason>.+)\)) -->$")


@dataclass(frozen=True)
class Block:
    line: int  # the fence's line number (1-based)
    tag: str | None  # "run", "not-run", or None (untagged)
    reason: str | None
    code: str

    @property
    def label(self) -> str:
        first = self.code.strip().splitlines()[0] if self.code.strip() else ""
        return f"README.md:{self.line}: {first[:60]}"


def bash_blocks(text: str) -> list[Block]:
    """The ```bash blocks of a Markdown text with the tag on the line before each fence."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```bash":
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        assert end is not None, f"README.md:{i + 1}: a ```bash block is never closed"
        before = lines[i - 1].strip() if i > 0 else ""
        match = _TAG.match(before)
        tag = None if match is None else ("run" if match.group(1) == "run" else "not-run")
        reason = match.group("reason") if match else None
        blocks.append(Block(i + 1, tag, reason, "\n".join(lines[i + 1 : end]) + "\n"))
        i = end + 1
    return blocks


BLOCKS = bash_blocks(README.read_text())
RUN = [b for b in BLOCKS if b.tag == "run"]


def test_the_parser_finds_tags_and_untagged_blocks() -> None:
    text = (
        "<!-- readme-test: run -->\n```bash\necho a\n```\n\n"
        "<!-- readme-test: not-run (needs Slurm) -->\n```bash\nsudo x\n```\n\n"
        "text\n```bash\necho untagged\n```\n```python\nnot bash\n```\n"
    )
    blocks = bash_blocks(text)
    assert [(b.tag, b.reason, b.code) for b in blocks] == [
        ("run", None, "echo a\n"),
        ("not-run", "needs Slurm", "sudo x\n"),
        (None, None, "echo untagged\n"),
    ]


def test_every_readme_block_is_tagged_run_or_not_run_with_a_reason() -> None:
    assert len(BLOCKS) >= 5, "the README's bash blocks were not found"
    untagged = [b.label for b in BLOCKS if b.tag is None]
    assert not untagged, (
        "tag these README blocks <!-- readme-test: run --> or not-run (reason):\n" + "\n".join(untagged)
    )
    assert all(b.reason and b.reason.strip() for b in BLOCKS if b.tag == "not-run")
    assert RUN, "no README block is run"


@pytest.mark.slow
@pytest.mark.parametrize("block", RUN, ids=[b.label for b in RUN])
def test_a_run_block_works_as_printed(block: Block, tmp_path: Path) -> None:
    for name in (".venv", "docs"):
        (tmp_path / name).symlink_to(ROOT / name)
    env = {**os.environ, "COLUMNS": "200"}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, (
        f"{block.label} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    assert "Traceback" not in done.stdout + done.stderr
