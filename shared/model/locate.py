"""Where a model version's checkpoint is and which sha256 identifies it.

Why in ``shared``: the prioritizer (which loads announced versions) and the model registry (which
registers and announces them) must agree byte for byte on what a version's ``uri`` and ``sha256``
mean; one definition here keeps them from drifting. The sha256 is that of ``card.json``, which
itself pins the weights' hash.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import unquote, urlparse

from shared.model.checkpoint import CARD_FILE, WEIGHTS_FILE

__all__ = ["ModelLoadError", "checkpoint_sha256", "file_sha256", "resolve_checkpoint"]


class ModelLoadError(Exception):
    """A model version that cannot be used; ``reason`` says why (the previous model is kept)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def resolve_checkpoint(uri: str) -> Path:
    """The checkpoint directory an announcement's ``uri`` names; ``ModelLoadError`` if none."""
    text = uri
    if "://" in uri:
        parsed = urlparse(uri)
        if parsed.scheme != "file":
            raise ModelLoadError(f"model uri {uri!r}: only local paths (or file://) can be loaded")
        text = unquote(parsed.path)
    path = Path(text)
    if path.is_file() and path.name in (CARD_FILE, WEIGHTS_FILE):
        path = path.parent
    if not path.is_dir():
        what = "is a file, not a checkpoint directory" if path.exists() else "does not exist"
        raise ModelLoadError(
            f"model uri {uri!r} {what} (a checkpoint is a directory with {CARD_FILE} and {WEIGHTS_FILE})"
        )
    return path


def checkpoint_sha256(path: str | Path) -> str:
    """The sha256 to announce for a checkpoint: that of its ``card.json`` (which pins the weights)."""
    return file_sha256(resolve_checkpoint(str(path)) / CARD_FILE)
