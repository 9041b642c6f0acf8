"""Who each party of ``hylo run``/``hylo up`` is on the bus.

Why: with identities on the bus (``shared.bus.identity``) a run has four kinds of client: the
services (each its own identity, passed as env vars), the simulated cluster's replay (its cluster's
adapter: it may publish only that cluster's snapshots and outcomes), and the CLI's own stream set-up
and store checks (the admin). ``hylo run`` generates throwaway credentials and TLS files in its run
folder, so the main command exercises the same permissions a deployment does; ``hylo up`` uses the
folder of ``hylo bus credentials`` given with ``--credentials``, or none (a server without auth).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from shared.bus.credentials import CredentialSet, load_credentials, write_credentials
from shared.bus.identity import standard_identities
from shared.bus.settings import BusSettings
from shared.bus.streams import create_streams
from shared.schemas.subjects import Subjects


@dataclass(frozen=True)
class RunBus:
    """The bus settings of each party of a run (all ``base`` when there are no credentials)."""

    base: BusSettings
    credentials: CredentialSet | None = None

    def admin(self) -> BusSettings:
        if self.credentials is None:
            return self.base
        return self.credentials.settings_for("admin", self.base)

    def adapter(self, cluster: str) -> BusSettings:
        if self.credentials is None:
            return self.base
        return self.credentials.settings_for(f"adapter-{cluster}", self.base)

    def service_env(self, names: tuple[str, ...]) -> dict[str, dict[str, str]]:
        """Each service's identity as env vars (empty without credentials)."""
        if self.credentials is None:
            return {}
        return {name: self.credentials.env_for(name) for name in names}

    def init_streams(self) -> None:
        """Create the streams as the admin (the services' identities may not)."""
        asyncio.run(create_streams(self.admin()))


def throwaway_credentials(folder: Path, cluster: str, subject_root: str) -> CredentialSet:
    """Credentials and TLS files for a run on this machine (loopback names in the certificate)."""
    return write_credentials(
        folder,
        standard_identities((cluster,)),
        Subjects(subject_root),
        tls=True,
        hosts=("127.0.0.1", "localhost"),
    )


def up_credentials(folder: Path | None, cluster: str, services: tuple[str, ...]) -> CredentialSet | None:
    """The credentials of ``hylo up --credentials``, checked to hold every identity the run needs."""
    if folder is None:
        return None
    found = load_credentials(folder)
    names = {c.identity.name for c in found.credentials}
    missing = [n for n in ("admin", f"adapter-{cluster}", *services) if n not in names]
    if missing:
        raise ValueError(
            f"{folder} has no identity {', '.join(missing)}: run `hylo bus credentials --out {folder} "
            f"--cluster {cluster}` (existing seeds are kept)"
        )
    return found
