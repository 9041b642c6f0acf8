"""A store filled through ``shared.store.writes`` with a history whose report is worked out by hand.

Cluster ``c`` (spec ``SPEC_DOC`` of the message factories: 2 x 8 + 2 x 4 = 24 GPUs), ten snapshots
k = 1..10 at cluster time 100 k, sequence k, two pending jobs each: ``k-a`` (rank 0, started on v0)
and ``k-b`` (rank 1, keeps waiting). So: 10 snapshots, 20 decision rows, 10 jobs started.

Who decided:
- k = 1, 2: base policy FCFS, fallback ``NO_MODEL`` (no model decided yet);
- k = 3-6, 8, 9: model ``c-m1``;
- k = 7, 10: FCFS, fallback ``DEADLINE`` (charged to ``c-m1``, the model in charge).

Stage latencies of snapshot k: featurizer k ms, prioritizer 2 ms, placer 1 ms (total k + 3). Over the
ten snapshots: featurizer p50 5.5, p99 1 + 0.99 x 9 = 9.91; total p50 8.5, p99 12.91.

Outcomes: ``k-a`` submitted at 100 k - 10 k, started at 100 k by snapshot k, ran 100 s on 2 GPUs, so
wait 10 k, JCT 10 k + 100, bounded slowdown (10 k + 100) / 100. Waits by decider: c-m1 30 40 50 60 80
90 (mean 58.33, p50 55), policy:fcfs 10 20 70 100 (mean 50, p50 45). Plus ``bg``: an outcome naming no
stored decision (unattributed), 4 GPUs from 0 to 550, wait 0.

Busy GPUs over [0, 1100]: 2 from 100 to 1100 and 4 from 0 to 550: (2 x 1000 + 4 x 550) / 1100 = 3.818...
Over the range [300, 600): 2 x 300 + 4 x 250 = 1600 over 300 s = 5.333...; jobs started: k = 3, 4, 5.

Model history: ``c-m1`` registered, then promoted (forced, by alice); ``c-m2`` registered, then refused
by the gate with ``REFUSAL``.
"""

from __future__ import annotations

import base64
import io
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html.parser import HTMLParser

from PIL import Image
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.schemas import JobOutcome, JobPlacement, PlacementDecision, Placements
from shared.store import (
    create_engine,
    ensure_cluster,
    record_decision,
    record_model_event,
    record_model_version,
    record_outcome,
    update_model_version,
    upgrade,
)
from tests.schemas.message_factories import SPEC_DOC, model_version

NO_MODEL = "no model loaded"
#: markup in a reason must come out as text
DEADLINE = 'deadline <50 ms> & "late"'
REFUSAL = "improvement +0.5% is below the margin 2%"
CAPACITY = 24
MODEL_SNAPSHOTS = (3, 4, 5, 6, 8, 9)
DEADLINE_SNAPSHOTS = (7, 10)
NO_MODEL_SNAPSHOTS = (1, 2)
REGISTERED_AT = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)
PROMOTED_AT = datetime(2026, 11, 20, 11, 0, tzinfo=UTC)
REFUSED_AT = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def unique_cluster() -> str:
    return f"r-{uuid.uuid4().hex[:10]}"


async def migrated(url: str) -> AsyncEngine:
    engine = create_engine(url)
    await upgrade(engine)
    return engine


def snapshot_decision(c: str, k: int) -> PlacementDecision:
    model = k in MODEL_SNAPSHOTS
    fallback = None if model else (NO_MODEL if k in NO_MODEL_SNAPSHOTS else DEADLINE)
    placements = (
        JobPlacement(
            job_id=f"{k}-a", rank=0, priority=2.0, nodes=("v0",), mode="pack", features={"wait": 0.1}
        ),
        JobPlacement(job_id=f"{k}-b", rank=1, priority=1.0, features={"wait": 0.2}),
    )
    return PlacementDecision(
        cluster=c,
        correlation_id=f"{c}-s{k}",
        snapshot_time=100.0 * k,
        sequence=k,
        policy="model" if model else "fcfs",
        model_version=f"{c}-m1" if model else None,
        fallback=fallback,
        placements=Placements.of(placements),
        latencies_ms={"featurizer": float(k), "prioritizer": 2.0, "placer": 1.0},
    )


async def seed(engine: AsyncEngine, c: str) -> None:
    """The history of the module docstring, written as the services and the registry write it."""
    async with engine.begin() as conn:
        await ensure_cluster(conn, c, spec=SPEC_DOC)
        for k in range(1, 11):
            await record_decision(conn, snapshot_decision(c, k))
            await record_outcome(
                conn,
                JobOutcome(
                    cluster=c,
                    correlation_id=f"{c}-s{k}",
                    job_id=f"{k}-a",
                    submit_s=100.0 * k - 10.0 * k,
                    start_s=100.0 * k,
                    end_s=100.0 * k + 100.0,
                    gpus=2,
                ),
            )
        await record_outcome(
            conn,
            JobOutcome(
                cluster=c,
                correlation_id=f"{c}-elsewhere",
                job_id="bg",
                submit_s=0.0,
                start_s=0.0,
                end_s=550.0,
                gpus=4,
            ),
        )
        for version in (f"{c}-m1", f"{c}-m2"):
            await record_model_version(conn, model_version(cluster=c, version=version))
        m1, m2 = f"{c}-m1", f"{c}-m2"
        await record_model_event(
            conn, version=m1, cluster=c, event="registered", from_status=None, to_status="candidate",
            actor="alice", at=REGISTERED_AT,
        )  # fmt: skip
        await update_model_version(
            conn,
            m1,
            {"status": "current", "promoted_at": PROMOTED_AT, "promoted_by": "alice", "forced": True},
        )
        await record_model_event(
            conn, version=m1, cluster=c, event="promoted", from_status="candidate", to_status="current",
            actor="alice", at=PROMOTED_AT, forced=True, reason="forced",
        )  # fmt: skip
        await record_model_event(
            conn, version=m2, cluster=c, event="registered", from_status=None, to_status="candidate",
            actor="bob", at=REGISTERED_AT.replace(day=21),
        )  # fmt: skip
        await record_model_event(
            conn, version=m2, cluster=c, event="gate-refused", from_status="candidate", to_status="candidate",
            actor="bob", at=REFUSED_AT, reason=REFUSAL,
        )  # fmt: skip


# --- reading the page back ------------------------------------------------------------------------


@dataclass
class Cell:
    text: str
    value: str | None  # the raw number in data-value, when the cell is a number


@dataclass
class Page:
    """What a test reads from a report: key figures, tables by id, images by id, element ids."""

    summary: dict[str, str | None] = field(default_factory=dict)
    tables: dict[str, list[list[Cell]]] = field(default_factory=dict)
    images: dict[str, str] = field(default_factory=dict)
    ids: set[str] = field(default_factory=set)
    tags: set[str] = field(default_factory=set)
    urls: list[str] = field(default_factory=list)

    def number(self, key: str) -> float:
        value = self.summary[key]
        assert value is not None, f"summary {key} has no value"
        return float(value)

    def rows(self, table: str) -> dict[str, list[Cell]]:
        """Rows of a table by their first cell's text."""
        return {r[0].text: r for r in self.tables[table]}


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page = Page()
        self._table: str | None = None
        self._row: list[Cell] | None = None
        self._cell: Cell | None = None
        self._dd: tuple[str, str | None] | None = None
        self._dd_text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.page.tags.add(tag)
        if a.get("id"):
            self.page.ids.add(str(a["id"]))
        for key in ("src", "href", "action", "data"):
            if a.get(key):
                self.page.urls.append(str(a[key]))
        if tag == "table":
            self._table = a.get("id") or f"table-{len(self.page.tables)}"
            self.page.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = Cell("", a.get("data-value"))
        elif tag == "dd" and str(a.get("id", "")).startswith("sum-"):
            self._dd = (str(a["id"])[4:], a.get("data-value"))
        elif tag == "img" and a.get("id"):
            self.page.images[str(a["id"])] = str(a.get("src"))

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.text += data

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._cell.text = self._cell.text.strip()
            self._row.append(self._cell)
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table is not None:
            self.page.tables[self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None
        elif tag == "dd" and self._dd is not None:
            self.page.summary[self._dd[0]] = self._dd[1]
            self._dd = None


def read_page(page: str) -> Page:
    reader = _Reader()
    reader.feed(page)
    reader.close()
    for rows in reader.page.tables.values():
        if rows:
            del rows[0]  # the header row
    return reader.page


def decode_png(src: str) -> tuple[int, int]:
    """Width and height of a PNG data URI, decoded by Pillow (fails on anything but a whole PNG)."""
    prefix = "data:image/png;base64,"
    assert src.startswith(prefix), src[:40]
    image = Image.open(io.BytesIO(base64.b64decode(src[len(prefix) :], validate=True)))
    assert image.format == "PNG"
    image.load()
    return image.size
