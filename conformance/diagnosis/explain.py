"""Diagnosis: when a check's output disagrees with the oracle, find the bug class that
explains it (``explain``), so that the failure names a cause, not just a number.

The hypotheses, first that fits wins: another value of one convention field
(``matching_values``), a parameter mix-up (``tck.conformance.diagnosis.decoding``), a mask inverted
or ignored, positions counted from another origin, the attention core and the ViT token
layout (``tck.conformance.diagnosis.hypotheses_layout``: a softmax over another axis, a mask
added to
the scores, a causal mask without its diagonal, the patch grid read in another order, the
position table added before the class token), a structural bug
(``tck.conformance.diagnosis.structural``), several convention fields at once
(``matching_combination``), the same at float32 precision for a float64 subject, state
carried between calls; an overflow last. Each hypothesis is an ``Alternative``
(``tck.conformance.diagnosis.alternatives``): the oracle under that change, passed to the comparison
(never patched into the oracle module), judged by the tolerance rule of the failed
comparison, and evidence only where it differs from the spec's own output on that input by
more than that rule's bound (``alternatives.fits``). The codes and words of the
conventions come from the catalogue (``tck.reference.catalogue``); every code is registered
in ``tck.reference.codes``. Named exceptions are ``tck.conformance.diagnosis.diagnosis``.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from tck.conformance.toolkit.harness import CAUSAL_SUBJECTS, Harness, Instance, _area
from tck.reference import Conventions, oracle, record
from tck.reference.catalogue import convention_code, plain_words
from tck.reference.codes import code as registered
from tck.reference.conventions import CHOICES
from tck.reference.expected import expected
from tck.reference.tolerance import (
    FLOOR,
    ISLAND_FLOOR,
    Comparison,
    compare,
    float64_floor,
    floor_of,
    k_forward,
    round_to,
)

from .alternatives import (
    Alternative,
    completed_params,
    distinguishable,
    first_fit,
    output_of,
    within,
)
from .decoding import param_hypotheses, prefill_inputs
from .position_measured import POSITION_TABLE, measure_position_table, patch_order_or_table

# Explanations that change several convention fields at once: at most this many
# fields, this many oracle evaluations per search, this many searches per check.
MAX_COMBINED_FIELDS = 3
COMBINATION_BUDGET = 400
COMBINATION_SEARCHES = 3

# Codes that a simpler one (the mask ignored) explains as well on a call where every key
# of the rows it fits is hidden (hypotheses_masks.degenerate).
SIMPLER_ON_HIDDEN_ROWS = ("mask.added_as_bias",)

# The dtypes whose comparison is tight enough for a fitting hypothesis to count as having
# reproduced the output (tck.reports.causes ranks such an explanation first).
REPRODUCING_DTYPES = ("float64", "float32")

_ALTERNATIVES: dict[str, tuple[Any, ...]] = {
    "eps": (1e-5, 1e-6, 1e-12, 1e-8, 1e-3, 0.0),
    "pe_base": (10000.0, 1000.0, 500000.0),
}


def combination_diagnosis(declared: Conventions, changed: Mapping[str, Any]) -> tuple[str, str]:
    """Code and message for an implementation that follows several undeclared conventions
    at once: the code is the first field's (in FIELDS order), the message names them all."""
    fields = list(changed)
    code = convention_code(fields[0], changed[fields[0]])
    shown = ", ".join(f"{f}={changed[f]!r}" for f in fields)
    words = "; ".join(plain_words(f, changed[f]) for f in fields)
    claimed = ", ".join(f"{f}={getattr(declared, f)!r}" for f in fields)
    return code, (
        f"behaves as {shown} together ({len(fields)} conventions at once: it {words}), but "
        f"the adapter declares {claimed}"
    )


def alternatives(field: str, declared: Any) -> list[Any]:
    """The values of a convention field to try besides the declared one."""
    if field == "sliding_window":  # §4.5: a window off by one either way, or none at all
        if declared is None:
            return []
        return [w for w in (declared + 1, declared - 1, None) if w is None or w >= 1]
    values = _ALTERNATIVES.get(field, CHOICES.get(field, ()))
    # 'undefined' is a promise not to promise: no output can show it.
    return [v for v in values if v != declared and v != "undefined"]


def gold_under(
    h: Harness, inst: Instance, inputs: Mapping[str, np.ndarray], conventions: Conventions
) -> np.ndarray:
    """The oracle under other ``conventions`` (a hypothesis). A norm those conventions
    have and the declared ones do not (a final LayerNorm after a post-LN stack) has no
    canonical parameters here: it gets what a fresh ``nn.LayerNorm`` holds, unit gain
    and zero bias (``alternatives.completed_params``)."""
    params = completed_params(h.component, inst.params, inst.config, conventions)
    return expected(h.component, inputs, params, inst.config, conventions)


def matching_values(
    h: Harness,
    inst: Instance,
    inputs: Mapping[str, np.ndarray],
    test: np.ndarray,
    field: str,
    tolerance: Comparison | None = None,
) -> list[Any]:
    """The values of convention ``field`` under which the oracle reproduces ``test``
    (within the bound of ``tolerance``, the failed comparison, when given)."""
    declared = getattr(inst.conventions, field)
    found = []
    for value in [declared, *alternatives(field, declared)]:
        try:
            conv = dataclasses.replace(inst.conventions, **{field: value})
            gold = gold_under(h, inst, inputs, conv)
        except (ValueError, KeyError):  # e.g. a final norm the params do not have
            continue
        if test.shape == gold.shape and _within(test, gold, tolerance):
            found.append(value)
    return found


def explain(
    h: Harness,
    inst: Instance,
    inputs: Mapping[str, np.ndarray],
    test: np.ndarray,
    result: Comparison,
) -> tuple[str, str]:
    """A diagnosis code and message for a mismatch with the oracle."""
    numbers = (
        f"max |test - oracle| = {result.max_abs_err:.3g} > bound {result.bound:.3g} "
        f"(ratio {result.ratio:.3g}) at index {result.worst_index}"
    )
    if result.nan_mismatch:
        numbers = (
            f"{result.nan_mismatch} position(s) are NaN in exactly one of the "
            f"implementation and the oracle (first at {result.worst_index})"
        )
    numbers += padded_positions(inputs, test, result, causal=h.component in CAUSAL_SUBJECTS)
    found = _hypotheses(h, inst, inputs, test, result)
    exact = found is not None  # reproduced at the failed comparison's own precision
    if found is None and inst.dtype == "float64" and floor_of("float64") == FLOOR["float64"]:
        # A float64 subject that computes or stores some step in float32 (a table built
        # in float64 and kept in a float32 buffer, a float32 constant, an exported graph:
        # see tck.adapters.onnx_runtime). The plain oracle first: where the spec itself
        # fits at float32's precision, no other hypothesis can be told apart from it on
        # this input, and none is tried. Only then the same hypotheses at that precision.
        # (Under a float32-island bound, SPEC.md §10.12, the comparison already allowed
        # float32 rounding: no retry.)
        # Float32's precision inside a float64 build is the island bound of SPEC.md §10.12
        # (float32 rounding of a few steps), not the floor of a whole float32 computation.
        hint = _precision_hint(h, inst)
        with float64_floor(ISLAND_FLOOR):
            if _within(test, h.gold(inst, inputs), result):
                found = (
                    "numerics.float64_precision_lost",
                    "agrees with the oracle to float32 precision only: a value is computed "
                    "or stored in float32 somewhere in a subject built in float64 (a buffer, "
                    "a table or a constant kept at the lower precision)",
                )
            else:
                found = _hypotheses(h, inst, inputs, test, result)
        if found is not None and hint is not None:
            found = (found[0], f"{found[1]} ({hint})")
    if found is not None:  # on a whole ViT the table read transposed is the same output
        found = patch_order_or_table(h, found)
    if found is not None and result.dtype in REPRODUCING_DTYPES:
        # An explanation that reproduces the output (the root-cause ranking prefers it to a
        # property's finding, and one at the comparison's own precision to one at float32's:
        # tck.reports.causes).
        h.note({"reproduced_by": found[0], "reproduced_at": result.dtype if exact else "float32"})
    elif found is not None:
        # A 16-bit comparison's bound is loose enough for a wrong hypothesis to fit too: weak
        # evidence, ranked after every failure with float64 or float32 evidence.
        h.note({"fit_only_in": result.dtype})
    if found is None:  # it loads the parameters again, with the position table zeroed
        found = measure_position_table(h, inst, inputs, test, result)
    if found is None:  # last: it builds and runs a fresh instance
        found = _state_hypothesis(h, inst, inputs, result)
    gold = h.gold(inst, inputs) if found is None else None
    if gold is not None and gold.shape == test.shape:
        blown = ~np.isfinite(test) & np.isfinite(gold)
        if blown.any():
            found = (
                "numerics.overflow",
                f"the output is inf or NaN at {int(blown.sum())} position(s) where the "
                f"oracle is finite, in {inst.dtype}: an intermediate overflows the dtype's "
                "range or divides 0 by 0 (exp of a score without subtracting the row "
                "maximum, a sum of squares, a normalisation by zero)",
            )
    if found is not None:
        return found[0], f"{found[1]}; {numbers}"
    return registered(
        f"{_area(h.component)}.oracle_mismatch"
    ), f"disagrees with the oracle: {numbers}"


def explain_steps(
    h: Harness,
    inst: Instance,
    inputs: Mapping[str, np.ndarray],
    full: np.ndarray,
    stepped: np.ndarray,
    prefill: int,
    decoded: np.ndarray,
) -> tuple[str, str] | None:
    """(code, message) of a hypothesis that reproduces the output of incremental decoding
    ``stepped`` where the full forward ``full`` agrees with the spec: a bug on the cached
    path alone (a final norm the step path skips, heads merged wrongly in the step's own
    attention). The forward's own hypotheses, tried on the steps' output at the ``decoded``
    positions (those of the calls after the prefill, SPEC.md §11.6), then on the prefill
    call alone, a forward through the step path on an empty cache, against the oracle on
    its ``prefill`` tokens. None below float64, where the bound needs a careful run, when
    the forward disagrees too (its own check names that), or when none fits. Recorded as a
    reproduction (``reproduced_by``)."""
    if inst.dtype != "float64" or inst.params is None:
        return None
    gold = h.gold(inst, inputs)
    if not stepped.shape == full.shape == decoded.shape == gold.shape:
        return None
    ignore = h.ignore_mask(inst, gold, inputs)
    k = k_forward(h.component)
    if not compare(full, gold, k=k, ignore=ignore).passed:
        return None
    unjudged = ~decoded if ignore is None else ignore | ~decoded
    result = compare(stepped, gold, k=k, ignore=unjudged)
    found = None if result.passed else _hypotheses(h, inst, inputs, stepped, result, ~decoded)
    where = "on the cached path alone (the full forward agrees with the spec)"
    if found is None and prefill > 1:
        first = prefill_inputs(h.component, inputs, prefill)
        test = stepped[:, :prefill]
        first_gold = h.gold(inst, first)
        result = compare(test, first_gold, k=k, ignore=h.ignore_mask(inst, first_gold, first))
        found = None if result.passed else _hypotheses(h, inst, first, test, result)
        where = (
            f"in the prefill call of {prefill} tokens, made through the step path on an empty "
            "cache (the full forward agrees with the spec)"
        )
    if found is None:
        return None
    h.note({"reproduced_by": found[0], "reproduced_at": "float64"})
    return found[0], f"{where}: {found[1]}"


def explain_shape(
    h: Harness, inst: Instance, inputs: Mapping[str, np.ndarray], test: np.ndarray
) -> tuple[str, str] | None:
    """(code, message) of a hypothesis whose output has the shape of ``test`` where the
    spec's has another, and reproduces it at float64's bound (``alternatives.fits``); None,
    and None in a lower dtype (whose bound needs a careful run of the spec's shape). An
    output of the wrong shape is otherwise a finding about the shape alone."""
    from .structural import batch_as_sequence_hypotheses

    if inst.dtype != "float64" or inst.params is None:
        return None
    try:
        spec = h.gold(inst, inputs)
    except (ValueError, KeyError):
        return None

    def evaluate(alternative: Alternative) -> np.ndarray:
        return output_of(
            h.component, inputs, inst.params, inst.config, inst.conventions, alternative
        )

    found = first_fit(batch_as_sequence_hypotheses(h.component), evaluate, test, spec, None)
    if found is None:
        return None
    h.note({"reproduced_by": found.code, "reproduced_at": inst.dtype})
    return found.code, found.message


def padded_positions(
    inputs: Mapping[str, np.ndarray], test: np.ndarray, result: Comparison, *, causal: bool
) -> str:
    """Where the failure lies with respect to padding (``key_padding``, True at real tokens,
    on a (B, L, ...) output): whether the worst index is a padded position, and how many
    non-finite positions are padded and how many real. Empty when the call has no padding
    or the output is not laid out by (batch, position). ``causal``: a decoder-only subject,
    whose padded query rows the spec does not promise (§11.7); elsewhere they are promised
    by the formula or the declared ``padded_query_rows`` (§4.2)."""
    keep = inputs.get("key_padding")
    if keep is None or test.ndim < 2:
        return ""
    keep = np.asarray(keep, dtype=bool)
    if keep.ndim != 2 or tuple(test.shape[:2]) != keep.shape or keep.all():
        return ""
    parts = []
    index = result.worst_index
    if index is not None and len(index) >= 2 and not keep[index[0], index[1]]:
        where = f"index {tuple(int(i) for i in index)} is a padded position (key_padding False)"
        parts.append(
            f"{where}: the spec promises nothing about a padded query's output in a causal "
            "subject (SPEC.md §11.7), so look at the real positions first"
            if causal
            else f"{where}: a padded query still attends to the real keys by the formula, "
            "unless the subject declares padded_query_rows='zero' (SPEC.md §4.2)"
        )
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(test).reshape(*keep.shape, -1).all(axis=-1)
    if bad.any():
        parts.append(
            f"non-finite at {int((bad & ~keep).sum())} padded and {int((bad & keep).sum())} "
            "real position(s)"
        )
    return "".join(f"; {part}" for part in parts)


def _convention_alternatives(component: str, declared: Conventions) -> Iterable[Alternative]:
    """Every other value of every convention field the component has (its record's
    ``fields``, each with the catalogue's alternatives)."""
    from .hypotheses_fitted import base_alternative  # a base, or the exponent stepped wrong

    for field in record(component).fields:
        for value in alternatives(field, getattr(declared, field)):
            if field == "pe_base":
                yield base_alternative(field, getattr(declared, field), value, solved=False)
                continue
            yield Alternative(
                convention_code(field, value),
                f"behaves as {field}={value!r}, but the adapter declares "
                f"{field}={getattr(declared, field)!r}",
                conventions={field: value},
            )


def float64_hypothesis(
    h: Harness,
    inst: Instance,
    inputs: Mapping[str, np.ndarray],
    test: np.ndarray,
    result: Comparison,
) -> str | None:
    """The code of the first hypothesis that reproduces ``test`` within ``result``'s bound
    (a comparison at float64's own floor), or None: what the float32-island measurement
    asks before it calls a small float64 error float32 rounding (``islands.measure``)."""
    found = _hypotheses(h, inst, inputs, test, result)
    return None if found is None else found[0]


def _hypotheses(
    h: Harness,
    inst: Instance,
    inputs: Mapping[str, np.ndarray],
    test: np.ndarray,
    tolerance: Comparison,
    unjudged: np.ndarray | None = None,
) -> tuple[str, str] | None:
    """The first hypothesis that explains ``test`` within ``tolerance`` while differing from
    the spec's own output by more than that bound (``alternatives.fits``); positions True in
    ``unjudged`` are left out as the unpromised ones are."""
    from .hypotheses_cross import cross_attention_hypotheses
    from .hypotheses_fitted import (  # position tables, FFN activations, ViT tokens
        activation_family_hypotheses,
        activation_place_hypotheses,
        class_token_hypotheses,
        embedding_scale_stream_hypotheses,
        fixed_activation_hypotheses,
        grouped_qkv_hypotheses,
        once_per_subject,
        patch_kernel_hypotheses,
        pe_function_hypotheses,
        positional_base_hypotheses,
        sibling_leaf_hypotheses,
    )
    from .hypotheses_folded import folded_hypotheses  # heads folded into the batch
    from .hypotheses_layout import (  # softmax axis, patch grid, inputs read
        input_swap_hypotheses,
        layout_hypotheses,
    )
    from .hypotheses_mask_axes import mask_axes_hypotheses
    from .hypotheses_masks import (  # a mask added as a bias, degenerate fits
        batch_flat_causal_hypotheses,
        combined_inverted_hypotheses,
        combined_with_or_hypotheses,
        default_mask_inverted,
        degenerate,
        finite_fill_inverted_hypotheses,
        mask_bias_hypotheses,
        mask_fill_hypotheses,
        note_degenerate,
        partial_rows_zeroed_hypotheses,
        solved_mask_bias,
        tile_mask_hypotheses,
        whole_rows_only,
    )
    from .hypotheses_more import (  # heads, bias, residual
        branch_scale_hypotheses,
        heads_time_major_hypotheses,
        kv_tiling_hypotheses,
        more_hypotheses,
        sublayer_calls,
    )
    from .hypotheses_online import online_softmax_hypotheses  # tiles combined wrongly
    from .hypotheses_solved import (
        layer_scale_hypotheses,
        learned_table_dtype_hypotheses,
        logits_scale_hypotheses,
        norm_axes_hypotheses,
        query_bias_unscaled_hypotheses,
        rope_direction_hypotheses,
        rope_factor_by_index_hypotheses,
        rope_one_side_turned_back_hypotheses,
        rope_sign_lost_hypotheses,
        rope_target_hypotheses,
        rope_tensors_mixed_hypotheses,
        scale_after_softmax_hypotheses,
        searches_left,
        softmax_epsilon_hypotheses,
        solved_hypotheses,
        table_dtype_hypotheses,
    )
    from .hypotheses_strided import (  # heads as (d, H), another head count
        head_count_hypotheses,
        strided_head_hypotheses,
    )
    from .rope_measured import (
        fitted_frequency_hypotheses,
        flat_index_hypotheses,
        partial_rotary_hypotheses,
        table_layout_hypotheses,
    )
    from .structural import (
        batch_as_sequence_hypotheses,
        extra_norm_hypotheses,
        image_layout_hypotheses,
        patch_axes_hypotheses,
        patch_order_hypotheses,
        pooling_hypotheses,
    )

    component = h.component

    def once(family: str, candidates: Iterable[Alternative]) -> Iterable[Alternative]:
        # a costly family that failed once on this subject is not retried (hypotheses_fitted)
        return once_per_subject(h.subject, inst.dtype, family, iter(candidates))

    try:
        spec = h.gold(inst, inputs)
    except (ValueError, KeyError):
        return None

    def evaluate(alternative: Alternative) -> np.ndarray:
        return output_of(component, inputs, inst.params, inst.config, inst.conventions, alternative)

    def params_alternatives() -> Iterable[Alternative]:
        for code, message, params in param_hypotheses(component, inst.config, inst.params):
            yield Alternative(code, message, params=params, nan="ignore")

    # The positions the failed comparison left out (a causal subject's padded query rows,
    # SPEC.md §11.7) are left out of every hypothesis's judgement too.
    unpromised = h.ignore_mask(inst, spec, inputs)
    if unjudged is not None:
        unpromised = unjudged if unpromised is None else unpromised | unjudged

    # A parameter the subject uses wrongly shows on every call: a parameter hypothesis found
    # on a padded call must hold on the same call without its padding mask too, where the
    # subject may agree with the spec (a padding mask read inverted with a finite fill
    # empties every real row to a uniform average, as queries of zeros would).
    plain = unpadded(h, inputs)

    def first(candidates: Iterable[Alternative]) -> Alternative | None:
        remaining = iter(candidates)
        found = first_fit(remaining, evaluate, test, spec, tolerance, unpromised)
        while (
            found is not None
            and found.params is not None
            and plain is not None
            and not holds_on_second_call(h, inst, inputs, found, tolerance, plain)
        ):
            found = first_fit(remaining, evaluate, test, spec, tolerance, unpromised)
        if found is not None:  # every key hidden on this call: weak evidence (hypotheses_masks)
            hidden = degenerate(component, found, evaluate(found), evaluate, tolerance, unpromised)
            hidden = hidden or (found.code.startswith("mask.") and whole_rows_only(inputs))
            if hidden and found.code in SIMPLER_ON_HIDDEN_ROWS:
                # on rows whose every key is hidden a bias constant over the row cancels in
                # softmax: the mask ignored fits as well, and is the simpler account
                simpler = [
                    a for a in _mask_hypotheses(component, inputs) if a.code == "mask.ignored"
                ]
                found = first_fit(simpler, evaluate, test, spec, tolerance, unpromised) or found
            note_degenerate(h.note, found.code if hidden else "")
        return found

    found = first(
        itertools.chain(
            _table_not_added(inst.params),
            _convention_alternatives(component, inst.conventions),
            params_alternatives(),
            mask_bias_hypotheses(component, inputs),  # before mask.ignored, its c = 0
            _mask_hypotheses(component, inputs),
            finite_fill_inverted_hypotheses(component, inputs),
            combined_inverted_hypotheses(component),
            batch_flat_causal_hypotheses(component),
            combined_with_or_hypotheses(component),
            partial_rows_zeroed_hypotheses(component),
            tile_mask_hypotheses(component),
            _offset_hypotheses(component, inputs),
            _table_offset_hypotheses(component, inputs, inst.params),
            layout_hypotheses(component),
            mask_axes_hypotheses(component),  # causal mask inverted, weights transposed
            cross_attention_hypotheses(component),  # cross-attention's mask and memory
            input_swap_hypotheses(component, inputs),
            extra_norm_hypotheses(component),
            patch_order_hypotheses(component),
            pooling_hypotheses(component),
            batch_as_sequence_hypotheses(component),
            # after the causal diagonal: on a call of one token both hide every key
            default_mask_inverted(component, inputs),
            # last of the masks: where the masked scores are already 0 (a hand fixture) a
            # fill of 0 gives what the mask ignored or the causal part dropped give
            mask_fill_hypotheses(component),
        )
    )
    if found is not None:
        return found.code, found.message
    combination = matching_combination(h, inst, inputs, test, tolerance=tolerance)
    if combination:
        h.note({"explained_by": combination})
        return combination_diagnosis(inst.conventions, combination)
    sublayers = len(sublayer_calls(evaluate))
    owners = getattr(inst.handle, "owners", None)  # which parameters are slices of one tensor
    found = first(
        more_hypotheses(
            component,
            inst.params,
            sublayers,
            inst.config,
            inst.conventions,
            owners() if callable(owners) else None,
        )
    )
    if found is None:
        found = first(
            itertools.chain(
                folded_hypotheses(component),
                strided_head_hypotheses(component),
                head_count_hypotheses(component, inst.config.kv_heads != inst.config.n_heads),
                heads_time_major_hypotheses(component),
                rope_target_hypotheses(component, inst.conventions),
                rope_direction_hypotheses(component),
                rope_sign_lost_hypotheses(component),
                rope_factor_by_index_hypotheses(component),
                rope_one_side_turned_back_hypotheses(component, inst.conventions),
                rope_tensors_mixed_hypotheses(component, inst.conventions),
                flat_index_hypotheses(component),
                partial_rotary_hypotheses(component),
                norm_axes_hypotheses(component),
                pe_function_hypotheses(component),
                embedding_scale_stream_hypotheses(component, inst.conventions),
                activation_place_hypotheses(component),
                fixed_activation_hypotheses(component),
                patch_kernel_hypotheses(inst.params),
                image_layout_hypotheses(component),
                class_token_hypotheses(component, inst.conventions),
                grouped_qkv_hypotheses(inst.config, inst.params),
                kv_tiling_hypotheses(component),
                layer_scale_hypotheses(inst.params),
                query_bias_unscaled_hypotheses(inst.config, inst.params),
                scale_after_softmax_hypotheses(component),
            )
        )
    if found is None:
        found = first(
            itertools.chain(
                table_dtype_hypotheses(component, tolerance.dtype),
                learned_table_dtype_hypotheses(inst.params, tolerance.dtype),
                table_layout_hypotheses(component, inst.conventions),
            )
        )
    if found is None and tolerance.dtype == "float64":
        # a kernel's tiles combined wrongly: many candidates, some of them close to the spec
        # on a call whose scores are far apart (an outlier stress), so judged in float64 alone,
        # where every such kernel shows
        found = first(once("online_softmax", online_softmax_hypotheses(component)))
    if found is None and searches_left(h):
        # A value solved for on this call fits it by construction: it is evidence only if it
        # also reproduces the subject's output on a second, independent call.
        for candidate in itertools.chain(
            # one leaf from a sibling module: many candidates, so budgeted like a search
            once("sibling_leaf", sibling_leaf_hypotheses(inst.params)),
            solved_hypotheses(
                component, inst.config, inst.conventions, evaluate, test, tolerance.dtype
            ),
            logits_scale_hypotheses(component, inst.config, evaluate, test),
            once("softmax_epsilon", softmax_epsilon_hypotheses(component, evaluate, test)),
            solved_mask_bias(component, inputs, evaluate, test),
            fitted_frequency_hypotheses(component, inst.conventions, evaluate, test, unpromised),
            once(
                "positional_base",
                positional_base_hypotheses(
                    component, inst.config, inst.conventions, evaluate, test, tolerance.dtype
                ),
            ),
            once("activation", activation_family_hypotheses(component, evaluate, test)),
            once("branch_scale", branch_scale_hypotheses(component, evaluate, test)),
            once("patch_axes", patch_axes_hypotheses(component)),
        ):
            if first([candidate]) is not None and holds_on_second_call(
                h, inst, inputs, candidate, tolerance
            ):
                found = candidate
                break
    return None if found is None else (found.code, found.message)


# The seed offset of the second call's draw (any fixed offset gives an independent draw).
SECOND_DRAW = 7919


def second_inputs(
    h: Harness, inst: Instance, inputs: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray] | None:
    """Inputs for a second, independent call of the subject: another draw of the same shape
    (``h.inputs`` with another seed) where the harness made ``inputs``; otherwise every float
    input redrawn from a normal of the same shape, mean and spread (masks, ids and positions
    kept). None when nothing can be redrawn."""
    recipe = h.recipe(inputs)
    if recipe is not None:
        shape, seed = recipe
        return dict(h.inputs(inst, shape, seed=seed + SECOND_DRAW))
    rng = np.random.default_rng(SECOND_DRAW)
    redrawn = dict(inputs)
    changed = False
    for name, value in inputs.items():
        array = np.asarray(value)
        if array.ndim == 0 or not np.issubdtype(array.dtype, np.floating):
            continue
        finite = array[np.isfinite(array)]
        if finite.size < 2:
            continue
        draw = rng.standard_normal(array.shape) * float(finite.std()) + float(finite.mean())
        redrawn[name] = round_to(draw, inst.dtype)
        changed = True
    return redrawn if changed else None


def unpadded(h: Harness, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    """``inputs`` without their key-padding mask, where the subject takes it as an optional
    input (None where they have none, or it cannot be left out)."""
    padding = {i.name for i in record(h.component).inputs if "padding" in i.kind and i.optional}
    if not padding & set(inputs):
        return None
    return {k: v for k, v in inputs.items() if k not in padding}


def holds_on_second_call(
    h: Harness,
    inst: Instance,
    inputs: Mapping[str, np.ndarray],
    alternative: Alternative,
    tolerance: Comparison,
    second: Mapping[str, np.ndarray] | None = None,
) -> bool:
    """Does ``alternative`` (a value solved for on the failing call) reproduce the subject's
    output on a second, independent call within the failed comparison's bound (``second``,
    or another draw of ``inputs``)? A value fitted to one output may absorb another bug
    there (a scale fitted to a RoPE rotated the wrong way); the true value fits every input.
    Where no second call can be made (the inputs cannot be redrawn, the subject refuses
    them), the fit stands on the first call alone."""
    second = second_inputs(h, inst, inputs) if second is None else second
    if second is None:
        return True
    try:
        again = h.run(inst, second)
    except Exception:  # a second call the subject refuses tests nothing
        return True
    try:
        gold = output_of(
            h.component, second, inst.params, inst.config, inst.conventions, alternative
        )
    except (ValueError, KeyError, IndexError):
        return False
    if again.shape != gold.shape:
        return False
    ignore = h.ignore_mask(inst, gold, second)
    if alternative.nan == "ignore":
        ignore = np.isnan(gold) if ignore is None else ignore | np.isnan(gold)
    return within(again, gold, tolerance, ignore)


def matching_combination(
    h: Harness,
    inst: Instance,
    inputs: Mapping[str, np.ndarray],
    test: np.ndarray,
    fields: Iterable[str] | None = None,
    tolerance: Comparison | None = None,
    max_fields: int = MAX_COMBINED_FIELDS,
) -> dict[str, Any] | None:
    """The smallest set of convention values (2 to ``max_fields`` fields changed at
    once) under which the oracle reproduces ``test``; None when none does.

    A field none of whose alternatives changes the oracle's output on these inputs is
    left out (it cannot be told apart here); a field that is live keeps every value, the
    ones that change nothing alone included: a field can depend on another (§7.3's
    ``final_norm='always'`` equals the declared ``'pre_only'`` on a pre-LN stack, and is
    what keeps the final norm of a stack whose layers went post-LN). The search stops after
    ``COMBINATION_BUDGET`` oracle evaluations, the first ``COMBINATION_SEARCHES`` times
    per check (hypothesis may explain many failing examples)."""
    if h.combination_searches >= COMBINATION_SEARCHES:
        return None
    h.combination_searches += 1
    declared = inst.conventions
    names = tuple(record(h.component).fields if fields is None else fields)
    try:
        base = h.gold(inst, inputs)
    except (ValueError, KeyError):
        return None
    options: dict[str, list[Any]] = {}
    for field in names:
        values, live = [], False
        for value in alternatives(field, getattr(declared, field)):
            try:
                gold = gold_under(h, inst, inputs, dataclasses.replace(declared, **{field: value}))
            except (ValueError, KeyError):
                continue
            if gold.shape == base.shape:
                values.append(value)
                live = live or not np.array_equal(gold, base, equal_nan=True)
        if live:
            options[field] = values
    budget = COMBINATION_BUDGET
    for size in range(2, max_fields + 1):
        for combo in itertools.combinations(options, size):
            for values in itertools.product(*(options[f] for f in combo)):
                budget -= 1
                if budget < 0:
                    return None
                changed = dict(zip(combo, values, strict=True))
                try:
                    gold = gold_under(h, inst, inputs, dataclasses.replace(declared, **changed))
                except (ValueError, KeyError):
                    continue
                if (
                    gold.shape == test.shape
                    and _within(test, gold, tolerance)
                    and distinguishable(gold, base, tolerance)
                ):
                    return changed
    return None


def _state_hypothesis(
    h: Harness, inst: Instance, inputs: Mapping[str, np.ndarray], tolerance: Comparison
) -> tuple[str, str] | None:
    """An instance called before that fails where a fresh one (same config, seed and
    parameters) passes carries state from one call to the next."""
    calls = h.runs.get(id(inst), 0)
    if calls < 2:
        return None
    try:
        fresh = h.instance(inst.config, seed=inst.seed, dtype=inst.dtype)
        if (fresh.params is None) != (inst.params is None):
            return None
        again = h.run(fresh, inputs)
        gold = h.gold(fresh, inputs)
    except Exception:  # a hypothesis that cannot be tested explains nothing
        return None
    ignore = h.ignore_mask(fresh, gold)
    if again.shape != gold.shape or not _within(again, gold, tolerance, ignore):
        return None
    return (
        "state.leaks_between_calls",
        f"a fresh instance gives the right output for these inputs, the instance that had "
        f"already been called {calls - 1} time(s) does not: the subject carries state from "
        "one call to the next (a mask, table or cache kept from an earlier call and reused "
        "for inputs of the same shape, a buffer updated in forward)",
    )


def _precision_hint(h: Harness, inst: Instance) -> str | None:
    """The adapter's account of float64 precision it may lose (``precision_hint``)."""
    hint = getattr(h.adapter, "precision_hint", None)
    return hint(inst.handle) if callable(hint) else None


def _mask_hypotheses(component: str, inputs: Mapping[str, np.ndarray]) -> Iterable[Alternative]:
    masks = [
        k for k in ("keep_mask", "key_padding", "attn_mask", "memory_key_padding") if k in inputs
    ]
    if masks:
        inverted = Alternative(
            "mask.polarity_inverted",
            "the output is what the spec gives with every keep-mask inverted: the "
            "implementation attends to the padded keys and ignores the real ones",
            inputs={**inputs, **{k: ~np.asarray(inputs[k]) for k in masks}},
            nan="ignore",
        )
        yield inverted
        # the rows the inversion leaves without a key, whatever the subject outputs there
        yield dataclasses.replace(inverted, keyless_nan=True)
        yield Alternative(
            "mask.ignored",
            "the output is what the spec gives with no mask at all: the mask has no "
            "effect (a float/bool mask mix-up, or a mask that never reaches softmax)",
            inputs={k: v for k, v in inputs.items() if k not in masks},
            nan="ignore",
        )
    if "key_padding" in inputs:
        # key_padding[:, None, :, None] for key_padding[:, None, None, :]: the padded query
        # rows have no key left, the real ones still read the padded keys (self-attention:
        # queries and keys are the same positions). Every name the oracle calls it by. The
        # padded rows follow the declared §4.4 policy, or, in a causal subject (an additive
        # padding fill plus an additive causal fill), average the keys the causal mask left.
        for causal_uniform in (False, True) if component in CAUSAL_SUBJECTS else (False,):
            yield Alternative(
                "mask.applied_to_queries",
                "the output is the spec's with the key-padding mask broadcast over the query "
                "axis instead of the key axis (mask[:, None, :, None] for "
                "mask[:, None, None, :]): the padded queries are hidden from every key, and "
                "the real queries still attend the padded keys (SPEC.md §4.2)",
                pieces=padding_over_queries(causal_uniform),
                nan="ignore",
            )


# The oracle's names for §4.2's key-padding mask (aliases of one function).
PADDING_PIECES = ("key_padding", "key_padding_mask", "_expand_key_padding")


def _padding_on_queries(keep: Any) -> np.ndarray:
    """A (B, L) key-padding keep-mask laid over the queries: (B, 1, L, 1)."""
    keep = np.asarray(keep)
    if keep.ndim != 2 or keep.dtype != np.bool_:
        raise ValueError(f"a key-padding keep-mask is boolean (B, L), got {keep.shape}")
    return keep[:, None, :, None]


def padding_over_queries(causal_uniform: bool = False) -> dict[str, Any]:
    """The oracle pieces that lay §4.2's key-padding mask over the queries, under every
    name the oracle calls it by: the ``pieces`` of an alternative or an ``oracle_variant``.
    ``causal_uniform``: the rows left without a key average the values of the keys a
    causal mask aligned bottom-right leaves them, instead of following §4.4's policy."""
    pieces: dict[str, Any] = dict.fromkeys(PADDING_PIECES, _padding_on_queries)
    if causal_uniform:
        pieces["scaled_dot_product_attention"] = _empty_rows_causal_uniform
    return pieces


def _empty_rows_causal_uniform(q, k, v, keep_mask=None, *, scale=None, fully_masked_rows="zero"):  # type: ignore[no-untyped-def]
    """§3.1 whose rows with no key (§4.4) average the values of the keys a causal mask
    leaves them: what a finite padding fill (``finfo.min``) added to a finite causal fill
    gives, the causal part overflowing to -inf and the rest equal (transformers' older
    ``_expand_mask(...) + _make_causal_mask(...)``)."""
    out = oracle.scaled_dot_product_attention(
        q, k, v, keep_mask, scale=scale, fully_masked_rows="zero"
    )
    if keep_mask is None:
        return out
    lq, lk = np.shape(q)[-2], np.shape(k)[-2]
    empty = ~np.broadcast_to(keep_mask, (*np.shape(out)[:-1], lk)).any(axis=-1)
    causal = oracle.causal_keep_mask(lq, lk, alignment="bottom_right").astype(np.float64)
    mean = (causal / causal.sum(axis=-1, keepdims=True)) @ np.asarray(v)
    return np.where(empty[..., None], mean, out)


def _table_not_added(params: Mapping[str, np.ndarray] | None) -> Iterable[Alternative]:
    """The learned position table loaded and never added (``x = wte[ids]`` for
    ``wte[ids] + wpe[positions]``): the oracle with the table zeroed. Tried before the
    convention fields: on a call of one token, RoPE (a rotation by 0) without the table is
    the same output, and the smaller change is the one to name."""
    tables = [k for k in params or {} if POSITION_TABLE.search(k)]
    if not tables or params is None or not any(np.any(params[k]) for k in tables):
        return
    yield Alternative(
        "positional.positions_ignored",
        "the output is the spec's with the learned position table never added (the tokens "
        "carry no position at all: x = wte[ids] for wte[ids] + wpe[positions]); the table "
        "is loaded and unused (SPEC.md §2.2)",
        params={**params, **{k: np.zeros_like(params[k]) for k in tables}},
    )


POSITION_OFFSETS = (1, 2, -1)


def _offset_hypotheses(component: str, inputs: Mapping[str, np.ndarray]) -> Iterable[Alternative]:
    """Positions counted from another origin: the encoding at p is the spec's at p + offset
    (fairseq counts positions from padding_idx + 1; a cache index off by one)."""
    if not record(component).has("positional") or "positions" not in inputs:
        return
    positions = np.asarray(inputs["positions"])
    area = record(component).area  # "positional" (§2.1) or "rope" (§2.3)
    counted = np.arange(positions.size)
    if positions.ndim == 1 and not np.array_equal(positions, counted):
        yield Alternative(
            registered(f"{area}.positions_ignored"),
            "the encoding ignores the positions it is given and uses 0, 1, ..., L-1 (its index "
            "in the sequence) instead: position ids passed in never reach it",
            inputs={**inputs, "positions": counted},
        )
    for offset in POSITION_OFFSETS:
        if positions.size and int(positions.min()) + offset < 0:
            continue
        yield Alternative(
            registered(f"{area}.position_offset"),
            f"the encoding at position p is the spec's at position p {offset:+d}: positions are "
            f"counted from {offset} instead of 0 (a position index offset, such as fairseq's "
            "positions that start at padding_idx + 1, or a cache read one step off)",
            inputs={**inputs, "positions": positions + offset},
        )


def _table_offset_hypotheses(
    component: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any] | None
) -> Iterable[Alternative]:
    """A learned position table read at p + offset inside a component that holds the table
    and numbers its tokens (a causal LM: ``wpe[positions + 1]``), whether or not the call
    gives position ids (without them the spec's are 0 .. L-1), or read at the token ids.
    Components whose record has a positional encoding of their own get
    ``_offset_hypotheses``."""
    if record(component).has("positional") or not any(
        POSITION_TABLE.search(k) for k in params or {}
    ):
        return
    tokens = next(iter(inputs.values()), None)
    if tokens is None or np.ndim(tokens) < 2:
        return
    b, length = np.shape(tokens)[:2]
    given = inputs.get("positions")
    positions = (
        np.broadcast_to(np.arange(length), (b, length)) if given is None else np.asarray(given)
    )
    if np.issubdtype(np.asarray(tokens).dtype, np.integer):
        # the table indexed by the token ids (``wpe(input_ids)`` for ``wpe(position_ids)``)
        yield Alternative(
            "positional.positions_ignored",
            "the output is the spec's with the learned position table indexed by the token "
            "ids instead of the positions (wpe(input_ids) for wpe(position_ids)): the "
            "positions never reach it (SPEC.md §2.5)",
            inputs={**inputs, "positions": np.asarray(tokens)},
        )
    for offset in POSITION_OFFSETS:
        if positions.size and int(positions.min()) + offset < 0:
            continue
        yield Alternative(
            "positional.position_offset",
            f"the output is the spec's with the learned position table read at p {offset:+d} "
            f"(wpe[positions {offset:+d}]): positions are counted from {offset} instead of 0 "
            "(SPEC.md §2.2)",
            inputs={**inputs, "positions": positions + offset},
        )
    # read before its start: a table stored behind rows an offset skips (OPT's two rows
    # before position 0), indexed without the offset: position p reads row p - k, the
    # first k positions the rows before the table, zeros; in a model of token ids (in a
    # ViT the same output is the class token without its row, vit.cls_pos_embed_missing)
    if not np.issubdtype(np.asarray(tokens).dtype, np.integer):
        return
    for name in sorted(k for k in params or {} if POSITION_TABLE.search(k)):
        table = np.asarray(params[name])
        for shift in (1, 2):
            if table.ndim < 2 or table.shape[-2] <= shift:
                continue
            early = np.zeros_like(table)
            early[..., shift:, :] = table[..., :-shift, :]
            yield Alternative(
                "positional.position_offset",
                f"the output is the spec's with the learned position table read at p - {shift} "
                f"(the offset of a table stored behind {shift} extra rows left out where it is "
                f"indexed, F.embedding(positions, table) for positions + {shift}): each token "
                f"gets the row of the position {shift} before its own, the first {shift} rows "
                "the extra ones, zeros (SPEC.md §2.2)",
                params={**params, name: early},
            )


# The tolerance rule of a failed comparison, applied to a hypothesis:
# tck.conformance.diagnosis.alternatives.
_within = within
