"""The tolerance rule (SPEC.md §10.7), from FlashAttention's and PyTorch's tests.

Inputs and parameters are rounded to the test dtype once and shared by every path; ``gold``
is the float64 oracle, ``careful`` the *careful run*: one careful implementation computed in
the test dtype (the torch model of ``tck.reference.model``, ``Harness.careful``: norm
statistics and softmax in float32, angles in float64, SPEC.md §10.10), ``test`` the
adapter. A check passes iff

    max|test - gold| <= k * max|careful - gold| + floor

where the floor is ``FLOOR[dtype] * max(1, scale)``: ``scale`` is max|gold| over the compared
positions (finite values only), and for a float64 gradient the larger of that and
max|input| x max|cotangent| (``gradient_scale``: the terms the gradient sums). NaN in
``test`` where ``gold`` has none fails outright. In float64 ``careful_err`` is 0 and the
floor alone decides. Where the careful run overflows and ``gold`` does not, a non-finite
``test`` still fails (the harness compares it); a finite one there has no bound. An
implementation compared with itself passes ``require_finite``: NaN or inf at a real
position fails on either side, never agreement. (The metrics keep their published names:
``ref_max_abs_err`` is the careful run's error, ``ref_multiple`` the error as a multiple
of it.)

**k, and where it comes from.** Both sources compare a fast kernel with a plain PyTorch
implementation in the same low precision and allow a multiple of that implementation's error:

- FlashAttention, ``tests/test_flash_attn.py`` (Dao-AILab/flash-attention): "FlashAttention's
  numerical error is at most twice the numerical error of a Pytorch implementation", for the
  output and, in the same test, for dQ, dK and dV (``<= 2 * (dq_pt - dq_ref)...``).
- PyTorch, ``test/test_transformers.py``: ``check_out_and_grad`` allows a default fudge factor
  of 5 per tensor, and the memory-efficient attention test with an attention mask raises it
  per tensor: ``out`` 4, ``grad_value`` 8, ``grad_key`` 25, ``grad_query`` 160 (sequence
  lengths up to 2048, fused CUDA kernels).

Measured, not assumed: the ratio of two *maximum* errors over small tensors is noisy (the
careful run's worst element is sometimes lucky), so k is the worst ratio measured on
torch.nn against the careful run over seeds 0-12 (CPU, torch 2.13), times about 2, kept
within PyTorch's own multipliers. Forward: 5 for a single op (attention, norms, FFN,
positional; PyTorch's default fudge; measured up to 2.9x the careful run's error, LayerNorm on
low-variance rows in float32), 32 for a layer, a stack or a model (measured up to 12.5x:
encoder layers on inputs x30 in bfloat16, where torch's fused LayerNorm and float32
accumulation round once and the careful run rounds at every op). Gradients: dV and the
value path 8 (PyTorch's ``grad_value``), dK and dQ 25 (PyTorch's ``grad_key``; its
``grad_query`` is 160), and 64 for the other gradients of layers, stacks and models
(measured up to 33x for a parameter deep in a pre-LN decoder layer in bfloat16: it collects
the rounding of every sublayer above it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from tck.reference import record

DTYPES = ("float64", "float32", "float16", "bfloat16")
LOW_PRECISION = ("float32", "float16", "bfloat16")
# Unit roundoff ulp(1)/2 per dtype: 2^-(mantissa bits + 1).
UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}

# The default multiplier, where no component record's k applies (compare()'s default; the
# fixtures' float64 cases, where the floor decides): between FlashAttention's 2 and PyTorch's
# 4 for an attention output, the two sources above.
K_FORWARD = 3.0
# Relative floor per dtype, times max(1, max|gold|). For float64 the careful run agrees
# with the oracle to ~1e-15, so the floor alone decides: 1e-10 is five orders above float64
# rounding in these small models, and five below the smallest deviation the suite hunts
# (a LayerNorm eps of 1e-5 against 1e-6 moves outputs by ~5e-6). In lower precision the
# floor only covers a careful run that happens to be exact (a few ulps of the output's
# scale): float32 ~170 unit roundoffs, float16 ~20, bfloat16 ~13.
FLOOR = {"float64": 1e-10, "float32": 1e-5, "float16": 1e-2, "bfloat16": 5e-2}

# SPEC.md §10.12, float32 islands: a float64 build that computes some steps in float32 on
# purpose (Llama's RMSNorm statistics of ``x.float()``, a RoPE table kept in a float32
# buffer, a float32 constant). Each such step rounds its result to float32 once, a relative
# error of at most u = 2^-24 (Higham, "Accuracy and Stability of Numerical Algorithms",
# 2nd ed., §2.2: fl(x op y) = (x op y)(1 + d), |d| <= u); the float64 steps after it carry
# that error through sums and products whose condition in these small models is a few units
# (a norm divides by a statistic formed from d rounded terms: Higham §3.1, gamma_n = n u /
# (1 - n u) for a sum of n terms, here bounded by its growth over a handful of rounded
# steps, not by d). The bound is that rounding times a growth factor of 16, times
# max(1, max|gold|) as every floor: 16 u ~ 9.5e-7. Measured on the island models of
# tests/checks/test_precision_islands.py (2026-11-26): at most 2.2 u (the gradient of Meta's
# RMSNorm, statistics of x.float()). A real bug the suite hunts stays above it: RMSNorm or
# LayerNorm eps 1e-5 outside the square root moves unit-variance rows by eps / 2 = 5e-6
# relative, 5x the bound.
ISLAND_GROWTH = 16.0
ISLAND_FLOOR = ISLAND_GROWTH * UNIT_ROUNDOFF["float32"]
# The float64 floor in force: FLOOR["float64"], or ISLAND_FLOOR while a subject with float32
# islands (declared, or detected: tck.conformance.diagnosis.islands) is checked. A module global, as
# tck.reference.model's precision switch: the suite checks one subject at a time per process.
_float64_floor: float = FLOOR["float64"]


@contextlib.contextmanager
def float64_floor(floor: float) -> Iterator[None]:
    """Within the block, float64 comparisons (``compare`` with ``dtype="float64"``, every
    property check's ``delta``) use ``floor`` instead of ``FLOOR["float64"]`` (SPEC.md
    §10.12: ``ISLAND_FLOOR`` for a subject with float32 islands)."""
    global _float64_floor
    before, _float64_floor = _float64_floor, floor
    try:
        yield
    finally:
        _float64_floor = before


def floor_of(dtype: str) -> float:
    """The relative floor of the tolerance rule in ``dtype``, as in force now."""
    return _float64_floor if dtype == "float64" else FLOOR[dtype]


# Gradient multipliers by what is differentiated (SPEC.md §10.8); see the module docstring.
K_GRAD_VALUE = 8.0
K_GRAD_KEY = 25.0
K_GRAD_QUERY = 25.0
K_GRAD_OTHER = 64.0

# The multiplier of each tolerance class a component record names (tck.reference.components:
# ``tolerance`` for the output, ``gradients`` and ``gradient_default`` for gradients).
K_BY_CLASS: dict[str, float] = {"op": 5.0, "composite": 32.0}
K_GRAD_BY_CLASS: dict[str, float] = {
    "value": K_GRAD_VALUE,  # dV and the value path; an elementwise scale or a lookup
    "key": K_GRAD_KEY,
    "query": K_GRAD_QUERY,
    "other": K_GRAD_OTHER,
}


def k_forward(component: str) -> float:
    """The multiplier of the careful run's error for ``component``'s output."""
    return K_BY_CLASS[record(component).tolerance]


def k_gradient(component: str, grad_of: str) -> float:
    """The multiplier for the gradient with respect to ``grad_of`` (an input name such as
    ``"k"`` or ``"params.v.weight"``)."""
    return K_GRAD_BY_CLASS[record(component).gradient_class(grad_of)]


def round_to(array: np.ndarray, dtype: str) -> np.ndarray:
    """``array`` rounded to ``dtype`` (round to nearest even), returned as float64; integer
    and boolean arrays unchanged. The one rounding every path of a comparison shares."""
    array = np.asarray(array)
    if dtype == "float64" or not np.issubdtype(array.dtype, np.floating):
        return array
    import torch  # only here: the oracle side of the suite needs no torch

    torch_dtype = {
        "float32": torch.float32,
        "float16": torch.float16,
        "bfloat16": torch.bfloat16,
    }.get(dtype)
    if torch_dtype is None:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    tensor = torch.from_numpy(np.ascontiguousarray(array, dtype=np.float64))
    return tensor.to(torch_dtype).to(torch.float64).numpy()


def careful_error(
    careful: np.ndarray, gold: np.ndarray, ignore: np.ndarray | None = None
) -> tuple[float, int]:
    """(max|careful - gold| where both are finite, the positions where only ``careful`` is
    not): the careful run's own error, and where it overflowed and so promises nothing."""
    careful, gold = np.asarray(careful, dtype=np.float64), np.asarray(gold, dtype=np.float64)
    if careful.shape != gold.shape:
        raise ValueError(f"careful run shape {careful.shape} is not the oracle's {gold.shape}")
    if ignore is None and _all_finite(careful) and _all_finite(gold):  # one pass, not six
        return float(np.abs(careful - gold).max(initial=0.0)), 0
    considered = (
        np.ones(gold.shape, bool) if ignore is None else ~np.broadcast_to(ignore, gold.shape)
    )
    finite = considered & np.isfinite(careful) & np.isfinite(gold)
    lost = int((considered & ~np.isfinite(careful) & np.isfinite(gold)).sum())
    err = float(np.abs(np.where(finite, careful - gold, 0.0)).max(initial=0.0))
    return err, lost


@dataclass
class Comparison:
    passed: bool
    max_abs_err: float
    mean_abs_err: float
    bound: float
    ratio: float
    nan_mismatch: int  # positions where exactly one of test and gold is NaN
    worst_index: tuple[int, ...] | None
    dtype: str = "float64"
    careful_err: float = 0.0  # max|careful - gold| of the careful run in ``dtype``
    k: float = K_FORWARD
    # Where ``require_finite`` asked for finite values: the positions NaN or inf in ``test``
    # and in ``gold`` (a position non-finite in both counts in both).
    nonfinite_test: int = 0
    nonfinite_gold: int = 0

    @property
    def nonfinite(self) -> bool:
        """A NaN or inf where both sides had to be finite (``compare(require_finite=)``)."""
        return bool(self.nonfinite_test or self.nonfinite_gold)

    def describe_nonfinite(self, test: str = "test", gold: str = "gold") -> str:
        """In words: how many positions are not finite on each side, and the first one."""
        return (
            f"{self.nonfinite_test} position(s) of the {test} and {self.nonfinite_gold} of the "
            f"{gold} are NaN or inf where both must be finite (first at index "
            f"{self.worst_index}); a non-finite value on both sides is not agreement"
        )

    def metrics(self) -> dict[str, Any]:
        out = {
            "max_abs_err": self.max_abs_err,
            "mean_abs_err": self.mean_abs_err,
            "bound": self.bound,
            "ratio": self.ratio,
            "nan_mismatch": self.nan_mismatch,
            "worst_index": list(self.worst_index) if self.worst_index is not None else None,
        }
        if self.nonfinite:
            out.update(nonfinite_test=self.nonfinite_test, nonfinite_gold=self.nonfinite_gold)
        if self.dtype != "float64":
            out.update(dtype=self.dtype, ref_max_abs_err=self.careful_err, k=self.k)
            multiple = self.careful_multiple
            if multiple is not None:
                out["ref_multiple"] = multiple
        return out

    @property
    def careful_multiple(self) -> float | None:
        """The error as a multiple of the careful run's error (SPEC.md §10.10), where
        that error is finite and not zero."""
        if self.careful_err > 0 and np.isfinite(self.careful_err) and np.isfinite(self.max_abs_err):
            return self.max_abs_err / self.careful_err
        return None


def gradient_scale(
    gradient: np.ndarray, inputs: dict[str, np.ndarray] | Any, cotangent: np.ndarray
) -> float:
    """The magnitude a float64 gradient's floor scales with: its own largest value, or the
    largest |input| times the largest |cotangent|, whichever is larger. A vector-Jacobian
    product sums terms of that size (dW = sum_t g_t x_t^T), and its rounding error scales
    with the terms even where they cancel to a small or zero gradient: measured on
    torch.nn's float64 encoder layer against the oracle (2026-11-26), inputs of magnitude
    1e3 and 1e5 gave gradients of at most ~11 (post-LN) with errors of 2.8e-9 and 2.4e-5 on a
    query-weight gradient that is 0 in float64 autograd, 28x and 2.4e5x a floor scaled by
    the gradient alone, and 2e-4 of a floor scaled by |input| x |cotangent|."""
    values = [np.abs(np.asarray(v, np.float64)) for v in inputs.values() if _is_float(v)]
    largest = max((float(v[np.isfinite(v)].max(initial=0.0)) for v in values), default=0.0)
    cot = np.abs(np.asarray(cotangent, np.float64))
    terms = largest * float(cot[np.isfinite(cot)].max(initial=0.0))
    own = np.abs(np.asarray(gradient, np.float64))
    return max(float(own[np.isfinite(own)].max(initial=0.0)), terms)


def _is_float(value: Any) -> bool:
    return np.issubdtype(np.asarray(value).dtype, np.floating)


def compare(
    test: np.ndarray,
    gold: np.ndarray,
    *,
    dtype: str = "float64",
    careful_err: float = 0.0,
    k: float = K_FORWARD,
    ignore: np.ndarray | None = None,
    require_finite: np.ndarray | bool = False,
    scale: float | None = None,
) -> Comparison:
    """Apply the rule. ``ignore`` masks positions the spec leaves undefined (§4.4), or where
    the careful run overflowed (``careful_error``).

    ``require_finite`` (True, or a mask broadcast to the shape) marks the compared positions
    where both sides must be finite: an implementation compared with itself (a cached step
    with the full forward, a row with the same row alone, a call with the same call again)
    has no oracle to say that NaN is expected there, so a NaN or inf on either side fails,
    and NaN on both sides is never agreement. Elsewhere a NaN in exactly one side fails.

    ``scale`` replaces ``max|gold|`` as the magnitude the floor scales with, where the
    values a result is computed from are larger than the result (``gradient_scale``)."""
    test, gold = np.asarray(test, dtype=np.float64), np.asarray(gold, dtype=np.float64)
    if test.shape != gold.shape:
        raise ValueError(f"shape {test.shape} is not the expected {gold.shape}")
    if ignore is None and _all_finite(test) and _all_finite(gold):  # require_finite holds
        return _compare_finite(test, gold, dtype, careful_err, k, scale)
    considered = (
        np.ones(gold.shape, bool) if ignore is None else ~np.broadcast_to(ignore, gold.shape)
    )
    finite_here = considered & np.broadcast_to(np.asarray(require_finite, bool), gold.shape)
    test_bad, gold_bad = finite_here & ~np.isfinite(test), finite_here & ~np.isfinite(gold)
    considered = considered & ~(test_bad | gold_bad)  # counted below, not as a difference
    test_nan, gold_nan = np.isnan(test) & considered, np.isnan(gold) & considered
    nan_mismatch = int((test_nan ^ gold_nan).sum())
    both = considered & ~test_nan & ~gold_nan
    # An infinite gold value is matched only by the same infinity (err 0; inf - inf is not 0)
    # and sets no scale: the bound stays finite, so it cannot excuse every other position.
    with np.errstate(invalid="ignore"):
        err = np.where(both & (test != gold), np.abs(test - gold), 0.0)
    err = np.where(np.isnan(err), np.inf, err)
    if scale is None:
        scale = float(np.abs(np.where(both & np.isfinite(gold), gold, 0.0)).max(initial=0.0))
    bound = k * careful_err + floor_of(dtype) * max(1.0, scale)
    max_err = float(err.max(initial=0.0))
    if not np.isfinite(max_err):  # test is +-inf where gold is finite
        max_err = float("inf")
    mean_err = float(err[both].mean()) if both.any() else 0.0
    worst = (
        tuple(int(i) for i in np.unravel_index(int(err.argmax()), err.shape)) if err.size else None
    )
    if nan_mismatch:
        worst = tuple(int(i) for i in np.argwhere(test_nan ^ gold_nan)[0])
    if test_bad.any() or gold_bad.any():
        worst = tuple(int(i) for i in np.argwhere(test_bad | gold_bad)[0])
    ratio = max_err / bound if bound > 0 else float("inf")
    return Comparison(
        nan_mismatch == 0 and not (test_bad.any() or gold_bad.any()) and max_err <= bound,
        max_err,
        mean_err,
        bound,
        ratio,
        nan_mismatch,
        worst,
        dtype,
        careful_err,
        k,
        int(test_bad.sum()),
        int(gold_bad.sum()),
    )


def _all_finite(array: np.ndarray) -> bool:
    return bool(np.isfinite(array).all())


def _compare_finite(
    test: np.ndarray,
    gold: np.ndarray,
    dtype: str,
    careful_err: float,
    k: float,
    scale: float | None,
) -> Comparison:
    """``compare`` where nothing is ignored and both sides are finite everywhere: the same
    result in a few passes over the arrays instead of about twenty (a 1024-token logits
    array of GPT-2 small is 51 M values; a token table's gradient 39 M)."""
    err = np.abs(test - gold)  # inf where the difference overflows, as compare counts it
    if scale is None:
        scale = float(np.abs(gold).max(initial=0.0))
    bound = k * careful_err + floor_of(dtype) * max(1.0, scale)
    max_err = float(err.max(initial=0.0))
    mean_err = float(err.mean()) if err.size else 0.0
    worst = (
        tuple(int(i) for i in np.unravel_index(int(err.argmax()), err.shape)) if err.size else None
    )
    ratio = max_err / bound if bound > 0 else float("inf")
    return Comparison(
        max_err <= bound, max_err, mean_err, bound, ratio, 0, worst, dtype, careful_err, k, 0, 0
    )
