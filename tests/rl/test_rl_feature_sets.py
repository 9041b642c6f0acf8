"""Feature sets end to end in the learning code: shipped checkpoints load as classic with the hash
their cards recorded, a ``predicted``-set model goes through a card and back and runs episodes,
and a card naming a set or a feature this code cannot compute is refused in one line naming the
card file and the features.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from shared.domain.jobs import build_table
from shared.features import SamplingConfig
from shared.features.catalog import PREDICTED
from shared.metrics import make_windows
from shared.model import ActorCritic, ModelConfig, SchemaMismatchError, save_checkpoint
from shared.policies import make_policy
from shared.rl.episodes import EpisodeRunner
from shared.rl.policy import LearnedPolicy
from shared.rl.setup import RunSetup, load_trained, make_card
from shared.scheduling.binding import BoundWorkload, bind_jobs
from tests.rl.conftest import one_node

RUNS = Path(__file__).resolve().parents[2] / "docs" / "results" / "runs"
CHECKPOINTS = sorted(p.parent for p in RUNS.glob("*/checkpoint/card.json"))


@pytest.mark.parametrize("folder", CHECKPOINTS, ids=lambda p: p.parent.name)
def test_shipped_checkpoints_load_in_their_set_with_their_recorded_hash(folder: Path) -> None:
    """Cards written before feature sets existed record none: they load as classic (8 observed
    features); a card that records its set loads in it."""
    data = json.loads((folder / "card.json").read_text())
    recorded_set = data["training"]["extra"]["feature_schema"].get("feature_set", "classic")
    _, card, schema = load_trained(folder)
    assert schema.feature_set == recorded_set
    assert schema.hash == data["features"]["schema_hash"] == card.features.schema_hash
    assert (
        card.model.obs_features == schema.sampling.n_observation == (8 if recorded_set == "classic" else 12)
    )


def predicted_workload(n_jobs: int = 96, with_predictions: bool = True) -> BoundWorkload:
    """The toy one-node workload with runtime predictions: every third job without one, every
    third a cold start (no band)."""
    rng = np.random.default_rng(5)
    runtime = rng.choice([10.0, 300.0], n_jobs)
    table = build_table(
        ids=[f"j{k}" for k in range(n_jobs)],
        submit=[float(400 * (k // 4) + k % 4) for k in range(n_jobs)],
        runtime=runtime.tolist(),
        estimate=(runtime * 3).tolist(),
        gpus=[4] * n_jobs,
    )
    if with_predictions:
        predicted = runtime * rng.uniform(0.7, 1.4, n_jobs)
        low, high = predicted / 2, predicted * 3
        predicted[::3] = np.nan
        low[::3] = high[::3] = low[1::3] = high[1::3] = np.nan
        table = table.with_fields(predicted=predicted, predicted_lo=low, predicted_hi=high)
    return bind_jobs(table, one_node())


def predicted_runner(workload: BoundWorkload) -> EpisodeRunner:
    setup = RunSetup(metric="wait", warmup=8, feature_set="predicted")
    return EpisodeRunner(workload, setup.episode_settings())


def predicted_model() -> ActorCritic:
    torch.manual_seed(0)
    return ActorCritic(ModelConfig(obs_features=12, critic_features=5, max_queue=16, top_k=4)).eval()


def save_predicted(folder: Path) -> Path:
    runner = predicted_runner(predicted_workload())
    model = predicted_model()
    card = make_card(model, runner, trace="toy", cluster="one-node", seed=0, epochs=0)
    save_checkpoint(folder, model, card)
    return folder


def test_run_setup_chooses_the_set_and_whether_predictions_are_needed() -> None:
    assert not RunSetup().needs_predictions
    assert RunSetup(feature_set="predicted").needs_predictions
    assert RunSetup(base_policy="sjf-pred").needs_predictions
    settings = RunSetup(feature_set="predicted", sampling="fixed").episode_settings()
    assert settings.schema.feature_set == "predicted" and settings.sampling.mode == "fixed"
    assert settings.schema.job_features == PREDICTED.job_features
    with pytest.raises(ValueError, match="unknown feature set 'nope'"):
        RunSetup(feature_set="nope")


def test_predicted_card_round_trips_and_its_model_runs_episodes(tmp_path: Path) -> None:
    folder = save_predicted(tmp_path / "ckpt")
    card_json = json.loads((folder / "card.json").read_text())
    assert card_json["training"]["extra"]["feature_schema"]["feature_set"] == "predicted"
    assert "predicted_time" in card_json["features"]["obs"]  # the fixed selection shows them
    model, card, schema = load_trained(folder)
    assert schema.feature_set == "predicted" and schema.hash == card.features.schema_hash
    assert schema.sampling == SamplingConfig(feature_set="predicted")
    # the loaded model schedules with the card's set, with and without predictions in the workload
    for with_predictions in (True, False):
        runner = predicted_runner(predicted_workload(with_predictions=with_predictions))
        window = make_windows(range(len(runner.workload.jobs)), 32, 1, seed=0)[0]
        result = runner.run(model, window, "sample", seed=1)
        assert result.decisions and all(d.obs.shape[1] == 12 for d in result.decisions)
        assert math.isfinite(result.reward)
        # every selection shows the four prediction features, the pool's last (catalog order):
        # predicted_time, predicted_band, predicted_urgency, predicted_known
        known = np.concatenate([d.obs[:, -1] for d in result.decisions])
        band = np.concatenate([d.obs[:, -3] for d in result.decisions])
        if with_predictions:
            assert known.any() and not known.all()  # every third job has none
        else:  # a workload without predictions: usable, every job marked missing
            assert not known.any() and (band == 1.0).all()
    policy = runner.learned_policy(model, window, "greedy")
    assert policy.sampler.pool is PREDICTED


def _rewrite(folder: Path, edit: object) -> Path:
    card = json.loads((folder / "card.json").read_text())
    edit(card["training"]["extra"]["feature_schema"])  # type: ignore[operator]
    (folder / "card.json").write_text(json.dumps(card))
    return folder


def test_a_card_of_an_unknown_set_is_refused_in_one_line(tmp_path: Path) -> None:
    folder = _rewrite(save_predicted(tmp_path / "ckpt"), lambda s: s.update(feature_set="telemetry"))
    with pytest.raises(SchemaMismatchError) as err:
        load_trained(folder)
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(f"{folder / 'card.json'}: trained on feature set 'telemetry'")
    assert "known: classic, predicted" in text and "predicted_time" in text


def test_a_card_with_features_this_code_cannot_compute_is_refused_in_one_line(tmp_path: Path) -> None:
    def add(schema: dict) -> None:  # type: ignore[type-arg]
        schema["job_features"].append("gpu_temperature")
        schema["sampling"]["priority"].append("gpu_temperature")

    folder = _rewrite(save_predicted(tmp_path / "ckpt"), add)
    with pytest.raises(SchemaMismatchError) as err:
        load_trained(folder)
    text = str(err.value)
    assert "\n" not in text
    assert text == (
        f"{folder / 'card.json'}: trained on features this code cannot compute in feature set "
        "'predicted': gpu_temperature"
    )


def test_a_classic_card_that_names_prediction_features_is_refused(tmp_path: Path) -> None:
    """A card that records prediction features but no set (as if the set were dropped) is
    classic, whose pool lacks them: named, not a hash mismatch without a reason."""
    folder = _rewrite(save_predicted(tmp_path / "ckpt"), lambda s: s.pop("feature_set"))
    with pytest.raises(SchemaMismatchError, match="in feature set 'classic': predicted_time"):
        load_trained(folder)


def test_a_model_of_another_width_is_refused_by_the_policy() -> None:
    with pytest.raises(ValueError, match=r"takes 12 observation features.*'classic' gives 8"):
        LearnedPolicy(predicted_model(), make_policy("fcfs"))


def test_a_loaded_model_brings_its_cards_set_to_a_runner_set_up_without_it(tmp_path: Path) -> None:
    """``hylo evaluate`` sets its runner up from the card's sampling mode alone: the loaded model's
    own rule (its card's feature set) is what it runs with, and a workload without predictions is
    refused for a set that reads them (its features would all read missing, unlike training)."""
    model, _, schema = load_trained(save_predicted(tmp_path / "ckpt"))
    assert model.trained_sampling == schema.sampling
    classic = RunSetup(metric="wait", warmup=8).episode_settings()
    runner = EpisodeRunner(predicted_workload(), classic)
    window = make_windows(range(len(runner.workload.jobs)), 32, 1, seed=0)[0]
    assert runner.learned_policy(model, window, "greedy").sampler.pool is PREDICTED
    with pytest.raises(ValueError, match="takes 12 observation features"):  # a model built here
        runner.learned_policy(predicted_model(), window, "greedy")  # has no card: the runner's set
    bare = EpisodeRunner(predicted_workload(with_predictions=False), classic)
    with pytest.raises(ValueError, match="prepared without them"):
        bare.learned_policy(model, window, "greedy")
