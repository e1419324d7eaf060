"""§7 Layers and §10 whole-model contracts: batch independence, permutation equivariance,
eval determinism, no state between calls, and the residual connections.

All but the residual diagnosis compare an implementation with itself, so they need no
parameters. Residual and norm-placement bugs show up as oracle mismatches; the harness
names placement and final-norm bugs (FIELDS), and ``residual`` names a missing residual
by reproducing the output with one sublayer's identity path removed.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping

import numpy as np
import pytest

from tck.conformance.toolkit.deltas import (
    Delta,
    delta,
    real_positions,
    require_deterministic,
    require_finite,
)
from tck.conformance.toolkit.harness import Harness, Instance
from tck.conformance.toolkit.input_edits import batch_slice, rng
from tck.conformance.toolkit.results import CheckFailure
from tck.reference import COMPONENTS, oracle, param_shapes, subparams
from tck.reference.components import record, select, tagged
from tck.reference.expected import memory_keep, self_keep
from tck.reference.inputs import Inputs, Shape
from tck.reference.tolerance import compare

spec = pytest.mark.spec
components = pytest.mark.components

MODELS = tagged("batched")  # the components §10.2 batch independence is checked on
# Every component: dropout and caches can hide anywhere, and these checks are cheap.
EVERYTHING = COMPONENTS

FIRST = Shape(batch=2, lq=5, lk=7)  # rows of different length, Lq != Lk
SECOND = Shape(batch=3, lq=11, lk=4, lengths=(4, 1, 2))  # other sizes, other masks
WIDE, WIDE_CALLS = Shape(batch=16, lq=5, lk=7), 4  # per-sample randomness at a low rate


# ---------------------------------------------------------------------- §10.2 batching


@spec("10.2", id="blocks.batch_independence")
@components(*MODELS)
def test_batch_independence(tck: Harness) -> None:
    """§10.2: f(X, keep)[b] = f(X[b:b+1], keep[b:b+1])[0]: running the batch gives each row
    as running that row alone with its own mask."""
    inst = tck.own_instance()
    for index, shape in enumerate((Shape(batch=3, lq=6, lk=7, lengths=(7, 4, 2)), SECOND)):
        inputs = tck.inputs(inst, shape, seed=tck.seed + index)
        out = tck.run(inst, inputs)
        for b in range(shape.batch):
            row = batch_slice(inputs, b)
            alone = tck.run(inst, row)
            found = delta(alone, out[b : b + 1], real=real_positions(row, alone.shape))
            require_finite(found, f"batch row {b} alone -> in the batch")
            if found.changed:
                require_deterministic(tck, inst, inputs, out)
                raise CheckFailure(
                    "batch.rows_interact",
                    f"batch row {b} of {shape.batch} differs from the same row run alone "
                    f"(rows of lengths {list(shape.key_lengths(shape.lk))}): "
                    f"{found.describe()} (alone -> in the batch; SPEC.md §10.2)",
                    found.metrics(),
                )


# --------------------------------------------------------------- §10.5 permutations


def permute(inputs: Mapping[str, np.ndarray], names: tuple[str, ...], order, axis: int) -> Inputs:
    out = dict(inputs)
    for name in names:
        out[name] = np.take(np.asarray(inputs[name]), order, axis=axis)
    return out


@spec("10.5", id="blocks.permutation_equivariance")
@components(*select("masks"))
def test_permutation_equivariance(tck: Harness) -> None:
    """§10.5: without positional information or a causal mask, permuting the positions
    permutes the output the same way; permuting keys with their values (and their mask
    columns) changes nothing. Decoders: permuting the memory changes nothing."""
    inst = tck.own_instance()
    generator = rng(tck.seed)
    rec = record(tck.component)
    if rec.has("cross_attention"):
        inputs = tck.inputs(inst, Shape(batch=2, lq=5, lk=7))
        out = tck.run(inst, inputs)
        require_deterministic(tck, inst, inputs, out)
        order = generator.permutation(7)
        moved = permute(inputs, ("memory", "memory_key_padding"), order, 1)
        expect(tck, out, tck.run(inst, moved), "permuting the memory", order, inputs)
        return
    length = 7
    inputs = tck.inputs(inst, Shape(batch=2, lq=length, lk=length, masked=False))
    if rec.has("qkv"):  # self-attention: one tensor as query, key and value
        inputs.update(key=inputs["query"], value=inputs["query"])
    out = tck.run(inst, inputs)
    require_deterministic(tck, inst, inputs, out)
    order = generator.permutation(length)
    if rec.has("heads"):
        shuffled = tck.run(inst, permute(inputs, ("q",), order, 2))
        expect(tck, np.take(out, order, axis=2), shuffled, "permuting the queries", order, {})
        shuffled = tck.run(inst, permute(inputs, ("k", "v"), order, 2))
        expect(tck, out, shuffled, "permuting keys with their values", order, {})
        return
    names = ("query", "key", "value") if rec.has("qkv") else ("x",)
    shuffled = tck.run(inst, permute(inputs, names, order, 1))
    expect(tck, np.take(out, order, axis=1), shuffled, "permuting the positions", order, {})


def expect(
    tck: Harness,
    want: np.ndarray,
    got: np.ndarray,
    what: str,
    order,
    inputs: Mapping[str, np.ndarray],
) -> None:
    found = delta(want, got, real=real_positions(inputs, want.shape))
    tck.note(found.metrics())
    require_finite(found, f"{what} (expected -> measured)")
    if found.changed:
        raise CheckFailure(
            "blocks.not_permutation_equivariant",
            f"{what} by {list(order)} is not matched by the output: {found.describe()} "
            "(expected -> measured); something position-dependent (a stray positional "
            "encoding, a causal mask, state) is applied (SPEC.md §10.5)",
            found.metrics(),
        )


# --------------------------------------------------------------------- §10.1 determinism


@spec("10.1", id="blocks.eval_determinism")
@components(*EVERYTHING)
def test_eval_determinism(tck: Harness) -> None:
    """§10.1: in evaluation mode the same inputs give the same outputs. Two identical fresh
    instances that disagree on their first call are random (dropout left on in eval); one
    that agrees with its twin but not with itself carries state between calls if the twin
    follows it call by call, and is random (its first calls agreeing by chance) if not."""
    first, twin = tck.own_instance(), tck.own_instance()  # both built before either runs
    inputs = tck.inputs(first, FIRST)
    out = tck.run(first, inputs)
    twin_out = tck.run(twin, inputs)
    again = tck.run(first, inputs)
    real = real_positions(inputs, out.shape)
    random, repeated = delta(out, twin_out, real=real), delta(out, again, real=real)
    tck.note({**random.metrics("twin_"), **repeated.metrics("repeat_")})
    require_finite(repeated, "the same instance called twice with the same inputs")
    require_finite(random, "two identical instances called with the same inputs")
    comparable = same_params(first, twin)
    if repeated.changed and not (comparable and not random.changed):
        raise CheckFailure(
            "dropout.active_in_eval",
            f"the same instance gives different outputs for the same inputs: "
            f"{repeated.describe()} (first call -> second); a dropout (or other randomness) "
            "is active in evaluation mode, e.g. a dropout_p passed unconditionally to "
            "scaled_dot_product_attention (SPEC.md §10.1)",
            repeated.metrics(),
        )
    if comparable and random.changed and not repeated.changed:
        raise CheckFailure(
            "dropout.active_in_eval",
            f"two identical instances give different outputs for the same inputs: "
            f"{random.describe()}; randomness in evaluation mode (SPEC.md §10.1)",
            random.metrics(),
        )
    twin_again = tck.run(twin, inputs)  # both instances have now had the same calls
    if repeated.changed:
        # the twin agreed on the first call: state, or randomness that agreed by chance
        raise state_or_randomness(
            first, twin, (again, twin_again), real, repeated, "first call -> second"
        )
    wide_batch_repeats(tck, first, twin)


def wide_batch_repeats(tck: Harness, first: Instance, twin: Instance) -> None:
    """Randomness drawn once per sample at a low rate (a drop path of rate 0.1 left on in
    one block) leaves a batch of two unchanged on most pairs of calls: ``WIDE_CALLS`` calls
    of a batch of ``WIDE.batch`` rows, on the instance and on its twin in step, miss a
    per-sample rate of 0.1 about once in 800 runs ((0.9^4 + 0.1^4)^16)."""
    inputs = tck.inputs(first, WIDE, seed=tck.seed + 2)
    outs = [(tck.run(first, inputs), tck.run(twin, inputs)) for _ in range(WIDE_CALLS)]
    real = real_positions(inputs, outs[0][0].shape)
    for index, last in enumerate(outs[1:], start=2):
        found = delta(outs[0][0], last[0], real=real)
        require_finite(found, f"a batch of {WIDE.batch} called {WIDE_CALLS} times")
        if found.changed:
            raise state_or_randomness(
                first, twin, last, real, found, f"a batch of {WIDE.batch}: call 1 -> {index}"
            )


def state_or_randomness(
    inst: Instance,
    twin: Instance,
    last: tuple[np.ndarray, np.ndarray],
    real: np.ndarray,
    changed: Delta,
    calls: str,
) -> CheckFailure:
    """An instance's output ``changed`` between identical inputs (on ``calls``, in words); a
    twin built beside it and given the same calls answered ``last[1]`` where it answered
    ``last[0]`` (``real``: the positions compared). State is deterministic, so the twin
    follows the instance call by call; randomness does not (a dropout or drop path left on,
    its first calls agreeing by chance: a low rate draws nothing most calls)."""
    diverged = delta(*last, real=real)
    if same_params(inst, twin) and diverged.changed:
        return CheckFailure(
            "dropout.active_in_eval",
            f"the same instance gives different outputs for the same inputs "
            f"({changed.describe()}, {calls}), and a twin instance given the same calls "
            f"disagrees with it ({diverged.describe()}): randomness in evaluation mode (a "
            "dropout or drop path active; SPEC.md §10.1)",
            changed.metrics(),
        )
    return CheckFailure(
        "state.leaks_between_calls",
        f"the same inputs give another output on a later call ({changed.describe()}, "
        f"{calls}), and a twin instance given the same calls gives the same: the instance "
        "keeps state between calls (a cache sized or filled by an earlier call, a buffer, a "
        "counter; SPEC.md §10.1)",
        changed.metrics(),
    )


def same_params(first: Instance, twin: Instance) -> bool:
    """Whether the twins are known to be the same function (so their outputs must agree)."""
    if not param_shapes(first.component, first.config, first.conventions):
        return True
    if first.params is None or twin.params is None or first.params.keys() != twin.params.keys():
        return False
    return all(np.array_equal(first.params[k], twin.params[k]) for k in first.params)


@spec("10.1", id="blocks.instance_reuse")
@components(*EVERYTHING)
def test_instance_reuse(tck: Harness) -> None:
    """§10.1: one instance reused across calls with other batch sizes, lengths and masks
    gives, for the first inputs again, the first output (no state carried between calls)."""
    inst, twin = tck.own_instance(), tck.own_instance()  # both built before either runs
    first = tck.inputs(inst, FIRST, seed=tck.seed)
    second = tck.inputs(inst, SECOND, seed=tck.seed + 1)
    calls = (first, first, second, first)
    outs = [tck.run(inst, x) for x in calls]
    if delta(outs[0], outs[1]).changed:
        pytest.skip("two consecutive identical calls already differ (see blocks.eval_determinism)")
    real = real_positions(first, outs[0].shape)
    found = delta(outs[0], outs[-1], real=real)
    tck.note(found.metrics())
    require_finite(found, "the first inputs again after a call with other sizes and masks")
    if found.changed:
        twin_outs = [tck.run(twin, x) for x in calls]
        raise state_or_randomness(
            inst, twin, (outs[-1], twin_outs[-1]), real, found,
            "after a call with other sizes and masks, first call -> fourth",
        )  # fmt: skip
    if "positions" in first:  # same length, other positions: a cache keyed by length only
        shifted = {**first, "positions": np.asarray(first["positions"]) + 7}
        found = delta(tck.run(tck.own_instance(), shifted), tck.run(inst, shifted))
        tck.note(found.metrics())
        if found.changed:
            raise CheckFailure(
                "state.leaks_between_calls",
                "the same length at other positions gives another output than a fresh "
                f"instance does: {found.describe()} (fresh -> reused); a cache keyed by the "
                "sequence length only (cos/sin or a table) keeps an earlier call's positions "
                "(SPEC.md §10.1)",
                found.metrics(),
            )


# ------------------------------------------------------------------ §7.1, §7.2 residuals


def layer_variant(
    inst: Instance, inputs: Mapping[str, np.ndarray], drop: tuple[int, ...]
) -> np.ndarray:
    """The layer of §7.1 / §7.2 from oracle pieces, with the sublayers in ``drop`` lacking
    their residual: post-LN Norm(f(x)) instead of Norm(x + f(x)), pre-LN f(Norm(x))
    instead of x + f(Norm(x))."""
    params, c, conv = inst.params or {}, inst.config, inst.conventions
    x = np.asarray(inputs["x"], np.float64)
    keep = self_keep(inputs, x.shape[1], conv)

    def attention(prefix: str, source: Callable[[np.ndarray], np.ndarray], mask):
        def run(h: np.ndarray) -> np.ndarray:
            kv = source(h)
            return oracle.multi_head_attention(
                h,
                kv,
                kv,
                subparams(params, prefix),
                n_heads=c.n_heads,
                keep_mask=mask,
                conventions=conv,
            )

        return run

    def ffn(h: np.ndarray) -> np.ndarray:
        return oracle.feed_forward(h, subparams(params, "ffn."), activation=conv.activation)

    sublayers = [("norm1.", attention("self_attn.", lambda h: h, keep))]
    if record(inst.component).has("cross_attention"):
        memory = np.asarray(inputs["memory"], np.float64)
        mem_keep = memory_keep(inputs, x.shape[1], memory.shape[1])
        sublayers.append(("norm2.", attention("cross_attn.", lambda h: memory, mem_keep)))
        sublayers.append(("norm3.", ffn))
    else:
        sublayers.append(("norm2.", ffn))
    for index, (norm, fn) in enumerate(sublayers):
        identity = 0.0 if index in drop else 1.0
        if conv.norm_placement == "post":
            x = oracle.norm(identity * x + fn(x), params, norm, conv)
        else:
            x = identity * x + fn(oracle.norm(x, params, norm, conv))
    return x


@spec("7.1", "7.2", id="blocks.residual")
@components(*select(family="transformer", level="layer"))
def test_residual(tck: Harness) -> None:
    """§7.1, §7.2: every sublayer is wrapped in a residual connection. When the layer
    disagrees with the oracle, test "sublayer i lost its residual" for each i."""
    inst = tck.instance()
    tck.require_params(inst)
    inputs = tck.inputs(inst)
    test = tck.run(inst, inputs)
    if tck.compare(inst, test, tck.gold(inst, inputs)).passed:
        return
    names = ["self-attention", "FFN"]
    if record(tck.component).has("cross_attention"):
        names = ["self-attention", "cross-attention", "FFN"]
    subsets = [
        drop
        for size in range(1, len(names) + 1)
        for drop in itertools.combinations(range(len(names)), size)
    ]
    for drop in subsets:  # one sublayer first: the likeliest bug
        gold = layer_variant(inst, inputs, drop)
        if compare(test, gold, ignore=np.isnan(gold)).passed:
            which = " and ".join(f"{names[i]} (norm{i + 1})" for i in drop)
            raise CheckFailure(
                "blocks.residual_missing",
                f"the output is the spec's with the {which} sublayer{'s' * (len(drop) > 1)} "
                "missing the residual connection: x + f(x) became f(x) under "
                f"norm_placement={inst.conventions.norm_placement!r} (SPEC.md §7.1, §7.2)",
                dict(tck.record.metrics),
            )
    pytest.skip(
        "the output differs from the oracle, but not as a missing residual would "
        "(see equality.oracle for the numbers and the convention diagnosis)"
    )
