"""Oracle equality: every subject against the float64 oracle, on inputs where bugs hide.

One instance serves every call of a check, so state kept between calls (caches, buffers
sized by the first call) shows up as a mismatch on a later one.
"""

from __future__ import annotations

import numpy as np
import pytest

from tck.adapters import Unsupported, real_size
from tck.conformance.diagnosis import precision
from tck.conformance.toolkit.harness import CAUSAL_SUBJECTS, Harness, Instance
from tck.conformance.toolkit.results import CheckFailure
from tck.conformance.toolkit.spaces import max_length
from tck.reference import RECORDS, select
from tck.reference.inputs import Shape
from tck.reference.oracle import ROPE_BANDS, head_dim_in_every_band, rope_bands

spec = pytest.mark.spec

# The clauses an oracle-equality pass of each component vouches for (its record's clauses).
CLAUSES = {name: rec.clauses for name, rec in RECORDS.items()}

# Shapes every component is run on, in order, through one instance.
SHAPES = (
    Shape(),  # batch 2, rows of different length, Lq != Lk
    Shape(batch=3, lq=3, lk=1, lengths=(1, 1, 1)),  # a single key
    Shape(batch=1, lq=1, lk=3, masked=False),  # a single query, no mask
    Shape(batch=2, lq=13, lk=13, causal=True),  # causal (for components that take it)
    Shape(batch=2, lq=6, lk=11, magnitude=30.0),  # large scores: softmax saturates
)
LONG = Shape(batch=2, lq=113, lk=113)  # not a multiple of 8, 16 or 64
# Causal with no padding at all: a causal mask measured on its own (SPEC.md §10.11).
CAUSAL_UNPADDED = Shape(batch=2, lq=9, lk=9, masked=False, causal=True)
CALLS = (*SHAPES, LONG, CAUSAL_UNPADDED)


@spec(*sorted({c for cs in CLAUSES.values() for c in cs}), "10.11", id="equality.oracle")
def test_oracle(tck: Harness) -> None:
    tck.record.measured(*CLAUSES[tck.component], "10.11")
    inst = tck.instance()
    tck.require_params(inst)
    unsupported = []
    images = RECORDS[tck.component].has("images")
    # a checkpoint's real-size stack: at most this many images a call
    most = real_size.images_per_call(tck.subject, "equality.oracle") if tck.real_size else None
    batches: set[int] = set()
    for index, shape in enumerate(CALLS):
        if RECORDS[tck.component].has("fixed_magnitude") and shape.magnitude != 1.0:
            continue
        if images and (shape.batch in batches or (most is not None and shape.batch > most)):
            # an image model's call has no length, mask or causal flag: calls of one batch
            # size differ by the draw alone (a ViT-B/16 image is a 197-token forward)
            continue
        batches.add(shape.batch)
        inputs = tck.inputs(inst, shape, seed=index)
        try:
            tck.assert_matches_oracle(inst, inputs, what=f"call {index + 1} ({_describe(shape)})")
        except Unsupported as why:  # this call only: the other shapes still count
            unsupported.append(f"{_describe(shape)}: {why}")
    full = _real_length(tck)
    if full is not None:  # a checkpoint's own length (512 for BERT-base): once, one row
        shape = Shape(batch=1, lq=full, lk=full)
        inputs = tck.inputs(inst, shape, seed=len(CALLS))
        try:
            # a real-size language model: judged layer by layer where its adapter records
            # the layers (tck.conformance.toolkit.teacher), else by the whole comparison
            what = f"full length ({_describe(shape)})"
            tck.assert_matches_oracle(inst, inputs, what=what, by_layer=True)
        except Unsupported as why:
            unsupported.append(f"{_describe(shape)}: {why}")
        tck.note({"full_length": full})
    made = len(batches) if images else len(CALLS)
    if len(unsupported) == made + (full is not None):
        pytest.skip("; ".join(unsupported))
    if unsupported:
        tck.note({"unsupported_calls": unsupported})
    _declared_rules(tck, inst)


# The longest call made to reach past a declared sliding window: the oracle's scores are
# O(L^2) in float64, and a checkpoint's own window is reached by its full-length call.
WINDOW_REACH = 1024


def _declared_rules(tck: Harness, inst: Instance) -> None:
    """A declared convention whose rule only some sizes compute, at a size that computes it
    (SPEC.md §10.11): Llama 3.1's RoPE scaling needs a head dimension with a pair in each of
    its three bands (§2.6: at d_k = 6 and base 500000 no pair is in the blended band, so a
    wrong blend passes every call above); a sliding window needs a causal call longer than
    the window (§4.5). A subject that cannot be built at such a size never computes the rule
    (a checkpoint's fixed head dimension, a maximum length within the window): noted. A
    window past the longest call this check makes leaves the check unverified."""
    conv, fields = inst.conventions, RECORDS[tck.component].fields
    seed = len(CALLS) + 1
    d = inst.config.head_dim_k
    here = rope_bands(d, conv) if "rope_scaling" in fields else ()  # () without bands
    empty = [b for b in ROPE_BANDS if b not in here]
    if here and empty:
        bands = " and ".join(empty) + (" bands" if len(empty) > 1 else " band")
        why = f"rope_scaling={conv.rope_scaling!r}: at d_k = {d} its {bands} holds no RoPE pair"
        wanted = head_dim_in_every_band(conv, d)
        try:
            if wanted is None:
                raise Unsupported("no head dimension up to 256 has a pair in every band")
            wider = (
                {"d_k": wanted} if inst.config.d_k else {"d_model": wanted * inst.config.n_heads}
            )
            config = tck.config(**wider)
            if config.head_dim_k != wanted:  # the subject fixes its sizes
                raise Unsupported(f"{tck.subject.name} fixes d_k = {config.head_dim_k}")
            wide = tck.instance(config)
        except Unsupported as refused:  # this model never computes that band's rule
            tck.note({"rope_bands_not_computed": f"{why}, and no instance has one: {refused}"})
        else:
            _exercise(tck, wide, tck.inputs(wide, LONG, seed=seed), f"d_k = {wanted} ({why})")
    window = conv.sliding_window if "sliding_window" in fields else None
    if window:
        always = tck.component in CAUSAL_SUBJECTS  # a decoder-only subject: every call
        causal = [c["seq_len"] or 0 for c in tck.record.calls if always or c.get("causal")]
        if max(causal, default=0) > window:
            return
        length = window + 8
        limit = max_length(tck.subject)
        what = f"sliding_window={window} declared; no causal call was longer than the window"
        if limit is not None and length > limit:  # the model never masks by its window
            tck.note({"window_not_reached": f"{what}: the subject takes at most {limit} tokens"})
            return
        if length > WINDOW_REACH:
            tck.record.unmeasured.append(f"{what}, and none is made past {WINDOW_REACH} tokens")
            return
        shape = Shape(batch=1, lq=length, lk=length, masked=False, causal=True)
        _exercise(tck, inst, tck.inputs(inst, shape, seed=seed), f"{what}: L = {length}")


def _exercise(tck: Harness, inst: Instance, inputs: dict[str, np.ndarray], what: str) -> None:
    """One oracle comparison for a declared rule; a call the subject refuses leaves the rule
    unmeasured, never the check skipped."""
    try:
        tck.assert_matches_oracle(inst, inputs, what=what)
    except Unsupported as why:
        tck.record.unmeasured.append(f"{what}, and the subject refused the call: {why}")


@spec("5.1", "5.2", "5.3", "5.4", id="equality.low_variance_rows")
@pytest.mark.components(*select("norm"))
def test_low_variance_rows(tck: Harness) -> None:
    """Rows whose variance is near eps: where eps and its placement decide the output."""
    inst = tck.instance()
    rng = np.random.default_rng(tck.seed)
    x = rng.standard_normal((3, 4, inst.config.d_model))
    x = x * np.array([1.0, 1e-3, 1e-5])[:, None, None] + 5.0  # variance 1, 1e-6, 1e-10
    try:
        tck.assert_matches_oracle(inst, {"x": x}, what="low-variance rows")
    except CheckFailure as failure:
        if not failure.code.endswith(".oracle_mismatch"):
            raise
        raise precision.variance_cancels(tck, inst, {"x": x}, failure) or failure from None


def _real_length(tck: Harness) -> int | None:
    """The length a checkpoint checked as it is runs at (``real_length`` of its adapter,
    e.g. 512 for BERT-base): None for adapters that build subjects at the suite's sizes."""
    real_length = getattr(tck.adapter, "real_length", None)
    return real_length(tck.subject) if callable(real_length) else None


def _describe(shape: Shape) -> str:
    parts = [f"B={shape.batch}", f"Lq={shape.lq}", f"Lk={shape.lk}"]
    if shape.causal:
        parts.append("causal")
    if not shape.masked:
        parts.append("no mask")
    if shape.magnitude != 1.0:
        parts.append(f"inputs x{shape.magnitude:g}")
    return ", ".join(parts)
