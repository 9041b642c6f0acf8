"""``hylo run``/``hylo up`` record the cluster's spec and the ``--model`` checkpoint before the replay.

Why: a store whose ``clusters.spec`` is NULL makes the report say "capacity unknown", and decisions
named ``file-<sha>`` (a checkpoint given by path) joined to no ``model_versions`` row.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from sqlalchemy import select

from services.prioritizer.service import startup_version
from shared.cli.run import ReplayOptions, _prepare_store
from shared.domain.cluster import parse_cluster_spec
from shared.store import Cluster, ModelVersionRow, create_engine, upgrade_url
from tests.schemas.message_factories import tiny_spec


def test_the_spec_and_the_model_given_by_path_are_stored(tmp_path: Path) -> None:
    card = tmp_path / "ckpt" / "card.json"
    card.parent.mkdir()
    card.write_text(json.dumps({"version": 1, "note": "a card"}), encoding="utf-8")
    url = f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}"
    upgrade_url(url)
    options = ReplayOptions(
        trace=None,
        cluster=None,
        cluster_name="demo",
        jobs=10,
        seed=0,
        load=None,
        base_policy="fcfs",
        decision_timeout=1.0,
        max_pending=16,
        job_id_prefix="",
        model=card,
    )
    _prepare_store(url, options, tiny_spec())
    _prepare_store(url, options, tiny_spec())  # again (hylo up on the same store): nothing changes

    async def read() -> tuple[object, list[dict[str, object]]]:
        engine = create_engine(url)
        async with engine.connect() as conn:
            spec = (await conn.execute(select(Cluster.__table__.c.spec))).scalar_one()
            models = [dict(r._mapping) for r in await conn.execute(select(ModelVersionRow.__table__))]
        await engine.dispose()
        return spec, models

    spec, models = asyncio.run(read())
    assert isinstance(spec, dict) and parse_cluster_spec(spec, "store") == tiny_spec()
    (model,) = models
    expected = startup_version(str(card), "demo")  # the name the prioritizer gives its decisions
    assert (model["version"], model["status"], model["uri"], model["sha256"]) == (
        expected.version,
        "external",
        str(card),
        expected.sha256,
    )
    assert model["card"] == {"version": 1, "note": "a card"} and model["cluster"] == "demo"


def test_hylo_job_tells_what_the_placer_said_and_where_the_job_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from shared.cli import common
    from shared.cli.app import app

    # the console's width is fixed when shared.cli is first imported (a terminal's, COLUMNS, or
    # 1,000 when piped); under pytest-xdist it can be 80, and the table then folds "waiting"
    monkeypatch.setattr(common.console, "width", 1_000)
    from tests.store.analyst_seed import seed_history

    url = f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}"
    upgrade_url(url)

    async def seed() -> None:
        engine = create_engine(url)
        await seed_history(engine, "demo")
        await engine.dispose()

    asyncio.run(seed())
    runner = CliRunner()

    def story(job: str) -> str:
        result = runner.invoke(app, ["job", job, "--database", str(tmp_path / "hylo.db")], terminal_width=200)
        assert result.exit_code == 0, result.output
        return " ".join(result.output.split())

    ran = story("j1")  # ranked, waited, started by the third decision on t0
    assert "ran on: t0 (T4)" in ran and "waiting" in ran and "placed" in ran
    waiting = story("j8")
    assert "it ranked 4 and was not placed (no nodes free for it, or starting it would delay" in waiting
