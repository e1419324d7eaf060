"""§4 Masks: keep-mask polarity, key padding, causal masks, fully-masked rows.

Masks cross the adapter boundary as boolean keep-masks (True = may attend, §4.1); every
adapter converts them to its library's convention, which is where polarity bugs live.
These checks need no parameters: they compare an implementation with itself. Three
experiments on one padded call tell the mask bugs apart (§4.2):

- **A**: change the keys and values at *padded* positions: the real query rows must not
  move. If they do, the mask is ignored, inverted or applied along the wrong axis.
- **B**: change one *kept* key: the real rows must move. If they do not (while A moved
  them), the implementation attends to the padded keys and ignores the kept ones: the
  polarity is inverted.
- **C**: padded *query* rows are computed like any other (§4.2): they must still depend
  on the keys (and on their own query). If they do not, the mask was applied along the
  query axis.

When A moves the real rows, **D** changes the padded keys of batch row 0 only: if *other*
batch rows move, the leak is across the batch (§10.2), not through the mask.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tck.adapters import Unsupported
from tck.conformance.toolkit.deltas import (
    Delta,
    delta,
    note_worst,
    real_positions,
    require_deterministic,
)
from tck.conformance.toolkit.harness import Harness, Instance
from tck.conformance.toolkit.input_edits import batch_slice, perturb, rng, rows_where
from tck.conformance.toolkit.instances import cached_instance
from tck.conformance.toolkit.results import CheckFailure
from tck.conformance.toolkit.strategies import padded_shapes, scales, seeds, split_points
from tck.reference.catalogue import convention_code, plain_words
from tck.reference.components import select
from tck.reference.inputs import Inputs, Shape, padding
from tck.reference.tolerance import compare

spec = pytest.mark.spec
components = pytest.mark.components

# From the component record (tck.reference.components): the subjects of the §4 mask checks
# and the kinds among them whose calls differ.
MASKED = select("masks")
SELF_ATTENTION = select("masks", "self_attention")  # one sequence: its keys are its queries
DECODERS = select("masks", "cross_attention")  # the mask is the memory's
HEADS = select("masks", "heads")  # the attention core: q, k, v already split into heads
QKV = select("masks", "qkv")  # separate query, key and value: self-attention passes one

FLOAT_MASK_HINT = (
    "Common causes: a 0/1 float mask passed where a boolean or additive mask was expected "
    "(added to the scores, 0 and 1 hide nothing: the mask silently does nothing), a padding "
    "mask built but never passed to the softmax, or one dropped by a wrapper."
)


# ---------------------------------------------------------------------------- the probes


@dataclass
class Probe:
    """One keep-mask of one call, and which inputs hold the keys it hides or shows."""

    what: str  # "key padding", "target padding", "memory padding"
    inputs: Inputs
    keep: np.ndarray  # [B, Lk] the probed keep pattern (True = a real key)
    keys: tuple[str, ...]  # inputs holding the keys and values the mask selects
    axis: int  # position axis of those inputs and of the output's query rows
    query: str | None = None  # input holding the queries, when separate from the keys
    self_attention: bool = False  # the keys are also the query rows (one input x)
    tied: bool = False  # the key inputs are one tensor (mha self-attention: q = k = v)

    def real_rows(self, lq: int) -> np.ndarray:
        """[B, Lq] the query rows that must ignore padded keys: every row of a cross or
        separate-query attention, the real tokens of a self-attention."""
        if self.self_attention:
            return self.keep
        return np.ones((self.keep.shape[0], lq), bool)

    def first_kept(self) -> np.ndarray:
        """[B, Lk] one-hot at the first kept key of each row."""
        first = np.zeros_like(self.keep)
        first[np.arange(len(first)), self.keep.argmax(axis=1)] = True
        return first


def holes(generator: np.random.Generator, batch: int, length: int) -> np.ndarray:
    """[B, L] key padding with gaps, position 0 always kept (SPEC.md §4.2 masks keys built
    from ids anywhere). Under a causal mask, right padding is invisible to the real tokens;
    a pad *between* real tokens is not."""
    keep = generator.random((batch, length)) < 0.6
    keep[:, 0] = True
    keep[:, -1] = True
    gap = generator.integers(1, length - 1, size=batch)
    keep[np.arange(batch), gap] = False
    return keep


def probes(tck: Harness, inst: Instance, shape: Shape, generator: np.random.Generator):
    """The probes of one call to the subject, on inputs of ``shape``."""
    inputs = tck.inputs(inst, shape, seed=int(generator.integers(2**32)))
    keep = padding(shape.key_lengths(shape.lk), shape.lk)
    component = tck.component
    if component in HEADS:
        inputs["keep_mask"] = keep[:, None, None, :]
        return [Probe("key padding", inputs, keep, ("k", "v"), 2, query="q")]
    if component in QKV:
        inputs["key_padding"] = keep
        x = inputs["key"]  # self-attention over the keys' length: one tensor three times
        own = {"query": x, "key": x, "value": x, "key_padding": keep}
        qkv = ("query", "key", "value")
        return [
            Probe("self-attention key padding", own, keep, qkv, 1, self_attention=True, tied=True),
            Probe("key padding", inputs, keep, ("key", "value"), 1, query="query"),
        ]
    if component in SELF_ATTENTION:  # one length: keys are the query rows
        keep = padding(shape.key_lengths(shape.lq), shape.lq)
        inputs["key_padding"] = keep
        return [Probe("key padding", inputs, keep, ("x",), 1, self_attention=True)]
    target = holes(generator, shape.batch, shape.lq)
    inputs["key_padding"], inputs["memory_key_padding"] = target, keep
    return [
        Probe("target padding", inputs, target, ("x",), 1, self_attention=True),
        Probe("memory padding", inputs, keep, ("memory",), 1),
    ]


def runs(tck: Harness, inst: Instance, some: list[Probe]) -> list[tuple[Probe, np.ndarray]]:
    """(probe, output) for each probe the subject accepts. A subject may refuse one form
    (PyTorch's MHA fast path takes only one tensor as query, key and value); it is
    Unsupported only when it refuses them all."""
    outputs: dict[int, np.ndarray | None] = {}  # a decoder's two probes share one call
    refused: Unsupported | None = None
    for probe in some:
        if id(probe.inputs) not in outputs:
            try:
                outputs[id(probe.inputs)] = tck.run(inst, probe.inputs)
            except Unsupported as err:
                outputs[id(probe.inputs)], refused = None, err
    done = [(p, outputs[id(p.inputs)]) for p in some if outputs[id(p.inputs)] is not None]
    if not done and refused is not None:
        raise refused
    return done  # type: ignore[return-value]


def mask_shapes(component: str, *, same_length: bool = False) -> st.SearchStrategy[Shape]:
    """Padded call sizes for ``component`` (Lq == Lk where a query row must map to a key)."""
    if component in SELF_ATTENTION:
        return padded_shapes(self_attention=True)
    if component in DECODERS:
        return padded_shapes(self_attention=False, min_lq=3)
    return padded_shapes(self_attention=same_length)


@dataclass
class Evidence:
    """The outcome of experiments A, B and C on one probe."""

    padded: Delta  # A: real rows after changing padded keys (must not move)
    kept: Delta | None = None  # B: real rows after changing one kept key (must move)
    queries: Delta | None = None  # C: padded query rows after changing keys (must move)
    neighbours: Delta | None = None  # D: other batch rows after changing row 0's padding


def move(
    tck: Harness,
    inst: Instance,
    probe: Probe,
    base: np.ndarray,
    where: np.ndarray,
    rows: np.ndarray,
    generator: np.random.Generator,
    *,
    names: tuple[str, ...] | None = None,
    scale: float = 1.0,
) -> Delta:
    """Change ``names`` (default: the keys) at ``where`` and measure ``rows`` of the output."""
    keys, tied = (names, False) if names else (probe.keys, probe.tied)
    changed = perturb(probe.inputs, keys, probe.axis, where, generator, scale, tied=tied)
    out = tck.run(inst, changed)
    return delta(base, out, rows_where(rows, out.ndim, probe.axis))


Generator = np.random.Generator


def experiment_a(
    tck: Harness,
    inst: Instance,
    probe: Probe,
    base: np.ndarray,
    generator: Generator,
    scale: float = 1.0,
) -> Delta:
    """A: change the padded keys; the real rows must not move."""
    lq = base.shape[probe.axis]
    return move(tck, inst, probe, base, ~probe.keep, probe.real_rows(lq), generator, scale=scale)


def experiment_b(
    tck: Harness, inst: Instance, probe: Probe, base: np.ndarray, generator: Generator
) -> Delta:
    """B: change the first kept key; the real rows (other than its own) must move."""
    first = probe.first_kept()
    rows = probe.real_rows(base.shape[probe.axis])
    if probe.self_attention:
        rows = rows & ~first  # x at the changed position is also that row's own query
    return move(tck, inst, probe, base, first, rows, generator)


def experiment_c(
    tck: Harness, inst: Instance, probe: Probe, base: np.ndarray, generator: Generator
) -> Delta | None:
    """C: padded query rows must move with the keys (self-attention) or with their own
    query (separate queries, Lq = Lk); None where the mask has no query axis to confuse."""
    padded = ~probe.keep
    if probe.self_attention:
        return move(tck, inst, probe, base, probe.first_kept(), padded, generator)
    if probe.query is None or base.shape[probe.axis] != probe.keep.shape[1]:
        return None  # the key mask has no query axis to be confused with
    return move(tck, inst, probe, base, padded, padded, generator, names=(probe.query,))


def experiment_d(
    tck: Harness, inst: Instance, probe: Probe, base: np.ndarray, generator: Generator
) -> Delta | None:
    """D: change the padded keys of batch row 0 only; the other batch rows must not move
    (None for a batch of one)."""
    batch, lq = probe.keep.shape[0], base.shape[probe.axis]
    if batch < 2:
        return None
    row0 = np.arange(batch)[:, None] == 0
    others = np.broadcast_to(~row0, (batch, lq))
    return move(tck, inst, probe, base, ~probe.keep & row0, others, generator)


def diagnose(evidence: Evidence) -> tuple[str, str]:
    """The bug class shown by A (padded keys moved real rows), B, C and D."""
    kept, queries, neighbours = evidence.kept, evidence.queries, evidence.neighbours
    if neighbours is not None and neighbours.changed:
        return (
            "batch.rows_interact",
            "and changing only batch row 0's padded keys moves OTHER batch rows "
            f"({neighbours.describe()}): the leak runs across the batch (a statistic over "
            "the batch, e.g. a norm over the wrong axis), not through the mask "
            "(SPEC.md §10.2)",
        )
    if kept is not None and not kept.changed:
        return (
            "mask.polarity_inverted",
            "changing a KEPT key does not move the real rows "
            f"({kept.describe()}): the implementation attends to the padded keys and "
            "ignores the real ones (a keep-mask passed where an ignore-mask is expected, "
            "or the reverse)",
        )
    if queries is not None and not queries.changed:
        return (
            "mask.applied_to_queries",
            "and the padded query rows no longer depend on the keys "
            f"({queries.describe()}): the padding mask hides query rows instead of key "
            "columns, so the real tokens still read the padded keys",
        )
    return (
        "mask.ignored",
        "the mask has no effect on these rows (unless a path outside attention mixes "
        f"positions: see ffn.position_wise). {FLOAT_MASK_HINT}",
    )


def gather_evidence(
    tck: Harness,
    inst: Instance,
    probe: Probe,
    base: np.ndarray,
    generator: Generator,
    padded: Delta,
) -> Evidence:
    return Evidence(
        padded,
        experiment_b(tck, inst, probe, base, generator),
        experiment_c(tck, inst, probe, base, generator),
        experiment_d(tck, inst, probe, base, generator),
    )


def fail_padded(probe: Probe, evidence: Evidence) -> CheckFailure:
    code, why = diagnose(evidence)
    metrics = evidence.padded.metrics()
    if evidence.kept is not None:
        metrics.update(evidence.kept.metrics("kept_"))
    return CheckFailure(
        code,
        f"{probe.what}: changing the keys and values at padded positions changes real query "
        f"rows, {evidence.padded.describe()}; {why} (SPEC.md §4.1, §4.2)",
        metrics,
    )


# ---------------------------------------------------------------------------- the checks


@spec("4.1", "4.2", "3.5", id="masks.padding_invariance")
@components(*MASKED)
@given(seed=seeds, scale=scales, data=st.data())
def test_padding_invariance(tck: Harness, seed: int, scale: float, data: st.DataObject) -> None:
    """§4.2: values at padded keys (and, in a decoder, at padded memory positions) have no
    influence on the real query rows, however large they are."""
    inst = cached_instance(tck, "default", tck.own_instance)
    generator = rng(seed)
    shape = data.draw(mask_shapes(tck.component))
    for probe, base in runs(tck, inst, probes(tck, inst, shape, generator)):
        padded = experiment_a(tck, inst, probe, base, generator, scale)
        note_worst(tck, padded)
        if padded.changed:
            require_deterministic(tck, inst, probe.inputs, base)
            raise fail_padded(probe, gather_evidence(tck, inst, probe, base, generator, padded))


@spec("4.1", id="masks.polarity")
@components(*MASKED)
def test_polarity(tck: Harness) -> None:
    """§4.1: True in a keep-mask means *may attend*.

    For ``attention`` a direct probe: with q = 0 every kept key has the same score, so each
    output row is the mean of V over the kept keys; the mean over the masked keys means the
    polarity is inverted, the mean over all keys that the mask is ignored. For the other
    components, experiments A and B on two fixed calls.
    """
    inst = tck.instance()
    if tck.component in HEADS:
        polarity_probe_attention(tck, inst)
        return
    generator = rng(tck.seed)
    lq = 8 if tck.component in SELF_ATTENTION else 6
    for shape in (
        Shape(batch=3, lq=lq, lk=8, lengths=(7, 3, 2)),
        Shape(batch=2, lq=9, lk=9, lengths=(8, 4)),
    ):
        for probe, base in runs(tck, inst, probes(tck, inst, shape, generator)):
            padded = experiment_a(tck, inst, probe, base, generator)
            kept = experiment_b(tck, inst, probe, base, generator)
            tck.note({**padded.metrics("padded_"), **kept.metrics("kept_")})
            if padded.changed:
                require_deterministic(tck, inst, probe.inputs, base)
                evidence = gather_evidence(tck, inst, probe, base, generator, padded)
                raise fail_padded(probe, evidence)


def polarity_probe_attention(tck: Harness, inst: Instance) -> None:
    c = inst.config
    generator = rng(tck.seed)
    lengths = np.array([6, 3, 2])  # every row pads some keys: both means exist
    b, h, lq, lk = len(lengths), c.n_heads, 4, 7
    keep = padding(lengths, lk)  # [B, Lk]
    v = generator.standard_normal((b, h, lk, c.head_dim_v))
    inputs = {
        "q": np.zeros((b, h, lq, c.head_dim_k)),  # every score 0: uniform weights
        "k": generator.standard_normal((b, h, lk, c.head_dim_k)),
        "v": v,
        "keep_mask": keep[:, None, None, :],
    }
    out = tck.run(inst, inputs)  # [B, H, Lq, dv]

    def mean_over(selected: np.ndarray) -> np.ndarray:
        weights = selected[:, None, :, None] / selected.sum(axis=1)[:, None, None, None]
        mean = (v * weights).sum(axis=2, keepdims=True)  # [B, H, 1, dv]
        return np.broadcast_to(mean, out.shape)

    kept, masked, every = mean_over(keep), mean_over(~keep), mean_over(np.ones_like(keep))
    added = mean_over(np.exp(keep.astype(float)))  # a 0/1 mask added to the scores
    if out.shape != kept.shape:
        raise CheckFailure(
            "shape.wrong_output_shape", f"output shape {out.shape}, expected {kept.shape}"
        )
    result = compare(out, kept)
    tck.note({"max_abs_err": result.max_abs_err, "worst_index": result.worst_index})
    if result.passed:
        return
    require_deterministic(tck, inst, inputs, out)
    found = delta(kept, out)
    if compare(out, masked).passed:
        raise CheckFailure(
            "mask.polarity_inverted",
            "with q = 0 the output is the mean of V over the MASKED keys, not the kept ones: "
            f"True is read as 'ignore' ({found.describe()} against the kept-key mean; "
            "SPEC.md §4.1)",
            found.metrics(),
        )
    if compare(out, every).passed:
        raise CheckFailure(
            "mask.ignored",
            "with q = 0 the output is the mean of V over ALL keys: the keep-mask has no "
            f"effect ({found.describe()} against the kept-key mean). {FLOAT_MASK_HINT}",
            found.metrics(),
        )
    if compare(out, added).passed:
        raise CheckFailure(
            "mask.added_as_bias",
            "with q = 0 the weights are proportional to exp(keep): the 0/1 keep-mask is "
            "ADDED to the scores as a float, so masked keys keep a weight of 1/e relative "
            f"to kept ones ({found.describe()} against the kept-key mean). A boolean "
            "keep-mask must remove the masked keys (SPEC.md §4.1)",
            found.metrics(),
        )
    raise CheckFailure(
        "attention.oracle_mismatch",
        "with q = 0 (equal scores) the output is neither the mean of V over the kept keys "
        f"(the spec), nor over the masked keys, nor over all keys: {found.describe()} "
        "(SPEC.md §3.1, §4.1)",
        found.metrics(),
    )


@spec("4.2", id="masks.mask_on_keys_not_queries")
@components(*MASKED)
@given(seed=seeds, data=st.data())
def test_mask_on_keys_not_queries(tck: Harness, seed: int, data: st.DataObject) -> None:
    """§4.2: key padding masks key *columns* for every query; padded query rows are still
    computed by the same formula. Masking query rows instead leaves the real tokens reading
    the padded keys (A moves) and turns the padded rows into zeros or constants (C does
    not move)."""
    inst = cached_instance(tck, "default", tck.own_instance)
    generator = rng(seed)
    shape = data.draw(mask_shapes(tck.component, same_length=True))
    # The probes where a query row maps to a key (not a decoder's memory padding).
    some = [p for p in probes(tck, inst, shape, generator) if p.self_attention or p.query]
    for probe, base in runs(tck, inst, some):
        padded = experiment_a(tck, inst, probe, base, generator)
        queries = experiment_c(tck, inst, probe, base, generator)
        note_worst(tck, padded)
        if padded.changed:
            require_deterministic(tck, inst, probe.inputs, base)
            raise fail_padded(probe, gather_evidence(tck, inst, probe, base, generator, padded))
        if queries is not None and not queries.changed:
            declared_zero_rows(tck, probe, base, queries)


def declared_zero_rows(tck: Harness, probe: Probe, base: np.ndarray, queries: Delta) -> None:
    """Padded query rows that ignore the keys while the real rows are right: the
    ``padded_query_rows='zero'`` convention (§4.2, PyTorch's nested-tensor encoder) when
    declared; undeclared, its code when the rows are exactly 0, else the rows were masked."""
    real = np.broadcast_to(rows_where(probe.keep, base.ndim, probe.axis), base.shape)
    if not np.isfinite(base[real]).all():
        raise CheckFailure(
            "numerics.nonfinite_output",
            f"{probe.what}: padded query rows do not move with the keys ({queries.describe()}), "
            f"but {int((~np.isfinite(base[real])).sum())} real position(s) are NaN or inf as "
            "well: an output undefined where it must be defined says nothing about which rows "
            "the mask reaches (SPEC.md §10.7)",
            queries.metrics(),
        )
    rows = rows_where(~probe.keep, base.ndim, probe.axis)
    zero = not np.abs(np.where(rows, base, 0.0)).max(initial=0.0)
    if tck.subject.conventions.padded_query_rows == "zero":
        tck.convention(
            "convention.padded_query_rows",
            f"It {plain_words('padded_query_rows', 'zero')} (canonical: it "
            f"{plain_words('padded_query_rows', 'computed')}): padded query rows "
            f"{'are 0' if zero else 'do not depend on the keys'}, real rows are unaffected by "
            "the padded keys. padded_query_rows='zero', declared and shown.",
        )
        return
    if zero:
        raise CheckFailure(
            convention_code("padded_query_rows", "zero"),
            f"{probe.what}: padded query rows are exactly 0 ({queries.describe()} after "
            "changing a kept key) but the adapter declares padded_query_rows='computed': "
            "SPEC.md §4.2 computes them by the formula (declare 'zero' if this is meant, "
            "as for PyTorch's nested-tensor encoder)",
            queries.metrics(),
        )
    raise CheckFailure(
        "mask.applied_to_queries",
        f"{probe.what}: padded query rows do not depend on the keys ({queries.describe()} "
        "after changing a kept key): the padding mask is applied to query rows as well as "
        "key columns; SPEC.md §4.2 computes padded rows by the same formula",
        queries.metrics(),
    )


@spec("4.3", id="masks.causal_no_leak")
@components(*MASKED)
@given(seed=seeds, split=split_points(), data=st.data())
def test_causal_no_leak(
    tck: Harness, seed: int, split: tuple[int, int], data: st.DataObject
) -> None:
    """§4.3: under a causal mask, query i sees key j only if j <= i + offset; changing the
    future (every position >= s) leaves every earlier row unchanged."""
    inst = cached_instance(tck, "default", tck.own_instance)
    generator = rng(seed)
    length, s = split
    if tck.component in HEADS:
        lq = data.draw(st.integers(1, 12), label="lq")
        inputs = tck.inputs(inst, Shape(batch=2, lq=lq, lk=length, masked=False, causal=True))
        names, axis = ("k", "v"), 2
        offset = 0 if inst.conventions.causal_alignment == "top_left" else length - lq
        i = np.arange(lq) + offset
        rows = np.broadcast_to((i < s) & (i >= 0), (2, lq))  # sees only keys < s, not empty
    else:
        inputs = causal_inputs(tck, inst, length)
        names, axis = ("query" if tck.component in QKV else "x",), 1
        rows = np.broadcast_to(np.arange(length) < s, (2, length))
    future = np.broadcast_to(np.arange(length) >= s, (2, length))
    base = tck.run(inst, inputs)
    changed = perturb(inputs, names, axis, future, generator, 3.0)
    if tck.component in QKV:  # self-attention: one tensor as query, key and value
        changed.update(key=changed["query"], value=changed["query"])
    changed = tck.run(inst, changed)
    moved = delta(base, changed, rows_where(rows, base.ndim, axis))
    note_worst(tck, moved)
    if moved.changed:
        require_deterministic(tck, inst, inputs, base)
        raise CheckFailure(
            "mask.causal_leak",
            f"changing positions >= {s} (of {length}) changes earlier rows: "
            f"{moved.describe()}; the causal mask lets queries see future keys "
            "(a missing or transposed triangle, or a softmax over the query axis; "
            "SPEC.md §4.3)",
            moved.metrics(),
        )


def causal_inputs(tck: Harness, inst: Instance, length: int, padded: bool = False) -> Inputs:
    """A causal self-attention call without padding (``padded``: a call with key padding and
    no causal mask instead); mha gets one tensor as q, k and v."""
    shape = Shape(batch=2, lq=length, lk=length, masked=padded, causal=not padded)
    inputs = tck.inputs(inst, shape)
    if tck.component in QKV:
        x = inputs["query"]
        inputs.update(query=x, key=x, value=x)
    return inputs


@spec("4.3", "4.4", id="masks.causal_diagonal")
@components(*MASKED)
def test_causal_diagonal(tck: Harness) -> None:
    """§4.3: the diagonal is kept, a token sees itself. Row 0 attends to key 0 alone, so
    it is defined (never an empty row) and for ``attention`` equals v[0]; row i depends on
    its own key and value. A strict triangle (``triu(diagonal=0)``) breaks all three."""
    inst = tck.instance()
    length = 5
    generator = rng(tck.seed)
    if tck.component in (*HEADS, *QKV):
        separate_kv_diagonal(tck, inst, length, generator)
        return
    inputs = causal_inputs(tck, inst, length)
    out = tck.run(inst, inputs)
    row0_defined(tck, inst, length, out, lambda y: y[:, 0])
    if inst.params is None:
        pytest.skip(
            "row 0 is defined; telling a hidden diagonal apart in a whole layer needs "
            "canonical parameters (load or params)"
        )
    if compare(out, tck.gold(inst, inputs)).passed:
        return
    strict = {k: v for k, v in inputs.items() if k != "causal"}
    strict["attn_mask"] = np.tril(np.ones((length, length), bool), k=-1)
    if "attn_mask" in inputs:  # combine with a given mask, as the implementation would
        strict["attn_mask"] &= inputs["attn_mask"]
    gold = tck.gold(inst, strict)
    later = np.arange(length)[None, :, None] >= 1  # row 0 is empty under a strict mask
    if compare(out, gold, ignore=~np.broadcast_to(later, gold.shape)).passed:
        raise CheckFailure(
            "mask.causal_diagonal_hidden",
            "the output matches the spec with a STRICT causal mask (j < i): tokens cannot "
            "see themselves and row 0 has no key at all (SPEC.md §4.3 keeps the diagonal)",
        )
    pytest.skip(
        "the output differs from the oracle in a way a hidden diagonal does not explain "
        "(see equality.oracle)"
    )


def separate_kv_diagonal(
    tck: Harness, inst: Instance, length: int, generator: np.random.Generator
) -> None:
    """attention / mha: change the key and value at position i only; row i must move."""
    inputs = tck.inputs(inst, Shape(batch=2, lq=length, lk=length, masked=False, causal=True))
    keys, axis = (("k", "v"), 2) if tck.component in HEADS else (("key", "value"), 1)
    out = tck.run(inst, inputs)
    row0_defined(tck, inst, length, out, lambda y: y[:, :, 0] if axis == 2 else y[:, 0])
    if tck.component in HEADS:
        # Row 0 attends to key 0 alone: its weight is 1, its output v[0] exactly.
        own = delta(inputs["v"][:, :, :1], out[:, :, :1])
        tck.note(own.metrics("row0_"))
        if own.changed:
            require_deterministic(tck, inst, inputs, out)
            empty_row_diagnosis(tck, inst, inputs, out, own, generator)
    for i in range(length):
        where = np.zeros((2, length), bool)
        where[:, i] = True
        changed = tck.run(inst, perturb(inputs, keys, axis, where, generator))
        moved = delta(out, changed, rows_where(where, out.ndim, axis))
        if not moved.changed:
            raise CheckFailure(
                "mask.causal_diagonal_hidden",
                f"row {i} does not depend on its own key and value (position {i}): "
                f"{moved.describe()}; the causal mask hides the diagonal (SPEC.md §4.3)",
                moved.metrics(),
            )


def empty_row_diagnosis(
    tck: Harness,
    inst: Instance,
    inputs: Inputs,
    out: np.ndarray,
    own: Delta,
    generator: Generator,
) -> None:
    """attention's row 0 is not v[0]: it sees the future, or nothing, or the weights are
    not a softmax over keys at all (then another check names it)."""
    length = out.shape[2]
    later = np.broadcast_to(np.arange(length) >= 1, (2, length))
    first_row = rows_where(np.broadcast_to(np.arange(length) == 0, (2, length)), out.ndim, 2)
    changed = tck.run(inst, perturb(inputs, ("k", "v"), 2, later, generator))
    if delta(out, changed, first_row).changed:
        raise CheckFailure(
            "mask.causal_leak",
            f"row 0 under a causal mask must equal v[0] ({own.describe()}), and it moves "
            "with the later keys: it sees the future (SPEC.md §4.3)",
            own.metrics(),
        )
    row0 = out[:, :, :1]
    mean = inputs["v"].mean(axis=2, keepdims=True)  # what a 'uniform' empty row gives
    if not delta(np.zeros_like(row0), row0).changed or not delta(mean, row0).changed:
        raise CheckFailure(
            "mask.causal_diagonal_hidden",
            f"row 0 under a causal mask must equal v[0] (it sees key 0 alone): "
            f"{own.describe()}; it is the output of a row with no key at all, so the mask "
            "hides the diagonal (SPEC.md §4.3)",
            own.metrics(),
        )
    pytest.skip(
        f"row 0 under a causal mask is not v[0] ({own.describe()}), but neither a leak nor "
        "an empty row: see attention.softmax_rows_sum_to_one"
    )


def row0_defined(
    tck: Harness,
    inst: Instance,
    length: int,
    out: np.ndarray,
    row0: Callable[[np.ndarray], np.ndarray],
) -> None:
    """Row 0 of ``out``, the output of a causal call of ``length`` tokens (``row0`` picks
    the row), is defined. NaN there says the diagonal is hidden only when the subject's
    other masks leave its output defined: NaN at real positions without a mask, or under
    key padding alone, says nothing about the diagonal (a mask built by arithmetic that
    overflows, 0 * -inf, poisons every masked call; SPEC.md §10.7)."""
    if not np.isnan(row0(out)).any():
        return
    others = {
        "without a mask": {**causal_inputs(tck, inst, length), "causal": False},
        "under key padding alone": causal_inputs(tck, inst, length, padded=True),
    }
    for what, other in others.items():
        try:
            found = tck.run(inst, other)
        except Unsupported:  # a subject that is causal by construction
            continue
        undefined = ~np.isfinite(found[real_positions(other, found.shape)])
        if undefined.any():
            raise CheckFailure(
                "numerics.nonfinite_output",
                f"row 0 of the output is NaN under a causal mask, and {what} the output is "
                f"NaN or inf at {int(undefined.sum())} real position(s) too: an output "
                "undefined whatever the mask hides says nothing about the diagonal "
                "(SPEC.md §10.7)",
            )
    raise CheckFailure(
        "mask.causal_diagonal_hidden",
        "row 0 of the output is NaN under a causal mask, where the same subject is defined "
        "without a mask and under key padding: the first token has no key to attend, so the "
        "mask hides the diagonal (SPEC.md §4.3)",
    )


# ------------------------------------------------------------------ fully-masked rows (§4.4)

EMPTY = 1  # the batch row whose keys are all padding


def empty_row_inputs(tck: Harness, inst: Instance) -> Inputs:
    """Batch 3, row 1 with no kept key: its query rows are fully masked (§4.4)."""
    lengths = (6, 0, 3)
    if tck.component in DECODERS:  # the memory of row 1 is all padding
        return tck.inputs(inst, Shape(batch=3, lq=4, lk=6, lengths=lengths))
    lq = 6 if tck.component in (*SELF_ATTENTION, *QKV) else 4
    inputs = tck.inputs(inst, Shape(batch=3, lq=lq, lk=6, lengths=lengths))
    if tck.component in QKV:  # self-attention, one tensor: where PyTorch's fast path runs
        inputs.update(key=inputs["query"], value=inputs["query"])
    return inputs


@spec("4.4", "10.2", id="masks.fully_masked_rows")
@components(*MASKED)
def test_fully_masked_rows(tck: Harness) -> None:
    """§4.4: a query row with no key kept follows the declared policy (zero: 0, nan: NaN,
    uniform: the mean of all values), and never contaminates the other batch rows (§10.2).
    ``attention`` needs no parameters; the others compare the row with the oracle."""
    inst = tck.instance()
    if tck.component not in HEADS:
        tck.require_params(inst)
    inputs = empty_row_inputs(tck, inst)
    out = tck.run(inst, inputs)
    for b in (0, 2):
        alone = tck.run(inst, batch_slice(inputs, b))
        moved = delta(alone, out[b : b + 1])
        if moved.changed:
            require_deterministic(tck, inst, inputs, out)
            raise CheckFailure(
                "batch.rows_interact",
                f"batch row {b} differs from the same row run alone when row {EMPTY} is "
                f"fully masked: {moved.describe()} (the empty row contaminates its "
                "neighbours; SPEC.md §4.4, §10.2)",
                moved.metrics(),
            )
    declared = inst.conventions.fully_masked_rows
    tck.note({"declared": declared})
    if declared == "undefined":
        pytest.skip("fully_masked_rows='undefined' is declared: the empty row is not checked")
    candidates = policy_outputs(tck, inst, inputs, out)
    shown = [p for p, gold in candidates.items() if compare(out[EMPTY], gold[EMPTY]).passed]
    tck.note({"shown": shown})
    if declared in shown:
        return
    first = shown[0] if shown else "other"
    found = delta(candidates[declared][EMPTY], out[EMPTY])
    raise CheckFailure(
        convention_code("fully_masked_rows", first) if shown else "mask.fully_masked_rows_other",
        f"a fully-masked row comes out as {first!r} but the adapter declares "
        f"fully_masked_rows={declared!r}: {found.describe()} against the declared policy "
        "(SPEC.md §4.4)",
        found.metrics(),
    )


def policy_outputs(
    tck: Harness, inst: Instance, inputs: Inputs, out: np.ndarray
) -> dict[str, np.ndarray]:
    """The oracle's output under each policy (``attention`` needs no parameters for it)."""
    golds = {}
    for policy in ("zero", "nan", "uniform"):
        conventions = dataclasses.replace(inst.conventions, fully_masked_rows=policy)
        golds[policy] = tck.gold(inst, inputs, conventions)
    others = np.arange(out.shape[0]) != EMPTY
    result = compare(out[others], golds[inst.conventions.fully_masked_rows][others])
    if not result.passed:
        pytest.skip(
            "the rows with keys already differ from the oracle (see equality.oracle and "
            "masks.padding_invariance), so the empty row's policy cannot be read off"
        )
    return golds
