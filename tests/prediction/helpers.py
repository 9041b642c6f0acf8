"""Small hand-built tables and fast predictor settings shared by the predictor tests."""

from __future__ import annotations

import numpy as np

from shared.domain.jobs import JobTable, TraceMeta, build_table
from shared.prediction import PredictorSettings

#: small and quick: a fit every 60 finished jobs, a few boosting rounds
FAST = PredictorSettings(
    retrain_jobs=80,
    retrain_hours=1e6,
    min_train=40,
    max_train=400,
    max_iter=10,
    band_iter=5,
    min_validation=20,
)


def synthetic_jobs(n: int = 600, seed: int = 0, *, users: int = 8, estimates: bool = True) -> JobTable:
    """Jobs of a few users, each with a typical runtime; logged waits make the logged finish later
    than submit + runtime, so a rule that ignored the wait would leak."""
    rng = np.random.default_rng(seed)
    submit = np.cumsum(rng.exponential(60.0, size=n))
    user = rng.integers(0, users, size=n)
    typical = np.exp(rng.uniform(np.log(120), np.log(20_000), size=users))
    runtime = np.maximum(typical[user] * np.exp(rng.normal(0, 0.4, size=n)), 1.0).round()
    estimate = (runtime * rng.uniform(1.0, 4.0, size=n)).round() if estimates else None
    wait = rng.exponential(900.0, size=n).round()
    return build_table(
        ids=[f"j{i}" for i in range(n)],
        submit=submit.tolist(),
        runtime=runtime.tolist(),
        estimate=None if estimate is None else estimate.tolist(),
        gpus=rng.integers(1, 9, size=n).tolist(),
        user=user.tolist(),
        users=[f"u{k}" for k in range(users)],
        optional={"group": (user % 3).tolist(), "logged_wait": wait.tolist()},
        code_tables={"groups": ["g0", "g1", "g2"]},
        meta=TraceMeta(name="synthetic", source="synthetic.swf", origin=1_500_000_000.0),
    )
