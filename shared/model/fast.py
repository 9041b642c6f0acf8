"""One decision at a time, without the batch machinery: scores, greedy priorities, a sampled order.

Why: ``ActorCritic.scores``/``priorities`` and ``sample_order`` are written for batches of padded
queues; for the single queue of one scheduling decision their fixed cost (shape checks, masking,
scatter, a torch sort and scatter for the ranks: about 0.1-0.3 ms) was larger than the arithmetic.
Here the actor runs on the real rows only, through the same torch kernels as the module, and the
rest is a handful of numpy calls:

- ``FastActor.scores`` runs the layers on a C-contiguous float32 copy of the observation, exactly
  what ``ActorCritic.scores`` does for a full mask (``obs[mask]`` is such a copy), through the same
  kernels: ``torch.addmm(bias, x, weight.t())`` is what ``torch.nn.functional.linear`` calls for a
  2-D input with a bias, and the activation is applied in place (same kernel, no new tensor), so the
  scores are the same floats, for 20-30% less time than ``linear`` and a fresh activation output.
  (A numpy matmul would not do: the activation's vectorized torch kernel and numpy's differ in the
  last bit, and tied scores of saturated units then break differently.) It reads the module's
  parameters, so weights loaded or updated in place are used at once. Where torch exports its
  BLAS (``sgemm_``, MKL's), each layer is that very call made from a compiled function
  (``_dense``, with the arguments ``addmm`` passes; ``direct_blas`` checks the floats once per
  process) and only the activations go through torch: two torch calls a decision instead of
  seven, each costing several microseconds inside a training episode. Where torch also exports
  the MKL ``vmsTanh`` its ``tanh_`` calls (``VMSTANH_``), the whole pass is one compiled call
  (``_forward``: the layers' BLAS calls and the activations, ``direct_activation`` checking the
  floats once per process); ``forward_sample`` adds the sample's ranking and the simulator's keys.
- ``greedy_priorities`` is ``scores_to_priorities`` for one queue: score descending, ties by slot
  (a stable sort of the negated scores, as ``greedy_order``), the first ``top_k`` by score and the
  rest in slot order.
- ``sample_order`` is the Gumbel-top-k sample of ``plackett_luce.sample_order`` for one queue with a
  numpy ``Generator`` (the same distribution; a different random stream than torch's).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm  # type: ignore[import-untyped]
import numpy as np
import numpy.typing as npt
import torch
from numba import njit, types
from torch import Tensor

from shared.model.network import ActorCritic, slot_prior

__all__ = [
    "FastActor",
    "ForwardArgs",
    "base_head",
    "forward_sample",
    "greedy_priorities",
    "gumbel_log",
    "learned_keys",
    "order_priorities",
    "rank_sampled",
    "sample_order",
    "sample_with_priorities",
]

IntArray = npt.NDArray[np.int64]
F32Array = npt.NDArray[np.float32]

#: in-place activations: the same kernels as ``nn.Tanh``/``nn.ReLU``, writing into their input
_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"tanh": torch.tanh_, "relu": torch.relu_}
_TINY = float(np.finfo(np.float64).tiny)


@njit(cache=True)
def _stable_argsort(keys: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """A stable ascending argsort of NaN-free ``keys``: insertion sort up to 32 keys (a
    decision's usual queue; no merge buffers), numba's merge sort above. A stable sort's result
    is unique (equal keys by position), so either is ``np.argsort(keys, kind="stable")``."""
    n = len(keys)
    if n > 32:
        return np.argsort(keys, kind="mergesort")
    srt = np.empty(n, dtype=np.int64)
    for i in range(n):
        key = keys[i]
        j = i
        while j > 0 and keys[srt[j - 1]] > key:
            srt[j] = srt[j - 1]
            j -= 1
        srt[j] = i
    return srt


@njit(cache=True)
def base_head(
    idx: np.ndarray, base_keys: np.ndarray, order: np.ndarray, head: np.ndarray
) -> bool:  # pragma: no cover - compiled
    """A learned policy's slots: ``order`` = ``np.argsort(base_keys, kind="stable")`` and ``head``
    = ``idx[order[:len(head)]]`` (the first jobs in the base policy's order), in one call.
    Returns False, having written nothing, when a key is NaN (numpy sorts those last: its own
    call decides)."""
    n = len(base_keys)
    for i in range(n):
        if base_keys[i] != base_keys[i]:
            return False
    srt = _stable_argsort(base_keys)
    for i in range(n):
        order[i] = srt[i]
    for i in range(len(head)):
        head[i] = idx[srt[i]]
    return True


@njit(cache=True)
def learned_keys(
    order: np.ndarray, priorities: np.ndarray, keys: np.ndarray
) -> None:  # pragma: no cover - compiled
    """The sort keys of a learned decision: the slots (``order[:len(priorities)]``) get
    ``-priorities`` (higher priority first, every key <= -1), the jobs after them (the rest of
    the base ``order``) 0, 1, 2, ... in base order."""
    h = len(priorities)
    for i in range(h):
        keys[order[i]] = -priorities[i]
    for r in range(len(order) - h):
        keys[order[h + r]] = r


@njit(cache=True)
def _sample_rank_kernel(
    scores: np.ndarray, log_e: np.ndarray, width: int, strict: bool, order: np.ndarray, prio: np.ndarray
) -> bool:  # pragma: no cover - compiled
    """``_rank_kernel`` of the Gumbel-top-k keys ``-(scores - log_e)`` (``_neg_sub`` of the
    scores in float64), in one call."""
    return _rank_kernel(_neg_sub(scores, log_e), width, strict, order, prio)


@njit(cache=True)
def _rank_kernel(
    keys: np.ndarray, width: int, strict: bool, order: np.ndarray, prio: np.ndarray
) -> bool:  # pragma: no cover - compiled
    """The first ``width`` of a stable ascending sort of ``keys`` into ``order``, and the
    priorities of ``order_priorities(order, n)`` into ``prio``. Returns False (fallback) on a NaN
    key or, with ``strict``, on equal keys among the first ``width + 1`` sorted: there numpy's
    ``argpartition`` (not stable) decides, which this does not repeat."""
    n = len(keys)
    for i in range(n):
        if keys[i] != keys[i]:
            return False
    srt = _stable_argsort(keys)  # ties by slot, as numpy's stable sort
    if strict:
        for i in range(min(width + 1, n) - 1):
            if not keys[srt[i]] < keys[srt[i + 1]]:
                return False
    picked = np.zeros(n, dtype=np.bool_)
    for i in range(width):
        order[i] = srt[i]
        prio[srt[i]] = n - i
        picked[srt[i]] = True
    r = 0
    for slot in range(n):
        if not picked[slot]:
            prio[slot] = n - width - r
            r += 1
    return True


@njit(cache=True)
def _neg_sub(s: np.ndarray, g: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """``-(s - g)``: the Gumbel-top-k keys, elementwise (the same IEEE operations as numpy's)."""
    out = np.empty(len(s))
    for i in range(len(s)):
        out[i] = -(s[i] - g[i])
    return out


def _torch_sgemm() -> int | None:
    """The address of the ``sgemm_`` that torch's CPU library exports (its MKL's, which
    ``torch.addmm`` calls for float32 on CPU), or None where it exports none."""
    try:
        lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        address: int | None = ctypes.cast(lib.sgemm_, ctypes.c_void_p).value
    except (OSError, AttributeError):
        return None
    return address


_SGEMM = _torch_sgemm()
if _SGEMM is not None:
    # the compiled layers call it by this name (resolved when they are compiled or loaded)
    llvm.add_symbol("hylo_torch_sgemm", _SGEMM)
_sgemm: Any = types.ExternalFunction("hylo_torch_sgemm", types.void(*([types.voidptr] * 13)))


def _torch_vmstanh() -> int | None:
    """The address of the MKL ``vmsTanh`` (Fortran interface ``VMSTANH_``) that torch's CPU
    library exports: the call ``torch.tanh_`` makes on a float32 CPU tensor (``at::vml::vtanh``,
    mode ``VML_HA | VML_FTZDAZ_OFF | VML_ERRMODE_IGNORE``), or None where it exports none."""
    try:
        lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        address: int | None = ctypes.cast(lib.VMSTANH_, ctypes.c_void_p).value
    except (OSError, AttributeError):
        return None
    return address


_VMSTANH = _torch_vmstanh()
if _VMSTANH is not None:
    llvm.add_symbol("hylo_torch_vmstanh", _VMSTANH)
_vmstanh: Any = types.ExternalFunction("hylo_torch_vmstanh", types.void(*([types.voidptr] * 4)))
#: ``VML_HA | VML_FTZDAZ_OFF | VML_ERRMODE_IGNORE``, the mode of torch's ``vtanh``
_VML_MODE = 0x2 | 0x140000 | 0x100
#: ``_forward``'s activation codes
_ACTIVATION_CODES = {"tanh": 0, "relu": 1}


@njit(cache=True)
def _dense(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray, out: np.ndarray, params: np.ndarray, ones: np.ndarray
) -> None:  # pragma: no cover - compiled
    """``out[:] = torch.addmm(bias, x, weight.t())`` (C-contiguous float32: ``x`` [n, k],
    ``weight`` [m, k], ``out`` [n, m]) with torch's own BLAS call: every row of ``out`` set to
    the bias, then ``sgemm_("T", "N", m, n, k, 1, weight, k, x, k, 1, out, m)``, the column-major
    call ``addmm`` makes for a row-major result (``params`` [8] int32: the transposition flags in
    its first two, the sizes written here; ``ones`` [2] float32: alpha and beta)."""
    n, k = x.shape
    m = weight.shape[0]
    for i in range(n):
        for j in range(m):
            out[i, j] = bias[j]
    params[2] = m
    params[3] = n
    params[4] = k
    params[5] = k
    params[6] = k
    params[7] = m
    _sgemm(
        params.ctypes,
        params[1:].ctypes,
        params[2:].ctypes,
        params[3:].ctypes,
        params[4:].ctypes,
        ones.ctypes,
        weight.ctypes,
        params[5:].ctypes,
        x.ctypes,
        params[6:].ctypes,
        ones[1:].ctypes,
        out.ctypes,
        params[7:].ctypes,
    )


@njit(cache=True)
def _dense_scores(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray, out: np.ndarray, params: np.ndarray, ones: np.ndarray
) -> np.ndarray:  # pragma: no cover - compiled
    """``_dense``, returning a copy of the output's first column (the scores)."""
    _dense(x, weight, bias, out, params, ones)
    scores = np.empty(x.shape[0], dtype=np.float32)
    for i in range(x.shape[0]):
        scores[i] = out[i, 0]
    return scores


@njit(cache=True)
def _activate(
    out: np.ndarray, act: int, count: np.ndarray, mode: np.ndarray
) -> None:  # pragma: no cover - compiled
    """The activation in place on the C-contiguous ``out`` [n, m]: tanh through torch's MKL call
    (``count`` [1] int32, written here, and ``mode`` [1] int64: its ``n`` and ``mode``
    arguments), ReLU as torch's ``clamp_min(0)`` (``max(0, v)`` keeping ``v`` unless ``0 > v``:
    NaN and -0.0 stay)."""
    if act == 0:
        count[0] = out.size
        _vmstanh(count.ctypes, out.ctypes, out.ctypes, mode.ctypes)
        return
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            if out[i, j] < 0:
                out[i, j] = 0.0


@njit(cache=True)
def _forward(
    x: np.ndarray,
    weights: tuple[np.ndarray, ...],
    biases: tuple[np.ndarray, ...],
    outs: tuple[np.ndarray, ...],
    act: int,
    params: np.ndarray,
    ones: np.ndarray,
    count: np.ndarray,
    mode: np.ndarray,
) -> np.ndarray:  # pragma: no cover - compiled
    """The actor's layers on ``x`` [n, F] (C-contiguous float32) in one call: per layer
    ``_dense`` into the first n rows of its kept output buffer ``outs[k]``, then the activation in
    place (not after the last layer). Returns the last buffer's first n rows."""
    n = x.shape[0]
    h = x[:n]
    last = len(weights) - 1
    for k in range(last):
        out = outs[k][:n]
        _dense(h, weights[k], biases[k], out, params, ones)
        _activate(out, act, count, mode)
        h = out
    out = outs[last][:n]
    _dense(h, weights[last], biases[last], out, params, ones)
    return out


@njit(cache=True)
def _forward_scores(
    x: np.ndarray,
    weights: tuple[np.ndarray, ...],
    biases: tuple[np.ndarray, ...],
    outs: tuple[np.ndarray, ...],
    act: int,
    params: np.ndarray,
    ones: np.ndarray,
    count: np.ndarray,
    mode: np.ndarray,
) -> np.ndarray:  # pragma: no cover - compiled
    """``_forward``, returning a copy of the scores (the last output's first column)."""
    out = _forward(x, weights, biases, outs, act, params, ones, count, mode)
    scores = np.empty(x.shape[0], dtype=np.float32)
    for i in range(x.shape[0]):
        scores[i] = out[i, 0]
    return scores


@njit(cache=True)
def forward_sample(
    x: np.ndarray,
    weights: tuple[np.ndarray, ...],
    biases: tuple[np.ndarray, ...],
    outs: tuple[np.ndarray, ...],
    act: int,
    params: np.ndarray,
    ones: np.ndarray,
    count: np.ndarray,
    mode: np.ndarray,
    log_e: np.ndarray,
    width: int,
    order: np.ndarray,
    prio: np.ndarray,
    base_order: np.ndarray,
    keys: np.ndarray,
) -> bool:  # pragma: no cover - compiled
    """One sampled decision after its draws, in one call: the scores (``_forward``), the
    Gumbel-top-k keys ``-(score - log_e)`` in float64 (``_neg_sub``'s operations), the order and
    priorities (``_rank_kernel``), then, when ``keys`` is not empty, the simulator's sort keys
    (``learned_keys`` of ``base_order``). Returns False where ``_rank_kernel`` does (a NaN or a
    tie at the cut): the caller then ranks the scores with numpy, from the same draws."""
    out = _forward(x, weights, biases, outs, act, params, ones, count, mode)
    n = x.shape[0]
    g = np.empty(n)
    for i in range(n):
        g[i] = -(out[i, 0] - log_e[i])
    if not _rank_kernel(g, width, width < n, order, prio):
        return False
    if len(keys):
        learned_keys(base_order, prio, keys)
    return True


def _gemm_params() -> npt.NDArray[np.int32]:
    """``_dense``'s parameter block: flags "T" and "N" (one byte each in an int32), sizes after."""
    params = np.zeros(8, dtype=np.int32)
    params[0], params[1] = ord("T"), ord("N")
    return params


_ONES = np.ones(2, dtype=np.float32)
#: ``forward_sample``'s "no keys to write"
_NO_INTS = np.zeros(0, dtype=np.int64)
_NO_FLOATS = np.zeros(0, dtype=np.float64)
#: ``direct_blas``'s answers, per tuple of layer shapes
_DIRECT_OK: dict[tuple[tuple[int, int], ...], bool] = {}
_CHECK_ROWS = (1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 300)


def direct_blas(shapes: tuple[tuple[int, int], ...] = ((8, 32), (32, 16), (16, 1))) -> bool:
    """Whether ``_dense`` gives ``torch.addmm``'s floats for layers of these (in, out) shapes,
    checked once per process and shapes on random layers and queue lengths 1-300, bit for bit:
    False where torch exports no ``sgemm_`` or its ``addmm`` takes another path (another BLAS,
    oneDNN); the actor then runs through torch (``FastActor._scores_torch``)."""
    ok = _DIRECT_OK.get(shapes)
    if ok is None:
        ok = _DIRECT_OK[shapes] = _SGEMM is not None and _check_direct(shapes)
    return ok


def _check_direct(shapes: tuple[tuple[int, int], ...]) -> bool:
    gen = torch.Generator().manual_seed(12345)  # not the global generator: no draw is taken from it
    params = _gemm_params()
    for k, m in shapes:
        weight = torch.randn((m, k), generator=gen) * 3.0
        bias = torch.randn(m, generator=gen)
        for n in _CHECK_ROWS:
            x = torch.tanh(torch.randn((n, k), generator=gen) * 4.0)
            want = torch.addmm(bias, x, weight.t()).numpy()
            got = np.empty((n, m), dtype=np.float32)
            _dense(x.numpy(), weight.numpy(), bias.numpy(), got, params, _ONES)
            if got.tobytes() != want.tobytes():
                return False
    return True


#: ``direct_activation``'s answers, per activation
_ACTIVATION_OK: dict[str, bool] = {}


def direct_activation(activation: str) -> bool:
    """Whether ``_activate`` gives torch's in-place activation's floats (``torch.tanh_`` through
    its exported MKL call, ``torch.relu_``), checked once per process on arrays of 1-300 rows of
    8-64 columns, with values around 0, saturating ones, -0.0, infinities and NaN: False where
    torch exports no ``VMSTANH_`` or ``tanh_`` takes another path; the actor then calls torch's
    activations between its layers (``FastActor._scores_layers``)."""
    ok = _ACTIVATION_OK.get(activation)
    if ok is None:
        ok = _ACTIVATION_OK[activation] = (
            activation in _ACTIVATION_CODES
            and (activation != "tanh" or _VMSTANH is not None)
            and _check_activation(activation)
        )
    return ok


def _check_activation(activation: str) -> bool:
    gen = torch.Generator().manual_seed(54321)
    special = torch.tensor(
        [0.0, -0.0, 9.0, -9.0, 1e-8, 1e-30, 88.0, float("inf"), -float("inf"), float("nan")]
    )
    count, mode = np.zeros(1, dtype=np.int32), np.array([_VML_MODE], dtype=np.int64)
    for n in _CHECK_ROWS:
        for width in (8, 16, 32, 64):
            x = torch.randn((n, width), generator=gen) * 4.0
            x.view(-1)[: len(special)] = special[: x.numel()]
            want = _ACTIVATIONS[activation](x.clone()).numpy()
            got = x.numpy().copy()
            _activate(got, _ACTIVATION_CODES[activation], count, mode)
            if got.tobytes() != want.tobytes():
                return False
    return True


class FastActor:
    """The actor of an ``ActorCritic`` applied to one decision's real jobs; see the module docstring."""

    def __init__(self, model: ActorCritic) -> None:
        layers = [m for m in model.actor if isinstance(m, torch.nn.Linear)]
        # detached views share the parameters' storage: in-place updates (optimizer steps,
        # load_state_dict) are seen, and no autograd graph is built; (bias, weight transposed)
        self._layers = [(layer.bias.detach(), layer.weight.detach().t()) for layer in layers]
        self._activation = _ACTIVATIONS[model.config.activation]
        self.n_features = model.config.obs_features
        self.top_k = model.config.top_k
        widths = (self.n_features, *(int(bias.shape[0]) for bias, _ in self._layers))
        self._buffers = _buffers_for(widths)
        #: per layer: its weight transposed and a numpy view of its bias (the parameters' memory)
        self._live = [(weight_t, bias.numpy()) for bias, weight_t in self._layers]
        #: per layer: numpy views of its weight [out, in] and bias (the parameters' memory), for
        #: ``_dense``; None when a parameter is not a C-contiguous float32 array
        self._direct: list[tuple[F32Array, F32Array]] | None = [
            (layer.weight.detach().numpy(), layer.bias.detach().numpy()) for layer in layers
        ]
        if not all(
            w.dtype == b.dtype == np.float32 and w.flags.c_contiguous and b.flags.c_contiguous
            for w, b in self._direct
        ) or not direct_blas(tuple((w.shape[1], w.shape[0]) for w, _ in self._direct)):
            self._direct = None
        self._params = _gemm_params()
        #: the whole forward pass in one compiled call (``_forward``): the direct BLAS calls and
        #: an activation ``_activate`` repeats; its arguments, kept (the buffers' per ``_fused``)
        self.fused = self._direct is not None and direct_activation(model.config.activation)
        #: ``ModelConfig.base_prior``: added to the kernel's scores in ``scores`` (the compiled
        #: sample, which ranks the kernel's own output, is then not used: ``forward_args`` None)
        self.base_prior = float(model.config.base_prior)
        if self.base_prior > 0:
            self.fused = False
        #: ``slot_prior`` for the longest queue seen so far; a shorter queue's is its first rows
        #: (the same floats: each slot's value does not depend on n), so a decision does not call
        #: torch to build it
        self._prior: F32Array = np.zeros(0, dtype=np.float32)
        self._act = _ACTIVATION_CODES.get(model.config.activation, -1)
        self._weights = tuple(w for w, _ in self._direct or ())
        self._biases = tuple(b for _, b in self._direct or ())
        self._count = np.zeros(1, dtype=np.int32)
        self._mode = np.array([_VML_MODE], dtype=np.int64)
        self._outs: tuple[F32Array, ...] = ()
        self._outs_rows = 0

    def scores(self, obs: npt.ArrayLike) -> F32Array:
        """Score of every row of ``obs`` ``[n, F_obs]``: ``ActorCritic.scores`` with a full mask.

        Each linear layer is ``torch.addmm(bias, h, weight.t())``'s MKL call made directly
        (``_dense``: the bias in every row of a kept output buffer, then torch's ``sgemm_`` with
        the arguments ``addmm`` passes it; ``direct_blas`` checks the floats are the same), the
        activation torch's own kernel in place on that buffer: two torch calls a decision instead
        of seven, which cost several microseconds each inside a training episode, where the
        simulator's work has evicted torch's dispatch path from the caches. Where the direct call
        is not available, ``_scores_torch`` runs the same layers through torch."""
        x = np.asarray(obs)
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise ValueError(f"obs must be [n, {self.n_features}], got {x.shape}")
        n = len(x)
        if n == 0 or n > _BUFFERED_ROWS:
            scores = self._scores_unbuffered(x)
        elif (forward := self.forward_args(n)) is not None:
            scores = _forward_scores(np.ascontiguousarray(x, dtype=np.float32), *forward)
        else:
            scores = self._scores_layers(x, n)
        if self.base_prior > 0:  # the same float32 numbers and sum as ``ActorCritic.scores``
            if len(self._prior) < n:
                self._prior = slot_prior(self.base_prior, n).numpy()
            with_prior: F32Array = scores + self._prior[:n]
            return with_prior
        return scores

    def sample(
        self,
        obs: F32Array,
        log_e: npt.NDArray[np.float64],
        width: int | None,
        base_order: IntArray | None = None,
        keys: npt.NDArray[np.float64] | None = None,
    ) -> tuple[IntArray, IntArray, bool]:
        """``sample_with_priorities(self.scores(obs), width, rng)`` from the draws ``log_e``
        (``gumbel_log(rng, n)``): (order, priorities, whether ``keys`` was written). On the fused
        path one compiled call (``forward_sample``) also writes the simulator's sort keys
        ``learned_keys(base_order, priorities, keys)`` when both are given; else, or on a tie at
        the cut, the scores, then ``rank_sampled``'s numpy ranking."""
        n = len(obs)
        forward = self.forward_args(n)
        if forward is not None and obs.dtype == np.float32 and obs.flags.c_contiguous:
            order = np.empty(n if width is None else min(width, n), dtype=np.int64)
            prio = np.empty(n, dtype=np.int64)
            write = base_order is not None and keys is not None
            if forward_sample(
                obs,
                *forward,
                log_e,
                len(order),
                order,
                prio,
                _NO_INTS if base_order is None or not write else base_order,
                _NO_FLOATS if keys is None or not write else keys,
            ):
                return order, prio, write
        order, prio = rank_sampled(self.scores(obs), log_e, width)
        return order, prio, False

    def forward_args(self, n: int) -> ForwardArgs | None:
        """``_forward``'s arguments after the input for ``n`` rows (the layers' output buffers:
        numpy views of this thread's ``_Buffers``), or None off the fused path (not ``fused``, or
        ``n`` outside 1 .. ``_BUFFERED_ROWS``): what a compiled caller passes on (``_forward``,
        ``forward_sample``)."""
        if not self.fused or not 0 < n <= _BUFFERED_ROWS:
            return None
        buffers = self._buffers
        if n > buffers.rows or self._outs_rows != buffers.rows:
            if n > buffers.rows:
                buffers.add(n)
            self._outs = tuple(t.numpy() for t in buffers.full[1:])
            self._outs_rows = buffers.rows
        return (
            self._weights,
            self._biases,
            self._outs,
            self._act,
            self._params,
            _ONES,
            self._count,
            self._mode,
        )

    def _scores_layers(self, x: npt.NDArray[np.generic], n: int) -> F32Array:
        """``scores`` layer by layer: the direct BLAS calls with torch's activations between
        them, or torch's layers (``_scores_torch``)."""
        bufs = self._buffers.by_rows.get(n)
        if bufs is None:
            bufs = self._buffers.add(n)
        direct = self._direct
        if direct is None:
            return self._scores_torch(x, bufs)
        _, outs, out_nps = bufs
        h = np.ascontiguousarray(x, dtype=np.float32)
        params = self._params
        last = len(direct) - 1
        for k in range(last):
            weight, bias = direct[k]
            _dense(h, weight, bias, out_nps[k], params, _ONES)
            self._activation(outs[k + 1])
            h = out_nps[k]
        weight, bias = direct[last]
        scores: F32Array = _dense_scores(h, weight, bias, out_nps[last], params, _ONES)
        return scores

    def _scores_torch(
        self, x: npt.NDArray[np.generic], bufs: tuple[F32Array, list[Tensor], list[F32Array]]
    ) -> F32Array:
        """``scores`` through torch, in the kept buffers: each output's rows set to the bias (a
        numpy copy from the parameter's memory), then ``out.addmm_(h, weight_t)`` adds the
        product, the same MKL call with beta 1 that ``torch.addmm(bias, h, weight_t)`` makes after
        copying the expanded bias into its result: the same floats."""
        x_np, outs, out_nps = bufs
        np.copyto(x_np, x, casting="unsafe")  # what ascontiguousarray(obs, float32) would hold
        h = outs[0]
        last = len(self._layers) - 1
        for k, (weight_t, bias_np) in enumerate(self._live):
            out = outs[k + 1]
            np.copyto(out_nps[k], bias_np)  # the bias in every row, then out += h @ weight_t
            out.addmm_(h, weight_t)
            if k < last:
                self._activation(out)
            h = out
        scores: F32Array = out_nps[last][:, 0].copy()
        return scores

    def _scores_unbuffered(self, x: npt.NDArray[np.generic]) -> F32Array:
        """``scores`` with new tensors (empty queues, and queues longer than the buffers)."""
        h = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
        last = len(self._layers) - 1
        for k, (bias, weight_t) in enumerate(self._layers):
            h = torch.addmm(bias, h, weight_t)
            if k < last:
                self._activation(h)
        out: F32Array = h.numpy()[:, 0]
        return out


#: queues up to this long use the kept buffers (``_Buffers``: about 0.5 MB for the default model)
_BUFFERED_ROWS = 2048

_Views = tuple[F32Array, list[Tensor], list[F32Array]]
#: ``FastActor.forward_args``: weights, biases, output buffers, activation code, BLAS parameter
#: block, alpha and beta, the activation's count and mode
ForwardArgs = tuple[
    tuple[F32Array, ...],
    tuple[F32Array, ...],
    tuple[F32Array, ...],
    int,
    npt.NDArray[np.int32],
    F32Array,
    npt.NDArray[np.int32],
    npt.NDArray[np.int64],
]


class _Buffers:
    """The layers' input and output buffers of ``FastActor``, kept per thread and layer widths
    (not per actor: a training run makes a policy, hence an actor, per episode, and building a
    queue length's views costs more than a decision's forward pass). For ``n`` rows: the input's
    numpy view, the tensors (input, each layer's output) and the outputs' numpy views, all views
    of the first ``n`` rows of buffers sized for the longest queue seen (C-contiguous: the same
    BLAS calls as fresh tensors). One thread's actors run one at a time; every call overwrites
    the buffers before it reads them."""

    def __init__(self, widths: tuple[int, ...]) -> None:
        self.widths = widths
        self.rows = 0
        self.full: list[Tensor] = []
        self.by_rows: dict[int, _Views] = {}

    def add(self, n: int) -> _Views:
        if n > self.rows:
            self.rows = max(n, 2 * self.rows, 32)
            self.full = [torch.empty((self.rows, width)) for width in self.widths]
            self.by_rows.clear()
        views = [t[:n] for t in self.full]
        bufs = (views[0].numpy(), views, [v.numpy() for v in views[1:]])
        self.by_rows[n] = bufs
        return bufs


_THREAD_BUFFERS = threading.local()


def _buffers_for(widths: tuple[int, ...]) -> _Buffers:
    """This thread's ``_Buffers`` for layers of these widths (input first)."""
    pools: dict[tuple[int, ...], _Buffers] | None = getattr(_THREAD_BUFFERS, "pools", None)
    if pools is None:
        pools = _THREAD_BUFFERS.pools = {}
    buffers = pools.get(widths)
    if buffers is None:
        buffers = pools[widths] = _Buffers(widths)
    return buffers


def _steps(n: int, top_k: int) -> tuple[IntArray, IntArray]:
    """(n, n - 1, ..., n - top_k + 1) and (n - top_k - i for each slot i), kept per (n, top_k):
    the integers every ranking of a queue of n jobs writes."""
    key = (n, top_k)
    steps = _STEPS.get(key)
    if steps is None:
        if len(_STEPS) >= 4096:
            _STEPS.clear()
        top = np.arange(n, n - top_k, -1, dtype=np.int64)
        rest = (n - top_k) - np.arange(n, dtype=np.int64)
        top.flags.writeable = rest.flags.writeable = False
        steps = _STEPS[key] = (top, rest)
    return steps


_STEPS: dict[tuple[int, int], tuple[IntArray, IntArray]] = {}


def order_priorities(order: npt.ArrayLike, n: int) -> IntArray:
    """``order_to_priorities`` for one queue of ``n`` jobs: the k-th pick gets n - k, the jobs not
    picked follow in slot order.

    A job not picked at slot i is the (i - c)-th of them, c being the picks at slots before it:
    its priority is n - k - i + c, with c a cumulative count of the picks (fewer numpy calls than
    listing the unpicked slots)."""
    picks = np.asarray(order, dtype=np.int64)
    k = len(picks)
    top, rest = _steps(n, k)
    if k == n:  # every job picked (a queue no longer than top_k): the order is all
        prio = np.empty(n, dtype=np.int64)
        prio[picks] = top
        return prio
    prio = np.zeros(n, dtype=np.int64)
    prio[picks] = 1
    np.cumsum(prio, out=prio)
    prio += rest
    prio[picks] = top
    return prio


def greedy_priorities(scores: npt.ArrayLike, top_k: int | None) -> IntArray:
    """``scores_to_priorities`` for one queue: the greedy top ``top_k`` by score (ties by slot),
    then the rest in slot order."""
    s = np.asarray(scores)
    if s.dtype in (np.float32, np.float64) and s.ndim == 1:
        n = len(s)
        width = n if top_k is None else min(top_k, n)
        order_buf = np.empty(width, dtype=np.int64)
        prio = np.empty(n, dtype=np.int64)
        if _rank_kernel(np.ascontiguousarray(-s), width, False, order_buf, prio):
            return prio
    order = np.argsort(-s, kind="stable")
    if top_k is None or top_k >= len(s):
        return order_priorities(order, len(s))
    return order_priorities(order[:top_k], len(s))


def sample_order(scores: npt.ArrayLike, top_k: int | None, rng: np.random.Generator) -> IntArray:
    """A Plackett-Luce sample of the first ``top_k`` picks (Gumbel-top-k), slot indices best first.

    The noise is ``-log(E)``, ``E ~ Exp(1)``, added to the scores in float64, as
    ``plackett_luce.sample_order``.
    """
    s = np.asarray(scores, dtype=np.float64)
    n = len(s)
    width = n if top_k is None else min(top_k, n)
    keys = -(s - np.log(np.maximum(rng.standard_exponential(n), _TINY)))
    if width < n:
        part = np.argpartition(keys, width - 1)[:width]
        order: IntArray = part[np.argsort(keys[part], kind="stable")]
        return order
    full: IntArray = np.argsort(keys, kind="stable")
    return full


def gumbel_log(rng: np.random.Generator, n: int) -> npt.NDArray[np.float64]:
    """``log(max(E, tiny))`` of ``n`` draws ``E ~ Exp(1)``: the noise of ``sample_order``, with
    numpy's draws and numpy's ``log`` (the random stream and the floats of ``sample_order``)."""
    log_e = rng.standard_exponential(n)
    np.maximum(log_e, _TINY, out=log_e)
    np.log(log_e, out=log_e)
    return log_e


def rank_sampled(
    scores: npt.ArrayLike, log_e: npt.NDArray[np.float64], width: int | None
) -> tuple[IntArray, IntArray]:
    """The Gumbel-top-``width`` order of ``scores`` with the noise ``log_e`` (``gumbel_log``) and
    its priorities: one compiled stable sort and ranking (``_rank_kernel``); when equal keys would
    make numpy's partial sort decide (practically never: continuous noise), numpy's own path."""
    s = np.asarray(scores)
    if s.dtype != np.float32:
        s = np.asarray(s, dtype=np.float64)
    n = len(s)
    width = n if width is None else min(width, n)
    order = np.empty(width, dtype=np.int64)
    prio = np.empty(n, dtype=np.int64)
    if _sample_rank_kernel(s, log_e, width, width < n, order, prio):
        return order, prio
    keys = _neg_sub(np.asarray(s, dtype=np.float64), log_e)
    if width < n:
        part = np.argpartition(keys, width - 1)[:width]
        order = part[np.argsort(keys[part], kind="stable")]
    else:
        order = np.argsort(keys, kind="stable")
    return order, order_priorities(order, n)


def sample_with_priorities(
    scores: npt.ArrayLike, top_k: int | None, rng: np.random.Generator
) -> tuple[IntArray, IntArray]:
    """``sample_order`` and ``order_priorities`` of its order, in fewer calls: the same draws and
    keys (``gumbel_log``), then ``rank_sampled``."""
    return rank_sampled(scores, gumbel_log(rng, len(np.asarray(scores))), top_k)
