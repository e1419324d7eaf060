"""§3.1 in context: attention weights sum to one in every subject that holds an attention,
measured at lengths that cross many key blocks.

``attention.softmax_rows_sum_to_one`` reads the weights of the bare ``attention`` op off
one-hot values, on short rows. A tiled (online, flash-style) softmax keeps a running maximum,
sum and accumulator per block of keys and must rescale the sum and the accumulator whenever
the maximum grows; dropping that rescale leaves weights that do not sum to one, but only on
rows long enough to span several key blocks and whose maximum moves along the row. And a
layer, a block or a self-attention module gives no access to its weights.

The measurement: make every key's value the same vector, so that any convex combination of
the values is that vector. Then the subject's output cannot depend on the scores, whatever
the mask, the scale or the position encoding, as long as each query's weights sum to one.
Two calls that differ only in the scores, one with the query projection as loaded (times
``SCORE_GAIN``, so that the scores spread and the row maximum moves from block to block),
one with the query projection zero (every score 0: uniform weights, which even an unrescaled
online softmax gets right), must then agree to the tolerance rule's floor. Everything else in
a block (norms, FFN, residuals) is the same in both calls, so any other bug leaves the two
outputs equal; a difference is attention weights that do not sum to one (or a softmax over
another axis than the keys, which the oracle comparison's hypotheses name).

How the values are made equal, for a subject that computes them from its input x: the value
projection is rank one, W_v = u a^T, with a unit direction a (zero mean), and every token is
x_j = s a + r_j with r_j orthogonal to a and to the all-ones vector and of one fixed norm.
Every token then has the same mean (0) and the same norm, so a LayerNorm, an RMSNorm or a
ScaleNorm with unit gain (the norms' gains are set to one, their biases to zero) scales every
token by the same factor and a . norm(x_j) is the same for all j: v_j = u (a . norm(x_j)) + b_v
is one vector.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping

import numpy as np
import pytest

from tck.adapters import Unsupported
from tck.conformance.toolkit.deltas import delta
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.input_edits import rng
from tck.conformance.toolkit.results import CheckFailure
from tck.conformance.toolkit.spaces import max_length
from tck.reference import Config, Conventions
from tck.reference.components import RECORDS, record
from tck.reference.inputs import Shape, make_inputs
from tck.reference.params import param_shapes
from tck.reference.tolerance import round_to

spec = pytest.mark.spec
components = pytest.mark.components


def takes_qkv(component: str) -> bool:
    """Is ``component`` the bare attention op (it takes queries, keys and values)?"""
    return {"q", "k", "v"} <= {spec.name for spec in record(component).inputs}


def measured_components() -> tuple[str, ...]:
    """The components measured: the bare op, and every component with one self-attention's
    canonical parameters at its top (``q.weight`` or ``self_attn.q.weight``: a stack's layers
    would need every layer's input built alike). A cross-attention after it is the same in
    both calls."""
    found = []
    for name in RECORDS:
        try:
            shapes = param_shapes(name, Config(), Conventions())
        except (ValueError, KeyError):
            continue
        if takes_qkv(name) or attention_prefix(shapes) is not None:
            found.append(name)
    return tuple(found)


# Row lengths: several key blocks of 4, 8, 16 or 32 keys, and one that is not a multiple of
# any of them (a last, partial block).
LENGTHS = (37, 70)
SHORT_ROW = 3  # keys: inside one block of any tiled softmax (blocks of 4 to 128 keys)
# The factor on the query projection (or the queries): scores of a few units, so that each
# row's maximum moves along the row by more than the rounding of a 16-bit exp.
SCORE_GAIN = 4.0
_NORM_GAIN = re.compile(r"(^|\.)norm\d*\.weight$")
_NORM_BIAS = re.compile(r"(^|\.)norm\d*\.bias$")
# A later layer's sublayer outputs (attention output projection, FFN down projection): zero
# makes the layer pass its input through, so a stack's first attention is the one measured.
_LATER_OUTPUT = re.compile(
    r"^layers\.([1-9]\d*)\.(self_attn\.o|cross_attn\.o|ffn\.fc2|ffn\.down)\."
)
# A learned position table: zero, so that every token keeps the norm the probe gave it.
_POSITION_TABLE = re.compile(r"(^|\.)pos_embedding\.weight$")


def attention_prefix(params: Mapping[str, np.ndarray]) -> str | None:
    """The canonical prefix of the subject's self-attention (``""`` or ``"self_attn."``)."""
    for prefix in ("", "self_attn.", "layers.0.self_attn."):
        if f"{prefix}q.weight" in params and f"{prefix}v.weight" in params:
            return prefix
    return None


def equal_value_tokens(generator: np.random.Generator, b: int, length: int, d: int) -> tuple:
    """Tokens x_j = s a + r_j (r_j orthogonal to a and to the ones, |r_j| fixed) and ``a``."""
    if d < 3:
        raise Unsupported(f"d_model {d} leaves no room for varying tokens of one norm")
    a = np.zeros(d)
    a[0], a[1] = 1.0, -1.0
    a /= np.linalg.norm(a)
    r = generator.standard_normal((b, length, d))
    for direction in (a, np.ones(d) / np.sqrt(d)):
        r -= (r @ direction)[..., None] * direction
    r *= np.sqrt(d / 2) / np.linalg.norm(r, axis=-1, keepdims=True)
    return np.sqrt(d / 2) * a + r, a


def probe_params(
    params: Mapping[str, np.ndarray], prefix: str, a: np.ndarray, generator: np.random.Generator
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Two parameter sets that differ only in the query projection: as loaded times
    ``SCORE_GAIN``, and zero. Both have the rank-one value projection and unit norms."""
    base = {k: np.asarray(v, np.float64).copy() for k, v in params.items()}
    for name in base:
        if _LATER_OUTPUT.search(name) or _POSITION_TABLE.search(name):
            base[name] = np.zeros_like(base[name])
        elif _NORM_GAIN.search(name):
            base[name] = np.ones_like(base[name])
        elif _NORM_BIAS.search(name):
            base[name] = np.zeros_like(base[name])
    rows = base[f"{prefix}v.weight"].shape[0]
    u = generator.standard_normal(rows)
    base[f"{prefix}v.weight"] = np.outer(u, a)
    spread = {**base, f"{prefix}q.weight": base[f"{prefix}q.weight"] * SCORE_GAIN}
    uniform = {**base, f"{prefix}q.weight": np.zeros_like(base[f"{prefix}q.weight"])}
    if f"{prefix}q.bias" in base:
        uniform[f"{prefix}q.bias"] = np.zeros_like(base[f"{prefix}q.bias"])
    return spread, uniform


Call = Callable[[str], np.ndarray]  # "spread" or "uniform" -> the subject's output


def op_call(tck: Harness, length: int, generator: np.random.Generator) -> Call:
    """The bare op: queries scaled up against zero queries, one value vector for all keys."""
    inst = tck.instance(params=False, dtype=tck.own_dtype())
    c = inst.config
    b = 2
    q = generator.standard_normal((b, c.n_heads, length, c.head_dim_k)) * SCORE_GAIN
    k = generator.standard_normal((b, c.n_heads, length, c.head_dim_k))
    v = np.broadcast_to(
        generator.standard_normal((b, c.n_heads, 1, c.head_dim_v)), (*q.shape[:3], c.head_dim_v)
    )
    spread = {
        "q": round_to(q, inst.dtype),
        "k": round_to(k, inst.dtype),
        "v": round_to(np.array(v), inst.dtype),
    }
    calls = {"spread": spread, "uniform": {**spread, "q": np.zeros_like(spread["q"])}}
    return lambda which: tck.run(inst, calls[which])


def module_call(tck: Harness, length: int, generator: np.random.Generator) -> Call:
    """A module with parameters: the same equal-value tokens under the two parameter sets,
    loaded in turn into one instance (a real-size model is built once)."""
    inst = tck.instance(dtype=tck.own_dtype())
    params = tck.require_params(inst)
    prefix = attention_prefix(params)
    if prefix is None:
        pytest.skip(f"{tck.component} has no canonical self-attention parameters")
    made = make_inputs(
        tck.component, inst.config, generator, Shape(2, length, length, masked=False)
    )
    x, a = equal_value_tokens(generator, 2, length, inst.config.d_model)
    if "embedding.weight" in params and not any(k in made for k in ("x", "query")):
        params, a = embedded_params(params, generator, inst.config.d_model)
    spread, uniform = probe_params(params, prefix, a, generator)
    sets = {
        name: {k: round_to(v, inst.dtype) for k, v in chosen.items()}
        for name, chosen in (("spread", spread), ("uniform", uniform))
    }
    inputs = {**made}
    for name in ("x", "query", "key", "value"):  # self-attention: one sequence for all three
        if name in inputs:
            inputs[name] = round_to(x, inst.dtype)

    def call(which: str) -> np.ndarray:
        try:
            tck.adapter.load(inst.handle, sets[which])
        except Unsupported as why:
            pytest.skip(f"the probe loads its own parameters: {why}")
        return tck.run(dataclasses.replace(inst, params=sets[which]), inputs)

    return call


def embedded_params(
    params: Mapping[str, np.ndarray], generator: np.random.Generator, d: int
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """A token embedding whose rows are equal-value tokens (``equal_value_tokens``), for a
    model that takes token ids; and the direction ``a``."""
    table = np.asarray(params["embedding.weight"])
    rows, a = equal_value_tokens(generator, 1, table.shape[0], d)
    return {**params, "embedding.weight": rows[0]}, a


@spec("3.1", id="attention.weights_sum_to_one_long_rows")
@components(*measured_components())
def test_weights_sum_to_one_long_rows(tck: Harness) -> None:
    """§3.1: each query's weights sum to one, on rows of ``LENGTHS`` keys: with one value
    vector for every key the output does not depend on the scores."""
    limit = max_length(tck.subject)
    make = op_call if takes_qkv(tck.component) else module_call
    # The premise first: on a row shorter than any key block (a tiled softmax rescales
    # nothing there) the output must not depend on the scores. Where it does, the values
    # are not one vector (a value path that reads another projection or another slice of a
    # fused one, which the oracle comparison names) or no row's weights are right: either
    # way not what long rows add, and the measurement cannot tell which.
    short = make(tck, SHORT_ROW, rng(1))
    premise = delta(short("uniform"), short("spread"))
    if premise.changed:
        tck.note(premise.metrics(f"length_{SHORT_ROW}_"))
        pytest.skip(
            f"on a row of {SHORT_ROW} keys, shorter than any key block, the output already "
            f"depends on the scores ({premise.describe()}): the values are not one vector "
            "here, so this measurement cannot say whether the weights sum to one (the "
            "oracle comparison names the cause)"
        )
    generator = rng(0)
    for length in LENGTHS:
        if limit is not None and length > limit:
            continue
        call = make(tck, length, generator)
        spread = call("spread")
        uniform = call("uniform")
        found = delta(uniform, spread)
        tck.note({**found.metrics(f"length_{length}_"), "length": length})
        if not found.changed:
            continue
        if delta(spread, call("spread")).changed:
            pytest.skip("two identical calls differ: see blocks.eval_determinism (SPEC.md §10.1)")
        raise CheckFailure(
            "attention.weights_not_normalized",
            f"with one value vector for every key, the output must not depend on the scores "
            f"if each query's weights sum to one, but spreading the scores (queries x "
            f"{SCORE_GAIN:g}) against all-equal scores moves it on rows of {length} keys: "
            f"{found.describe()}. The attention weights do not sum to one (an online or "
            "tiled softmax that does not rescale its running sum or accumulator when the "
            "running maximum grows; a normaliser taken before masking) (SPEC.md §3.1)",
            {**found.metrics(), "length": length},
        )
