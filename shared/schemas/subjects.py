"""Subject names, built in one place: ``<root>.v1.<cluster>.<kind>``.

Why one helper: a cluster name with a dot, a space or a wildcard would silently change which
subscribers receive a message (``a.b`` is two tokens, ``*`` matches everything). Every subject is
built here, after validating the cluster name, and ``root`` lets tests (and multi-tenant
deployments) use their own namespace (``t1a2b.v1.<cluster>.snapshots``) on a shared server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

from shared.schemas.base import CLUSTER_PATTERN

Kind = Literal["snapshots", "features", "priorities", "placements", "outcomes", "models", "shadows", "dead"]
KINDS: tuple[Kind, ...] = get_args(Kind)
API_VERSION = "v1"

_CLUSTER = re.compile(CLUSTER_PATTERN)
_ROOT = re.compile(r"^[A-Za-z0-9_-]{1,32}$")


class SubjectError(ValueError):
    """A cluster name, root or subject that cannot be used on the bus."""


def validate_cluster_name(cluster: str) -> str:
    """Return ``cluster`` if it is one subject token of letters, digits, ``-`` and ``_`` (<= 63 chars)."""
    if not _CLUSTER.match(cluster):
        raise SubjectError(
            f"cluster name {cluster!r} is not usable in a subject: expected 1-63 characters of letters, "
            "digits, '-' and '_', starting with a letter or digit"
        )
    return cluster


@dataclass(frozen=True)
class Subjects:
    """The subjects of one namespace (``root``); ``Subjects()`` is production's ``hylo``."""

    root: str = "hylo"

    def __post_init__(self) -> None:
        if not _ROOT.match(self.root):
            raise SubjectError(f"subject root {self.root!r}: expected 1-32 letters, digits, '-' or '_'")

    @property
    def prefix(self) -> str:
        return f"{self.root}.{API_VERSION}"

    def of(self, cluster: str, kind: Kind) -> str:
        """The subject of one cluster's messages of one kind."""
        if kind not in KINDS:
            raise SubjectError(f"unknown subject kind {kind!r}; expected one of {', '.join(KINDS)}")
        return f"{self.prefix}.{validate_cluster_name(cluster)}.{kind}"

    def all_clusters(self, kind: Kind) -> str:
        """Wildcard over every cluster's subject of one kind (what streams and consumers bind to)."""
        if kind not in KINDS:
            raise SubjectError(f"unknown subject kind {kind!r}; expected one of {', '.join(KINDS)}")
        return f"{self.prefix}.*.{kind}"

    def parse(self, subject: str) -> tuple[str, Kind]:
        """(cluster, kind) of a subject built by ``of``; raises SubjectError otherwise."""
        parts = subject.split(".")
        if len(parts) != 4 or f"{parts[0]}.{parts[1]}" != self.prefix:
            raise SubjectError(f"subject {subject!r} is not of the form {self.prefix}.<cluster>.<kind>")
        cluster, kind = parts[2], parts[3]
        validate_cluster_name(cluster)
        for known in KINDS:
            if kind == known:
                return cluster, known
        raise SubjectError(f"subject {subject!r}: unknown kind {kind!r}")
