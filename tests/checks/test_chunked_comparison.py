"""A causal LM's long call is compared with the oracle in chunks of positions
(``harness.gold_chunks``, docs/performance.md "Real sizes"): the same rule as the whole
comparison, the whole oracle output never held. Exercised on small shapes with the
threshold lowered."""

from __future__ import annotations

import numpy as np
import pytest

from tck.adapters import Adapter, Subject, load_adapter
from tck.conformance.toolkit import harness as harness_module
from tck.conformance.toolkit.harness import (
    Harness,
    chunk_part,
    combine_chunks,
)
from tck.reference.inputs import Shape
from tck.reference.tolerance import compare, k_forward

pytestmark = pytest.mark.spec("10.7", "11.5")

REFERENCE = load_adapter("reference")
FACTS = ("passed", "max_abs_err", "bound", "ratio", "worst_index", "nan_mismatch", "careful_err")


def _subject(adapter: Adapter, name: str) -> Subject:
    return next(s for s in adapter.subjects() if s.name == name)


def _chunked(test, gold, ignore, step, dtype="float64", careful_err=0.0, k=3.0):
    parts = []
    for start in range(0, gold.shape[1], step):
        where = slice(start, start + step)
        part_ignore = None if ignore is None else ignore[:, where]
        parts.append(chunk_part(test[:, where], gold[:, where], part_ignore, start, careful_err))
    return combine_chunks(parts, gold.shape, dtype, k)


def test_combined_chunks_are_the_whole_rule() -> None:
    """Chunk by chunk, combined: the verdict, largest error and its index, bound, ratio and
    NaN count of ``compare`` on the whole array, its mean within 1e-12 relative (a sum in
    another order), with and without ignored positions and NaNs."""
    rng = np.random.default_rng(11)
    for trial in range(30):
        gold = rng.standard_normal((1, 17, 9)) * 10.0 ** rng.integers(-2, 3)
        test = gold + rng.standard_normal(gold.shape) * 10.0 ** rng.integers(-16, -8)
        ignore = None
        if trial % 3 == 1:
            ignore = rng.random(gold.shape) < 0.2
        if trial % 3 == 2:
            test[0, trial % 17, 3] = np.nan
            gold[0, (trial + 5) % 17, 4] = np.nan
            ignore = np.zeros(gold.shape, bool)
        for dtype in ("float64", "float32"):
            whole = compare(test, gold, dtype=dtype, careful_err=1e-9, k=3.0, ignore=ignore)
            for step in (1, 4, 17):
                parts = _chunked(test, gold, ignore, step, dtype=dtype, careful_err=1e-9)
                assert [getattr(parts, f) for f in FACTS] == [getattr(whole, f) for f in FACTS]
                assert np.isclose(parts.mean_abs_err, whole.mean_abs_err, rtol=1e-12, atol=0)


def _compared(monkeypatch, name: str, dtype: str, chunked: bool, length: int = 23):
    """The metrics and the call row of assert_matches_oracle on one unpadded call of
    ``length`` tokens, with the chunked path taken (chunks of 2 positions) or not."""
    monkeypatch.setattr(harness_module, "CHUNKED_ABOVE", 0 if chunked else 1 << 60)
    monkeypatch.setattr(harness_module, "CHUNK_VALUES", 2 * 23)  # vocabulary 23: 2 positions
    tck = Harness(REFERENCE, _subject(REFERENCE, name), seed=0)
    inst = tck.instance(dtype=dtype)
    inputs = tck.inputs(inst, Shape(batch=1, lq=length, lk=length, masked=False), seed=3)
    taken = []
    real = harness_module.gold_chunks
    monkeypatch.setattr(
        harness_module,
        "gold_chunks",
        lambda *a: taken.append(real(*a)) or taken[-1],
    )
    tck.assert_matches_oracle(inst, inputs)
    assert (taken[-1] is not None) == chunked
    largest = float(np.abs(tck.gold(inst, inputs)).max())
    return tck.record.metrics, {**tck.record.calls[-1], "largest": largest}


@pytest.mark.parametrize(
    "name,dtype",
    [("causal_lm", "float64"), ("causal_lm", "float32"), ("causal_lm[llama]", "float32")],
)
def test_chunked_call_is_the_whole_call(monkeypatch, name: str, dtype: str) -> None:
    """The same call of the reference causal LM compared whole and in chunks: the same
    verdict and worst index, the error to 1e-9 relative (the oracle's last product in
    another blocking: a few float64 ulps). Below float64 the careful run's logits are
    formed per chunk too, in its dtype: its error, and with it the bound, may move by a few
    of that dtype's ulps of the largest logit (bound here: 8 float32 ulps)."""
    whole_metrics, whole_call = _compared(monkeypatch, name, dtype, chunked=False)
    chunk_metrics, chunk_call = _compared(monkeypatch, name, dtype, chunked=True)
    assert chunk_call["passed"] and whole_call["passed"]
    assert chunk_metrics["worst_index"] == whole_metrics["worst_index"]
    assert np.isclose(chunk_metrics["max_abs_err"], whole_metrics["max_abs_err"], rtol=1e-9)
    if dtype == "float64":
        assert np.isclose(chunk_metrics["bound"], whole_metrics["bound"], rtol=1e-12)
    else:
        moved = abs(chunk_metrics["ref_max_abs_err"] - whole_metrics["ref_max_abs_err"])
        assert moved <= 8 * np.finfo(np.float32).eps * whole_call["largest"], moved


def test_chunked_call_fails_a_wrong_position(monkeypatch) -> None:
    """A subject wrong at one position past the first chunk fails the chunked comparison,
    with that position as the worst index."""
    monkeypatch.setattr(harness_module, "CHUNKED_ABOVE", 0)
    monkeypatch.setattr(harness_module, "CHUNK_VALUES", 2 * 23)
    tck = Harness(REFERENCE, _subject(REFERENCE, "causal_lm"), seed=0)
    inst = tck.instance()
    inputs = tck.inputs(inst, Shape(batch=1, lq=15, lk=15, masked=False), seed=3)
    test = tck.run(inst, inputs)
    test[0, 9, 4] += 1e-6
    chunks = harness_module.gold_chunks(tck, inst, inputs, test.shape)
    result = tck.compare_chunked(inst, test, chunks, inputs)
    assert not result.passed and result.worst_index == (0, 9, 4)
    whole = compare(test, tck.gold(inst, inputs), k=k_forward("causal_lm"))
    assert result.bound == pytest.approx(whole.bound, rel=1e-12)


def test_compare_by_rows_is_compare() -> None:
    """A large array (a token table's gradient) compared by chunks of rows: the verdict,
    largest error and its index, bound and ratio of the whole comparison, with the scale
    given (float64 gradients) or taken from the gold; the largest finite |value| by rows is
    the whole array's."""
    rng = np.random.default_rng(3)
    gold = rng.standard_normal((41, 5))
    test = gold + rng.standard_normal(gold.shape) * 1e-14
    test[29, 3] += 1e-9
    gold[7, 1] = np.inf
    test[7, 1] = np.inf
    for scale in (None, 3.5):
        for dtype in ("float64", "float32"):
            whole = compare(test, gold, dtype=dtype, careful_err=1e-12, k=3.0, scale=scale)
            for values in (5, 12, 60):
                with pytest.MonkeyPatch.context() as patch:
                    patch.setattr(harness_module, "CHUNK_VALUES", values)
                    rows = harness_module.compare_by_rows(
                        test, gold, dtype=dtype, careful_err=1e-12, k=3.0, scale=scale
                    )
                    largest = harness_module.largest_finite(gold)
                    assert largest == np.abs(gold[np.isfinite(gold)]).max()
                assert [getattr(rows, f) for f in FACTS] == [getattr(whole, f) for f in FACTS]
