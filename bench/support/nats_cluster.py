"""A three-node NATS cluster with JetStream on loopback, for failover tests (never the machine's).

Why real processes: what must hold when a node dies (streams at replication 3 keep every message,
consumers keep their state, clients reconnect to the survivors) is the servers' behaviour, which no
mock has.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from services.adapter_sim.stack import free_port, nats_server_binary
from shared.bus import BusSettings, connect
from shared.bus.streams import stream_name
from shared.schemas.subjects import Kind, Subjects


@dataclass
class NatsCluster:
    """The nodes' client URLs and processes."""

    urls: list[str]
    procs: list[subprocess.Popen[bytes]]

    @property
    def url(self) -> str:
        """Every node, as ``HYLO_NATS_URL`` lists them."""
        return ",".join(self.urls)

    def kill(self, index: int) -> None:
        """SIGKILL one node (no lame-duck mode, no goodbye to its peers)."""
        self.procs[index].send_signal(signal.SIGKILL)
        self.procs[index].wait(10)


async def stream_leader(url: str, root: str, kind: Kind = "placements") -> int:
    """The index of the node that leads ``kind``'s stream of namespace ``root`` (the nodes' server
    names are ``n<index>``): the node to kill for a failover that forces an election."""
    nc = await connect(BusSettings(nats_url=url, subject_root=root))
    try:
        info = await nc.jetstream().stream_info(stream_name(Subjects(root), kind))
        assert info.cluster is not None and info.cluster.leader is not None
        return int(info.cluster.leader.removeprefix("n"))
    finally:
        await nc.close()


def _config(name: str, port: int, route: int, routes: list[int], store: Path) -> str:
    peers = ", ".join(json.dumps(f"nats-route://127.0.0.1:{r}") for r in routes)
    return (
        f"server_name: {name}\nlisten: 127.0.0.1:{port}\nmax_payload: 8MB\n"
        f"jetstream {{\n  store_dir: {json.dumps(str(store))}\n}}\n"
        f"cluster {{\n  name: hylo-test\n  listen: 127.0.0.1:{route}\n  routes: [{peers}]\n}}\n"
    )


async def _wait_for_meta_leader(url: str, timeout_s: float) -> None:
    """JetStream answers only once the cluster elected its meta leader."""
    deadline = time.monotonic() + timeout_s
    nc = await connect(BusSettings(nats_url=url, nats_max_reconnect_attempts=5, nats_reconnect_wait_s=0.2))
    try:
        while True:
            try:
                await nc.jetstream().account_info()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
    finally:
        await nc.close()


@contextlib.contextmanager
def nats_cluster(folder: Path, nodes: int = 3, timeout_s: float = 30.0) -> Iterator[NatsCluster]:
    ports = [free_port() for _ in range(nodes)]
    routes = [free_port() for _ in range(nodes)]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i in range(nodes):
            conf = folder / f"n{i}.conf"
            others = [r for j, r in enumerate(routes) if j != i]
            conf.write_text(_config(f"n{i}", ports[i], routes[i], others, folder / f"js{i}"))
            log = (folder / f"n{i}.log").open("wb")
            procs.append(
                subprocess.Popen([str(nats_server_binary()), "-c", str(conf)], stdout=log, stderr=log)
            )
        cluster = NatsCluster([f"nats://127.0.0.1:{p}" for p in ports], procs)
        asyncio.run(_wait_for_meta_leader(cluster.url, timeout_s))
        yield cluster
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
