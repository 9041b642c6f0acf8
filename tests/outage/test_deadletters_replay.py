"""``hylo deadletters replay``: what the recorder dead-lettered is stored once, however often it runs.

The letters are made the real way: the placer's recorder runs against a database that is not there,
with a retry window of 0.3 s, so every record it is sent ends up in the dead letters. The replay then
writes them to a real store through the recorder's own writes.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from services.adapter_sim.stack import free_port
from shared.bus import Publisher, PublishResult, connect, ensure_streams
from shared.cli.deadletters import deadletters_app
from shared.schemas import Limits, Message, Subjects
from shared.store import create_engine, upgrade
from tests.bus.bus_helpers import wait_until
from tests.conftest_services import bus_settings, delete_namespace
from tests.outage.outage_helpers import CLUSTER, Counts, counts, matrix, recorder, recorder_stats
from tests.schemas.message_factories import decision, model_version, outcome

pytestmark = pytest.mark.slow

app = typer.Typer(pretty_exceptions_enable=False)
app.add_typer(deadletters_app, name="deadletters")

BIG = tuple(f"big-{i:03d}" for i in range(60))  # its decision's payload is longer than a letter's excerpt


def _dead_letter(
    nats_url: str,
    root: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    messages: list[Message],
    gone: set[int],
) -> None:
    """Publish ``messages`` to a recorder whose database never answers; wait until each is a dead
    letter; then delete the originals at indices ``gone`` from their streams."""

    async def main() -> None:
        settings = bus_settings(nats_url, subject_root=root, retry_window_s=0.3, retry_backoff_s=0.05)
        nc = await connect(settings)
        js = nc.jetstream()
        subjects = Subjects(root)
        await ensure_streams(js, subjects, settings)
        publisher = Publisher(js, subjects, Limits(max_message_bytes=1 << 20))
        nowhere = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/nowhere"
        try:
            async with recorder(settings, nowhere, tmp_path, monkeypatch) as rec:
                sent: list[PublishResult] = [await publisher.publish(m) for m in messages]
                await wait_until(
                    lambda: sum(d for _, _, d in recorder_stats(rec).values()) == len(messages), 30
                )
            for i in gone:
                await js.delete_msg(sent[i].stream, sent[i].seq)
        finally:
            await nc.close()

    asyncio.run(main())


def _store(tmp_path: Path) -> str:
    url = f"sqlite+aiosqlite:///{tmp_path / 'replayed.db'}"

    async def migrate() -> None:
        engine = create_engine(url)
        await upgrade(engine)
        await engine.dispose()

    asyncio.run(migrate())
    return url


def _replay(nats_url: str, root: str, url: str, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        app,
        [
            "deadletters",
            "replay",
            "--nats-url",
            nats_url,
            "--subject-root",
            root,
            "--database-url",
            url,
            *extra,
        ],
    )
    return result.exit_code, result.output


def _cleanup(nats_url: str, root: str) -> None:
    async def main() -> None:
        settings = bus_settings(nats_url)
        nc = await connect(settings)
        try:
            await delete_namespace(nc.jetstream(), root, settings)
        finally:
            await nc.close()

    asyncio.run(main())


def test_replay_stores_each_dead_letter_once(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = f"t{uuid.uuid4().hex[:12]}"
    messages: list[Message] = [
        decision(cluster=CLUSTER, correlation_id="big", jobs=BIG),  # replayed from its stream
        matrix("m"),  # 3 jobs rows
        outcome(cluster=CLUSTER, job_id="big-000", correlation_id="big"),  # its original deleted: the excerpt
        model_version(cluster=CLUSTER, version="m-dead"),
        matrix("zz").model_copy(update={"cluster": "zz"}),  # no spec for zz: rejected, never replayed
    ]
    try:
        _dead_letter(nats_url, root, tmp_path, monkeypatch, messages, gone={2})
        url = _store(tmp_path)
        code, out = _replay(nats_url, root, url, "--cluster", CLUSTER, "--dry-run")
        assert code == 0, out
        assert "4 dead letters of the recorder: 4 would be replayed" in out
        assert asyncio.run(counts(url)) == Counts(0, 0, 0, 0, 0)  # a dry run writes nothing

        code, out = _replay(nats_url, root, url, "--cluster", CLUSTER)
        assert code == 0, out
        assert "4 dead letters of the recorder: 4 replayed (65 rows stored), 0 already stored" in out
        assert asyncio.run(counts(url)) == Counts(
            jobs=3, decision_rows=60, decisions=1, outcomes=1, model_versions=1
        )

        code, out = _replay(nats_url, root, url)  # again, every cluster: nothing new, zz's left alone
        assert code == 0, out
        assert (
            "5 dead letters of the recorder: 0 replayed (0 rows stored), 4 already stored, 1 rejected" in out
        )
        assert asyncio.run(counts(url)) == Counts(
            jobs=3, decision_rows=60, decisions=1, outcomes=1, model_versions=1
        )
    finally:
        _cleanup(nats_url, root)


def test_a_letter_whose_original_is_gone_is_reported_and_exits_1(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = f"t{uuid.uuid4().hex[:12]}"
    try:
        _dead_letter(
            nats_url,
            root,
            tmp_path,
            monkeypatch,
            [decision(cluster=CLUSTER, correlation_id="gone", jobs=BIG)],
            {0},
        )
        url = _store(tmp_path)
        code, out = _replay(nats_url, root, url, "--cluster", CLUSTER)
        assert code == 1, out
        assert "gone from" in out and "1 not replayable" in out
        assert asyncio.run(counts(url)).decision_rows == 0
    finally:
        _cleanup(nats_url, root)
