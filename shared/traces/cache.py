"""Parsed-trace cache: ``.npz`` files keyed by what determines the parse result.

Why: parsing and validating 200,000 SWF rows takes about a second, and experiments load the same
trace many times. The key is the SHA-256 of the file content (not its path or mtime, so a copied
or touched file still hits and an edited file never does), the loader name, the loader's
``VERSION`` (bumped whenever a loader's output changes), this module's ``CACHE_FORMAT`` and the
loader options. Entries are plain ``.npz`` (no pickle, so a cache file cannot run code); a
corrupt or unreadable entry is ignored and rewritten. ``get_settings().trace_cache = False``
(``HYLO_TRACE_CACHE=0``) turns the cache off.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from shared.config import get_settings
from shared.domain.jobs import (
    DERIVED_FIELDS,
    NUMERIC_FIELDS,
    OPTIONAL_CODE_TABLES,
    OPTIONAL_FIELDS,
    JobTable,
    TraceMeta,
)
from shared.npz_files import save_npz_atomic
from shared.traces.model import Exclusion, LoadedTrace
from shared.traces.reading import file_sha256

CACHE_FORMAT = 2  # 2: the optional columns (group, app, queue, partition, logged_wait)
SUBDIR = "traces"
_JSON_KEY = "__json__"

Parser = Callable[..., LoadedTrace]


def cache_key(content_sha256: str, loader: str, version: int, options: Mapping[str, Any]) -> str:
    """A stable hex key; options are serialized with sorted keys so their order does not matter."""
    payload = {
        "sha256": content_sha256,
        "loader": loader,
        "version": version,
        "format": CACHE_FORMAT,
        "options": dict(options),
    }
    text = json.dumps(payload, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def cache_file(cache_dir: Path, loader: str, key: str) -> Path:
    return Path(cache_dir) / SUBDIR / f"{loader}-{key[:40]}.npz"


def save_entry(target: Path, loaded: LoadedTrace) -> None:
    """Write atomically (temporary file + rename) so a crash never leaves a half-written entry."""
    table = loaded.table
    doc = {
        "meta": asdict(table.meta),
        "type_sets": [list(t) for t in table.type_sets],
        "users": table.users,
        "vcs": table.vcs,
        "qoses": table.qoses,
        **{names: getattr(table, names) for names in OPTIONAL_CODE_TABLES.values()},
        "exclusions": [asdict(e) for e in loaded.exclusions],
        "loader": loaded.loader,
    }
    # the derived columns (predictions) are not the trace's: the loaded table never has them
    stored = [name for name in (*NUMERIC_FIELDS, *OPTIONAL_FIELDS) if name not in DERIVED_FIELDS]
    arrays: dict[str, Any] = {name: getattr(table, name) for name in stored}
    arrays["ids"] = table.ids
    arrays[_JSON_KEY] = np.asarray(json.dumps(doc))
    save_npz_atomic(target, arrays)


def load_entry(source: Path, path: Path) -> LoadedTrace | None:
    """The cached trace, or None when the entry is missing, corrupt or from another layout."""
    if not source.is_file():
        return None
    try:
        with np.load(source, allow_pickle=False) as npz:
            doc = json.loads(str(npz[_JSON_KEY][()]))
            fields = {name: np.asarray(npz[name], dtype=dtype) for name, dtype in NUMERIC_FIELDS.items()}
            fields.update(
                {
                    name: np.asarray(npz[name], dtype=dt)
                    for name, (dt, _) in OPTIONAL_FIELDS.items()
                    if name not in DERIVED_FIELDS
                }
            )
            ids = np.asarray(npz["ids"])
        meta = dict(doc["meta"])
        meta["notes"] = tuple(meta.get("notes", ()))
        columns: dict[str, Any] = {**fields, **{k: list(doc[k]) for k in OPTIONAL_CODE_TABLES.values()}}
        table = JobTable(
            ids=ids,
            type_sets=[tuple(t) for t in doc["type_sets"]],
            users=list(doc["users"]),
            vcs=list(doc["vcs"]),
            qoses=list(doc["qoses"]),
            meta=TraceMeta(**meta),
            **columns,
        )
        exclusions = [
            Exclusion(e["reason"], int(e["count"]), list(e["example_ids"]), tuple(e.get("submit_s", ())))
            for e in doc["exclusions"]
        ]
        return LoadedTrace(
            table=table, exclusions=exclusions, loader=str(doc["loader"]), path=path, from_cache=True
        )
    except Exception:
        return None


def cached_parse(
    path: Path,
    loader: str,
    version: int,
    parse: Parser,
    options: Mapping[str, Any] | None = None,
    *,
    use_cache: bool | None = None,
    cache_dir: Path | None = None,
) -> LoadedTrace:
    """``parse(path, **options)``, served from the cache when an entry for this content exists.

    ``use_cache`` and ``cache_dir`` default to the settings (``trace_cache``, ``cache_dir``).
    """
    opts = dict(options or {})
    settings = get_settings()
    enabled = settings.trace_cache if use_cache is None else use_cache
    if not enabled:
        return parse(path, **opts)
    content_sha = file_sha256(path)
    entry = cache_file(cache_dir or settings.cache_dir, loader, cache_key(content_sha, loader, version, opts))
    hit = load_entry(entry, path)
    if hit is not None and hit.table.meta.sha256 == content_sha:
        return hit
    loaded = parse(path, **opts)
    if loaded.table.meta.sha256 == content_sha:  # the file did not change while it was parsed
        try:
            save_entry(entry, loaded)
        except OSError as err:
            warnings.warn(f"trace cache not written ({entry}): {err}", RuntimeWarning, stacklevel=2)
    return loaded
