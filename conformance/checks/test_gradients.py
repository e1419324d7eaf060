"""§10.8 Gradients: the backward pass against float64 autograd through the torch reference.

For adapters that differentiate (``Adapter.grad``), the vector-Jacobian product of one call
(the gradient of ``sum(output * cotangent)``) with respect to every floating-point input and
every canonical parameter, in each dtype the adapter offers, compared per tensor with the
tolerance rule: ``gold`` is float64 autograd through ``tck.reference.model`` on the same
rounded values, ``ref`` the same model's autograd in the test dtype, and k depends on what is
differentiated (``tolerance.k_gradient``: dV < dK, dQ, as in PyTorch's own tests).

Masked keys take no part in attention, so their gradients are exactly zero, not small: a
mask applied after the softmax, or a finite fill that does not underflow, shows here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tck.adapters import OutputShapeMismatch, real_size
from tck.conformance.toolkit import careful
from tck.conformance.toolkit.harness import Harness, Instance, compare_by_rows, largest_finite
from tck.conformance.toolkit.results import CheckFailure
from tck.reference.components import record, select
from tck.reference.inputs import Inputs, Shape
from tck.reference.tolerance import (
    DTYPES,
    FLOOR,
    careful_error,
    compare,
    floor_of,
    gradient_scale,
    k_gradient,
    round_to,
)

spec = pytest.mark.spec
components = pytest.mark.components


def _is_table(component: str) -> bool:
    """The embedding op (§1.1): a table of token ids, whose padding row §1.3 holds."""
    rec = record(component)
    return rec.has("token_ids") and rec.level == "op"


def _cotangent(tck: Harness, inst: Instance, inputs: Inputs, seed: int) -> np.ndarray:
    """A random cotangent of the output's shape, in the test dtype, zero on the rows the
    declared conventions leave undefined or NaN (they carry no gradient to compare)."""
    gold = tck.gold(inst, inputs)
    cotangent = np.random.default_rng(seed).standard_normal(gold.shape)
    return round_to(np.where(np.isnan(gold), 0.0, cotangent), inst.dtype)


@contextlib.contextmanager
def _wrong_shape_is_a_finding() -> Iterator[None]:
    """An output of another shape than the spec's has no gradient to compare: that is the
    finding (``shape.wrong_output_shape``), not a failure of the adapter."""
    try:
        yield
    except OutputShapeMismatch as err:
        raise CheckFailure(
            "shape.wrong_output_shape",
            f"{err}: no gradient of it can be compared (SPEC.md §10.6, §10.8)",
        ) from None


def _instance(tck: Harness, dtype: str) -> Instance:
    if record(tck.component).has("no_gradients"):
        pytest.skip(f"{tck.component} has no floating-point input and no parameter")
    inst = tck.instance(dtype=dtype)
    tck.require_params(inst)
    tck.note({"dtype": dtype})
    return inst


class _Judge:
    """Each gradient tensor under the rule with a naive error of ``relative`` times its
    scale, judged as it comes (``take``), so that the subject's gradients are never held
    together: only each one's comparison is kept, and the array of the worst so far (what
    the padding-row diagnosis reads)."""

    def __init__(
        self,
        tck: Harness,
        inst: Instance,
        inputs: Inputs,
        cotangent: np.ndarray,
        gold: dict[str, np.ndarray],
        relative: float,
    ):
        self.tck, self.inst, self.inputs, self.cotangent = tck, inst, inputs, cotangent
        self.gold, self.relative = gold, relative
        # float64: the floor scales with the terms the gradient sums (gradient_scale: of
        # the inputs and cotangent alone, given no gradient; the gradient's own part in
        # ``take``, by rows: a token table's gradient is 0.31 GB for GPT-2 small)
        self.terms = gradient_scale(np.zeros(0), inputs, cotangent)
        self.results: dict[str, Any] = {}  # name -> Comparison, or the wrong shape
        self.kept: tuple[float, str, np.ndarray] | None = None  # the worst failing one

    def take(self, name: str, test: np.ndarray) -> None:
        if name not in self.gold:
            return
        gold = self.gold[name]
        if np.shape(test) != np.shape(gold):
            self.results[name] = np.shape(test)
            return
        dtype = self.inst.dtype
        largest = largest_finite(gold)
        careful_err = self.relative * max(1.0, largest)  # _scale(gold)
        k = k_gradient(self.tck.component, name)
        scale = max(largest, self.terms) if dtype == "float64" else None
        result = compare_by_rows(test, gold, dtype=dtype, careful_err=careful_err, k=k, scale=scale)
        self.results[name] = result
        rank = np.inf if result.nan_mismatch else result.ratio
        kept = self.kept
        worse = kept is None or rank > kept[0] or (rank == kept[0] and name < kept[1])
        if not result.passed and worse:  # what a failure's diagnosis reads: a failing one
            self.kept = (rank, name, np.array(test, copy=True))

    def verdict(self) -> tuple[dict[str, Any], tuple[float, str, Any], np.ndarray | None]:
        """The ratio per tensor, the worst (rank, name, comparison) and its gradient, in the
        order of the names (the first of equal ranks); a wrong shape fails first."""
        dtype = self.inst.dtype
        per_tensor: dict[str, Any] = {}
        worst: tuple[float, str, Any] | None = None
        for name in sorted(self.gold):
            result = self.results[name]
            if not hasattr(result, "ratio"):
                raise CheckFailure(
                    "gradients.wrong_shape",
                    f"the gradient for {name} has shape {result}, its input or "
                    f"parameter {np.shape(self.gold[name])}",
                    {"dtype": dtype, "grad_of": name},
                )
            per_tensor[name] = round(result.ratio, 4) if np.isfinite(result.ratio) else "inf"
            rank = np.inf if result.nan_mismatch else result.ratio
            if worst is None or rank > worst[0]:
                worst = (rank, name, result)
        assert worst is not None  # every component here has an input or a parameter
        kept = self.kept if self.kept is not None and self.kept[1] == worst[1] else None
        return per_tensor, worst, None if kept is None else kept[2]


@spec("10.8", id="gradients.gradients")
@pytest.mark.parametrize("dtype", DTYPES)
@_wrong_shape_is_a_finding()
def test_gradients(tck: Harness, dtype: str) -> None:
    """Every input and parameter gradient within k * (naive error) + floor of float64."""
    inst = _instance(tck, dtype)
    # a checkpoint's real-size stack: its images one at a time, and every parameter's
    # gradient but its later layers' (tck.adapters.real_size)
    images = real_size.images_per_call(tck.subject, "gradients.gradients")
    if images and tck.real_size and record(tck.component).has("images"):
        shape = Shape(batch=images)
    else:
        shape = Shape()
    inputs = tck.inputs(inst, shape, seed=4)
    if _is_table(tck.component) and inst.config.padding_idx is not None:
        inputs["ids"][0, -1] = inst.config.padding_idx  # a padded position: §1.3's row
    cotangent = _cotangent(tck, inst, inputs, seed=5)
    only = real_size.judged_gradients(tck.subject, inst.params or {}) if tck.real_size else None
    # The reference first: for a checkpoint, its float64 reference model goes as soon as its
    # gradients are made (careful.gold_gradients), before the subject's are: the two models'
    # gradients are never held beside the reference model.
    gold = careful.gold_gradients(tck, inst, inputs, cotangent, only)

    # The naive error, relative to each tensor's scale, pooled over every tensor: one tensor's
    # naive maximum error is sometimes lucky (a few elements), while all of them come out of
    # the same computation in the same dtype.
    def relative(ref: dict[str, np.ndarray]) -> float:
        return max(careful_error(ref[name], gold[name])[0] / _scale(gold[name]) for name in gold)

    naive = [0.0]  # float64: the gold is the naive reference, its error 0
    if dtype != "float64":  # the naive gradients, one at a time, before the subject's come

        def pooled(name: str, value: np.ndarray) -> None:
            if name in gold:
                error = careful_error(value, gold[name])[0] / _scale(gold[name])
                naive[0] = max(naive[0], error)

        careful.naive_gradients_each(tck, inst, inputs, cotangent, pooled, only)
    # The subject's gradients one at a time, each judged as it comes (careful.gradients_each:
    # a checkpoint streams them out of its backward pass), never the whole set beside the
    # reference's: a real-size stack's set is its float64 size.
    judge = _Judge(tck, inst, inputs, cotangent, gold, naive[0])
    seen: set[str] = set()

    def take(name: str, value: np.ndarray) -> None:
        seen.add(name)
        judge.take(name, value)

    careful.gradients_each(tck, inst, inputs, cotangent, take, only)
    missing = sorted(set(gold) - seen)
    if missing:
        raise CheckFailure(
            "gradients.missing",
            f"grad() returned no gradient for {', '.join(missing)} (Adapter.grad returns one "
            "for every floating-point input and every canonical parameter)",
            {"dtype": dtype, "grad_of": missing[0]},
        )

    per_tensor, worst, worst_test = judge.verdict()
    if not worst[2].passed and dtype == "float64" and floor_of("float64") > FLOOR["float64"]:
        # float32 islands (SPEC.md §10.12): the reference with the same steps in float32 is
        # the yardstick, as the naive run is below float64 (needed only past the floor); the
        # subject's gradients are asked for again (a failing check pays for the second pass)
        island = careful.island_gradients(tck, inst, inputs, cotangent)
        if island is not None and set(island) >= set(gold):
            island_err = relative(island)
            del island
            judge = _Judge(tck, inst, inputs, cotangent, gold, island_err)
            careful.gradients_each(tck, inst, inputs, cotangent, judge.take, only)
            per_tensor, worst, worst_test = judge.verdict()
    _, name, result = worst
    metrics = {**result.metrics(), "dtype": dtype, "grad_of": name, "ratios": per_tensor}
    if only is not None:  # the parameters a real-size stack's check leaves out, said
        left = len(inst.params or {}) - len(only)
        metrics["not_judged"] = f"{left} parameters of the layers after the first"
    tck.note(metrics)
    if not result.passed:
        assert worst_test is not None  # the worst failing gradient is kept
        row = _padding_row_only(
            inst, name, worst_test, gold[name], dtype, result.careful_err, result.k
        )
        if row is not None:
            raise CheckFailure(
                "gradients.padding_row",
                f"{dtype}: the gradient with respect to {name} is wrong only in the padding "
                f"row (row {row}, the embedding of the padding token, padding_idx={row}): "
                f"|gradient| there is {np.abs(worst_test[row]).max():.3g} where the spec's is "
                f"{np.abs(gold[name][row]).max():.3g}. The padding row must receive no gradient "
                "(SPEC.md §1.3): an embedding built without padding_idx (nn.Embedding(V, D) "
                "instead of nn.Embedding(V, D, padding_idx=...)) trains it; every other row "
                "agrees",
                {**metrics, "padding_row": row},
            )
        what = "NaN" if result.nan_mismatch else "error"
        raise CheckFailure(
            "gradients.nan" if result.nan_mismatch else "gradients.oracle_mismatch",
            f"{dtype}: the gradient with respect to {name} disagrees with float64 autograd "
            f"through the reference ({what}): max |test - gold| = {result.max_abs_err:.3g} > "
            f"bound {result.bound:.3g} = {result.k:g} x naive error {result.careful_err:.3g} + "
            f"floor (ratio {result.ratio:.3g}) at index {result.worst_index}",
            metrics,
        )


@spec("10.8", "4.2", id="gradients.masked_keys_have_zero_gradient")
@pytest.mark.parametrize("dtype", ("float64", "float16"))
@components(*select("masks"))
@_wrong_shape_is_a_finding()
def test_masked_keys_have_zero_gradient(tck: Harness, dtype: str) -> None:
    """d output / d (key, value at a padded position) is exactly 0 (SPEC.md §4.2)."""
    inst = _instance(tck, dtype)
    shape = Shape(batch=2, lq=7, lk=7, lengths=(5, 3))
    inputs = tck.inputs(inst, shape, seed=6)
    cotangent = _cotangent(tck, inst, inputs, seed=7)
    rec = record(tck.component)
    if rec.has("heads"):
        keep = np.broadcast_to(inputs["keep_mask"], (2, 1, 1, 7))[:, 0, 0, :]
        probes = {"k": (keep, 2), "v": (keep, 2)}
    elif rec.has("qkv"):
        keep = inputs["key_padding"]
        probes = {"key": (keep, 1), "value": (keep, 1)}
    elif rec.has("self_attention"):
        # a padded position is also a (computed) query row: take no gradient from it
        keep = inputs["key_padding"]
        cotangent = cotangent * keep[:, :, None]
        probes = {"x": (keep, 1)}
    else:  # decoders: the memory enters only as cross-attention keys and values
        keep = inputs["memory_key_padding"]
        probes = {"memory": (keep, 1)}
    grads = careful.gradients(tck, inst, inputs, cotangent)
    for name, (keep, axis) in probes.items():
        if name not in grads:
            raise CheckFailure("gradients.missing", f"grad() returned no gradient for input {name}")
        g = np.moveaxis(grads[name], axis, 1)  # (B, L, ...)
        leak = np.abs(np.where(_expand(~keep, g.ndim), g, 0.0))
        worst = float(leak.max(initial=0.0))
        tck.note({"dtype": dtype, "grad_of": name, "max_abs_grad_at_masked_keys": worst})
        if worst != 0.0 or np.isnan(leak).any():
            per_key = np.nan_to_num(leak.reshape(*keep.shape, -1).max(-1), nan=np.inf)
            b, j = (int(i) for i in np.unravel_index(int(per_key.argmax()), keep.shape))
            raise CheckFailure(
                "mask.masked_key_gradient",
                f"{dtype}: the gradient with respect to {name} at masked key position {j} of "
                f"batch row {b} is {worst:.3g}, not exactly 0: the masked key still takes part "
                "in attention (a mask applied after the softmax, or a fill value that does not "
                "underflow to a weight of exactly 0)",
                {"dtype": dtype, "grad_of": name, "max_abs_grad_at_masked_keys": worst},
            )


def _padding_row_only(
    inst: Instance,
    name: str,
    test: np.ndarray,
    gold: np.ndarray,
    dtype: str,
    careful_err: float,
    k: float,
) -> int | None:
    """The padding row, when an embedding table's gradient is wrong there and only there."""
    row = inst.config.padding_idx
    c = inst.config
    named = "embed" in name or _is_table(inst.component)
    table = gold.ndim == 2 and gold.shape == (c.vocab_size, c.d_model) and named
    if row is None or not table:
        return None
    others = np.ones(gold.shape[0], bool)
    others[row] = False
    rest = compare(test[others], gold[others], dtype=dtype, careful_err=careful_err, k=k)
    there = compare(
        test[row : row + 1], gold[row : row + 1], dtype=dtype, careful_err=careful_err, k=k
    )
    return row if rest.passed and not there.passed else None


def _scale(values: np.ndarray) -> float:
    return max(1.0, largest_finite(np.asarray(values)))


def _expand(mask: np.ndarray, ndim: int) -> np.ndarray:
    return mask.reshape(mask.shape + (1,) * (ndim - mask.ndim))
