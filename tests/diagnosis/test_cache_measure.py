"""Cache addressing measured (conformance/diagnosis/cache_measure.py, SPEC.md §11.6): a
cache whose slots overlap is named by which earlier tokens stop reaching the last one after
cached decoding; layers sharing one cache by a one-layer build decoding right where the
subject does not. The reference's cache gives neither."""

from __future__ import annotations

import pytest

from tck.adapters import load_adapter
from tck.adapters.mutants import cache_slots_overlap
from tck.conformance.checks import test_decoder
from tck.conformance.diagnosis.cache_measure import measure_cache
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.results import CheckFailure


def _harness(adapter: str, component: str) -> Harness:
    loaded = load_adapter(adapter)
    subject = next(s for s in loaded.subjects() if s.component == component)
    return Harness(loaded, subject, seed=0)


@pytest.mark.parametrize("page_size", [3, 4, 5])
def test_overlapping_slots_are_named_whatever_the_page_size(
    page_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache_slots_overlap, "PAGE_SIZE", page_size)
    tck = _harness("mutants.cache_slots_overlap", "causal_self_attention")
    with pytest.raises(CheckFailure) as failure:
        test_decoder.test_kv_cache(tck)
    assert failure.value.code == "cache.slots_overlap", failure.value


def test_layers_sharing_one_cache_are_named() -> None:
    tck = _harness("mutants.cache_layers_share_pool", "causal_lm")
    with pytest.raises(CheckFailure) as failure:
        test_decoder.test_kv_cache(tck)
    assert failure.value.code == "cache.layers_share_pool", failure.value


@pytest.mark.parametrize("component", ["causal_self_attention", "decoder_block", "causal_lm"])
def test_a_right_cache_measures_nothing(component: str) -> None:
    tck = _harness("reference", component)
    inst = test_decoder.instance(tck)
    assert measure_cache(tck, inst, test_decoder.unpadded(tck, inst, 2, 11, seed=509)) is None
