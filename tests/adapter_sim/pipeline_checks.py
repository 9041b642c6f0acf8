"""What a replay left on the bus and in the database, read back for the no-loss/no-duplicate checks
of the failover tests (services killed, a NATS node killed)."""

from __future__ import annotations

from sqlalchemy import text

from shared.bus import BusSettings, connect
from shared.bus.streams import stream_name
from shared.schemas import Limits, PlacementDecision, Subjects, decode
from shared.store import create_engine


async def placements_on_stream(nats_url: str, root: str) -> list[PlacementDecision]:
    nc = await connect(BusSettings(nats_url=nats_url, subject_root=root))
    try:
        js = nc.jetstream()
        info = await js.stream_info(stream_name(Subjects(root), "placements"))
        sub = await js.pull_subscribe(Subjects(root).all_clusters("placements"), durable=None)
        out: list[PlacementDecision] = []
        while len(out) < info.state.messages:
            for m in await sub.fetch(200, timeout=2):
                out.append(decode(PlacementDecision, m.data, Limits(max_message_bytes=8 << 20)))
                await m.ack()
        return out
    finally:
        await nc.close()


async def db_rows(url: str) -> tuple[dict[str, int], list[str]]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            per_corr = dict(
                (await conn.execute(text("SELECT correlation_id, count(*) FROM decisions GROUP BY 1"))).all()
            )
            outcomes = [r[0] for r in (await conn.execute(text("SELECT job_id FROM outcomes"))).all()]
        return {str(k): int(v) for k, v in per_corr.items()}, [str(j) for j in outcomes]
    finally:
        await engine.dispose()
