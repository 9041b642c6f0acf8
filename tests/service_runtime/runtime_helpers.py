"""Set-up shared by the service runtime tests: the cluster spec file and a migrated SQLite store."""

from __future__ import annotations

import json
from pathlib import Path

from shared.store import create_engine, upgrade
from tests.schemas.message_factories import SPEC_DOC


async def spec_and_store(tmp_path: Path, name: str) -> tuple[Path, str]:
    """(path of cluster ``c1``'s spec file, URL of a migrated SQLite database) under ``tmp_path``."""
    spec = tmp_path / "c1.yaml"
    spec.write_text(json.dumps(SPEC_DOC))  # JSON is YAML
    db = f"sqlite+aiosqlite:///{tmp_path / f'{name}.db'}"
    engine = create_engine(db)
    await upgrade(engine)
    await engine.dispose()
    return spec, db
