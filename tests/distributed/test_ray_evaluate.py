"""``hylo evaluate --ray`` gives, window by window, the metrics local workers give; and Ray that
cannot be used is one line naming what to do (issue 22, item 5).

The model is the one shipped for the embedded cluster, evaluated on a small embedded workload
compressed to a load where jobs queue (so the learned policy's decisions change the schedule, and
its sampled orderings differ from its greedy ones).
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import numpy as np
import pytest

from shared.cli.app import app
from shared.presets.shipped import MODELS_DIR
from shared.rl.parallel import LOCAL_RAY, Parallelism, compute_session
from shared.rl.ray_pool import RayUnavailable
from tests.distributed.ray_helpers import hylo, runner

SHIPPED = MODELS_DIR / "embedded"
#: 4 held-out windows of 200 jobs at a load where they queue; baselines, greedy, sampled, a transfer
EVALUATE = [
    "evaluate", "--checkpoint", str(SHIPPED), "--jobs", "6000", "--load", "6", "--window-size", "200",
    "--windows", "4", "--warmup", "100", "--train-fraction", "0.9", "--policies", "fcfs,sjf",
    "--transfer", "sjf", "--no-plots",
]  # fmt: skip


def evaluated(out: Path, *where: str) -> dict[str, object]:
    hylo(*EVALUATE, *where, "--out", str(out))
    report = json.loads((out / "evaluate.json").read_text())
    return {p: entry["windows"] for p, entry in report["policies"].items()}


@pytest.mark.slow
def test_evaluate_on_ray_gives_the_local_workers_metrics(local_ray: None, tmp_path: Path) -> None:
    here = evaluated(tmp_path / "here")
    local = evaluated(tmp_path / "local", "--workers", "2")
    on_ray = evaluated(tmp_path / "ray", "--ray", "--workers", "2")
    assert list(here) == ["fcfs", "sjf", "learned-greedy", "learned-sampled", "learned/sjf"]
    # the rows differ from each other (the windows queue, the model decides), and each row's
    # windows are the same, field for field, wherever they ran
    waits = {p: [w["wait_s"]["mean"] for w in here[p]] for p in here}  # type: ignore[index]
    assert waits["learned-greedy"] != waits["learned-sampled"] and waits["fcfs"] != waits["sjf"]
    np.testing.assert_equal(local, here)
    np.testing.assert_equal(on_ray, local)
    setup = json.loads((tmp_path / "ray" / "evaluate.json").read_text())["setup"]
    assert setup["workers"] == {"count": 2, "ray": LOCAL_RAY}
    # here, and not in a test of its own, so that pytest-xdist never starts a second Ray for it
    refusals_while_ray_is_held()


def refusals_while_ray_is_held() -> None:
    """With Ray already held (as in these tests), more workers than its CPUs and an address
    nobody answers at are refused all the same, before any actor starts."""
    too_many = compute_session(Parallelism(workers=3, ray=LOCAL_RAY))
    with (
        pytest.raises(RayUnavailable, match=r"--workers 3: .* has 2 CPUs and each worker takes one"),
        too_many,
    ):
        pass
    nobody = compute_session(Parallelism(workers=1, ray=f"127.0.0.1:{closed_port()}"))
    with pytest.raises(RayUnavailable, match="no Ray cluster answers there"), nobody:
        pass


def closed_port() -> int:
    """A local port nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def one_line_error(*args: str) -> str:
    result = runner.invoke(app, [*EVALUATE, *args])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    return lines[0]


def test_an_address_nobody_answers_at_is_one_line(tmp_path: Path) -> None:
    address = f"127.0.0.1:{closed_port()}"
    line = one_line_error("--ray-address", address, "--out", str(tmp_path))
    assert f"--ray-address {address}: no Ray cluster answers there" in line
    assert "ray start --head" in line and "docs/ray.md" in line
    assert not any(tmp_path.iterdir())  # refused before anything ran


def test_ray_missing_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    line = one_line_error("--ray", "--out", str(tmp_path))
    assert "Ray is not installed" in line and "pip install 'hylo[ray]'" in line
