"""The model registry: candidates, gated promotion, rollback, and the history of every change.

State lives in the store (``model_versions``: the latest state of each version;
``model_version_events``: one row per change, with who and when); the prioritizers learn of a change
from a ``ModelVersion`` announcement on the cluster's ``models`` subject. Per cluster at most one
version is ``current``.

Why announce inside the database transaction: a promotion must not be half done. The state change
and its events are written first, then the announcements are published and acknowledged by
JetStream, and only then is the transaction committed; if publishing fails, the transaction rolls
back and the store still names the old current model, which is what the prioritizers still run.
(If the commit itself failed after the publish, the store would still name the old model: the
prioritizers re-read the registry for each announcement and refuse one it does not confirm, and the
placer's recorder no longer copies an announced status into the store; issue 20.)

Why the new ``current`` is announced before the old one's ``retired``: a prioritizer that hears
``retired`` for the model it runs falls back to the base policy; in this order it has already
switched to the new model, and the ``retired`` of a model it no longer runs changes nothing, so no
request is scored by the base policy during a switch.

Shadow mode (``shadow``): a candidate announced with ``shadow`` set is scored by every prioritizer
beside the current model, never applied; the store marks it (``model_versions.shadow``), one per
cluster. Its announcements carry a fresh id in their message id for the same reason as below.

Why each announcement's message id carries the event id (``Announcement``): JetStream drops a
message whose ``Nats-Msg-Id`` it saw within the duplicate window, and ``ModelVersion``'s own id is
``models.<cluster>.<version>.<status>``; a rollback re-announces a version as ``current`` that was
announced ``current`` before, and would be dropped as a duplicate without the event id.
"""

from __future__ import annotations

import asyncio
import getpass
import math
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import JsonValue
from sqlalchemy import Table, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from shared.bus import Publisher
from shared.bus.publisher import PublishResult
from shared.model.locate import ModelLoadError, checkpoint_sha256, resolve_checkpoint
from shared.registry.gate import GateResult, GateSettings, evaluate_gate
from shared.schemas.messages import ModelVersion
from shared.store.models import ModelVersionEvent, ModelVersionRow
from shared.store.writes import record_model_event, record_model_version, update_model_version

_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_TABLE = ModelVersionRow.__table__
_EVENTS = ModelVersionEvent.__table__
assert isinstance(_TABLE, Table) and isinstance(_EVENTS, Table)
MODELS: Table = _TABLE
EVENTS: Table = _EVENTS


class RegistryError(Exception):
    """A registry operation that cannot be done; the message says why and what to do."""


class Announcement(ModelVersion):
    """A ``ModelVersion`` whose message id names the registry event it announces (see module doc).

    On the wire it is exactly a ``ModelVersion``; only the ``Nats-Msg-Id`` differs.
    """

    def message_id(self) -> str:
        return f"{super().message_id()}.{self.correlation_id}"


@dataclass(frozen=True)
class VersionInfo:
    """One row of ``model_versions``, as the registry and ``hylo models list`` see it."""

    version: str
    cluster: str | None
    status: str
    sha256: str
    uri: str
    card: dict[str, Any]
    created_at: datetime
    promoted_at: datetime | None
    promoted_by: str | None
    forced: bool | None
    retired_at: datetime | None
    metrics: dict[str, Any] | None
    reason: str | None
    shadow: bool | None = None

    @classmethod
    def of(cls, row: Any) -> VersionInfo:
        m = row._mapping
        return cls(**{name: m[name] for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class EventInfo:
    """One entry of a version's history."""

    id: int
    version: str
    cluster: str | None
    event: str
    from_status: str | None
    to_status: str
    actor: str
    forced: bool
    reason: str | None
    detail: dict[str, Any] | None
    at: datetime

    @classmethod
    def of(cls, row: Any) -> EventInfo:
        m = row._mapping
        return cls(**{name: m[name] for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class PromotionResult:
    """What ``promote`` or ``rollback`` did: ``promoted`` False means the gate refused."""

    version: str
    cluster: str
    promoted: bool
    forced: bool
    previous: str | None
    gate: GateResult | None
    published: tuple[PublishResult, ...] = ()


@dataclass(frozen=True)
class ShadowResult:
    """What ``shadow`` did: ``on`` is the new state; ``replaced`` the cluster's former shadow, if any."""

    version: str
    cluster: str
    on: bool
    replaced: str | None
    published: PublishResult


def default_actor() -> str:
    """Who is acting, for the history: the login name (``unknown`` when there is none)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "unknown"


def _now() -> datetime:
    return datetime.now(UTC)


def _aware(value: datetime | None) -> datetime | None:
    """SQLite returns naive timestamps (stored as UTC); messages need timezone-aware ones."""
    if value is None:
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _json_card(card: dict[str, Any]) -> dict[str, JsonValue]:
    return dict(card)


def _message_metrics(metrics: dict[str, Any] | None) -> dict[str, float]:
    """The numeric, finite entries of a version's metrics (what ``ModelVersion.metrics`` accepts)."""
    out: dict[str, float] = {}
    for key, value in (metrics or {}).items():
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            out[key] = float(value)
    return out


class Registry:
    """Registers checkpoints and moves versions between candidate, current and retired.

    ``publisher`` announces changes on the models subject; without one (``None``) the registry can
    only register and list, and promotion raises ``RegistryError``.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        publisher: Publisher | None = None,
        *,
        actor: str | None = None,
        gate: GateSettings | None = None,
    ) -> None:
        self.engine = engine
        self.publisher = publisher
        self.actor = actor or default_actor()
        self.gate = gate or GateSettings()

    # -- reading ------------------------------------------------------------------------------------

    async def get(self, version: str) -> VersionInfo | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(MODELS).where(MODELS.c.version == version))).first()
        return None if row is None else VersionInfo.of(row)

    async def versions(self, cluster: str | None = None) -> list[VersionInfo]:
        """Every version (of ``cluster``), newest first."""
        stmt = select(MODELS).order_by(MODELS.c.created_at.desc(), MODELS.c.version)
        if cluster is not None:
            stmt = stmt.where(MODELS.c.cluster == cluster)
        async with self.engine.connect() as conn:
            return [VersionInfo.of(r) for r in await conn.execute(stmt)]

    async def current(self, cluster: str) -> VersionInfo | None:
        async with self.engine.connect() as conn:
            row = await self._current_row(conn, cluster)
        return None if row is None else VersionInfo.of(row)

    async def history(self, *, version: str | None = None, cluster: str | None = None) -> list[EventInfo]:
        """State changes and gate verdicts in the order they happened."""
        stmt = select(EVENTS).order_by(EVENTS.c.id)
        if version is not None:
            stmt = stmt.where(EVENTS.c.version == version)
        if cluster is not None:
            stmt = stmt.where(EVENTS.c.cluster == cluster)
        async with self.engine.connect() as conn:
            return [EventInfo.of(r) for r in await conn.execute(stmt)]

    # -- registering --------------------------------------------------------------------------------

    async def register(
        self, checkpoint: Path | str, *, cluster: str, version: str | None = None
    ) -> tuple[VersionInfo, bool]:
        """Record a checkpoint as a ``candidate`` of ``cluster``; returns (version, newly registered).

        The checkpoint is verified first (card, weights' sha256, feature schema: what a prioritizer
        checks), so a broken one never becomes a candidate. Registering the same checkpoint under the
        same name again changes nothing; the same name for other bytes is refused.
        """
        try:
            folder = resolve_checkpoint(str(checkpoint))
        except ModelLoadError as err:
            raise RegistryError(err.reason) from None
        folder = folder.resolve()
        card = await asyncio.to_thread(_verified_card, folder)
        sha = checkpoint_sha256(folder)
        name = version or f"m-{sha[:12]}"
        if not _VERSION.match(name):
            raise RegistryError(
                f"version name {name!r}: 1-64 letters, digits, '.', '_' or '-', "
                "starting with a letter or digit"
            )
        now = _now()
        message = ModelVersion(
            cluster=cluster,
            correlation_id=f"register-{name}",
            version=name,
            sha256=sha,
            uri=str(folder),
            status="candidate",
            card=card,
            created_at=now,
        )
        async with self.engine.begin() as conn:
            existing = (await conn.execute(select(MODELS).where(MODELS.c.version == name))).first()
            if existing is not None:
                info = VersionInfo.of(existing)
                if info.sha256 != sha or info.cluster != cluster:
                    raise RegistryError(
                        f"version {name!r} is already registered for cluster {info.cluster!r} with sha256 "
                        f"{info.sha256[:12]}... ({info.uri}); choose another version name"
                    )
                return info, False
            await record_model_version(conn, message)
            await record_model_event(
                conn,
                version=name,
                cluster=cluster,
                event="registered",
                from_status=None,
                to_status="candidate",
                actor=self.actor,
                at=now,
                detail={"uri": str(folder), "sha256": sha},
            )
            row = (await conn.execute(select(MODELS).where(MODELS.c.version == name))).one()
        return VersionInfo.of(row), True

    # -- promoting ----------------------------------------------------------------------------------

    async def promote(
        self, version: str, *, force: bool = False, gate: GateSettings | None = None
    ) -> PromotionResult:
        """Make ``version`` current if it passes the gate (or ``force``); otherwise record why not.

        The gate compares it with the cluster's current model, or with its base policy when the
        cluster has none. A refusal keeps it a candidate with the gate's numbers and reason.
        """
        publisher = self._need_publisher()
        target = await self.get(version)
        if target is None:
            raise RegistryError(f"no model version {version!r}; `hylo models list` shows the registered ones")
        if target.status == "current":
            raise RegistryError(f"version {version!r} is already current for cluster {target.cluster!r}")
        cluster = self._cluster_of(target)
        await asyncio.to_thread(_verified_card, Path(target.uri), target.sha256)
        before = await self.current(cluster)
        result: GateResult | None = None
        if not force:
            settings = gate or self.gate
            reference = Path(before.uri) if before is not None else None
            label = f"model:{before.version}" if before is not None else None
            result = await asyncio.to_thread(_run_gate, Path(target.uri), reference, settings, label)
        async with self.engine.begin() as conn:
            row = await self._lock(conn, cluster, version)
            current = await self._current_row(conn, cluster)
            now_current = None if current is None else current._mapping["version"]
            if now_current != (before.version if before else None):
                raise RegistryError(
                    f"the current model of cluster {cluster!r} changed to {now_current!r} while the gate "
                    "ran; run the promotion again"
                )
            if row._mapping["status"] == "current":
                raise RegistryError(f"version {version!r} became current meanwhile")
            if result is not None and not result.passed:
                await update_model_version(
                    conn, version, {"metrics": result.summary(), "reason": result.reason}
                )
                await record_model_event(
                    conn,
                    version=version,
                    cluster=cluster,
                    event="gate-refused",
                    from_status=row._mapping["status"],
                    to_status=row._mapping["status"],
                    actor=self.actor,
                    at=_now(),
                    reason=result.reason,
                    detail=result.to_dict(),
                )
                return PromotionResult(version, cluster, False, False, now_current, result)
            published = await self._switch(
                conn,
                publisher,
                cluster=cluster,
                target=row,
                previous=current,
                event="promoted",
                forced=force,
                gate=result,
            )
        return PromotionResult(version, cluster, True, force, now_current, result, published)

    async def evaluate(self, version: str, *, gate: GateSettings | None = None) -> GateResult:
        """Run the gate on candidate ``version`` and record its verdict on it, without promoting.

        Why: promoting announces on NATS (module docstring), and where no NATS server is reachable
        (``hylo retrain --local`` after ``hylo run`` stopped its own) nothing can be announced; the
        candidate is still measured, and its numbers and reason are kept as a refusal's are
        (``gate-passed`` or ``gate-refused`` in its history), so ``hylo models list`` shows the
        verdict and ``hylo models promote`` can promote it once NATS is there.
        """
        target = await self.get(version)
        if target is None:
            raise RegistryError(f"no model version {version!r}; `hylo models list` shows the registered ones")
        if target.status != "candidate":
            raise RegistryError(f"version {version!r} is {target.status}: only a candidate is gated")
        cluster = self._cluster_of(target)
        await asyncio.to_thread(_verified_card, Path(target.uri), target.sha256)
        before = await self.current(cluster)
        reference = Path(before.uri) if before is not None else None
        label = f"model:{before.version}" if before is not None else None
        result = await asyncio.to_thread(_run_gate, Path(target.uri), reference, gate or self.gate, label)
        async with self.engine.begin() as conn:
            row = await self._lock(conn, cluster, version)
            status = row._mapping["status"]
            await update_model_version(conn, version, {"metrics": result.summary(), "reason": result.reason})
            await record_model_event(
                conn,
                version=version,
                cluster=cluster,
                event="gate-passed" if result.passed else "gate-refused",
                from_status=status,
                to_status=status,
                actor=self.actor,
                at=_now(),
                reason=result.reason,
                detail=result.to_dict(),
            )
        return result

    async def rollback(self, cluster: str, *, to: str | None = None) -> PromotionResult:
        """Make the version that was current before the current one current again (no gate).

        ``to`` names another version of the cluster to return to instead (a retired one, typically).
        """
        publisher = self._need_publisher()
        async with self.engine.begin() as conn:
            await self._lock(conn, cluster, None)
            current = await self._current_row(conn, cluster)
            if current is None:
                raise RegistryError(f"cluster {cluster!r} has no current model: nothing to roll back")
            name = current._mapping["version"]
            target_name = to or await self._previous_of(conn, cluster, name)
            if target_name is None:
                raise RegistryError(
                    f"version {name!r} was the first model made current on cluster {cluster!r}: there is "
                    "no previous version to roll back to (`hylo models rollback --to VERSION` names one)"
                )
            if target_name == name:
                raise RegistryError(f"version {name!r} is already current for cluster {cluster!r}")
            target = (await conn.execute(select(MODELS).where(MODELS.c.version == target_name))).first()
            if target is None or target._mapping["cluster"] != cluster:
                raise RegistryError(f"no model version {target_name!r} registered for cluster {cluster!r}")
            await asyncio.to_thread(_verified_card, Path(target._mapping["uri"]), target._mapping["sha256"])
            published = await self._switch(
                conn,
                publisher,
                cluster=cluster,
                target=target,
                previous=current,
                event="rolled-back",
                forced=False,
                gate=None,
            )
        return PromotionResult(target_name, cluster, True, False, name, None, published)

    # -- shadow mode --------------------------------------------------------------------------------

    async def shadow(self, version: str, *, on: bool = True) -> ShadowResult:
        """Put a candidate in shadow mode (``on``) or take it out: every prioritizer of its cluster
        then scores the live queues with it beside the current model, without applying its order.

        Only a candidate can be a shadow (a current model is already applied; a retired one would
        have to be promoted or rolled back to). A cluster has at most one shadow: a new one replaces
        the previous (the prioritizers hold one), whose row is marked so. The announcement is a
        ``ModelVersion`` with ``status="candidate"`` and ``shadow`` set, published inside the
        transaction as promotions are (module docstring); its message id carries a fresh id so that
        turning a shadow on, off and on again within the duplicate window is not dropped.
        """
        publisher = self._need_publisher()
        target = await self.get(version)
        if target is None:
            raise RegistryError(f"no model version {version!r}; `hylo models list` shows the registered ones")
        if target.status != "candidate":
            raise RegistryError(
                f"version {version!r} is {target.status}, not a candidate: only a candidate can run in "
                "shadow mode (a current model is already applied; register a new candidate instead)"
            )
        cluster = self._cluster_of(target)
        if on:
            await asyncio.to_thread(_verified_card, Path(target.uri), target.sha256)
        async with self.engine.begin() as conn:
            row = await self._lock(conn, cluster, version)
            m = row._mapping
            if m["status"] != "candidate":
                raise RegistryError(f"version {version!r} became {m['status']} meanwhile")
            others = [
                r._mapping["version"]
                for r in await conn.execute(
                    select(MODELS.c.version).where(
                        MODELS.c.cluster == cluster, MODELS.c.shadow.is_(True), MODELS.c.version != version
                    )
                )
            ]
            replaced = others[0] if on and others else None
            if on:
                for other in others:
                    await update_model_version(conn, other, {"shadow": False})
            await update_model_version(conn, version, {"shadow": on})
            message = Announcement(
                cluster=cluster,
                correlation_id=f"shadow-{'on' if on else 'off'}-{uuid.uuid4().hex[:16]}",
                version=version,
                sha256=m["sha256"],
                uri=m["uri"],
                status="candidate",
                card=_json_card(m["card"]),
                created_at=_aware(m["created_at"]) or _now(),
                metrics=_message_metrics(m["metrics"]),
                shadow=on,
            )
            published = await publisher.publish(message)
        return ShadowResult(version, cluster, on, replaced, published)

    # -- internals ----------------------------------------------------------------------------------

    def _need_publisher(self) -> Publisher:
        if self.publisher is None:
            raise RegistryError(
                "promotion announces on the models subject: the registry needs a NATS publisher"
            )
        return self.publisher

    @staticmethod
    def _cluster_of(info: VersionInfo) -> str:
        if not info.cluster:
            raise RegistryError(
                f"version {info.version!r} has no cluster (recorded from an announcement without one?); "
                "register the checkpoint again for a cluster"
            )
        return info.cluster

    @staticmethod
    async def _current_row(conn: AsyncConnection, cluster: str) -> Any:
        stmt = select(MODELS).where(MODELS.c.cluster == cluster, MODELS.c.status == "current")
        rows = list(await conn.execute(stmt.order_by(MODELS.c.promoted_at.desc())))
        return rows[0] if rows else None

    @staticmethod
    async def _lock(conn: AsyncConnection, cluster: str, version: str | None) -> Any:
        """Lock the cluster's versions for this transaction (PostgreSQL ``FOR UPDATE``; SQLite's write
        lock is taken by the first write), so two promotions of one cluster cannot interleave."""
        rows = list(await conn.execute(select(MODELS).where(MODELS.c.cluster == cluster).with_for_update()))
        if version is None:
            return None
        for row in rows:
            if row._mapping["version"] == version:
                return row
        raise RegistryError(f"no model version {version!r} registered for cluster {cluster!r}")

    @staticmethod
    async def _previous_of(conn: AsyncConnection, cluster: str, version: str) -> str | None:
        """The version that ``version``'s latest promotion (or rollback) replaced."""
        stmt = (
            select(EVENTS.c.detail)
            .where(
                EVENTS.c.cluster == cluster,
                EVENTS.c.version == version,
                EVENTS.c.event.in_(("promoted", "rolled-back")),
            )
            .order_by(EVENTS.c.id.desc())
            .limit(1)
        )
        detail = (await conn.execute(stmt)).scalar_one_or_none()
        previous = detail.get("previous") if isinstance(detail, dict) else None
        return previous if isinstance(previous, str) else None

    async def _switch(
        self,
        conn: AsyncConnection,
        publisher: Publisher,
        *,
        cluster: str,
        target: Any,
        previous: Any,
        event: str,
        forced: bool,
        gate: GateResult | None,
    ) -> tuple[PublishResult, ...]:
        """Make ``target`` current and ``previous`` (if any) retired: rows, events, announcements."""
        now = _now()
        t = target._mapping
        prev_name = None if previous is None else previous._mapping["version"]
        if event == "promoted":
            reason = (
                f"forced by {self.actor} (no gate)" if forced else gate.reason if gate is not None else None
            )
        else:
            reason = f"rolled back from {prev_name} by {self.actor}"
        values: dict[str, Any] = {
            "status": "current",
            "promoted_at": now,
            "promoted_by": self.actor,
            "forced": forced,
            "reason": reason,
            "retired_at": None,
            "shadow": False,  # a prioritizer stops shadowing a version that becomes current
        }
        if gate is not None:
            values["metrics"] = gate.summary()
        await update_model_version(conn, t["version"], values)
        if gate is not None:
            await record_model_event(
                conn,
                version=t["version"],
                cluster=cluster,
                event="gate-passed",
                from_status=t["status"],
                to_status=t["status"],
                actor=self.actor,
                at=now,
                reason=gate.reason,
                detail=gate.to_dict(),
            )
        event_id = await record_model_event(
            conn,
            version=t["version"],
            cluster=cluster,
            event=event,
            from_status=t["status"],
            to_status="current",
            actor=self.actor,
            at=now,
            forced=forced,
            reason=reason,
            detail={"previous": prev_name},
        )
        metrics = values.get("metrics", t["metrics"])
        announcements = [
            Announcement(
                cluster=cluster,
                correlation_id=f"registry-{event_id}",
                version=t["version"],
                sha256=t["sha256"],
                uri=t["uri"],
                status="current",
                card=_json_card(t["card"]),
                created_at=_aware(t["created_at"]) or now,
                promoted_at=now,
                metrics=_message_metrics(metrics),
            )
        ]
        if previous is not None:
            p = previous._mapping
            old: str = p["version"]
            await update_model_version(conn, old, {"status": "retired", "retired_at": now})
            retired_id = await record_model_event(
                conn,
                version=old,
                cluster=cluster,
                event="retired",
                from_status="current",
                to_status="retired",
                actor=self.actor,
                at=now,
                reason=f"replaced by {t['version']} ({event})",
                detail={"replaced_by": t["version"]},
            )
            announcements.append(
                Announcement(
                    cluster=cluster,
                    correlation_id=f"registry-{retired_id}",
                    version=old,
                    sha256=p["sha256"],
                    uri=p["uri"],
                    status="retired",
                    card=_json_card(p["card"]),
                    created_at=_aware(p["created_at"]) or now,
                    promoted_at=_aware(p["promoted_at"]),
                    metrics=_message_metrics(p["metrics"]),
                )
            )
        published = []
        for message in announcements:  # current first: see the module docstring
            published.append(await publisher.publish(message))
        return tuple(published)


def _verified_card(folder: Path, sha256: str | None = None) -> dict[str, Any]:
    """Load the checkpoint as a prioritizer would (weights, schema) and return its card as JSON.

    With ``sha256``, also check the checkpoint still has the bytes it was registered with.
    """
    import json

    from shared.model import CheckpointError
    from shared.rl.setup import load_trained

    if sha256 is not None:
        try:
            actual = checkpoint_sha256(folder)
        except (ModelLoadError, OSError) as err:
            raise RegistryError(f"checkpoint {folder} cannot be read: {err}") from None
        if actual != sha256:
            raise RegistryError(
                f"checkpoint {folder} changed since it was registered: sha256 {actual[:12]}... "
                f"instead of {sha256[:12]}...; register it again under a new version name"
            )
    try:
        _, card, _ = load_trained(folder)
    except CheckpointError as err:
        raise RegistryError(f"checkpoint {folder} cannot be used: {err}") from None
    except (OSError, RuntimeError, ValueError) as err:
        raise RegistryError(f"checkpoint {folder} cannot be read: {type(err).__name__}: {err}") from None
    loaded: dict[str, Any] = json.loads(card.model_dump_json())
    return loaded


def _run_gate(
    candidate: Path, reference: Path | None, settings: GateSettings, label: str | None
) -> GateResult:
    from shared.registry.gate import GateError

    try:
        return evaluate_gate(candidate, reference, settings, reference_label=label)
    except GateError as err:
        raise RegistryError(f"the promotion gate could not run: {err}") from None
