"""The feature schema: its canonical content, a hash that is stable and changes when it must."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from shared.features import FeatureConfig, FeatureSchema, FeatureSchemaMismatch, SamplingConfig

# The schema of this code, written out by hand. A change here is a change of model inputs: bump
# FEATURES_VERSION (if a formula changed) and update this document and the hash below together.
EXPECTED: dict[str, Any] = {
    "version": 1,
    "job_features": [
        "gpus",
        "gpu_type",
        "vc",
        "requested_time",
        "submit_time",
        "wait",
        "cpus",
        "mem",
        "free_nodes",
        "can_schedule_now",
        "num_ways",
        "demand_supply",
        "job_size",
        "urgency",
        "future_availability",
        "fragmentation",
        "user_share",
    ],
    "cluster_features": [
        "free_gpus",
        "fragmentation",
        "queue_demand",
        "queue_length",
        "mean_urgency",
        "runnable",
        "future_availability",
    ],
    "config": {
        "time_unit_s": 60.0,
        "horizon_s": 604800.0,
        "near_horizon_s": 3600.0,
        "queue_ref": 1024,
        "bsld_floor_s": 10.0,
    },
    "sampling": {
        "mode": "state",
        "n_observation": 8,
        "n_critic": 5,
        "fragmentation_high": 0.5,
        "multi_way_high": 0.5,
        "multi_ways": 2,
        "priority": [
            "wait",
            "requested_time",
            "gpus",
            "can_schedule_now",
            "demand_supply",
            "future_availability",
            "fragmentation",
            "free_nodes",
            "urgency",
            "job_size",
            "num_ways",
            "cpus",
            "mem",
            "gpu_type",
            "user_share",
            "vc",
            "submit_time",
        ],
        "critic_priority": [
            "free_gpus",
            "queue_demand",
            "runnable",
            "future_availability",
            "queue_length",
            "fragmentation",
            "mean_urgency",
        ],
    },
}
EXPECTED_HASH = "56e3ce796ee2bb6eea3f1eee681ee25c8df76601acae06299f056bce60118e0d"


def test_current_schema_is_the_documented_one() -> None:
    assert FeatureSchema.current().to_dict() == EXPECTED


def test_hash_is_sha256_of_the_canonical_json() -> None:
    canonical = json.dumps(EXPECTED, sort_keys=True, separators=(",", ":"))
    assert hashlib.sha256(canonical.encode()).hexdigest() == EXPECTED_HASH
    assert FeatureSchema.current().hash == EXPECTED_HASH


def test_round_trip_through_json() -> None:
    schema = FeatureSchema.current(FeatureConfig(horizon_s=86_400.0), SamplingConfig(mode="fixed"))
    back = FeatureSchema.from_dict(json.loads(json.dumps(schema.to_dict())))
    assert back.hash == schema.hash
    assert back == schema


@pytest.mark.parametrize(
    ("config", "sampling"),
    [
        (FeatureConfig(horizon_s=86_400.0), SamplingConfig()),
        (FeatureConfig(bsld_floor_s=0.0), SamplingConfig()),
        (FeatureConfig(), SamplingConfig(mode="fixed")),
        (FeatureConfig(), SamplingConfig(fragmentation_high=0.4)),
        (FeatureConfig(), SamplingConfig(n_observation=9)),
    ],
)
def test_anything_that_changes_the_inputs_changes_the_hash(
    config: FeatureConfig, sampling: SamplingConfig
) -> None:
    assert FeatureSchema.current(config, sampling).hash != EXPECTED_HASH


def test_exploration_temperature_is_not_part_of_the_schema() -> None:
    assert FeatureSchema.current(sampling=SamplingConfig(explore=2.0)).hash == EXPECTED_HASH


def test_mismatch_names_the_differences() -> None:
    trained = FeatureSchema.current(FeatureConfig(horizon_s=86_400.0))
    FeatureSchema.current().require_same(FeatureSchema.current())
    with pytest.raises(FeatureSchemaMismatch, match="config") as err:
        FeatureSchema.current().require_same(trained)
    assert "86400.0" in str(err.value)
    renamed = FeatureSchema.from_dict({**EXPECTED, "job_features": [*EXPECTED["job_features"][:-1], "other"]})
    with pytest.raises(FeatureSchemaMismatch, match="job_features"):
        FeatureSchema.current().require_same(renamed)


def test_fixed_observation() -> None:
    assert FeatureSchema.current().fixed_observation == (
        "gpus",
        "requested_time",
        "wait",
        "free_nodes",
        "can_schedule_now",
        "demand_supply",
        "future_availability",
        "fragmentation",
    )
