"""The prioritizer's processing logic, free of the bus: FeatureMatrix -> PriorityVector.

**With a model** (``ModelHolder``), the queue is scored as the simulator's ``LearnedPolicy`` scores
it in training and evaluation (``shared.rl.policy``), greedy:

1. the featurized jobs are laid out in the order of the base policy the model was trained with
   (its card's ``base_policy``; ties by submit time, then matrix order), and the first K of them
   are the model's slots (the candidates): K is ``candidates`` (``HYLO_MODEL_CANDIDATES``), by
   default the model's own window (its card's ``max_queue``, what it was trained with);
2. their features: the matrix rows when the whole queue fits the window (the matrix was computed
   over exactly that queue); for a longer queue they are recomputed over the window's jobs alone
   from the matrix's snapshot (queue-relative features such as ``submit_time`` or ``user_share``
   depend on which jobs are queued), which needs the cluster spec (``specs``) and the snapshot
   itself, fetched by ``snapshots`` (the service reads it from the snapshots stream; the matrix does
   not carry it); without a spec the matrix rows are used, an approximation; without the snapshot
   the base policy decides (a fallback, below);
3. the feature sampler of the model's schema picks the observation columns from the state;
4. ``ActorCritic.priorities`` orders the slots (score descending within its ``top_k``, then slot
   order); the jobs beyond the window follow in base order.

Why a bounded window: the model's own cost (the window's features, the forward pass, the ranking)
grows with K, not with the queue, so a queue of 50,000 jobs is scored in about the time of one of
K; what grows with the queue is the base policy's keys and one sort (numpy, milliseconds). The price
is that a job outside the first K in base order is never moved up by the model; the simulator's
``LearnedPolicy`` makes the same cut (``max_queue``), and ``bench/big_queues.py --quality``
measures what it costs against a model that ranks the whole queue (``docs/results/big-queues.md``).

Step 2 for a long queue costs about as much as featurizing it again, so ``prepare`` does it for
each snapshot as it arrives (the service calls it while the featurizer works): from the snapshot
alone it finds the jobs the featurizer will keep, the model's window and its features; ``_score``
uses them when the matrix's jobs, the window and the model version are the ones prepared for.

Priorities are then distinct integers, Q for the first job and 1 for the last; the model's raw
scores (logits) of its window's jobs go beside them (``PriorityVector.scores``, null for the jobs
beyond the window), so that the store keeps what the model thought and not only the rank. The model
runs in a worker thread (one at a time) under ``deadline_ms``, counted from the start of
``handle``.

**Fallback**: with no model, a matrix computed under another feature schema than the model's, a
matrix lacking the model's columns, a model that raises or returns nonsense, a missed deadline, or
a model still busy with an earlier matrix past its deadline, a long queue whose snapshot cannot be
fetched, the configured base policy decides
(``shared.policies.snapshot_keys``): ``policy`` is its name, ``model_version`` None and
``fallback`` the reason. A matrix the base policy cannot rank (``multifactor`` on a cluster with no
spec) raises ``StageError``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from pydantic import ValidationError

from services.prioritizer.models import LoadedModel, ModelHolder
from shared.domain.cluster import ClusterSpec
from shared.features import CLUSTER_FEATURES, JOB_FEATURES, FeatureValues, compute_features
from shared.model.network import ActorCritic
from shared.model.priorities import scores_to_priorities
from shared.policies.multifactor import MultifactorWeights
from shared.policies.snapshot_keys import (
    SnapshotPolicyError,
    base_order,
    check_policy,
    priorities_from_keys,
    snapshot_keys,
)
from shared.schemas.limits import Limits, limits_or_configured
from shared.schemas.messages import FeatureMatrix, PriorityVector
from shared.schemas.snapshot import PendingJobs, QueueSnapshot
from shared.schemas.stage_error import MAX_REASON, StageError
from shared.schemas.views import WAYS_COLUMN, bind_pending, snapshot_views

__all__ = ["PreparedWindow", "PrioritizerStage"]

FloatArray = npt.NDArray[np.float64]
SnapshotSource = Callable[[FeatureMatrix], Awaitable[QueueSnapshot | None]]
"""Where the stage gets a matrix's snapshot (None: not available)."""


@dataclass(frozen=True, eq=False)
class PreparedWindow:
    """A long queue's model window and its features, computed from the snapshot before its matrix.

    ``job_ids`` are the jobs the featurizer keeps (what the matrix will carry), ``head`` the rows of
    the window in base order, ``version`` the model it was computed for.
    """

    version: str
    job_ids: tuple[str, ...]
    head: npt.NDArray[np.int64]
    values: FeatureValues


#: prepared windows kept per stage (the newest snapshots of a few clusters)
PREPARED_KEEP = 8


Scored = tuple[FloatArray, FloatArray]
"""A model's priorities of a matrix's rows and its raw scores (NaN: a row outside its window)."""


def _score_column(scores: FloatArray) -> tuple[float | None, ...]:
    """A vector's ``scores``: the finite ones, None elsewhere (outside the window, or not finite)."""
    return tuple(v if math.isfinite(v) else None for v in scores.tolist())


class _Unusable(Exception):
    """The model cannot score this matrix (a fallback reason, not a fault)."""


def _reason(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MAX_REASON else line[: MAX_REASON - 3] + "..."


class PrioritizerStage:
    """Priorities of feature matrices: the model's when it can, else ``base_policy``'s.

    ``specs`` (cluster name -> spec) are needed by ``multifactor`` and for exact model features on
    queues longer than the model's window (module docstring); ``node_slack`` must then be the
    featurizer's. ``multifactor_weights`` and ``f1_origin_s`` parameterize those base policies.
    ``candidates``: how many jobs, first in base order, the model ranks (0: its card's
    ``max_queue``).
    """

    def __init__(
        self,
        base_policy: str = "fcfs",
        deadline_ms: float = 50.0,
        holder: ModelHolder | None = None,
        *,
        specs: Mapping[str, ClusterSpec] | None = None,
        node_slack: int = 0,
        multifactor_weights: MultifactorWeights | None = None,
        f1_origin_s: float = 0.0,
        limits: Limits | None = None,
        snapshots: SnapshotSource | None = None,
        candidates: int = 0,
    ) -> None:
        try:
            check_policy(base_policy)
        except SnapshotPolicyError as err:
            raise ValueError(str(err)) from None
        if not deadline_ms > 0:
            raise ValueError("deadline_ms must be > 0")
        if candidates < 0:
            raise ValueError("candidates must be >= 0 (0: the model's own window)")
        self.candidates = candidates
        self.base_policy = base_policy
        self.deadline_ms = deadline_ms
        self.holder = holder or ModelHolder()
        self.specs = dict(specs or {})
        self.node_slack = node_slack
        self.weights = multifactor_weights or MultifactorWeights()
        self.f1_origin_s = f1_origin_s
        self.snapshots = snapshots
        self._context = limits_or_configured(limits).context()
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="hylo-model")
        self._inflight: concurrent.futures.Future[Scored] | None = None
        self._windows: OrderedDict[tuple[str, str], PreparedWindow] = OrderedDict()

    def window(self, loaded: LoadedModel) -> int:
        """How many jobs, first in base order, ``loaded`` ranks: ``candidates``, else its window."""
        return self.candidates or loaded.max_queue

    def close(self) -> None:
        """Stop the model thread (after the call in flight, if any)."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    # -- ahead of the message ----------------------------------------------------------------------

    def prepare(self, snapshot: QueueSnapshot) -> None:
        """Compute the model window of ``snapshot``'s queue and its features, if a model would need
        them (module docstring). Anything that stops it just leaves the work to ``_score``.
        """
        loaded = self.holder.loaded
        spec = self.specs.get(snapshot.cluster)
        if loaded is None or spec is None or len(snapshot.pending) <= self.window(loaded):
            return
        try:
            binding = bind_pending(snapshot.pending, spec, self.node_slack)
            jobs = snapshot.pending.take(binding.kept)
            if len(jobs) <= self.window(loaded):
                return
            base_keys = self._keys(self.base_policy, jobs, snapshot.time, spec)
            model_keys = self._model_base_keys(loaded, jobs, snapshot.time, spec, base_keys)
            submit = np.array(jobs.submit_s, dtype=np.float64).reshape(len(jobs))
            head = base_order(model_keys, submit)[: self.window(loaded)]
            values = self._window_from_snapshot(loaded, jobs.job_id, head, spec, snapshot)
        except (StageError, _Unusable, KeyError, ValueError):
            return
        self._windows[(snapshot.cluster, snapshot.correlation_id)] = PreparedWindow(
            loaded.version, jobs.job_id, head, values
        )
        while len(self._windows) > PREPARED_KEEP:
            self._windows.popitem(last=False)

    # -- the message ----------------------------------------------------------------------------

    async def handle(self, matrix: FeatureMatrix) -> PriorityVector:
        """The PriorityVector of ``matrix``; ``StageError`` if not even the base policy can rank it."""
        t0 = time.perf_counter()
        jobs = matrix.jobs
        submit = np.array(jobs.submit_s, dtype=np.float64).reshape(len(jobs))
        spec = self.specs.get(matrix.cluster)
        base_keys = self._keys(self.base_policy, jobs, matrix.snapshot_time, spec)

        loaded = self.holder.loaded
        priorities: FloatArray | None = None
        scores: FloatArray | None = None
        reason: str | None = None
        if loaded is None:
            reason = "no model loaded"
        elif matrix.feature_schema_hash != loaded.schema_hash:
            reason = (
                f"feature schema mismatch: the matrix was computed under {matrix.feature_schema_hash[:12]}, "
                f"model {loaded.version} was trained on {loaded.schema_hash[:12]}"
            )
        elif len(jobs) < 2:
            model_keys = self._model_base_keys(loaded, jobs, matrix.snapshot_time, spec, base_keys)
            priorities = priorities_from_keys(model_keys, submit)  # nothing to order (as in training)
        else:
            scored, reason = await self._run_model(loaded, matrix, jobs, submit, spec, base_keys, t0)
            if scored is not None:
                priorities, scores = scored

        if priorities is not None:
            assert loaded is not None
            policy, version = "model", loaded.version
        else:
            priorities = priorities_from_keys(base_keys, submit)
            policy, version = self.base_policy, None
        latencies = dict(matrix.latencies_ms)
        fields: dict[str, Any] = {
            "cluster": matrix.cluster,
            "correlation_id": matrix.correlation_id,
            "matrix": matrix,
            "priorities": tuple(priorities.tolist()),
            "policy": policy,
            "model_version": version,
            "fallback": None if reason is None else _reason(reason),
            "scores": () if scores is None or policy != "model" else _score_column(scores),
            "latencies_ms": latencies,
        }
        try:
            vector = PriorityVector.model_validate(fields, context=self._context)
        except ValidationError as err:
            raise StageError(f"matrix {matrix.correlation_id}: priority vector is invalid: {err}") from None
        latencies["prioritize"] = (time.perf_counter() - t0) * 1e3
        return vector.model_copy(update={"latencies_ms": latencies})

    def _keys(self, policy: str, jobs: PendingJobs, now: float, spec: ClusterSpec | None) -> FloatArray:
        try:
            return snapshot_keys(policy, jobs, now, spec, weights=self.weights, f1_origin_s=self.f1_origin_s)
        except SnapshotPolicyError as err:
            raise StageError(f"base policy {policy!r} cannot rank this matrix: {err}") from None

    def _model_base_keys(
        self,
        loaded: LoadedModel,
        jobs: PendingJobs,
        now: float,
        spec: ClusterSpec | None,
        base_keys: FloatArray,
    ) -> FloatArray:
        """Keys of the base policy the model was trained with (the configured one if not computable)."""
        name = loaded.base_policy
        if name is None or name == self.base_policy:
            return base_keys
        try:
            check_policy(name)
            return snapshot_keys(name, jobs, now, spec, weights=self.weights, f1_origin_s=self.f1_origin_s)
        except SnapshotPolicyError:
            return base_keys

    # -- the model ------------------------------------------------------------------------------

    async def _run_model(
        self,
        loaded: LoadedModel,
        matrix: FeatureMatrix,
        jobs: PendingJobs,
        submit: FloatArray,
        spec: ClusterSpec | None,
        base_keys: FloatArray,
        t0: float,
    ) -> tuple[Scored | None, str | None]:
        deadline_s = self.deadline_ms / 1000
        busy = self._inflight
        if busy is not None and not busy.done():
            return None, "model busy: an earlier call is still running past its deadline"
        model_keys = self._model_base_keys(loaded, jobs, matrix.snapshot_time, spec, base_keys)
        snapshot: QueueSnapshot | None = None
        if len(jobs) > self.window(loaded) and spec is not None:  # the window's features need the snapshot
            snapshot = await self.snapshots(matrix) if self.snapshots is not None else None
            if snapshot is None:
                return None, (
                    f"snapshot {matrix.correlation_id} unavailable: the features of the model's "
                    f"{self.window(loaded)}-job window of a {len(jobs)}-job queue need it"
                )
        left = deadline_s - (time.perf_counter() - t0)
        if left <= 0:
            return None, f"missed the {self.deadline_ms:g} ms deadline before the model ran"
        try:
            future = self._executor.submit(self._score, loaded, matrix, submit, model_keys, spec, snapshot)
        except RuntimeError as err:  # executor shut down
            return None, f"model unavailable: {err}"
        self._inflight = future
        try:
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), left), None
        except TimeoutError:
            return None, f"model {loaded.version} missed the {self.deadline_ms:g} ms deadline"
        except _Unusable as err:
            return None, str(err)
        except Exception as err:  # a broken model must not stop the pipeline
            return None, f"model {loaded.version} failed: {type(err).__name__}: {err}"

    def _score(
        self,
        loaded: LoadedModel,
        matrix: FeatureMatrix,
        submit: FloatArray,
        model_keys: FloatArray,
        spec: ClusterSpec | None,
        snapshot: QueueSnapshot | None,
    ) -> Scored:
        """Priorities of every matrix row from the model, and its raw scores (NaN outside its window)
        (worker thread; module docstring)."""
        n = len(matrix.job_ids)
        order = base_order(model_keys, submit)
        head = order[: self.window(loaded)]
        ready = self._windows.pop((matrix.cluster, matrix.correlation_id), None)
        if (
            ready is not None
            and ready.version == loaded.version
            and ready.job_ids == matrix.job_ids
            and np.array_equal(ready.head, head)
        ):
            values = ready.values
        else:
            values = self._window_values(loaded, matrix, head, spec, snapshot)
        selection = loaded.sampler.select(values)
        obs, _ = selection.apply(values)
        obs_t = torch.from_numpy(np.ascontiguousarray(obs, dtype=np.float32)).unsqueeze(0)
        mask = torch.ones((1, len(head)), dtype=torch.bool)
        model = loaded.model
        with torch.no_grad():
            if type(model).priorities is ActorCritic.priorities:  # one pass: the scores it ranks
                raw = model.scores(obs_t, mask)
                prio = scores_to_priorities(raw, mask, model.config.top_k)
            else:  # a model class that ranks its own way: its priorities, and its scores beside
                prio = model.priorities(obs_t, mask)
                raw = model.scores(obs_t, mask)
        head_prio = np.asarray(prio.detach().cpu().numpy(), dtype=np.float64).reshape(-1)
        head_raw = np.asarray(raw.detach().cpu().numpy(), dtype=np.float64).reshape(-1)
        if head_prio.shape != (len(head),) or not np.isfinite(head_prio).all():
            raise _Unusable(
                f"model {loaded.version} returned {head_prio.shape[0]} priorities (finite: "
                f"{bool(np.isfinite(head_prio).all())}) for {len(head)} jobs"
            )
        tail = n - len(head)
        out = np.empty(n, dtype=np.float64)
        out[head] = head_prio + tail  # the model's window first, in its order
        out[order[len(head) :]] = np.arange(tail, 0, -1, dtype=np.float64)  # the rest in base order
        scores = np.full(n, np.nan)
        if head_raw.shape == (len(head),):
            scores[head] = head_raw
        return out, scores

    def _window_values(
        self,
        loaded: LoadedModel,
        matrix: FeatureMatrix,
        head: npt.NDArray[np.int64],
        spec: ClusterSpec | None,
        snap: QueueSnapshot | None,
    ) -> FeatureValues:
        """The feature pool of the window's jobs (rows in ``head`` order), as training computes it."""
        if len(head) < len(matrix.jobs) and spec is not None and snap is not None:
            return self._window_from_snapshot(loaded, matrix.job_ids, head, spec, snap)
        columns = {c: k for k, c in enumerate(matrix.columns)}
        missing = [c for c in (*JOB_FEATURES, WAYS_COLUMN) if c not in columns]
        cluster_cols = {c: k for k, c in enumerate(matrix.cluster_columns)}
        missing += [f"cluster {c}" for c in CLUSTER_FEATURES if c not in cluster_cols]
        if missing:
            raise _Unusable(f"the feature matrix lacks columns the model needs: {', '.join(missing)}")
        table = matrix.values.array[head].reshape(len(head), -1)  # the packed values, no Python floats
        job = table[:, [columns[c] for c in JOB_FEATURES]]
        ways = table[:, columns[WAYS_COLUMN]]
        cluster = np.asarray(matrix.cluster_values, dtype=np.float64)[
            [cluster_cols[c] for c in CLUSTER_FEATURES]
        ]
        return FeatureValues(job, cluster, ways, float(matrix.snapshot_time))

    def _window_from_snapshot(
        self,
        loaded: LoadedModel,
        job_ids: tuple[str, ...],
        head: npt.NDArray[np.int64],
        spec: ClusterSpec,
        snap: QueueSnapshot,
    ) -> FeatureValues:
        """The features of the window's jobs (``job_ids[head]``) computed over them alone."""
        ids = [job_ids[r] for r in head.tolist()]
        views = snapshot_views(snap, spec, self.node_slack, set(ids))
        values = compute_features(views.queue, views.cluster, views.now, loaded.feature_config)
        if views.job_ids != tuple(job_ids[r] for r in sorted(head.tolist())):
            raise _Unusable("the window's jobs do not bind to the cluster spec as the featurizer's did")
        pos = {j: k for k, j in enumerate(views.job_ids)}
        rows = np.fromiter((pos[j] for j in ids), dtype=np.int64, count=len(ids))
        return FeatureValues(values.job[rows], values.cluster, values.ways[rows], values.now)
