"""Which model announcements a prioritizer believes (issue 20, item 2).

Why: before this, any process that could publish on NATS could retire the current model or make an
ungated checkpoint current on every prioritizer, and the forged state survived restarts. The
registry's database is the source of truth for ``current``; an announcement on the bus is only a
hint that the registry changed. So, per ``HYLO_MODEL_TRUST``:

- ``registry`` (the default; every prioritizer in docker-compose has the database URL): each
  announcement is looked up in ``model_versions``. A version the registry does not know, or whose
  cluster, sha256 or uri differ from the registry's, is refused at once. One whose status (and shadow
  mark) the registry does not confirm is re-read for ``HYLO_MODEL_CONFIRM_S`` (the registry announces
  inside its transaction and commits right after) and then refused. A refusal is dead-lettered with
  its reason and changes nothing. At start the replica loads what the registry names (current and
  shadow), so the route only needs announcements made from then on (``DeliverPolicy.NEW``): an old
  announcement replayed from the stream can no longer override the registry or ``HYLO_MODEL_PATH``.
- ``signature`` (a prioritizer without database access): only announcements signed with
  ``HYLO_MODEL_SIGNING_KEY`` (``shared.bus.signing``) are adopted, and none signed earlier than
  the last one adopted for the cluster, so a replayed old announcement cannot bring back a retired
  model. The stream is replayed from its start (as before) to rebuild the state after a restart.

With a signing key configured, signatures are checked in both modes, before decoding is finished
(``Route.verify``), so an unsigned or badly signed announcement is dead-lettered with the reason
without a database round trip. Per-sender identity (NATS accounts, item 1) plugs in at the same
hook: it will refuse a models message from any account but the registry's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.bus.consumer import Delivery
from shared.bus.signing import Signed, Signer, signed_at
from shared.schemas.messages import ModelVersion
from shared.store.models import ModelVersionRow

log = logging.getLogger("hylo.prioritizer")

_MODELS = ModelVersionRow.__table__


class ModelRefused(Exception):
    """An announcement the prioritizer does not believe: dead-lettered with this reason, not applied."""


@dataclass(frozen=True)
class Entry:
    """A version as the registry stores it."""

    version: str
    cluster: str | None
    sha256: str
    uri: str
    status: str
    shadow: bool

    def announced(self) -> str:
        return f"{self.status} (shadow)" if self.shadow else self.status


async def registry_entry(engine: AsyncEngine, version: str) -> Entry | None:
    """``version``'s row in ``model_versions``, or None."""
    t = _MODELS
    stmt = select(t.c.version, t.c.cluster, t.c.sha256, t.c.uri, t.c.status, t.c.shadow).where(
        t.c.version == version
    )
    async with engine.connect() as conn:
        row = (await conn.execute(stmt)).first()
    if row is None:
        return None
    m = row._mapping
    return Entry(m["version"], m["cluster"], m["sha256"], m["uri"], m["status"], bool(m["shadow"]))


async def registry_state(engine: AsyncEngine, cluster: str) -> list[ModelVersion]:
    """What the registry names for ``cluster`` now, as announcements to apply: its current model
    (if any), then its shadow (if any)."""
    t = _MODELS
    stmt = select(t).where(t.c.cluster == cluster, (t.c.status == "current") | (t.c.shadow.is_(True)))
    async with engine.connect() as conn:
        rows = [r._mapping for r in await conn.execute(stmt)]
    rows.sort(key=lambda m: m["status"] != "current")
    return [
        ModelVersion(
            cluster=cluster,
            correlation_id=f"registry-start-{m['version']}"[:64],
            version=m["version"],
            sha256=m["sha256"],
            uri=m["uri"],
            status="current" if m["status"] == "current" else "candidate",
            created_at=m["created_at"],
            shadow=m["status"] != "current",
        )
        for m in rows
    ]


def _claim(version: ModelVersion) -> str:
    return f"{version.status} (shadow)" if version.shadow else version.status


class ModelTrust:
    """The rule of the module docstring for one prioritizer replica."""

    def __init__(
        self,
        mode: str,
        signer: Signer | None,
        engine: AsyncEngine | None,
        confirm_s: float = 5.0,
        no_registry: str | None = None,
    ) -> None:
        if mode == "signature" and signer is None:
            raise ValueError(
                "HYLO_MODEL_TRUST=signature needs HYLO_MODEL_SIGNING_KEY (the key the registry signs with)"
            )
        self.mode = mode
        #: registry mode without a registry to read: why (every announcement is refused with it)
        self.no_registry = no_registry if engine is None else None
        self.signer = signer
        self.engine = engine
        self.confirm_s = confirm_s
        #: cluster -> signing time (ns) of the newest adopted announcement (signature mode)
        self._signed: dict[str, int] = {}

    def verify(self, subject: str, headers: Mapping[str, str], payload: bytes) -> str | None:
        """``Route.verify``: None if the signature holds (or no key is configured), else why not."""
        if self.signer is None:
            return None
        result = self.signer.verify(subject, headers, payload)
        return None if isinstance(result, Signed) else f"model announcement {result}"

    async def confirm(self, version: ModelVersion, delivery: Delivery) -> None:
        """Return if ``version`` may be applied; raise ``ModelRefused`` (why) if not."""
        if self.mode == "signature":
            self._check_order(version, delivery)
            return
        if self.engine is None:
            raise ModelRefused(f"HYLO_MODEL_TRUST=registry: {self.no_registry or 'no registry database'}")
        deadline = time.monotonic() + self.confirm_s
        pause = 0.05
        while True:
            entry = await registry_entry(self.engine, version.version)
            reason = self._contradiction(version, entry)
            if reason is None:
                return
            if entry is None or not reason.startswith("status"):
                raise ModelRefused(reason)
            if time.monotonic() >= deadline:
                raise ModelRefused(f"{reason}, still after {self.confirm_s:g} s (HYLO_MODEL_CONFIRM_S)")
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)

    @staticmethod
    def _contradiction(version: ModelVersion, entry: Entry | None) -> str | None:
        name = version.version
        if entry is None:
            return f"version {name!r} is not in the registry: only registered versions can be announced"
        for field, ours, theirs in (
            ("cluster", version.cluster, entry.cluster),
            ("sha256", version.sha256, entry.sha256),
            ("uri", version.uri, entry.uri),
        ):
            if ours != theirs:
                return f"version {name!r}: {field} {ours!r} differs from the registry's {theirs!r}"
        shadow_ok = entry.shadow == version.shadow or version.status != "candidate"
        if entry.status != version.status or not shadow_ok:
            return (
                f"status: announced {_claim(version)} but the registry says {entry.announced()} for {name!r}"
            )
        return None

    def _check_order(self, version: ModelVersion, delivery: Delivery) -> None:
        at = signed_at(delivery.headers)
        if at is None:  # verify() let it through: no key is configured in registry mode
            return
        newest = self._signed.get(version.cluster)
        if newest is not None and at < newest:
            raise ModelRefused(
                f"signed at {at} ns, before the announcement last adopted for {version.cluster!r} "
                f"({newest} ns): an old announcement replayed"
            )

    def adopted(self, version: ModelVersion, delivery: Delivery) -> None:
        """Remember that ``version`` (from ``delivery``) was applied."""
        at = signed_at(delivery.headers)
        if at is not None:
            self._signed[version.cluster] = max(at, self._signed.get(version.cluster, at))
