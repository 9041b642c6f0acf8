"""Shadow mode in the registry (real PostgreSQL/SQLite and NATS JetStream).

``Registry.shadow`` announces a candidate with ``shadow`` set (read back from the models stream and
loaded by a real ``ModelHolder``), refuses what is not a candidate, marks the stored row, replaces a
cluster's previous shadow, and takes it out again; a promotion clears the mark; on, off and on again
are three announcements, none dropped as a duplicate.
"""

from __future__ import annotations

import pytest

from services.prioritizer.models import ModelHolder
from shared.registry import Registry, RegistryError
from tests.conftest_services import Bus
from tests.registry.registry_helpers import (
    BSLD_MODEL,
    WAIT_MODEL,
    announced,
    migrated,
    unique_cluster,
)


@pytest.mark.asyncio
async def test_shadow_announces_a_candidate_and_refuses_anything_else(bus: Bus, url: str) -> None:
    engine = await migrated(url)
    cluster = unique_cluster()
    registry = Registry(engine, bus.publisher, actor="tester")
    cur, cand, other = f"{cluster}-cur", f"{cluster}-cand", f"{cluster}-other"
    try:
        await registry.register(WAIT_MODEL, cluster=cluster, version=cur)
        await registry.register(BSLD_MODEL, cluster=cluster, version=cand)
        await registry.register(WAIT_MODEL, cluster=cluster, version=other)
        await registry.promote(cur, force=True)

        with pytest.raises(RegistryError, match=r"is current, not a candidate: only a candidate"):
            await registry.shadow(cur)
        with pytest.raises(RegistryError, match="no model version 'nope'"):
            await registry.shadow("nope")

        on = await registry.shadow(cand)
        assert (on.version, on.cluster, on.on, on.replaced) == (cand, cluster, True, None)
        stored = await registry.get(cand)
        assert stored is not None and (stored.status, stored.shadow) == ("candidate", True)

        replaced = await registry.shadow(other)  # one shadow per cluster: the new one replaces it
        assert replaced.replaced == cand
        shadows = {v.version: v.shadow for v in await registry.versions(cluster)}
        assert shadows == {cur: False, cand: False, other: True}

        off = await registry.shadow(other, on=False)
        assert not off.on
        again = await registry.shadow(cand)
        assert again.on

        messages = [m for m in await announced(bus, cluster) if m.status == "candidate"]
        assert [(m.version, m.shadow) for m in messages] == [
            (cand, True),
            (other, True),
            (other, False),
            (cand, True),  # on -> (replaced) -> on again: not dropped as a duplicate
        ]
        assert all(
            not p.duplicate for p in (on.published, replaced.published, off.published, again.published)
        )
        holder = ModelHolder()
        holder.load(messages[-1])  # what a prioritizer's shadow holder does with it
        assert holder.current is not None and holder.current[0] == cand

        # promoting the shadow makes it current and clears its mark; it can no longer be a shadow
        await registry.promote(cand, force=True)
        promoted = await registry.get(cand)
        assert promoted is not None and (promoted.status, promoted.shadow) == ("current", False)
        with pytest.raises(RegistryError, match="not a candidate"):
            await registry.shadow(cand)
    finally:
        await engine.dispose()
