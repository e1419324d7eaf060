"""Self-tests of the decoder options the kit models beyond GPT-2's and Llama's defaults:
the sliding-window causal mask (SPEC.md §4.5) and RoPE frequency scaling (§2.6): the oracle
by hand, against the torch reference model (float64, 1e-12) and against transformers'
own modules (float32, with the bound stated at each comparison)."""

from __future__ import annotations

import dataclasses
import importlib.util

import numpy as np
import pytest
import torch

from tck.adapters.reference import LLAMA, adapter
from tck.conformance.decoding import decode
from tck.reference import Config, Conventions, init_params, oracle
from tck.reference import model as ref
from tck.reference.expected import expected
from tck.reference.inputs import Shape, make_inputs

spec = pytest.mark.spec
needs_transformers = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None,
    reason="transformers is not installed (tox -e hf installs it)",
)
CONFIG = Config(d_model=24, n_heads=4, d_ff=40, vocab_size=23, max_len=64, n_kv_heads=2)
TOL = 1e-12  # float64 oracle vs float64 torch: a few ulps of O(1) values through a stack
# A float32 model against the float64 oracle on its own (float32) weights: the float32
# rounding of a 2-layer stack of width 32 is ~1e-6 relative on O(1) logits; 1e-4 leaves
# room for it, and every option compared below moves the logits by more than 1e-2.
FLOAT32_BOUND = 1e-4
WINDOW = dataclasses.replace(LLAMA, sliding_window=3)


# ------------------------------------------------------------------ §4.5 sliding window


@spec("4.5")
def test_window_mask_by_hand() -> None:
    """SPEC.md §4.5's picture: w = 3 over 5 tokens; each query sees min(i + 1, w) keys, its
    own the last; bottom-right alignment shifts the band with the offset."""
    keep = oracle.causal_keep_mask(5, 5, window=3)
    expected_rows = ["10000", "11000", "11100", "01110", "00111"]
    assert ["".join(str(int(v)) for v in row) for row in keep] == expected_rows
    assert keep.sum(axis=1).tolist() == [1, 2, 3, 3, 3]
    step = oracle.causal_keep_mask(2, 6, "bottom_right", window=3)  # a cached step of 2 of 6
    assert step.astype(int).tolist() == [[0, 0, 1, 1, 1, 0], [0, 0, 0, 1, 1, 1]]
    assert (oracle.causal_keep_mask(4, 4, window=4) == oracle.causal_keep_mask(4, 4)).all()
    torch_keep = ref.causal_keep_mask(2, 6, "bottom_right", window=3)
    assert torch_keep.numpy().tolist() == step.tolist()


@spec("4.5")
def test_window_agrees_with_transformers_overlay() -> None:
    """transformers' sliding_window_overlay and causal_mask_function give the same keep-mask
    (kv_idx > q_idx - w and kv_idx <= q_idx) at every width up to the length and beyond."""
    masking = pytest.importorskip("transformers.masking_utils")
    for w in (1, 2, 3, 7, 12):
        rule = masking.sliding_window_causal_mask_function(w)
        q, k = torch.arange(9)[:, None], torch.arange(9)[None, :]
        theirs = rule(torch.tensor(0), torch.tensor(0), q, k).numpy()
        assert (theirs == oracle.causal_keep_mask(9, 9, window=w)).all(), w


@spec("4.5", "0.3")
@pytest.mark.parametrize("bad", [0, -2, 2.5, True])
def test_window_must_be_a_width(bad) -> None:
    with pytest.raises(ValueError, match="sliding_window"):
        Conventions(sliding_window=bad)


def _reference(name: str, shape: Shape, seed: int = 0):
    subject = next(s for s in adapter.subjects() if s.name == name)
    handle = adapter.build(subject, CONFIG, seed=seed)
    params = init_params(subject.component, CONFIG, subject.conventions, seed=seed + 1)
    adapter.load(handle, params)
    inputs = make_inputs(subject.component, CONFIG, np.random.default_rng(seed), shape)
    return subject, handle, params, inputs


@spec("4.5", "11.1", "11.5")
@pytest.mark.parametrize("name", ["causal_self_attention[window]", "causal_lm[mistral]"])
def test_window_oracle_matches_torch_reference(name: str) -> None:
    """The oracle and the reference model under the declared window (4 keys), on 13 tokens
    with padding; the window changes the output there (so the comparison sees it)."""
    subject, handle, params, inputs = _reference(name, Shape(batch=2, lq=13))
    gold = expected(subject.component, inputs, params, CONFIG, subject.conventions)
    assert np.abs(adapter.run(handle, inputs) - gold).max() < TOL
    full = dataclasses.replace(subject.conventions, sliding_window=None)
    assert np.abs(expected(subject.component, inputs, params, CONFIG, full) - gold).max() > 1e-3


@spec("4.5", "11.6")
@pytest.mark.parametrize("name", ["causal_self_attention[window]", "causal_lm[mistral]"])
def test_window_kv_cache_equals_full_forward(name: str) -> None:
    """§11.6 under a window: the cache keeps every key, the step's mask the last 4; each
    step's rows equal the full forward's (prefill 2, then one token at a time to 11)."""
    subject, handle, _, inputs = _reference(name, Shape(batch=2, lq=11, masked=False))
    full = adapter.run(handle, inputs)
    outs, ranges = decode(adapter, handle, subject.component, inputs, prefill=2)
    for out, (start, stop) in zip(outs, ranges, strict=True):
        assert np.abs(out - full[:, start:stop]).max() < TOL


@spec("4.5", "11.7")
def test_window_left_padding_is_invariant() -> None:
    """Left pads sit before every real token: under a window counted in key slots, a
    left-padded row (its pads masked, positions shifted) gives what the row gives alone."""
    params = init_params("causal_lm", CONFIG, WINDOW, seed=3)
    ids = np.random.default_rng(0).integers(0, CONFIG.vocab_size, (1, 8))
    alone = oracle.causal_lm(ids, params, CONFIG, conventions=WINDOW)
    padded = np.concatenate([np.array([[5, 7, 1]]), ids], axis=1)
    keep = np.arange(11)[None] >= 3
    shifted = np.maximum(np.arange(11) - 3, 0)[None]
    out = oracle.causal_lm(
        padded, params, CONFIG, key_padding=keep, positions=shifted, conventions=WINDOW
    )
    assert np.abs(out[:, 3:] - alone).max() < TOL


def _mistral_config(window: int | None, **extra):
    import transformers

    return transformers.MistralConfig(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
        rms_norm_eps=1e-6,
        sliding_window=window,
        tie_word_embeddings=False,
        **extra,
    )


OURS_MISTRAL = Config(
    d_model=32,
    n_heads=4,
    n_kv_heads=2,
    d_ff=48,
    n_layers=2,
    vocab_size=50,
    max_len=64,
    padding_idx=None,
    tie_weights=False,
    bias=False,
)


def _canonical(model: torch.nn.Module, config: Config) -> dict[str, np.ndarray]:
    """transformers' Llama-family weights under their canonical names (SPEC.md §0.2)."""
    from tck.adapters.hf_decoder import _llama_model_map

    state = model.state_dict()
    return {k: state[v].double().numpy() for k, v in _llama_model_map(config).items()}


@needs_transformers
@spec("4.5", "11.5")
@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_window_oracle_matches_transformers_mistral(implementation: str) -> None:
    """MistralForCausalLM with sliding_window=3 (float32, random weights) against the oracle
    under sliding_window=3 on its own weights, 12 tokens: within FLOAT32_BOUND; the oracle
    without the window, or with 4, is off by more than 1e-2."""
    import transformers

    torch.manual_seed(0)
    model = transformers.MistralForCausalLM(
        _mistral_config(3, attn_implementation=implementation)
    ).eval()
    params = _canonical(model, OURS_MISTRAL)
    ids = np.random.default_rng(1).integers(0, 50, (2, 12))
    with torch.no_grad():
        theirs = model(torch.from_numpy(ids)).logits.double().numpy()
    ours = oracle.causal_lm(ids, params, OURS_MISTRAL, conventions=WINDOW)
    assert np.abs(theirs - ours).max() < FLOAT32_BOUND
    for other in (None, 4):
        moved = dataclasses.replace(WINDOW, sliding_window=other)
        off = oracle.causal_lm(ids, params, OURS_MISTRAL, conventions=moved)
        assert np.abs(theirs - off).max() > 1e-2, other
