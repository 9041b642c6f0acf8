"""The featurizer's processing logic, free of the bus: QueueSnapshot -> FeatureMatrix.

Every pending job the cluster spec can ever hold is featurized, whatever the queue length: the
matrix carries all of them (bounded by ``Limits.max_jobs``, enforced when the snapshot was decoded),
so the prioritizer ranks and the placer records every job. Which of them the model sees is the
prioritizer's business (its window, ``ModelConfig.max_queue``). Jobs no node group can ever hold
(binding's rules, ``shared.schemas.views``) are listed in ``excluded`` with the reason.

The numbers are those of training: ``shared.schemas.snapshot_views`` fills the same
``QueueView``/``ClusterView`` the simulator fills (``shared.features.sim_views``) and
``compute_features`` computes the pool from them, so a model trained in simulation is fed the same
features in production (``tests/stages`` checks the two paths against each other).

Columns: ``shared.schemas.views.MATRIX_COLUMNS``, the 17 job features of
``shared.features.JOB_FEATURES`` in catalog order, then ``ways``: the raw number of nodes that could
take part in a placement of the job now. It is not a model input; the feature sampler reads it (the
share of jobs with several usable nodes emphasizes ``num_ways``), and it cannot be recovered from
the normalized ``num_ways``. Cluster columns: the 7 ``CLUSTER_FEATURES``. Raw columns
(``RAW_COLUMNS``, for the store only): each job's pool totals, which the features normalize.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
from pydantic import ValidationError

from shared.domain.cluster import ClusterSpec
from shared.features import (
    CLUSTER_FEATURES,
    JOB_FEATURES,
    FeatureConfig,
    FeatureSchema,
    FeatureValues,
    SamplingConfig,
    compute_features,
)
from shared.prediction.online import LivePredictions, OnlinePredictor, Submissions
from shared.prediction.predictor import PredictorSettings
from shared.schemas.limits import Limits, limits_or_configured
from shared.schemas.messages import FeatureMatrix, JobOutcome
from shared.schemas.snapshot import PendingJobs, QueueSnapshot
from shared.schemas.stage_error import StageError
from shared.schemas.views import MATRIX_COLUMNS, RAW_COLUMNS, SnapshotViews, raw_pool_values, snapshot_views

__all__ = ["FeaturizerStage", "featurize", "submissions"]


def submissions(pending: PendingJobs) -> Submissions:
    """A snapshot's pending jobs as the live predictor reads them (what is known at submission)."""
    return Submissions(
        job_id=pending.job_id,
        submit_s=pending.submit_s,
        gpus=pending.gpus,
        gpu_milli=pending.gpu_milli,
        gpu_types=pending.gpu_types,
        cpus_milli=pending.cpus_milli,
        mem_mib=pending.mem_mib,
        est_runtime_s=pending.est_runtime_s,
        user=pending.user,
        partition=pending.partition,
        qos=pending.qos,
    )


def featurize(
    snapshot: QueueSnapshot,
    spec: ClusterSpec,
    config: FeatureConfig | None = None,
    node_slack: int = 0,
    only: set[str] | None = None,
    predictions: LivePredictions | None = None,
) -> tuple[SnapshotViews, FeatureValues]:
    """Views and feature values of ``snapshot`` on ``spec`` (``only``: a subset of the pending jobs;
    ``predictions``: the live predictor's, per pending job of the snapshot, for the views).

    Raises ``StageError`` when the snapshot contradicts the spec (unknown node group, too many nodes,
    free resources above capacity).
    """
    try:
        predicted = None if predictions is None else (predictions.runtime, predictions.low, predictions.high)
        views = snapshot_views(snapshot, spec, node_slack, only, predicted)
    except (KeyError, ValueError) as err:
        raise StageError(
            f"snapshot {snapshot.correlation_id} does not fit cluster spec {spec.name!r}: {err}"
        ) from None
    values = compute_features(views.queue, views.cluster, views.now, config or FeatureConfig())
    return views, values


class FeaturizerStage:
    """Featurizes the snapshots of the clusters in ``specs`` (cluster name -> spec).

    ``config`` and ``sampling`` fix the feature schema (``FeatureSchema.current(config, sampling)``),
    whose hash every matrix carries; the prioritizer only lets a model trained on the same schema
    score it. ``node_slack`` must be the placer's (``PlacerSettings.node_slack``) and the training
    simulator's (``SimConfig.node_slack``, 0 by default). ``limits`` are the service's message limits
    (the matrix is validated under them).
    """

    def __init__(
        self,
        specs: Mapping[str, ClusterSpec],
        config: FeatureConfig | None = None,
        sampling: SamplingConfig | None = None,
        node_slack: int = 0,
        limits: Limits | None = None,
        predictor: PredictorSettings | None = None,
    ) -> None:
        if node_slack < 0:
            raise ValueError("node_slack must be >= 0")
        self.specs = dict(specs)
        self.config = config or FeatureConfig()
        self.schema = FeatureSchema.current(self.config, sampling)
        self.schema_hash = self.schema.hash
        self.node_slack = node_slack
        self.limits = limits_or_configured(limits)
        self._context = self.limits.context()
        self.predictor_settings = predictor or PredictorSettings()
        self.predictors: dict[str, OnlinePredictor] = {}
        #: per cluster, the last featurized snapshot's views (what the status endpoint reports)
        self.last_views: dict[str, SnapshotViews] = {}
        self._predictors_lock = threading.Lock()

    def predictor_of(self, cluster: str) -> OnlinePredictor | None:
        """The live predictor of ``cluster`` (made on first use); None when live prediction is off."""
        if not self.predictor_settings.live:
            return None
        with self._predictors_lock:
            found = self.predictors.get(cluster)
            if found is None:
                found = self.predictors[cluster] = OnlinePredictor(self.predictor_settings, cluster)
            return found

    def record_outcome(self, outcome: JobOutcome) -> bool:
        """Feed a finished job to its cluster's predictor; True when a refit is now due (the caller
        runs ``refit``, off the event loop: a fit takes about a second)."""
        predictor = self.predictor_of(outcome.cluster)
        if predictor is None:
            return False
        predictor.record_outcome(outcome.job_id, outcome.start_s, outcome.end_s)
        return predictor.refit_due

    def refit(self, cluster: str) -> bool:
        """Run the due fit of ``cluster``'s predictor, if any; True when one was made."""
        predictor = self.predictor_of(cluster)
        return predictor is not None and predictor.refit()

    def spec_of(self, cluster: str) -> ClusterSpec:
        spec = self.specs.get(cluster)
        if spec is None:
            known = ", ".join(sorted(self.specs)) or "none"
            raise StageError(f"unknown cluster {cluster!r}: no cluster spec configured (known: {known})")
        return spec

    def handle(self, snapshot: QueueSnapshot, snapshot_seq: int | None = None) -> FeatureMatrix:
        """The FeatureMatrix of ``snapshot``; ``StageError`` if the snapshot cannot be used.

        ``snapshot_seq``: the snapshot's sequence in the snapshots stream (where the placer finds it).
        """
        t0 = time.perf_counter()
        spec = self.spec_of(snapshot.cluster)
        predictor = self.predictor_of(snapshot.cluster)
        predictions = None if predictor is None else predictor.predict(submissions(snapshot.pending))
        views, values = featurize(snapshot, spec, self.config, self.node_slack, predictions=predictions)
        self.last_views[snapshot.cluster] = views
        rows = np.empty((len(views.job_ids), len(MATRIX_COLUMNS)))
        rows[:, : len(JOB_FEATURES)] = values.job
        rows[:, len(JOB_FEATURES)] = values.ways
        if not np.isfinite(rows).all() or not np.isfinite(values.cluster).all():
            raise StageError(
                f"snapshot {snapshot.correlation_id}: features are not finite (an estimate or time "
                "out of range?)"
            )
        fields: dict[str, Any] = {
            "cluster": snapshot.cluster,
            "correlation_id": snapshot.correlation_id,
            "snapshot_time": snapshot.time,
            "sequence": snapshot.sequence,
            "snapshot_seq": snapshot_seq,
            "feature_schema_hash": self.schema_hash,
            "jobs": snapshot.pending.take(views.rows),
            "columns": MATRIX_COLUMNS,
            "values": rows,  # packed as it is, not as 18,000 Python floats (``shared.schemas.packed``)
            "cluster_columns": CLUSTER_FEATURES,
            "cluster_values": tuple(values.cluster.tolist()),
            # stored beside the decision's features, not read by the model (schema version 7)
            "raw_columns": RAW_COLUMNS,
            "raw_values": raw_pool_values(views),
            "excluded": views.excluded,
            "latencies_ms": {},
        }
        try:
            matrix = FeatureMatrix.model_validate(fields, context=self._context)
        except ValidationError as err:
            raise StageError(
                f"snapshot {snapshot.correlation_id}: feature matrix is invalid: {err}"
            ) from None
        latency = (time.perf_counter() - t0) * 1e3
        # latencies are filled last, so they include building the matrix (frozen model: a copy)
        return matrix.model_copy(update={"latencies_ms": {"featurize": latency}})
