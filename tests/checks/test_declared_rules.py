"""A declared convention whose rule only some sizes compute is computed (SPEC.md §2.6, §4.5,
§10.11): equality.oracle adds a call at a size that computes it, or reports the check
unverified saying which rule it could not reach; a model that never computes the rule at
the sizes it can be built at (a fixed head dimension) passes with a note. Llama 3.1's RoPE
scaling has three bands of wavelength; at the suite's default head dimension (d_k = 6) and
Llama 3's base 500000 no pair lies in the blended band. A sliding window wider than every
causal call masks nothing."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from support.check_rows import check_rows

from tck.adapters import TorchModuleAdapter
from tck.adapters.reference import LLAMA, entry
from tck.reference import Conventions
from tck.reference.oracle import head_dim_in_every_band, rope_bands

pytestmark = pytest.mark.spec("2.6", "4.5", "10.11")

LLAMA31 = Conventions(
    positions="rope",
    pe_base=500000.0,
    rope_scaling="llama3",
    rope_scaling_factor=8.0,
    rope_original_max_positions=8192,
)


def _wavelengths(d: int, base: float) -> list[float]:
    return [2 * math.pi * base ** (2 * i / d) for i in range(d // 2)]


def test_bands_by_wavelength() -> None:
    # the band edges of Llama 3.1's numbers: 8192 / 1 and 8192 / 4 positions
    assert [round(w) for w in _wavelengths(6, 500000.0)] == [6, 499, 39582]
    assert rope_bands(6, LLAMA31) == ("kept", "kept", "divided")  # nothing in 2048 .. 8192
    assert round(_wavelengths(8, 500000.0)[2]) == 4443
    assert rope_bands(8, LLAMA31) == ("kept", "kept", "blended", "divided")
    assert head_dim_in_every_band(LLAMA31, 6) == 8
    assert head_dim_in_every_band(LLAMA31, 8) == 8
    # at base 10000 the bands sit elsewhere: d = 12 is the first with all three
    base_10k = dataclasses.replace(LLAMA31, pe_base=10000.0)
    assert [rope_bands(d, base_10k).count("blended") for d in (8, 10)] == [1, 0]
    assert head_dim_in_every_band(base_10k, 6) == 12
    # scalings without bands: every d computes the rule
    assert rope_bands(6, dataclasses.replace(LLAMA31, rope_scaling="linear")) == ()
    assert head_dim_in_every_band(dataclasses.replace(LLAMA31, rope_scaling="none"), 6) == 6
    # a band no head dimension reaches: the long band needs wavelengths above 10^9
    unreachable = dataclasses.replace(LLAMA31, rope_original_max_positions=10**9)
    assert head_dim_in_every_band(unreachable, 6) is None


def _oracle_row(tmp_path: Path, monkeypatch, spec: str, subject: str) -> dict:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    # a component: its other subjects run too
    rows = check_rows(tmp_path, "test_equality", "test_oracle", spec, only=[subject.split("[")[0]])
    [row] = [r for r in rows if r["check"] == "equality.oracle" and r["subject"] == subject]
    return row


_LLAMA31 = dataclasses.replace(
    LLAMA, pe_base=500000.0, rope_scaling="llama3", rope_original_max_positions=8192
)
# the head dimension fixed at the default's 6: no instance has a blended pair
fixed_dim = TorchModuleAdapter(
    "fixed-dim",
    [
        dataclasses.replace(
            entry("causal_self_attention", _LLAMA31), config={"d_model": 24, "n_heads": 4}
        )
    ],
)
# a window wider than any causal call of the suite, and one wider than it reaches
window_200 = TorchModuleAdapter(
    "window-200",
    [entry("causal_self_attention", dataclasses.replace(LLAMA, sliding_window=200))],
)
window_2000 = TorchModuleAdapter(
    "window-2000",
    [entry("causal_self_attention", dataclasses.replace(LLAMA, sliding_window=2000))],
)


def test_a_correct_llama31_passes_with_a_call_in_every_band(tmp_path, monkeypatch) -> None:
    row = _oracle_row(tmp_path, monkeypatch, "reference", "causal_self_attention[llama3]")
    assert row["status"] == "pass", row["diagnosis"]
    [call] = [c for c in row["metrics"]["calls"] if c["what"].startswith("d_k = 8")]
    assert "blended band holds no RoPE pair" in call["what"] and call["passed"]


def test_the_blend_swapped_is_caught_at_a_head_dimension_with_a_blended_pair(
    tmp_path, monkeypatch
) -> None:
    spec = "tck.adapters.mutants.rope_scaling_blend_swapped:adapter"
    row = _oracle_row(tmp_path, monkeypatch, spec, "causal_self_attention")
    assert row["status"] == "fail"
    assert row["diagnosis"]["code"] == "positional.frequency_wrong"
    assert row["diagnosis"]["message"].startswith("d_k = 8 ")
    # every call at the default head dimension passed: the bug is in the band they lack
    assert all(c["passed"] for c in row["metrics"]["calls"] if not c["what"].startswith("d_k"))


def test_a_band_the_model_never_computes_is_noted(tmp_path, monkeypatch) -> None:
    # built only at d_k = 6: this model has no blended pair, so the blend is not its maths
    spec = "test_declared_rules:fixed_dim"
    row = _oracle_row(tmp_path, monkeypatch, spec, "causal_self_attention")
    assert row["status"] == "pass"
    note = row["metrics"]["rope_bands_not_computed"]
    assert "at d_k = 6 its blended band holds no RoPE pair" in note and "fixes d_k = 6" in note


def test_a_window_wider_than_every_call_gets_a_longer_call(tmp_path, monkeypatch) -> None:
    row = _oracle_row(
        tmp_path, monkeypatch, "test_declared_rules:window_200", "causal_self_attention"
    )
    assert row["status"] == "pass", row["diagnosis"]
    calls = row["metrics"]["calls"]
    assert calls[-1]["seq_len"] == 208 and "sliding_window=200" in calls[-1]["what"]


def test_a_window_past_the_reach_is_unverified(tmp_path, monkeypatch) -> None:
    spec = "test_declared_rules:window_2000"
    row = _oracle_row(tmp_path, monkeypatch, spec, "causal_self_attention")
    assert row["status"] == "unverified"
    assert "sliding_window=2000" in row["diagnosis"]["message"]
    assert "1024 tokens" in row["diagnosis"]["message"]
