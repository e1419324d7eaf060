"""§3 Attention: softmax over keys, the effective scale, heads and projections.

``attention`` needs no parameters: its weights are read off by feeding one-hot values,
and its scale by a two-key probe whose output is a logistic function of the scaled score.
``mha`` probes load canonical parameters (identity projections for the scale; the oracle
with altered parameters to name a projection or merge bug).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tck.conformance.toolkit.deltas import delta, require_deterministic
from tck.conformance.toolkit.harness import Harness, Instance
from tck.conformance.toolkit.input_edits import rng
from tck.conformance.toolkit.instances import cached_instance, zero_params
from tck.conformance.toolkit.results import CheckFailure
from tck.conformance.toolkit.strategies import seeds
from tck.reference import Config, oracle
from tck.reference.inputs import Inputs
from tck.reference.tolerance import compare

spec = pytest.mark.spec
components = pytest.mark.components

# Relative agreement of a measured scale with 1/sqrt(d_k): far tighter than any scale bug
# (the nearest, 1/sqrt(d_model), is off by sqrt(H)), loose enough for float32 kernels.
SCALE_RTOL = 1e-5
# Relative agreement with a *named* wrong scale, to say which bug it is.
MATCH_RTOL = 1e-3
# Scores t * |u|^2 with |u| = 1 at which the scale is measured: small enough that every
# candidate scale (up to sqrt(d_k)) keeps the logistic out of saturation.
PROBE_SCORES = (0.25, 0.5, 1.0, 2.0)


# ---------------------------------------------------------------------- weights (§3.1)


def attention_weights(
    tck: Harness, inst: Instance, q: np.ndarray, k: np.ndarray, keep: np.ndarray | None = None
) -> np.ndarray:
    """The implementation's weights [B, H, Lq, Lk], read off with one-hot values: with
    V[j, c] = 1 where j = chunk * d_v + c, output column c of a chunk is weight column j."""
    b, h, _, _ = q.shape
    lk, dv = k.shape[2], inst.config.head_dim_v
    columns = []
    for start in range(0, lk, dv):
        v = np.zeros((b, h, lk, dv))
        for c in range(min(dv, lk - start)):
            v[:, :, start + c, c] = 1.0
        inputs = {"q": q, "k": k, "v": v}
        if keep is not None:
            inputs["keep_mask"] = keep
        columns.append(tck.run(inst, inputs)[..., : min(dv, lk - start)])
    return np.concatenate(columns, axis=-1)


# The axes of the [B, H, Lq, Lk] weights a softmax may run over by mistake (dim=2, 1, 0).
SOFTMAX_AXES = ((2, "the query axis"), (1, "the head axis"), (0, "the batch axis"))


@spec("3.1", id="attention.softmax_rows_sum_to_one")
@components("attention")
@given(
    seed=seeds,
    lq=st.integers(1, 9),
    lk=st.integers(1, 13),
    magnitude=st.sampled_from([1.0, 4.0]),
)
def test_softmax_rows_sum_to_one(
    tck: Harness, seed: int, lq: int, lk: int, magnitude: float
) -> None:
    """§3.1: W = softmax over the **key** axis: every row of weights is >= 0 and sums to 1.

    A softmax over the query axis makes the columns sum to 1 instead; one over the heads
    (or the batch) makes the weights of one (query, key) pair sum to 1 across the heads.
    """
    inst = cached_instance(tck, "default", lambda: tck.instance(params=False))
    c = inst.config
    generator = rng(seed)
    q = generator.standard_normal((2, c.n_heads, lq, c.head_dim_k)) * magnitude
    k = generator.standard_normal((2, c.n_heads, lk, c.head_dim_k)) * magnitude
    weights = attention_weights(tck, inst, q, k)  # [B, H, Lq, Lk]
    row_sums = weights.sum(axis=-1)
    sums = delta(np.ones_like(row_sums), row_sums)
    negative = float(-weights.min(initial=0.0))
    tck.note({**sums.metrics("row_sum_"), "most_negative_weight": negative})
    if not sums.changed and negative <= sums.bound:
        return
    if delta(weights, attention_weights(tck, inst, q, k)).changed:
        pytest.skip("two identical calls differ: see blocks.eval_determinism (SPEC.md §10.1)")
    # Shrinking may leave one query row (or one batch row), where the axes look alike: read
    # the sums over every other axis of a fixed call with several of each.
    fixed = rng(0)
    q3 = fixed.standard_normal((2, c.n_heads, 3, c.head_dim_k))
    k5 = fixed.standard_normal((2, c.n_heads, 5, c.head_dim_k))
    fixed_weights = attention_weights(tck, inst, q3, k5)
    for axis, words in SOFTMAX_AXES:
        if fixed_weights.shape[axis] < 2:
            continue  # one head: that axis cannot be told apart
        other = fixed_weights.sum(axis=axis)
        if not delta(np.ones_like(other), other).changed:
            raise CheckFailure(
                "attention.softmax_axis_wrong",
                f"the weights sum to 1 over {words}, the rows over the keys do not "
                f"({sums.describe()} for a row sum): the softmax runs over {words} instead of "
                "the key axis (SPEC.md §3.1)",
                {**sums.metrics(), "softmax_axis": axis},
            )
    raise CheckFailure(
        "attention.weights_not_normalized",
        f"attention weight rows must be >= 0 and sum to 1: {sums.describe()} for a row sum, "
        f"most negative weight {-negative:.3g} (SPEC.md §3.1)",
        {**sums.metrics(), "most_negative_weight": negative},
    )


# ------------------------------------------------------------------------ scale (§3.1, §3.2)


def scale_candidates(config: Config) -> list[tuple[str, float, str]]:
    """(what, value, code) for the scales implementations are known to use by mistake."""
    dk, h = config.head_dim_k, config.n_heads
    candidates = [
        ("1/sqrt(d_model) (= 1/sqrt(H*d_k))", 1.0 / math.sqrt(h * dk), "attention.scale_wrong"),
        ("1/sqrt(d_model)", 1.0 / math.sqrt(config.d_model), "attention.scale_wrong"),
        ("1/d_k", 1.0 / dk, "attention.scale_wrong"),
        ("1/sqrt(d_v)", 1.0 / math.sqrt(config.head_dim_v), "attention.scale_wrong"),
        ("1 (no scale)", 1.0, "attention.scale_missing"),
        ("sqrt(d_k) (multiplied instead of divided)", math.sqrt(dk), "attention.scale_inverted"),
    ]
    expected = 1.0 / math.sqrt(dk)
    return [c for c in candidates if not math.isclose(c[1], expected, rel_tol=MATCH_RTOL)]


def judge_scale(tck: Harness, measured: np.ndarray, config: Config, where: str) -> None:
    """Hold the measured effective scales (one per probe score and head) to 1/sqrt(d_k)."""
    expected = 1.0 / math.sqrt(config.head_dim_k)
    finite = measured[np.isfinite(measured)]
    if not finite.size or not np.any(finite):
        # Every weight pair saturated (0 or 1) or read nothing: no scale can be read off,
        # and a probe that cannot measure does not accuse.
        reason = (
            f"{where}: not measured: the two-key weights are saturated (0 or 1) or equal at "
            f"every probe score {list(PROBE_SCORES)}, so the effective scale cannot be read "
            "off them (see equality.oracle and attention.softmax_rows_sum_to_one)"
        )
        tck.note({"expected_scale": expected, "not_measured": reason})
        pytest.skip(reason)
    value = float(np.median(finite))
    spread = float(np.ptp(finite) / abs(value)) if finite.size and value else math.inf
    tck.note({"effective_scale": value, "expected_scale": expected, "scale_spread": spread})
    if math.isclose(value, expected, rel_tol=SCALE_RTOL) and spread <= SCALE_RTOL:
        return
    numbers = {"effective_scale": value, "expected_scale": expected}
    if spread > MATCH_RTOL and finite.size < measured.size:
        reason = (
            f"{where}: not measured: {measured.size - finite.size} of {measured.size} probe "
            "points saturate the softmax (a weight of exactly 0 or 1) and the others disagree, "
            "so no single effective scale can be read off"
        )
        tck.note({"not_measured": reason})
        pytest.skip(reason)
    if spread > MATCH_RTOL:
        raise CheckFailure(
            "attention.scale_wrong",
            f"{where}: the scaled score is not proportional to q.k: measured scales "
            f"{np.round(measured.ravel(), 6).tolist()} at q.k = {list(PROBE_SCORES)} "
            f"(expected {expected:.6g} = 1/sqrt(d_k) throughout; SPEC.md §3.1)",
            numbers,
        )
    for what, candidate, code in scale_candidates(config):
        if math.isclose(value, candidate, rel_tol=MATCH_RTOL):
            raise CheckFailure(
                code,
                f"{where}: effective scale {value:.6g} matches {what} = {candidate:.6g}, "
                f"not 1/sqrt(d_k) = {expected:.6g} with d_k = {config.head_dim_k} "
                "(SPEC.md §3.1, §3.2)",
                numbers,
            )
    raise CheckFailure(
        "attention.scale_wrong",
        f"{where}: effective scale {value:.6g}, expected 1/sqrt(d_k) = {expected:.6g} "
        f"(d_k = {config.head_dim_k}); it matches none of 1/sqrt(d_model), 1/d_k, 1, "
        "sqrt(d_k) (SPEC.md §3.1, §3.2)",
        numbers,
    )


def two_key_probe(config: Config, t: np.ndarray, generator: np.random.Generator) -> Inputs:
    """attention inputs whose output is a logistic of the scaled score.

    Key 0 is a unit vector u, key 1 is 0, and query i is t_i * u, so the scores are
    (scale * t_i, 0) and the weights (sigmoid(scale * t_i), 1 - sigmoid(scale * t_i)).
    Value channel 0 carries key 0's weight, channel 1 key 1's.
    """
    h, dk, dv = config.n_heads, config.head_dim_k, config.head_dim_v
    u = generator.standard_normal((1, h, 1, dk))
    u /= np.linalg.norm(u, axis=-1, keepdims=True)
    q = t[None, None, :, None] * u  # [1, H, T, dk]
    k = np.concatenate([u, np.zeros_like(u)], axis=2)  # [1, H, 2, dk]
    v = np.zeros((1, h, 2, dv))
    v[:, :, 0, 0] = v[:, :, 1, 1] = 1.0
    return {"q": q, "k": k, "v": v}


def require_two_key_softmax(w0: np.ndarray, w1: np.ndarray) -> None:
    """The probe reads scores off a softmax over two keys; without one it reads nothing."""
    if delta(np.ones_like(w0), w0 + w1).changed:
        pytest.skip(
            "the weights of the two keys do not sum to 1, so the scale cannot be read off "
            "(see attention.softmax_rows_sum_to_one)"
        )


def logit_pair(w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    """s0 - s1 = log w0 - log w1 (exact for a softmax over two keys, no 1 - w cancellation)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(w0) - np.log(w1)


@spec("3.1", "3.2", id="attention.effective_scale")
@components("attention")
def test_effective_scale(tck: Harness) -> None:
    """§3.1: scores are scaled by 1/sqrt(d_k), measured directly: with scores (s, 0) the
    output is sigmoid(scale * s), so scale = logit(out) / s. Several s guard against
    saturation and against a score that is not linear in q.k."""
    inst = tck.instance(params=False)
    t = np.array(PROBE_SCORES)
    inputs = two_key_probe(inst.config, t, rng(tck.seed))
    out = tck.run(inst, inputs)  # [1, H, T, dv]
    require_deterministic(tck, inst, inputs, out)
    w0, w1 = out[0, :, :, 0], out[0, :, :, 1]  # [H, T]
    require_two_key_softmax(w0, w1)
    judge_scale(tck, logit_pair(w0, w1) / t, inst.config, "attention")


@spec("3.1", "3.2", id="attention.scaled_score_variance")
@components("attention")
def test_scaled_score_variance(tck: Harness) -> None:
    """§3.2: with q, k of independent unit-variance entries and d_k = 64, the scaled scores
    (q.k)/sqrt(d_k) have variance about 1; unscaled they have variance d_k.

    The scores are read off with the two-key probe, so the statistic comes with the exact
    effective scale behind it: the check fails by naming that scale, not by a threshold on
    a noisy variance."""
    config = tck.config(d_k=64)
    inst = tck.instance(config, params=False)
    generator = rng(tck.seed)
    b, h, n, dk = 4, config.n_heads, 64, 64
    q = generator.standard_normal((b, h, n, dk))
    key = generator.standard_normal((b, h, 1, dk))
    v = np.zeros((b, h, 2, config.head_dim_v))
    v[:, :, 0, 0] = v[:, :, 1, 1] = 1.0
    inputs = {"q": q, "k": np.concatenate([key, 0 * key], axis=2), "v": v}
    out = tck.run(inst, inputs)
    require_deterministic(tck, inst, inputs, out)
    require_two_key_softmax(out[..., 0], out[..., 1])
    scores = logit_pair(out[..., 0], out[..., 1])  # the implementation's scaled q.k
    raw = (q * key).sum(axis=-1)  # [B, H, N]
    usable = np.isfinite(scores) & (np.abs(raw) > 1e-3)
    if not usable.any():
        pytest.skip("not measured: no finite scaled score could be read off the two-key probe")
    variance = float(np.var(scores[usable]))
    spec_variance = float(np.var(raw / math.sqrt(dk)))
    tck.note({"score_variance": variance, "spec_score_variance": spec_variance})
    judge_scale(tck, (scores / raw)[usable], config, f"scaled score variance {variance:.3g}")


@spec("3.1", "3.3", "3.4", id="attention.effective_scale_per_head")
@components("mha")
def test_effective_scale_per_head(tck: Harness) -> None:
    """§3.1 inside multi-head attention: with identity projections (H * d_k = d_model) each
    head sees the two-key probe, and each head's scale must be 1/sqrt(d_k), not
    1/sqrt(d_model)."""
    inst = tck.instance(params=False)
    c = inst.config
    if c.n_heads * c.head_dim_k != c.d_model or c.head_dim_v != c.head_dim_k:
        pytest.skip("identity projections need H * d_k = H * d_v = d_model")
    params = zero_params(inst)
    for name in ("q", "k", "v", "o"):
        params[f"{name}.weight"] = np.eye(c.d_model)
    tck.adapter.load(inst.handle, params)  # Unsupported -> skip
    generator = rng(tck.seed)
    u = generator.standard_normal((c.n_heads, c.head_dim_k))
    u /= np.linalg.norm(u, axis=-1, keepdims=True)
    key = np.stack([u.reshape(-1), np.zeros(c.d_model)])[None]  # [1, 2, D]
    value = np.zeros((1, 2, c.n_heads, c.head_dim_v))
    value[0, 0, :, 0] = value[0, 1, :, 1] = 1.0  # per head: channel 0 <- key 0, 1 <- key 1
    value = value.reshape(1, 2, c.d_model)
    measured = []
    for t in PROBE_SCORES:  # one query per call: Lq = 1 makes the merge a plain concat
        inputs = {"query": t * key[:, :1], "key": key, "value": value}
        out = tck.run(inst, inputs)
        require_deterministic(tck, inst, inputs, out)
        heads = out[0, 0].reshape(c.n_heads, c.head_dim_v)  # [H, d_v]
        require_two_key_softmax(heads[:, 0], heads[:, 1])
        measured.append(logit_pair(heads[:, 0], heads[:, 1]) / t)
    judge_scale(tck, np.array(measured).T, c, "mha (per head, identity projections)")


# ---------------------------------------------------------------- projections and merge (§3.3-4)


def mha_variant(
    inputs: Mapping[str, np.ndarray],
    params: Mapping[str, np.ndarray],
    inst: Instance,
    *,
    value_prefix: str = "v.",
    merge: str = "heads_first",
) -> np.ndarray:
    """Multi-head attention from oracle pieces, with one deliberate deviation:
    ``value_prefix="k."`` projects the values with the key weights (seed 004's bug);
    ``merge="channels_first"`` concatenates as [B, L, d_v, H]; ``merge="no_transpose"``
    reshapes [B, H, L, d_v] straight to [B, L, H*d_v] (§3.3's interleaving bug)."""
    c, conv = inst.config, inst.conventions
    query, key, value = inputs["query"], inputs["key"], inputs["value"]
    keep = oracle.combine_keep_masks(
        query.shape[1],
        key.shape[1],
        key_padding=inputs.get("key_padding"),
        attn_mask=inputs.get("attn_mask"),
        causal=bool(np.asarray(inputs.get("causal", False))),
        alignment=conv.causal_alignment,
    )
    h = c.n_heads
    q = oracle.split_heads(oracle.linear(query, params, "q."), h)  # [B, H, Lq, d_k]
    k = oracle.split_heads(oracle.linear(key, params, "k."), h)
    v = oracle.split_heads(oracle.linear(value, params, value_prefix), h)  # [B, H, Lk, d_v]
    heads = oracle.scaled_dot_product_attention(
        q, k, v, keep, fully_masked_rows=conv.fully_masked_rows
    )  # [B, H, Lq, d_v]
    b, _, lq, dv = heads.shape
    if merge == "channels_first":
        merged = heads.transpose(0, 2, 3, 1).reshape(b, lq, dv * h)
    elif merge == "no_transpose":
        merged = heads.reshape(b, lq, h * dv)
    else:
        merged = oracle.merge_heads(heads)
    return oracle.linear(merged, params, "o.")


def oracle_disagreement(tck: Harness) -> tuple[Instance, Inputs, np.ndarray] | None:
    """Run the subject on default inputs; None when it agrees with the oracle."""
    inst = tck.instance()
    tck.require_params(inst)
    inputs = tck.inputs(inst)
    test = tck.run(inst, inputs)
    result = tck.compare(inst, test, tck.gold(inst, inputs))
    return None if result.passed else (inst, inputs, test)


def matches(test: np.ndarray, gold: np.ndarray) -> bool:
    return test.shape == gold.shape and compare(test, gold, ignore=np.isnan(gold)).passed


@spec("3.4", id="attention.value_projection")
@components("mha")
def test_value_projection(tck: Harness) -> None:
    """§3.4: each input has its own projection. When the output disagrees with the oracle,
    test the hypothesis "values projected with the key weights" (``v = self.k_proj(v)``)."""
    found = oracle_disagreement(tck)
    if found is None:
        return
    inst, inputs, test = found
    params = inst.params or {}
    if params["v.weight"].shape != params["k.weight"].shape:
        pytest.skip("d_k != d_v: the value-with-key-weights hypothesis does not apply")
    if matches(test, mha_variant(inputs, params, inst, value_prefix="k.")):
        raise CheckFailure(
            "attention.value_uses_key_projection",
            "the output is the spec's with the values projected by the KEY weights "
            "(k.weight, k.bias) instead of v.weight, v.bias: v = k_proj(value) "
            "(SPEC.md §3.4)",
            dict(tck.record.metrics),
        )
    pytest.skip(
        "the output differs from the oracle, but not as values projected with the key "
        "weights would (see equality.oracle)"
    )


@spec("3.3", id="attention.heads_merge_order")
@components("mha")
def test_heads_merge_order(tck: Harness) -> None:
    """§3.3: heads are concatenated in head order, [B, L, H, d_v] -> [B, L, H*d_v]. When the
    output disagrees with the oracle, test the two wrong merges: channel-major
    ([B, L, d_v, H]) and a reshape of [B, H, L, d_v] without the transpose."""
    found = oracle_disagreement(tck)
    if found is None:
        return
    inst, inputs, test = found
    params = inst.params or {}
    for merge, what in (
        ("no_transpose", "reshapes [B, H, L, d_v] to [B, L, H*d_v] without the transpose"),
        ("channels_first", "concatenates channel-major, as [B, L, d_v, H]"),
    ):
        if matches(test, mha_variant(inputs, params, inst, merge=merge)):
            raise CheckFailure(
                "attention.heads_merged_wrong_order",
                f"the output is the spec's with a merge that {what}: positions and heads "
                "are interleaved before the output projection (SPEC.md §3.3)",
                dict(tck.record.metrics),
            )
    pytest.skip(
        "the output differs from the oracle, but not as a wrong head merge would "
        "(see equality.oracle)"
    )
