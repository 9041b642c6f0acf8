"""Cluster specs by name, loaded once per process from ``ServiceSettings.clusters``.

Why eager loading: a typo in a spec path should stop the service at start-up with the file and
field named, not dead-letter every snapshot of that cluster an hour later.
"""

from __future__ import annotations

from collections.abc import Mapping

from shared.domain.cluster import ClusterSpec, load_cluster_spec
from shared.schemas.subjects import validate_cluster_name


class ClusterConfigError(ValueError):
    """The cluster map names an unusable cluster or spec."""


def load_specs(clusters: Mapping[str, str]) -> dict[str, ClusterSpec]:
    """Load every spec of the map; raises ClusterConfigError naming the cluster and the cause."""
    if not clusters:
        raise ClusterConfigError("HYLO_CLUSTERS is empty: expected at least one cluster -> spec entry")
    specs = {}
    for name, source in clusters.items():
        try:
            validate_cluster_name(name)
            specs[name] = load_cluster_spec(source)
        except (ValueError, OSError) as err:
            raise ClusterConfigError(f"cluster {name!r} (spec {source!r}): {err}") from err
    return specs
