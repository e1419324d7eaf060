"""One calling convention for the diagnosis: a hypothesis is an ``Alternative``, the spec's
oracle with one deliberate change, and ``fits`` judges it against an implementation's output.

An alternative changes any of: pieces of the oracle (``pieces``: name -> function, built
into a separate oracle by ``tck.reference.variants`` and passed in, never written into
``tck.reference.oracle``), convention fields (``conventions``), the parameters (``params``)
or the inputs (``inputs``). Every hypothesis module (``hypotheses_layout``,
``hypotheses_more``, ``structural``, ``decoding``) yields alternatives; only this module
computes them.

What counts as evidence (SPEC.md §0.3; the diagnosis manual, docs/diagnosis.md): an
alternative explains an output when

1. its output reproduces the implementation's within the bound of the failed comparison (the
   same dtype, the same careful reference's error), and
2. its output differs from the spec's own output on the same input by more than that bound.

Without (2) the input cannot tell the hypothesis from the spec (a head split without the
transpose on a one-token call, a causal mask without its diagonal on a call with no causal
mask, an eps of 1e-6 instead of 1e-5 at float32 precision): such a "fit" is the spec fitting,
never evidence of a bug.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from tck.reference import oracle, param_shapes
from tck.reference.tolerance import Comparison, compare
from tck.reference.variants import expected_under, oracle_variant

Arrays = Mapping[str, np.ndarray]
Pieces = Mapping[str, Callable[..., Any]]

# How positions where an alternative's output is NaN are judged: "compare" (like any other),
# "ignore" (not compared: the alternative leaves them undefined, a mask hypothesis that
# empties a row), "located" (the implementation must be non-finite exactly there, where the
# spec's output is finite; those positions are then not compared).
NAN_RULES = ("compare", "ignore", "located")


@dataclasses.dataclass(frozen=True)
class Alternative:
    """The spec's oracle with one deliberate change, and the bug class it stands for."""

    code: str
    message: str
    # name -> replacement; or a function that builds them anew for each evaluation (a
    # replacement that counts its calls)
    pieces: Pieces | Callable[[], Pieces] = dataclasses.field(default_factory=dict)
    conventions: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    params: Arrays | None = None
    inputs: Arrays | None = None
    nan: str = "compare"
    # applied to the oracle's output (a model that normalises its logits), None: nothing
    after: Callable[[np.ndarray], np.ndarray] | None = None
    # True: the query rows the alternative leaves with no key (in any attention whose rows
    # are the output's rows) come out NaN, for the ``nan`` rule to judge. What a row with no
    # key outputs is §4.4's own question (a module may zero it after its output projection,
    # where the oracle zeroes the attention's row): a mask hypothesis that empties rows the
    # spec does not is judged on the rows that still see keys.
    keyless_nan: bool = False

    def __post_init__(self) -> None:
        if self.nan not in NAN_RULES:
            raise ValueError(f"nan rule {self.nan!r} is not one of {NAN_RULES}")


def completed_params(component: str, params: Arrays | None, config: Any, conventions: Any):
    """``params`` with the norms ``conventions`` have and the declared ones do not (a final
    LayerNorm after a post-LN stack): what a fresh ``nn.LayerNorm`` holds, unit gain and zero
    bias, since no canonical parameter maps onto them."""
    if params is None:
        return None
    wanted = param_shapes(component, config, conventions)
    missing = {k: v for k, v in wanted.items() if k not in params}
    if missing and all(len(shape) == 1 for shape in missing.values()):
        return {
            **params,
            **{k: np.ones(v) if k.endswith("weight") else np.zeros(v) for k, v in missing.items()},
        }
    return params


def output_of(
    component: str,
    inputs: Arrays,
    params: Arrays | None,
    config: Any,
    conventions: Any,
    alternative: Alternative,
) -> np.ndarray:
    """The oracle's output under ``alternative`` for one call (float64)."""
    conv = conventions
    if alternative.conventions:
        conv = dataclasses.replace(conventions, **alternative.conventions)
    chosen = params if alternative.params is None else alternative.params
    if alternative.conventions and alternative.params is None:
        chosen = completed_params(component, chosen, config, conv)
    pieces = alternative.pieces() if callable(alternative.pieces) else alternative.pieces
    keyless: list[np.ndarray] = []
    if alternative.keyless_nan:
        pieces = {**pieces, "scaled_dot_product_attention": _recording_keyless(pieces, keyless)}
    variant = oracle_variant(pieces) if pieces else None
    call_inputs = inputs if alternative.inputs is None else alternative.inputs
    out = expected_under(variant, component, call_inputs, chosen, config, conv)
    for rows in keyless:
        if np.ndim(out) > 2 and rows.shape == np.shape(out)[:2] and rows.any():
            out = np.where(rows[(...,) + (None,) * (np.ndim(out) - 2)], np.nan, out)
    return out if alternative.after is None else alternative.after(out)


def broadcast_keep(q: Any, k: Any, keep_mask: Any) -> np.ndarray | None:
    """One attention call's keep-mask broadcast to its scores' shape (..., Lq, Lk)."""
    if keep_mask is None:
        return None
    lead = np.broadcast_shapes(np.shape(q)[:-2], np.shape(k)[:-2])
    shape = (*lead, np.shape(q)[-2], np.shape(k)[-2])
    return np.broadcast_to(np.asarray(keep_mask, dtype=bool), shape)


def batch_rows(rows: np.ndarray) -> np.ndarray | None:
    """Query rows (B, ..., Lq) of an attention call as (B, Lq): a row counts where it does in
    any head; None for a call with no batch axis."""
    if rows.ndim < 2:
        return None
    return rows.reshape(rows.shape[0], -1, rows.shape[-1]).any(axis=1)


def _recording_keyless(pieces: Pieces, rows: list[np.ndarray]) -> Callable[..., np.ndarray]:
    """The attention core ``pieces`` use (the oracle's unless they replace it), recording in
    ``rows`` each batched call's query rows with no key kept, as (B, Lq)."""
    attend = pieces.get("scaled_dot_product_attention", oracle.scaled_dot_product_attention)

    def attention(q, k, v, keep_mask=None, **kwargs):  # type: ignore[no-untyped-def]
        keep = broadcast_keep(q, k, keep_mask)
        empty = None if keep is None else batch_rows(~keep.any(axis=-1))
        if empty is not None:
            rows.append(empty)
        return attend(q, k, v, keep_mask, **kwargs)

    return attention


def within(
    test: np.ndarray,
    gold: np.ndarray,
    tolerance: Comparison | None,
    ignore: np.ndarray | None = None,
) -> bool:
    """Does ``gold`` explain ``test`` as well as the rule asks, in the dtype and with the
    careful reference's error of the failed comparison (``tolerance``; None: float64)?"""
    if tolerance is None or tolerance.dtype == "float64":
        return compare(test, gold, ignore=ignore).passed
    return compare(
        test,
        gold,
        dtype=tolerance.dtype,
        careful_err=tolerance.careful_err,
        k=tolerance.k,
        ignore=ignore,
    ).passed


def distinguishable(
    gold: np.ndarray,
    spec: np.ndarray,
    tolerance: Comparison | None,
    unpromised: np.ndarray | None = None,
) -> bool:
    """Does an alternative's output differ from the spec's own output on the same input by
    more than the comparison's bound (NaN against a number counts as a difference), at the
    positions the spec promises (``unpromised``: True where it promises nothing)?"""
    if gold.shape != spec.shape:
        return True
    return not within(gold, spec, tolerance, unpromised)


def fits(
    test: np.ndarray,
    gold: np.ndarray,
    spec: np.ndarray,
    tolerance: Comparison | None,
    nan: str = "compare",
    unpromised: np.ndarray | None = None,
) -> bool:
    """Is ``gold`` (an alternative's output) evidence for ``test``: it reproduces ``test``
    within the bound, and the spec's own output ``spec`` is told apart from it? Both are
    judged where the failed comparison judged them: ``unpromised`` (True where the spec
    promises nothing, such as a causal subject's padded query rows, SPEC.md §11.7) is left
    out of both."""
    if unpromised is not None and np.shape(unpromised) != test.shape:
        unpromised = None
    if test.shape != gold.shape or not distinguishable(gold, spec, tolerance, unpromised):
        return False
    ignore = unpromised
    if nan == "ignore":
        ignore = np.isnan(gold) if ignore is None else ignore | np.isnan(gold)
    elif nan == "located":
        undefined = np.isnan(gold) if ignore is None else np.isnan(gold) & ~ignore
        # non-finite exactly where the alternative leaves a query without a key, where the
        # spec's output is finite
        if not undefined.any() or not np.array_equal(undefined, ~np.isfinite(test)):
            return False
        if spec.shape != gold.shape or not np.isfinite(spec[undefined]).all():
            return False
        ignore = undefined if ignore is None else ignore | undefined
    if nan == "ignore" and np.all(ignore):
        return False  # an alternative of NaN only is judged on no position: no evidence
    judged = np.ones(test.shape, bool) if ignore is None else ~ignore
    if not np.isfinite(test[judged]).any():
        # An output that is inf or NaN wherever it is judged tells one thing: something
        # overflowed or divided 0 by 0. Any alternative that empties or poisons a row which
        # the layers then spread everywhere "reproduces" it; none is told apart from another
        # by a single value, so none is evidence (the overflow is numerics.overflow's).
        return False
    return within(test, gold, tolerance, ignore)


def first_fit(
    alternatives: Iterable[Alternative],
    evaluate: Callable[[Alternative], np.ndarray],
    test: np.ndarray,
    spec: np.ndarray,
    tolerance: Comparison | None,
    unpromised: np.ndarray | None = None,
) -> Alternative | None:
    """The first alternative that ``fits`` (``evaluate`` computes one's output; positions
    ``unpromised`` left out); an alternative that cannot be computed for this call (a piece
    the call lacks, a norm the parameters do not have) explains nothing."""
    for alternative in alternatives:
        try:
            gold = evaluate(alternative)
        except (ValueError, KeyError, IndexError, np.exceptions.AxisError):
            continue
        if fits(test, gold, spec, tolerance, alternative.nan, unpromised):
            return alternative
    return None
