"""Masks by class (SPEC.md §4.1, §4.3): a keep-mask added to the scores as a float bias is
named ``mask.added_as_bias`` whatever its offset (+1, -1, or one solved for); a subject that
reads its own all-True mask inverted on a call without padding is named
``mask.polarity_inverted``; and a fit on a degenerate call (every key hidden, or masks that
hide whole rows only) is weak evidence that never outranks a fit on a call where queries see
keys."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from tck.adapters import load_adapter
from tck.conformance.diagnosis.explain import explain
from tck.conformance.diagnosis.hypotheses_masks import whole_rows_only
from tck.conformance.toolkit.harness import Harness
from tck.reference import oracle
from tck.reference.inputs import Shape
from tck.reference.variants import expected_under, oracle_variant
from tck.reports.causes import evidence, root_causes


def _harness(component: str, pieces: dict[str, Any], name: str | None = None) -> Harness:
    """The reference subject ``name`` (default: the first of ``component``) run through the
    oracle with ``pieces`` replaced."""
    loaded = load_adapter("reference")
    subject = next(
        s for s in loaded.subjects() if (s.name == name if name else s.component == component)
    )
    tck = Harness(loaded, subject, seed=0)
    variant = oracle_variant(pieces)
    tck.run = lambda inst, given: expected_under(  # type: ignore[method-assign]
        variant, component, given, inst.params, inst.config, inst.conventions
    )
    return tck


def _biased(offset: float):  # type: ignore[no-untyped-def]
    """Attention that adds ``offset * keep`` to the scores (written here, not imported)."""

    def sdpa(q, k, v, keep_mask=None, *, scale=None, fully_masked_rows="zero"):  # type: ignore[no-untyped-def]
        q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
        scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
        if keep_mask is not None:
            scores = scores + offset * np.broadcast_to(keep_mask, scores.shape)
        w = np.exp(scores - scores.max(-1, keepdims=True))
        return (w / w.sum(-1, keepdims=True)) @ v

    return sdpa


def _explained(tck: Harness, shape: Shape) -> tuple[str, str]:
    inst = tck.instance()
    inputs = tck.inputs(inst, shape)
    test = tck.run(inst, inputs)
    result = tck.compare(inst, test, tck.gold(inst, inputs))
    assert not result.passed
    return explain(tck, inst, inputs, test, result)


@pytest.mark.parametrize("offset", [1.0, -1.0, 3.5])
@pytest.mark.parametrize("component", ["mha", "encoder_layer"])
def test_a_mask_added_as_a_bias_is_named_with_its_offset(component: str, offset: float) -> None:
    tck = _harness(component, {"scaled_dot_product_attention": _biased(offset)})
    code, message = _explained(tck, Shape(batch=2, lq=6, lk=6, lengths=(6, 3)))
    assert code == "mask.added_as_bias", message
    assert f"{offset:.3g}"[:3] in message, message


def _inverted_padding(keep):  # type: ignore[no-untyped-def]
    return ~np.asarray(keep, bool)[:, None, None, :]


def test_an_own_mask_read_inverted_is_named_on_calls_without_padding() -> None:
    """A subject that builds an all-True keep-mask when none is given and reads it inverted:
    every key hidden. Named on an unpadded call, and noted as a degenerate fit."""

    def sdpa(q, k, v, keep_mask=None, *, scale=None, fully_masked_rows="zero"):  # type: ignore[no-untyped-def]
        hidden = np.zeros((np.shape(q)[-2], np.shape(k)[-2]), bool)
        return oracle.scaled_dot_product_attention(q, k, v, hidden, scale=scale)

    tck = _harness("causal_self_attention", {"scaled_dot_product_attention": sdpa})
    code, message = _explained(tck, Shape(batch=2, lq=4, lk=4, masked=False))
    assert code == "mask.polarity_inverted", message
    assert tck.record.metrics.get("degenerate_fit") == "mask.polarity_inverted"


def test_a_fit_where_queries_see_keys_is_not_degenerate() -> None:
    tck = _harness("mha", {"scaled_dot_product_attention": _biased(1.0)})
    _explained(tck, Shape(batch=2, lq=6, lk=6, lengths=(6, 3)))
    assert tck.record.metrics.get("degenerate_fit") == ""


def _keys_at_position_zero(x, params, *, positions=None, **kwargs):  # type: ignore[no-untyped-def]
    """§11.1 with the keys rotated at position 0 (not rotated): written here through the
    oracle's own ``key_positions``, not the hypothesis's rewrite of the attention."""
    kwargs["key_positions"] = np.zeros(np.shape(x)[:2], dtype=np.int64)
    return oracle.causal_self_attention(x, params, positions=positions, **kwargs)


def test_a_fit_by_an_alternative_with_its_own_attention_is_not_degenerate() -> None:
    """RoPE on the queries only is a hypothesis that rewrites the whole causal attention: the
    oracle's attention with every key hidden is never called under it, so its output cannot
    be compared with every key hidden (it was compared with itself and called degenerate)."""
    tck = _harness(
        "causal_self_attention",
        {"causal_self_attention": _keys_at_position_zero},
        name="causal_self_attention[rope]",
    )
    code, message = _explained(tck, Shape(batch=2, lq=6, lk=6, lengths=(6, 4)))
    assert code == "rope.applied_to_wrong_tensors", message
    assert tck.record.metrics.get("degenerate_fit") == ""


def test_masks_that_hide_whole_rows_only_are_degenerate() -> None:
    whole = np.array([[True, True, True], [False, False, False]])
    mixed = np.array([[True, True, False], [True, True, True]])
    assert whole_rows_only({"key_padding": whole})
    assert not whole_rows_only({"key_padding": mixed})
    assert not whole_rows_only({"x": np.zeros((2, 3, 4))})


def _r(subject: str, code: str, **metrics: Any) -> dict[str, Any]:
    return {
        "check": "equality.oracle",
        "subject": subject,
        "status": "fail",
        "diagnosis": {"code": code, "message": code},
        "metrics": {"dtype": "float64", "reproduced_by": code, **metrics},
    }


@pytest.mark.spec("0.3")
def test_a_degenerate_fit_never_outranks_a_fit_where_queries_see_keys() -> None:
    """A hidden diagonal fitted on a call of one token (every key hidden), on the smaller
    component and more rows, against an inverted mask reproduced on padded calls."""
    degenerate = [
        _r(
            "causal_self_attention",
            "mask.causal_diagonal_hidden",
            degenerate_fit="mask.causal_diagonal_hidden",
        )
        for _ in range(3)
    ]
    real = _r("decoder_block", "mask.polarity_inverted", degenerate_fit="")
    assert evidence(degenerate[0]) == 1 and evidence(real) == 3
    causes = root_causes([*degenerate, real])
    assert [c["code"] for c in causes] == ["mask.polarity_inverted", "mask.causal_diagonal_hidden"]


@pytest.mark.spec("0.3")
def test_a_degenerate_fit_is_ordered_as_a_property_finding() -> None:
    """A hidden diagonal fitted only where every key is hidden (one row) is no reproduction:
    against a property's finding of the same rank class on more rows, the row count
    decides, as between two property findings."""
    degenerate = _r(
        "causal_self_attention",
        "mask.causal_diagonal_hidden",
        degenerate_fit="mask.causal_diagonal_hidden",
    )
    found = [
        {
            "check": "decoder.batch_rows_of_different_lengths",
            "subject": subject,
            "status": "fail",
            "diagnosis": {"code": "batch.padded_rows_differ", "message": "a row differs"},
            "metrics": {"dtype": "float64"},
        }
        for subject in ("causal_self_attention", "decoder_block", "causal_lm")
    ]
    causes = root_causes([degenerate, *found])
    assert [c["code"] for c in causes] == [
        "batch.padded_rows_differ",
        "mask.causal_diagonal_hidden",
    ]
    assert causes[1]["reproduced"] is False


def _flat_causal(lq, lk, *, key_padding=None, attn_mask=None, causal=False, alignment="top_left"):  # type: ignore[no-untyped-def]
    """Written here: the causal test against key index b * lk + j (padded-flat layout)."""
    keep = None if key_padding is None else np.asarray(key_padding, bool)[:, None, None, :]
    if causal:
        rows = 1 if key_padding is None else np.shape(key_padding)[0]
        flat = np.arange(rows)[:, None] * lk + np.arange(lk)[None, :]
        seen = (flat[:, None, :] <= np.arange(lq)[None, :, None])[:, None]
        keep = seen if keep is None else keep & seen
    return keep


@pytest.mark.parametrize("component", ["encoder_layer", "encoder", "mha"])
def test_a_causal_mask_over_batch_flat_key_indices_is_named(component: str) -> None:
    tck = _harness(component, {"combine_keep_masks": _flat_causal})
    code, message = _explained(tck, Shape(batch=3, lq=5, lk=5, lengths=(5, 4, 5), causal=True))
    assert code == "mask.causal_batch_flat", message


def _batch_as_sequence(q, k, v, keep_mask=None, *, scale=None, fully_masked_rows="zero"):  # type: ignore[no-untyped-def]
    """A sequence-first attention given batch-first tensors (written here, not imported):
    each position's query attends over the batch's keys at that position."""
    q, k, v = (np.moveaxis(np.asarray(a, np.float64), 0, -2) for a in (q, k, v))
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    w = np.exp(scores - scores.max(-1, keepdims=True))
    return np.moveaxis((w / w.sum(-1, keepdims=True)) @ v, -2, 0)


@pytest.mark.parametrize("component", ["mha", "encoder_layer", "encoder"])
def test_the_batch_read_as_the_sequence_is_named(component: str) -> None:
    """batch_first dropped: attention over the batch axis, every per-token step unchanged."""
    tck = _harness(component, {"scaled_dot_product_attention": _batch_as_sequence})
    code, message = _explained(tck, Shape(batch=3, lq=5, lk=5, masked=False))
    assert code == "batch.rows_interact", message
    assert "batch_first" in message, message


def test_one_sequence_is_never_read_as_the_batch() -> None:
    """With one sequence each token would attend to itself alone, which other bugs produce
    too: the hypothesis does not run there."""
    from tck.conformance.diagnosis.hypotheses_mask_axes import _sdpa_batch_as_sequence

    q = np.ones((1, 2, 4, 8))
    with pytest.raises(ValueError):
        _sdpa_batch_as_sequence(q, q, q)
    with pytest.raises(ValueError):  # a batch-first mask is refused by such a module
        _sdpa_batch_as_sequence(*(np.ones((2, 2, 4, 8)),) * 3, np.eye(4, dtype=bool))


def _or_combined(lq, lk, *, key_padding=None, attn_mask=None, causal=False, alignment="top_left"):  # type: ignore[no-untyped-def]
    """Padding OR causal (written here, not imported)."""
    keep = np.asarray(key_padding, bool)[:, None, None, :]
    return keep | (np.arange(lk)[None, :] <= np.arange(lq)[:, None]) if causal else keep


@pytest.mark.parametrize("component", ["encoder_layer", "encoder", "mha"])
def test_masks_combined_with_or_are_named(component: str) -> None:
    tck = _harness(component, {"combine_keep_masks": _or_combined})
    code, message = _explained(tck, Shape(batch=2, lq=6, lk=6, lengths=(6, 4), causal=True))
    assert code == "mask.combined_with_or", message


def _causal_dropped(lq, lk, *, key_padding=None, **ignored):  # type: ignore[no-untyped-def]
    """The padding mask alone (written here, not imported)."""
    return None if key_padding is None else np.asarray(key_padding, bool)[:, None, None, :]


@pytest.mark.parametrize("component", ["encoder_layer", "mha"])
def test_a_causal_mask_dropped_is_not_read_as_masks_combined_with_or(component: str) -> None:
    """Padding OR causal keeps what padding alone keeps wherever the query is real: the
    simpler account, the causal mask dropped, is tried first."""
    tck = _harness(component, {"combine_keep_masks": _causal_dropped})
    code, message = _explained(tck, Shape(batch=2, lq=6, lk=6, lengths=(6, 4), causal=True))
    assert code == "mask.causal_leak", message


def _partial_rows_zeroed(q, k, v, keep_mask=None, **kwargs):  # type: ignore[no-untyped-def]
    """The spec's attention with every row that has some key hidden set to 0 (written here)."""
    out = oracle.scaled_dot_product_attention(q, k, v, keep_mask, **kwargs)
    if keep_mask is None:
        return out
    keep = np.broadcast_to(keep_mask, (*out.shape[:-1], np.shape(k)[-2]))
    return np.where(keep.all(axis=-1)[..., None], out, 0.0)


@pytest.mark.parametrize("component", ["mha", "encoder_layer", "causal_self_attention"])
def test_rows_with_some_key_hidden_zeroed_in_the_core_are_named(component: str) -> None:
    tck = _harness(component, {"scaled_dot_product_attention": _partial_rows_zeroed})
    inst = tck.instance()
    inputs = tck.inputs(inst, Shape(batch=2, lq=6, lk=6, lengths=(6, 4)))
    test = tck.run(inst, inputs)
    result = tck.compare(inst, test, tck.gold(inst, inputs), inputs=inputs)
    code, message = explain(tck, inst, inputs, test, result)
    assert code == "mask.partial_rows_zeroed", message
    assert "before the output projection" in message


def test_rows_with_some_key_hidden_zeroed_after_the_projection_are_named() -> None:
    """An mha module that zeroes its output rows where a key is hidden (a guard after the
    output projection, as code around nn.MultiheadAttention writes it)."""
    tck = _harness("mha", {})
    inst = tck.instance()
    inputs = tck.inputs(inst, Shape(batch=2, lq=5, lk=6, lengths=(6, 4)))
    keep = np.asarray(inputs["key_padding"])  # (B, Lk): a row with a pad hides it from all
    test = tck.gold(inst, inputs).copy()
    test[~keep.all(axis=-1)] = 0.0
    tck.run = lambda inst, given: test  # type: ignore[method-assign]
    result = tck.compare(inst, test, tck.gold(inst, inputs), inputs=inputs)
    code, message = explain(tck, inst, inputs, test, result)
    assert code == "mask.partial_rows_zeroed", message
    assert "after the attention's output projection" in message
