"""The end of a sampled training decision in one compiled call: observation, scores, order, keys.

Why: after the features' kernel (``SimObserver.columns``) and the selection, a sampled decision
used to run ``finish_kernel`` (the observation and critic values), the forward pass, the ranking
of the Gumbel-top-k sample and the simulator's sort keys as separate calls, each several
microseconds inside a training episode (where the simulator's work evicts the policy's code from
the caches). ``finish_and_sample`` runs the same compiled functions in one call: the same numbers
(``tests/rl/test_rl_fast_policy.py`` compares whole training episodes with the unfused path).
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm  # type: ignore[import-untyped]
import numpy as np
from numba import njit, types

from shared.features.fast import FinishArgs
from shared.features.kernels import _DEMAND_SUPPLY, finish_kernel
from shared.model.fast import _TINY, ForwardArgs, forward_sample

__all__ = ["blas_matches_numpy", "finish_and_sample", "libm_matches_numpy"]


def _numpy_blas() -> tuple[int, int] | None:
    """The addresses of ``cblas_dgemv`` and ``cblas_ddot`` in the OpenBLAS numpy's wheel ships
    (ILP64, ``scipy_`` prefix: what its ``matmul`` calls for float64), or None where there is none."""
    libs = sorted((Path(np.__file__).parent.parent / "numpy.libs").glob("libscipy_openblas64_*.so"))
    try:
        lib = ctypes.CDLL(str(libs[0]))
        gemv: int | None = ctypes.cast(lib.scipy_cblas_dgemv64_, ctypes.c_void_p).value
        dot: int | None = ctypes.cast(lib.scipy_cblas_ddot64_, ctypes.c_void_p).value
    except (IndexError, OSError, AttributeError):
        return None
    return None if gemv is None or dot is None else (gemv, dot)


_BLAS = _numpy_blas()
if _BLAS is not None:
    llvm.add_symbol("hylo_numpy_dgemv", _BLAS[0])
    llvm.add_symbol("hylo_numpy_ddot", _BLAS[1])
_i32, _i64, _f64, _ptr = types.int32, types.int64, types.float64, types.voidptr
_dgemv: Any = types.ExternalFunction(
    "hylo_numpy_dgemv", types.void(_i32, _i32, _i64, _i64, _f64, _ptr, _i64, _ptr, _i64, _f64, _ptr, _i64)
)
_ddot: Any = types.ExternalFunction("hylo_numpy_ddot", _f64(_i64, _ptr, _i64, _ptr, _i64))
_ROW_MAJOR, _COL_MAJOR, _TRANS = 101, 102, 112


@njit(cache=True)
def _pool_demand(
    share: np.ndarray, elig: np.ndarray, cap: np.ndarray, out: np.ndarray
) -> None:  # pragma: no cover - compiled
    """``out = elig @ (cap * (share @ elig))`` (``share`` [q], ``elig`` [q, G] C-contiguous) with
    the BLAS calls numpy's ``matmul`` makes: ``share @ elig`` a ``ddot`` for one group, else
    ``dgemv`` (row-major, transposed, lda G); ``elig @ v`` a ``dgemv`` (column-major,
    transposed, lda G)."""
    q, n_groups = elig.shape
    per_group = np.empty(n_groups)
    if n_groups == 1:
        per_group[0] = _ddot(q, share.ctypes, 1, elig.ctypes, 1)
    else:
        _dgemv(
            _ROW_MAJOR,
            _TRANS,
            q,
            n_groups,
            1.0,
            elig.ctypes,
            n_groups,
            share.ctypes,
            1,
            0.0,
            per_group.ctypes,
            1,
        )
    for g in range(n_groups):
        per_group[g] = cap[g] * per_group[g]
    _dgemv(
        _COL_MAJOR, _TRANS, n_groups, q, 1.0, elig.ctypes, n_groups, per_group.ctypes, 1, 0.0, out.ctypes, 1
    )


_BLAS_OK: list[bool] = []


def blas_matches_numpy() -> bool:
    """Whether ``_pool_demand`` gives numpy's ``elig @ (cap * (share @ elig))`` bit for bit,
    checked once per process on queues of 2-300 jobs (a decision's: one job is not ordered) and
    1-8 groups (False where numpy ships no such OpenBLAS, or its ``matmul`` calls it otherwise;
    a queue of one job takes another of its paths)."""
    if not _BLAS_OK:
        ok = _BLAS is not None
        rng = np.random.default_rng(8)
        for q in (*range(2, 40), 63, 64, 65, 255, 256, 300):
            for n_groups in (1, 2, 3, 4, 5, 8):
                if not ok:
                    break
                share = rng.random(q) / rng.integers(1, 100, q)
                elig = np.ascontiguousarray(rng.random((q, n_groups)) < 0.6, dtype=np.float64)
                cap = rng.integers(1, 2000, n_groups).astype(np.float64)
                got = np.empty(q)
                _pool_demand(share, elig, cap, got)
                ok = got.tobytes() == (elig @ (cap * (share @ elig))).tobytes()
        _BLAS_OK.append(ok)
    return _BLAS_OK[0]


@njit(cache=True)
def finish_and_sample(
    finish: FinishArgs,
    products: bool,
    share: np.ndarray,
    elig: np.ndarray,
    cap: np.ndarray,
    wait_raw: bool,
    obs: np.ndarray,
    critic: np.ndarray,
    forward: ForwardArgs,
    noise: np.ndarray,
    noise_raw: bool,
    width: int,
    order: np.ndarray,
    prio: np.ndarray,
    base_order: np.ndarray,
    keys: np.ndarray,
) -> bool:  # pragma: no cover - compiled
    """``finish_kernel(*finish, obs, critic)`` (``WorkloadFeaturizer.prepare_finish``'s
    arguments), then ``forward_sample(obs, *forward, noise, width, order, prio, base_order,
    keys)`` (``FastActor.forward_args``' arguments): its answer (False: a NaN or a tie at the cut,
    which the caller ranks with numpy; ``obs`` and ``critic`` are written either way).

    With ``products``, ``demand_supply``'s products (when selected) are taken here from its
    gathered operands ``share`` and ``elig`` and the groups' capacities ``cap``
    (``_pool_demand``, which the caller uses only where it gives numpy's floats:
    ``blas_matches_numpy``). With ``wait_raw``, ``finish``'s wait is wait / unit, its ``log1p``
    taken here; with
    ``noise_raw``, ``noise`` holds the draws ``E``, turned into ``log(max(E, tiny))`` in place
    first (``gumbel_log``'s noise, for the caller's fallback too): numba's ``log1p`` and ``log``,
    which the caller uses only where they give numpy's floats (``libm_matches_numpy``)."""
    job, cols, wait, log_horizon, pool_demand, clus, critic_cols = finish
    if products:
        for i in range(len(cols)):
            if cols[i] == _DEMAND_SUPPLY:
                pool_demand = np.empty(len(share))
                _pool_demand(share, elig, cap, pool_demand)
                break
    if noise_raw:
        _log_floor(noise, noise)
    if wait_raw:
        wait = _log1p(wait)
    finish_kernel(job, cols, wait, log_horizon, pool_demand, clus, critic_cols, obs, critic)
    weights, biases, outs, act, params, ones, count, mode = forward
    return forward_sample(
        obs,
        weights,
        biases,
        outs,
        act,
        params,
        ones,
        count,
        mode,
        noise,
        width,
        order,
        prio,
        base_order,
        keys,
    )


@njit(cache=True)
def _log_floor(x: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out = log(max(x, tiny))`` (numba's ``log``; ``out`` may be ``x``)."""
    for i in range(len(x)):
        out[i] = np.log(max(x[i], _TINY))


@njit(cache=True)
def _log1p(x: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """``log1p(x)`` (numba's)."""
    out = np.empty(len(x))
    for i in range(len(x)):
        out[i] = np.log1p(x[i])
    return out


@njit(cache=True)
def _libm(x: np.ndarray, out_log: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """``finish_and_sample``'s ``log`` and ``log1p`` of ``x`` (the same helpers)."""
    _log_floor(x, out_log)
    return _log1p(x)


_LIBM_OK: list[bool] = []


def libm_matches_numpy() -> bool:
    """Whether numba's ``log`` and ``log1p`` (the C library's) give numpy's floats, checked once
    per process on 100,000 values: exponential draws (the sample's noise: ``gumbel_log``), waits
    in time units from 0 to 10^7 (the ``wait`` feature), 0, subnormals, ``tiny`` and huge values.
    Where numpy uses the C library too (x86-64 without AVX-512: its own loops call ``log`` and
    ``log1p``) they are the same functions; where it has its own (SVML, AVX-512 loops) the two
    differ in the last bit on a large share of inputs, which a sample this size shows."""
    if not _LIBM_OK:
        rng = np.random.default_rng(20240601)
        x = np.concatenate(
            (
                rng.standard_exponential(50_000),
                rng.uniform(0.0, 1.0, 10_000),
                10.0 ** rng.uniform(-3.0, 7.0, 40_000),
                np.array([0.0, 5e-324, 1e-310, _TINY, 1e-300, 1.0, 1e300, np.inf]),
            )
        )
        got_log = np.empty_like(x)
        got_log1p = _libm(x, got_log)
        want_log = np.log(np.maximum(x, _TINY))
        want_log1p = np.log1p(x)
        _LIBM_OK.append(
            got_log.tobytes() == want_log.tobytes() and got_log1p.tobytes() == want_log1p.tobytes()
        )
    return _LIBM_OK[0]
