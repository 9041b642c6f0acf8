"""Write the JSON Schema of every message to ``docs/schemas/<kind>.json``.

Why generated files in the repository: adapters written outside Python (a Slurm plugin, a Go
exporter) validate against them, and reviewers see a schema change as a diff. A test fails when the
files are out of date; rerun ``python -m shared.schemas.jsonschema`` after changing a model.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import BaseModel

from shared.config import PROJECT_ROOT
from shared.schemas.deadletter import DeadLetter
from shared.schemas.messages import MESSAGE_TYPES

DEFAULT_DIR = PROJECT_ROOT / "docs" / "schemas"


def schema_documents() -> dict[str, str]:
    """File name -> JSON text of every message schema (stable key order, trailing newline)."""
    models: dict[str, type[BaseModel]] = {**MESSAGE_TYPES, DeadLetter.kind: DeadLetter}
    return {
        f"{kind}.json": json.dumps(model.model_json_schema(mode="validation"), indent=2, sort_keys=True)
        + "\n"
        for kind, model in models.items()
    }


def write_schemas(directory: Path = DEFAULT_DIR) -> list[Path]:
    """(Re)write the schema files; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in schema_documents().items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for p in write_schemas(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_DIR):
        print(p)
