"""Self-tests of the built-in ``torch.nn`` adapter: every subject loads canonical parameters,
gives them back unchanged, and matches the float64 oracle computed under the conventions it
declares, with masks that reach the places polarity bugs hide (batch 2 with different lengths,
Lq != Lk, causal, fully-masked rows)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np
import pytest
import torch

from tck.adapters import Subject, Unsupported
from tck.adapters.torch_nn import adapter
from tck.reference import Config, Conventions, init_params, oracle
from tck.reference.expected import expected

spec = pytest.mark.spec

CONFIG = Config(
    d_model=16, n_heads=4, d_ff=32, n_layers=2, n_decoder_layers=2, vocab_size=23, padding_idx=0
)
TOL = 1e-10
B, L, LK = 2, 5, 7  # batch, (query / target) length, key / memory length
LENGTHS, MEMORY_LENGTHS = (5, 3), (7, 4)  # real tokens per row: different lengths per row

SUBJECTS = {s.name: s for s in adapter.subjects()}
CLAUSES = {
    "attention": ("3.1", "4.1", "4.3"),
    "mha": ("3.4", "3.5", "4.1", "4.2", "4.3"),
    "layer_norm": ("5.1",),
    "encoder_layer": ("7.1", "4.1", "4.2", "4.3"),
    "decoder_layer": ("7.2", "3.5", "4.2", "4.3"),
    "encoder": ("7.3", "4.2", "4.3"),
    "decoder": ("7.3", "3.5", "4.2", "4.3"),
    "seq2seq": ("8.1", "8.3", "7.3", "4.2", "4.3"),
}
# Which optional inputs each component takes (adapters.base.INPUTS), per mask case.
CASES = {
    "attention": ("none", "keep_mask", "causal", "keep_mask+causal"),
    "mha": ("none", "key_padding", "attn_mask", "causal", "all"),
    "layer_norm": ("none",),
    "encoder_layer": ("none", "key_padding", "attn_mask", "causal", "all"),
    "encoder": ("none", "key_padding", "attn_mask", "causal", "all"),
    "decoder_layer": ("none", "key_padding", "memory_key_padding", "causal", "all"),
    "decoder": ("none", "key_padding", "memory_key_padding", "causal", "all"),
    "seq2seq": ("padded",),
}


def _subject_params(cases: bool = False) -> list:
    """One pytest param per subject (or per subject and mask case), marked with its clauses."""
    out = []
    for name, subject in SUBJECTS.items():
        mark = spec(*CLAUSES[subject.component])
        if cases:
            out += [pytest.param(name, c, marks=mark) for c in CASES[subject.component]]
        else:
            out.append(pytest.param(name, marks=mark))
    return out


# ------------------------------------------------------------------------------ inputs


def _keep(lengths, length: int) -> np.ndarray:
    return oracle.padding_keep_mask(np.array(lengths), length)


def _attn_mask(rng: np.random.Generator, lq: int, lk: int) -> np.ndarray:
    keep = rng.random((lq, lk)) < 0.6
    keep[:, 0] = True  # key 0 is real in every row, so no query is left without a key
    return keep


def _inputs(component: str, case: str, seed: int = 0) -> dict[str, np.ndarray]:
    """The component's inputs (INPUTS) for one mask case, in float64."""
    rng = np.random.default_rng(seed)
    d, h, dk = CONFIG.d_model, CONFIG.n_heads, CONFIG.head_dim_k
    on = {case, "all"}.__contains__
    if component == "attention":
        inputs = {
            "q": rng.standard_normal((B, h, L, dk)),
            "k": rng.standard_normal((B, h, LK, dk)),
            "v": rng.standard_normal((B, h, LK, dk + 2)),  # d_v != d_k: SDPA allows it
        }
        if "keep_mask" in case:
            inputs["keep_mask"] = oracle.key_padding(_keep(MEMORY_LENGTHS, LK)) & _attn_mask(
                rng, L, LK
            )  # (B, 1, Lq, Lk)
        if "causal" in case:
            inputs["causal"] = np.array(True)
        return inputs
    if component == "layer_norm":
        return {"x": 3.0 + 2.0 * rng.standard_normal((B, L, d))}
    if component == "seq2seq":
        src = rng.integers(1, CONFIG.vocab_size, (B, LK))
        tgt = rng.integers(1, CONFIG.vocab_size, (B, L))
        src[1, MEMORY_LENGTHS[1] :] = CONFIG.padding_idx  # right-padded, as users batch
        tgt[1, LENGTHS[1] :] = CONFIG.padding_idx
        return {"src_ids": src, "tgt_ids": tgt}
    x = rng.standard_normal((B, L, d))
    if component == "mha":  # cross-attention shapes: Lq != Lk
        memory = rng.standard_normal((B, LK, d))
        inputs = {"query": x, "key": memory, "value": rng.standard_normal((B, LK, d))}
        lk = LK
    elif component in ("decoder_layer", "decoder"):
        inputs = {"x": x, "memory": rng.standard_normal((B, LK, d))}
        if on("memory_key_padding"):
            inputs["memory_key_padding"] = _keep(MEMORY_LENGTHS, LK)
        lk = L
    else:
        inputs, lk = {"x": x}, L
    if on("key_padding"):
        inputs["key_padding"] = _keep(MEMORY_LENGTHS if component == "mha" else LENGTHS, lk)
    if on("attn_mask") and component in ("mha", "encoder_layer", "encoder"):
        inputs["attn_mask"] = _attn_mask(rng, L, lk)
    if on("causal"):
        inputs["causal"] = np.array(True)
    return inputs


def _self_attention(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """mha inputs as self-attention: one array for query, key and value (Lq == Lk)."""
    x = inputs["query"][:, :L]
    out = {"query": x, "key": x, "value": x}
    if "key_padding" in inputs:
        out["key_padding"] = _keep(LENGTHS, L)
    if "attn_mask" in inputs:
        out["attn_mask"] = inputs["attn_mask"][:, :L]
    if "causal" in inputs:
        out["causal"] = inputs["causal"]
    return out


# ------------------------------------------------------------------------------ oracle


def _gold(
    component: str, inputs: Mapping[str, np.ndarray], params: Mapping, conv: Conventions
) -> np.ndarray:
    """The oracle's output for the same inputs and parameters, under ``conv``."""
    return expected(component, inputs, params, CONFIG, conv)


def _assert_matches(out: np.ndarray, gold: np.ndarray) -> None:
    """Same shape, NaN in exactly the same places, and <= TOL apart everywhere else."""
    assert out.shape == gold.shape, (out.shape, gold.shape)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(gold), err_msg="NaN positions differ")
    finite = ~np.isnan(gold)
    if finite.any():
        assert np.abs(out[finite] - gold[finite]).max() <= TOL


def _loaded(name: str, config: Config = CONFIG, seed: int = 1):
    subject = SUBJECTS[name]
    handle = adapter.build(subject, config, seed=seed)
    params = init_params(subject.component, config, subject.conventions, seed=seed)
    adapter.load(handle, params)
    return subject, handle, params


def _with_policy(subject: Subject, policy: str) -> Conventions:
    return dataclasses.replace(subject.conventions, fully_masked_rows=policy)


# ------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("name", _subject_params())
def test_params_round_trip(name: str) -> None:
    _, handle, params = _loaded(name)
    back = adapter.params(handle)
    assert sorted(back) == sorted(params)
    for key, value in params.items():
        np.testing.assert_array_equal(back[key], value, err_msg=key)


@pytest.mark.parametrize(("name", "case"), _subject_params(cases=True))
def test_matches_oracle(name: str, case: str) -> None:
    subject, handle, params = _loaded(name)
    inputs = _inputs(subject.component, case)
    if name == "mha[self_fast_path]":
        inputs = _self_attention(inputs)
    nested = subject.conventions.padded_query_rows == "zero"
    if nested and ("attn_mask" in inputs or "causal" in inputs):
        with pytest.raises(Unsupported, match="nested-tensor path"):
            adapter.run(handle, inputs)
        return
    out = adapter.run(handle, inputs)
    gold = _gold(subject.component, inputs, params, subject.conventions)
    if nested and "key_padding" in inputs:
        # encoder[nested_tensor]: real positions follow the formula, padded ones come back 0.
        padded = ~inputs["key_padding"]
        assert padded.any() and (out[padded] == 0.0).all()
    _assert_matches(out, gold)


@spec("3.4", "3.5")
def test_mha_without_bias_matches_oracle() -> None:
    config = dataclasses.replace(CONFIG, bias=False)
    subject, handle, params = _loaded("mha", config)
    assert "q.bias" not in adapter.params(handle)
    inputs = _inputs("mha", "all")
    gold = _gold("mha", inputs, params, subject.conventions)
    _assert_matches(adapter.run(handle, inputs), gold)


@spec("8.1", "8.3")
def test_seq2seq_without_padding_idx_matches_oracle() -> None:
    config = dataclasses.replace(CONFIG, padding_idx=None)
    subject, handle, params = _loaded("seq2seq", config)
    inputs = _inputs("seq2seq", "padded")  # id 0 is an ordinary token here: no masks
    gold = oracle.seq2seq(
        inputs["src_ids"], inputs["tgt_ids"], params, config, conventions=subject.conventions
    )
    _assert_matches(adapter.run(handle, inputs), gold)


@spec("3.4")
def test_self_fast_path_refuses_cross_attention() -> None:
    _, handle, _ = _loaded("mha[self_fast_path]")
    with pytest.raises(Unsupported, match="one tensor"):
        adapter.run(handle, _inputs("mha", "none"))


# ---------------------------------------------------------------- fully-masked rows §4.4


def _empty_rows(component: str) -> list[tuple[str, dict[str, np.ndarray]]]:
    """Inputs where some query has no key to attend: (what emptied it, inputs)."""
    if component == "attention":
        inputs = _inputs("attention", "keep_mask")
        inputs["keep_mask"] = inputs["keep_mask"].copy()
        inputs["keep_mask"][1, :, 2] = False  # query 2 of row 1 sees nothing
        return [("keep_mask", inputs)]
    if component == "mha":
        padded = _inputs("mha", "key_padding")
        padded["key_padding"] = padded["key_padding"].copy()
        padded["key_padding"][1] = False  # every key of row 1 is padding
        masked = _inputs("mha", "attn_mask")
        masked["attn_mask"] = masked["attn_mask"].copy()
        masked["attn_mask"][3] = False  # query 3 may attend nothing
        return [("key_padding", padded), ("attn_mask", masked)]
    if component in ("encoder_layer", "encoder"):
        padded = _inputs(component, "key_padding")
        padded["key_padding"] = _keep((5, 0), L)  # row 1 is all padding
        masked = _inputs(component, "attn_mask")
        masked["attn_mask"] = masked["attn_mask"].copy()
        masked["attn_mask"][3] = False
        return [("key_padding", padded), ("attn_mask", masked)]
    if component in ("decoder_layer", "decoder"):
        memory = _inputs(component, "memory_key_padding")
        memory["memory_key_padding"] = _keep((7, 0), LK)
        target = _inputs(component, "key_padding")
        target["key_padding"] = _keep((5, 0), L)
        return [("memory_key_padding", memory), ("key_padding", target)]
    if component == "seq2seq":
        source = _inputs("seq2seq", "padded")
        source["src_ids"][1] = CONFIG.padding_idx  # a source that is all padding
        target = _inputs("seq2seq", "padded")
        target["tgt_ids"][1, 0] = CONFIG.padding_idx  # a target whose first token is padding
        return [("memory_key_padding", source), ("key_padding", target)]
    return []


# What was measured where a decoder subject declares 'undefined': its cross-attention (emptied
# by memory padding) gives zeros, its self-attention (emptied by target padding) NaN.
MEASURED_UNDEFINED = {"memory_key_padding": "zero", "key_padding": "nan"}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(p.values[0], marks=[*p.marks, spec("4.4")])
        for p in _subject_params()
        if _empty_rows(SUBJECTS[p.values[0]].component)
    ],
)
def test_fully_masked_rows(name: str) -> None:
    subject, handle, params = _loaded(name)
    for emptied_by, inputs in _empty_rows(subject.component):
        if name == "mha[self_fast_path]":
            inputs = _self_attention(inputs)
            if emptied_by == "key_padding":
                inputs["key_padding"] = _keep((5, 0), L)
        out = adapter.run(handle, inputs)
        policy = subject.conventions.fully_masked_rows
        if name == "encoder[nested_tensor]":
            if emptied_by == "key_padding":  # nested: the all-padding row comes back as zeros
                assert (out[1] == 0.0).all()
                out, inputs = out[:1], {k: v[:1] for k, v in inputs.items()}
                policy = "zero"
            else:
                policy = "nan"  # an attn_mask blocks the nested path: per-layer fast path
        elif policy == "undefined":
            policy = MEASURED_UNDEFINED[emptied_by]
        gold = _gold(subject.component, inputs, params, _with_policy(subject, policy))
        assert np.isnan(gold).any() == (policy == "nan"), emptied_by
        _assert_matches(out, gold)


# ------------------------------------------------------------------------- Unsupported

UNSUPPORTED = [
    ("mha", dict(d_k=8, d_v=4), "d_v"),
    ("mha", dict(d_k=8, d_v=8), "d_model"),
    ("mha[self_fast_path]", dict(bias=False), "fast path"),
    ("mha[self_fast_path]", dict(d_model=12, n_heads=3), "even number of heads"),
    ("encoder_layer", dict(bias=False), "LayerNorm biases"),
    ("encoder_layer", dict(d_k=2, d_v=2), "d_model"),
    ("encoder_layer", dict(d_model=12, n_heads=3), "even number of heads"),
    ("encoder_layer[norm_first,gelu]", dict(d_model=12, n_heads=3), "even number of heads"),
    ("decoder_layer", dict(d_k=8, d_v=4), "d_v"),
    ("decoder_layer[norm_first]", dict(bias=False), "LayerNorm biases"),
    ("encoder", dict(n_layers=0), "n_layers=0"),
    ("encoder[norm_first]", dict(d_model=12, n_heads=3), "even number of heads"),
    ("decoder", dict(n_decoder_layers=0), "n_decoder_layers=0"),
    ("seq2seq", dict(tie_weights=False), "untied"),
    ("seq2seq", dict(bias=False), "LayerNorm biases"),
    ("seq2seq", dict(n_layers=0), "n_layers=0"),
]


@pytest.mark.parametrize(
    ("name", "changes", "reason"),
    [
        pytest.param(n, c, r, marks=spec(*CLAUSES[SUBJECTS[n].component]), id=f"{n}-{r}")
        for n, c, r in UNSUPPORTED
    ],
)
def test_unsupported_configs(name: str, changes: dict, reason: str) -> None:
    config = dataclasses.replace(CONFIG, **changes)
    with pytest.raises(Unsupported, match=reason):
        adapter.build(SUBJECTS[name], config, seed=0)


@spec("7.1", "4.4")
def test_subjects_set_the_fast_path_themselves_and_restore_it() -> None:
    """A subject must not depend on what the process set: encoder_layer turns the fast path on
    (NaN for an all-padding row) even where it was off, and leaves it as it found it."""
    _, handle, _ = _loaded("encoder_layer")
    inputs = _empty_rows("encoder_layer")[0][1]  # row 1 is all padding
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        out = adapter.run(handle, inputs)
        assert torch.backends.mha.get_fastpath_enabled() is False
    finally:
        torch.backends.mha.set_fastpath_enabled(before)
    assert np.isnan(out[1]).all() and not np.isnan(out[0]).any()


@spec("0.2", "10.3")
def test_a_stack_of_one_shared_layer_loads_and_reads_back_what_sharing_keeps() -> None:
    """A stack built as ``[layer] * n`` holds one tensor under ``layers.0.*`` and
    ``layers.1.*`` (``named_parameters`` lists it once): its map resolves every name, the
    last layer's weights win, and reading back shows it, so the parameter checks name the
    sharing (params.round_trip_changed, params.count_wrong) instead of a missing name."""
    from tck.adapters import TorchEntry, TorchModuleAdapter
    from tck.adapters.torch_nn import _encoder, _encoder_factory, _encoder_map

    def shared(config: Config) -> torch.nn.Module:
        model = _encoder_factory(False)(config)
        model.layers = torch.nn.ModuleList([model.layers[0]] * len(model.layers))
        return model

    stack = TorchModuleAdapter(
        "shared",
        [TorchEntry("encoder", make=shared, forward=_encoder, param_map=_encoder_map(False))],
    )
    subject = stack.subjects()[0]
    handle = stack.build(subject, CONFIG, seed=0)
    params = init_params("encoder", CONFIG, subject.conventions, seed=0)
    stack.load(handle, params)
    back = stack.params(handle)
    name = "layers.0.self_attn.q.weight"
    np.testing.assert_array_equal(back[name], params[name.replace("layers.0", "layers.1")])
    assert not np.array_equal(back[name], params[name])
    # the shared layer's scalars count once: fewer than the canonical stack's
    assert stack.param_count(handle) < sum(int(np.size(v)) for v in params.values())
