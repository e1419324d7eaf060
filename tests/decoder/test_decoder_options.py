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
from tck.conformance.diagnosis.decoding import decode
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


def _load_ours(model: torch.nn.Module, config: Config, conventions: Conventions):
    """init_params's weights (std 1/sqrt(fan_in): attention far from uniform, so positions
    matter) rounded to float32, loaded into transformers' model under its own names; the
    float64 values of what it holds, by canonical name."""
    from tck.adapters.hf_decoder import _llama_model_map

    params = init_params("causal_lm", config, conventions, seed=5)
    params = {k: v.astype(np.float32).astype(np.float64) for k, v in params.items()}
    state = {
        theirs: torch.from_numpy(params[ours]).float()
        for ours, theirs in _llama_model_map(config).items()
    }
    model.load_state_dict(state)  # strict: every tensor of the model is set
    return params


@needs_transformers
@spec("4.5", "11.5")
@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_window_oracle_matches_transformers_mistral(implementation: str) -> None:
    """MistralForCausalLM with sliding_window=3 (float32, init_params's weights) against the oracle
    under sliding_window=3 on its own weights, 12 tokens: within FLOAT32_BOUND; the oracle
    without the window, or with 4, is off by more than 1e-2."""
    import transformers

    torch.manual_seed(0)
    model = transformers.MistralForCausalLM(
        _mistral_config(3, attn_implementation=implementation)
    ).eval()
    params = _load_ours(model, OURS_MISTRAL, WINDOW)
    ids = np.random.default_rng(1).integers(0, 50, (2, 12))
    with torch.no_grad():
        theirs = model(torch.from_numpy(ids)).logits.double().numpy()
    ours = oracle.causal_lm(ids, params, OURS_MISTRAL, conventions=WINDOW)
    assert np.abs(theirs - ours).max() < FLOAT32_BOUND
    for other in (None, 4):
        moved = dataclasses.replace(WINDOW, sliding_window=other)
        off = oracle.causal_lm(ids, params, OURS_MISTRAL, conventions=moved)
        assert np.abs(theirs - off).max() > 1e-2, other


# ------------------------------------------------------------ §2.6 RoPE frequency scaling

LLAMA3 = dataclasses.replace(
    LLAMA,
    pe_base=500000.0,
    rope_scaling="llama3",
    rope_scaling_factor=8.0,
    rope_low_freq_factor=1.0,
    rope_high_freq_factor=4.0,
    rope_original_max_positions=32,
)
LINEAR = dataclasses.replace(LLAMA, rope_scaling="linear", rope_scaling_factor=2.0)


@spec("2.6")
def test_scaled_frequencies_by_hand() -> None:
    """none keeps base^(-2i/d); linear divides each by the factor; llama3 at d = 8,
    base 10000, L = 64: wavelengths 2 pi, 20 pi, 200 pi, 2000 pi against L / 4 = 16 and
    L / 1 = 64: the first kept, the last two divided by 8, the second blended with
    s = (64 / (20 pi) - 1) / 3."""
    omega = 10000.0 ** (-np.arange(0, 8, 2) / 8)
    assert np.allclose(oracle.rope_frequencies(8), omega, rtol=1e-15)
    assert np.allclose(oracle.rope_frequencies(8, scaling="linear", factor=4.0), omega / 4)
    got = oracle.rope_frequencies(8, scaling="llama3", original_max_positions=64)
    s = (64 / (20 * np.pi) - 1.0) / 3.0
    hand = [omega[0], (1 - s) * omega[1] / 8 + s * omega[1], omega[2] / 8, omega[3] / 8]
    assert np.allclose(got, hand, rtol=1e-15, atol=0)
    # linear scaling rotates position p as the unscaled rule rotates p / factor
    x = np.random.default_rng(0).standard_normal((5, 8))
    pos = np.arange(5) * 2
    scaled = oracle.rope(
        x, pos, frequencies=oracle.rope_frequencies(8, scaling="linear", factor=2.0)
    )
    assert np.abs(scaled - oracle.rope(x, pos / 2)).max() < 1e-14


@spec("2.6")
def test_llama3_blend_is_continuous() -> None:
    """At the two edges of the blend the llama3 rule meets its neighbours: s = 0 at
    lambda = L / low (omega / factor) and s = 1 at lambda = L / high (omega)."""
    context, low, high, factor = 64, 1.0, 4.0, 8.0
    for wavelength, expected_ratio in ((context / low, 1 / factor), (context / high, 1.0)):
        for nudge in (1 - 1e-9, 1 + 1e-9):
            omega = 2 * np.pi / (wavelength * nudge)
            base = omega**-2.0  # d = 4: omega_1 = base^(-1/2)
            got = oracle.rope_frequencies(
                4, base=base, scaling="llama3", factor=factor, original_max_positions=context
            )[1]
            assert abs(got / omega - expected_ratio) < 1e-6


@spec("2.6", "0.3")
@pytest.mark.parametrize(
    "fields",
    [
        {"rope_scaling": "yarn"},
        {"rope_scaling_factor": 0.0},
        {"rope_low_freq_factor": 4.0, "rope_high_freq_factor": 4.0},
        {"rope_original_max_positions": 0},
    ],
)
def test_scaling_numbers_are_checked(fields) -> None:
    with pytest.raises(ValueError, match=r"rope_scaling|rope_low|rope_original"):
        Conventions(**fields)


@spec("2.6", "2.3")
@pytest.mark.parametrize("conventions", [LINEAR, LLAMA3], ids=["linear", "llama3"])
def test_scaling_oracle_matches_torch_reference(conventions: Conventions) -> None:
    """The oracle and the reference model under the declared scaling, for the rope component
    and a causal LM (float64, 1e-12); the scaling moves the output there."""
    x = np.random.default_rng(0).standard_normal((2, 3, 9, 8))
    pos = np.arange(9)
    omega = oracle.rope_frequencies_of(8, conventions)
    gold = oracle.rope(x, pos, layout=conventions.rope_layout, frequencies=omega)
    ours = ref.RoPE(conventions)(torch.from_numpy(x), torch.from_numpy(pos)).numpy()
    assert np.abs(ours - gold).max() < TOL
    model = ref.build("causal_lm", CONFIG, conventions).double()
    params = init_params("causal_lm", CONFIG, conventions, seed=2)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in params.items()})
    ids = np.random.default_rng(3).integers(0, CONFIG.vocab_size, (2, 13))
    gold = oracle.causal_lm(ids, params, CONFIG, conventions=conventions)
    with torch.no_grad():
        out = model(torch.from_numpy(ids)).numpy()
    assert np.abs(out - gold).max() < TOL
    plain = dataclasses.replace(conventions, rope_scaling="none")
    assert np.abs(oracle.causal_lm(ids, params, CONFIG, conventions=plain) - gold).max() > 1e-3


@needs_transformers
@spec("2.6")
@pytest.mark.parametrize("conventions", [LINEAR, LLAMA3], ids=["linear", "llama3"])
def test_scaled_frequencies_match_transformers(conventions: Conventions) -> None:
    """transformers' ROPE_INIT_FUNCTIONS (linear, llama3) on a LlamaConfig with the same
    numbers give the oracle's frequencies to float32 precision (they compute in float32:
    ~6e-8 relative)."""
    import transformers
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from tck.adapters.hf_decoder import rope_parameters

    config = transformers.LlamaConfig(
        hidden_size=64,
        num_attention_heads=4,
        head_dim=16,
        rope_parameters=rope_parameters(conventions),
    )
    theirs, _ = ROPE_INIT_FUNCTIONS[conventions.rope_scaling](config, "cpu")
    ours = oracle.rope_frequencies_of(16, conventions)
    assert np.allclose(theirs.double().numpy(), ours, rtol=1e-6, atol=0)


@needs_transformers
@spec("2.6", "11.5")
@pytest.mark.parametrize("conventions", [LINEAR, LLAMA3], ids=["linear", "llama3"])
def test_scaling_oracle_matches_transformers_llama(conventions: Conventions) -> None:
    """LlamaForCausalLM with rope_parameters of that scaling (float32, init_params's weights)
    against the oracle on its own weights, 12 tokens: within FLOAT32_BOUND; unscaled, the
    oracle is off by more than 1e-2."""
    import transformers

    from tck.adapters.hf_decoder import rope_parameters

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        rope_parameters=rope_parameters(conventions),
    )
    model = transformers.LlamaForCausalLM(config).eval()
    params = _load_ours(model, OURS_MISTRAL, conventions)
    ids = np.random.default_rng(1).integers(0, 50, (2, 12))
    with torch.no_grad():
        theirs = model(torch.from_numpy(ids)).logits.double().numpy()
    ours = oracle.causal_lm(ids, params, OURS_MISTRAL, conventions=conventions)
    assert np.abs(theirs - ours).max() < FLOAT32_BOUND
    plain = dataclasses.replace(conventions, rope_scaling="none")
    off = oracle.causal_lm(ids, params, OURS_MISTRAL, conventions=plain)
    assert np.abs(theirs - off).max() > 1e-2


@spec("4.5", "2.6", "0.3")
def test_diagnosis_tries_the_neighbouring_windows_and_every_scaling() -> None:
    """The explanations of a failed comparison try a window one key wider, one narrower and
    none (never a width below 1); every other rope_scaling; the catalogue names each value."""
    from tck.conformance.diagnosis.explain import alternatives
    from tck.reference.catalogue import convention_code, plain_words

    assert alternatives("sliding_window", 4) == [5, 3, None]
    assert alternatives("sliding_window", 1) == [2, None]
    assert alternatives("sliding_window", None) == []
    assert alternatives("rope_scaling", "llama3") == ["none", "linear"]
    assert convention_code("sliding_window", 5) == "mask.sliding_window_wrong"
    assert "sliding window of 5" in plain_words("sliding_window", 5)
    assert "no sliding window" in plain_words("sliding_window", None)
    assert convention_code("rope_scaling", "none") == "rope.scaling_none"
