"""Named feature sets: the classic schema is unchanged, the ``predicted`` set's schema records its
set and round-trips, its prediction features follow the documented formulas, and a missing
prediction is marked missing (never an error), in the simulator's views and in production's.

The shipped checkpoints' own records are the reference for "unchanged": their cards were written
before feature sets existed, so the classic schema must still be what they recorded.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from feature_views import cluster_view, queue_view

from shared.features import FeatureConfig, FeatureSampler, FeatureSchema, SamplingConfig, compute_features
from shared.features.catalog import (
    CLASSIC,
    FEATURE_SETS,
    JOB_FEATURES,
    PREDICTED,
    PREDICTION_FEATURES,
    UnknownFeatureSet,
    feature_set,
)
from shared.features.compute import MISSING_BAND
from shared.features.sampling import SamplingState
from shared.schemas.views import snapshot_views
from tests.stages.stage_helpers import node, pend, run, snap, two_group_spec

RUNS = Path(__file__).resolve().parents[2] / "docs" / "results" / "runs"
CARDS = sorted(RUNS.glob("*/checkpoint/card.json"))


def test_there_are_shipped_cards() -> None:
    assert len(CARDS) >= 18


def test_most_shipped_cards_predate_feature_sets() -> None:
    """The classic record must stay what the cards written before sets recorded (18 of them)."""
    old = [
        c
        for c in CARDS
        if "feature_set" not in json.loads(c.read_text())["training"]["extra"]["feature_schema"]
    ]
    assert len(old) >= 18


@pytest.mark.parametrize("card_path", CARDS, ids=lambda p: p.parent.parent.name)
def test_this_code_rebuilds_every_shipped_cards_schema(card_path: Path) -> None:
    """Byte for byte, whatever the set: a card without a set key (written before sets existed)
    is classic; one with it (e.g. ``predicted``) is rebuilt in its set."""
    card = json.loads(card_path.read_text())
    recorded = card["training"]["extra"]["feature_schema"]
    schema = FeatureSchema.from_dict(recorded)
    assert schema.feature_set == recorded.get("feature_set", "classic")
    mine = FeatureSchema.current(sampling=schema.sampling)
    assert mine.to_dict() == recorded  # byte for byte the same record ...
    assert mine.hash == card["features"]["schema_hash"]  # ... and the hash the card carries


def test_classic_record_has_no_set_key_and_no_prediction_constant() -> None:
    record = FeatureSchema.current().to_dict()
    assert "feature_set" not in record
    assert "band_ratio_ref" not in record["config"]
    assert "feature_set" not in record["sampling"]
    # a prediction constant does not change the classic schema: its features do not read it
    wider = FeatureSchema.current(FeatureConfig(band_ratio_ref=10.0))
    assert wider.hash == FeatureSchema.current().hash


def test_predicted_schema_records_its_set_and_round_trips() -> None:
    schema = FeatureSchema.of_set("predicted")
    record = schema.to_dict()
    assert record["feature_set"] == "predicted"
    assert record["job_features"] == [*JOB_FEATURES, *PREDICTION_FEATURES]
    assert record["config"]["band_ratio_ref"] == 1000.0
    assert record["sampling"]["n_observation"] == 12
    assert record["sampling"]["priority"][:5] == ["wait", *PREDICTION_FEATURES]
    back = FeatureSchema.from_dict(json.loads(json.dumps(record)))
    assert back == schema and back.hash == schema.hash
    assert schema.hash != FeatureSchema.current().hash
    assert FeatureSchema.of_set("predicted", FeatureConfig(band_ratio_ref=10.0)).hash != schema.hash
    fixed = FeatureSchema.current(sampling=SamplingConfig(feature_set="predicted", mode="fixed"))
    assert fixed.hash != schema.hash and fixed.feature_set == "predicted"


def test_unknown_set_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(UnknownFeatureSet, match="unknown feature set 'nope'; known: classic, predicted"):
        feature_set("nope")
    with pytest.raises(ValueError, match="nope"):
        SamplingConfig(feature_set="nope")
    # a classic priority list is not a predicted one, and the other way round
    with pytest.raises(ValueError, match="predicted set"):
        SamplingConfig(feature_set="predicted", priority=CLASSIC.priority)
    with pytest.raises(ValueError, match="classic set"):
        SamplingConfig(priority=PREDICTED.priority)


def test_every_set_extends_the_classic_pool() -> None:
    for pool in FEATURE_SETS.values():
        assert pool.job_features[: len(JOB_FEATURES)] == JOB_FEATURES
        assert pool.cluster_features == CLASSIC.cluster_features


@pytest.mark.parametrize("mode", ["state", "fixed"])
@pytest.mark.parametrize("fragmentation", [0.0, 0.49, 0.5, 1.0])
@pytest.mark.parametrize("multi", [0.0, 0.5, 1.0])
def test_predicted_observation_is_the_classic_one_plus_the_prediction_features(
    mode: str, fragmentation: float, multi: float
) -> None:
    """With 12 observed features the predicted set shows, in every state, what classic shows plus
    the four prediction columns (docs/features.md, "Feature sets")."""
    state = SamplingState(fragmentation, multi)
    classic = FeatureSampler(SamplingConfig(mode=mode)).select_state(state)  # type: ignore[arg-type]
    predicted = FeatureSampler(SamplingConfig(feature_set="predicted", mode=mode)).select_state(state)  # type: ignore[arg-type]
    assert set(predicted.observation_names) == {*classic.observation_names, *PREDICTION_FEATURES}
    assert predicted.critic_names == classic.critic_names
    assert predicted.observation_mask.shape == (len(PREDICTED.job_features),)
    # catalog order: the classic columns first, in the classic's order
    assert predicted.observation_names[: len(classic.observation)] == classic.observation_names


def _queue(**predictions: list[float]) -> tuple[object, object]:
    jobs = [
        {"gpus": 1, "cpu": 1000, "mem": 1024, "eligible": [0], "est": 600.0, "submit": 0.0},
        {"gpus": 2, "cpu": 2000, "mem": 2048, "eligible": [0], "est": 60.0, "submit": 500.0},
        {"gpus": 1, "cpu": 1000, "mem": 1024, "eligible": [0], "est": 7200.0, "submit": 900.0},
    ]
    qv = queue_view(jobs, 1)
    if predictions:
        from dataclasses import replace

        qv = replace(qv, **{k: np.asarray(v, dtype=np.float64) for k, v in predictions.items()})
    cv = cluster_view([(2, 4, 32000, 65536)], [(4, 32000, 65536), (1, 8000, 16384)])
    return qv, cv


def L(seconds: float) -> float:
    return min(1.0, math.log1p(seconds / 60.0) / math.log1p(7 * 86400 / 60.0))


def test_prediction_features_follow_their_formulas() -> None:
    # job 0: a prediction with a band; job 1: cold start (no band); job 2: no prediction at all
    qv, cv = _queue(
        predicted_s=[600.0, 30.0, math.nan],
        predicted_lo_s=[60.0, math.nan, math.nan],
        predicted_hi_s=[6000.0, math.nan, math.nan],
    )
    now = 1000.0
    values = compute_features(qv, cv, now, features="predicted")  # type: ignore[arg-type]
    col = values.column
    assert col("predicted_known").tolist() == [1.0, 1.0, 0.0]
    assert col("predicted_time").tolist() == pytest.approx([L(600.0), L(30.0), 0.0], abs=1e-15)
    # log(6000 / 60) / log(1000) = 2/3; no band: the widest
    assert col("predicted_band").tolist() == pytest.approx([2 / 3, MISSING_BAND, MISSING_BAND], abs=1e-15)
    # w / (w + max(p, 10 s)): waits 1000 and 500 s
    assert col("predicted_urgency").tolist() == pytest.approx([1000 / 1600, 500 / 530, 0.0], abs=1e-15)
    # the classic columns are the classic set's
    classic = compute_features(qv, cv, now)  # type: ignore[arg-type]
    assert np.array_equal(values.job[:, : len(JOB_FEATURES)], classic.job)
    assert ((values.job >= 0) & (values.job <= 1)).all()


def test_a_queue_without_predictions_is_usable_and_marked_missing() -> None:
    qv, cv = _queue()  # no prediction columns given: all NaN
    values = compute_features(qv, cv, 1000.0, features=PREDICTED)  # type: ignore[arg-type]
    assert not values.column("predicted_known").any()
    assert not values.column("predicted_time").any() and not values.column("predicted_urgency").any()
    assert (values.column("predicted_band") == MISSING_BAND).all()
    assert np.isfinite(values.job).all()


def test_bad_predictions_are_refused_with_value_checks_only() -> None:
    qv, _ = _queue()
    from dataclasses import replace

    with pytest.raises(ValueError, match="predicted_s must be >= 0"):
        replace(qv, predicted_s=np.array([1.0, -5.0, math.nan]))
    with pytest.raises(ValueError, match="predicted_hi_s has shape"):
        replace(qv, predicted_hi_s=np.array([1.0]))


def test_production_snapshots_carry_no_predictions_and_read_missing() -> None:
    """``snapshot_views``: the snapshot message has no prediction, so every job's is missing, and
    the classic columns of the predicted set are the classic featurizer's."""
    s = snap(
        [pend("j1", 8, gpu_types=("B",)), pend("j2", 6, gpu_types=("A",)), pend("j3", 1)],
        [node("a-0", "a"), node("a-1", "a", gpus=2, cpus=16000, mem=65536), node("b-0", "b")],
        [run("r1", ["a-1"], 2, end=1000.0)],
    )
    views = snapshot_views(s, two_group_spec())
    assert np.isnan(views.queue.predicted_s).all() and np.isnan(views.queue.predicted_lo_s).all()
    values = compute_features(views.queue, views.cluster, views.now, features="predicted")
    classic = compute_features(views.queue, views.cluster, views.now)
    assert not values.column("predicted_known").any()
    assert np.array_equal(values.job[:, : len(JOB_FEATURES)], classic.job)
