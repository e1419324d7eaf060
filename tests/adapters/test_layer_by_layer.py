"""A real-size language model's call at its own context is judged layer by layer
(tck.conformance.toolkit.teacher): the oracle's block at a sample of query positions, fed the
model's own output of the layer before. Its rows are the oracle's block at those rows; a
correct checkpoint passes; a bug that shows only past a position, or a layer fed the wrong
input, fails. Small checkpoints, TCK_STACK_PLAN=on (the rule real sizes get by default)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from support.hf_checkpoints import save

from tck.adapters import pretrained
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.results import CheckFailure
from tck.conformance.toolkit.teacher import block_rows, judge, judged_rows
from tck.reference import Config, init_params, oracle
from tck.reference.inputs import Shape
from tck.reference.params import DECODER_CANONICAL
from tck.reference.tolerance import FLOOR, ISLAND_FLOOR, float64_floor

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

pytestmark = pytest.mark.spec("11.4", "11.5", "2.3", "4.5")

CONTEXT, BUG_FROM = 48, 30  # the checkpoints' context; where the planted bug starts


def test_judged_rows_span_the_context() -> None:
    rows = judged_rows(2048, seed=3)
    assert rows[0] == 0 and rows[-1] == 2047
    assert np.all(np.diff(rows) > 0)
    assert np.max(np.diff(rows)) <= 2048 // 40  # evenly spread: no long stretch unjudged
    assert list(judged_rows(5)) == [0, 1, 2, 3, 4]


CONVENTIONS = {
    "gpt2": dataclasses.replace(DECODER_CANONICAL),
    "llama": dataclasses.replace(
        DECODER_CANONICAL,
        positions="rope",
        norm_kind="rms_norm",
        ffn_kind="gated",
        gate_activation="silu",
        pe_base=5e5,
    ),
    "window": dataclasses.replace(DECODER_CANONICAL, positions="rope", sliding_window=5),
    "post": dataclasses.replace(DECODER_CANONICAL, norm_placement="post"),
}


@pytest.mark.parametrize("name", sorted(CONVENTIONS))
def test_block_rows_are_the_oracle_block_at_those_rows(name: str) -> None:
    conventions = CONVENTIONS[name]
    n_kv = 2 if name == "llama" else None  # grouped-query attention (SPEC.md §11.2)
    config = Config(d_model=16, n_heads=4, d_ff=24, **({"n_kv_heads": n_kv} if n_kv else {}))
    params = init_params("decoder_block", config, conventions, seed=5)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 37, 16))
    keep = np.ones((2, 37), dtype=bool)
    keep[1, 30:] = False  # a padded row: its pads are keys no query sees
    positions = np.broadcast_to(np.arange(37), (2, 37))
    whole = oracle.decoder_block(
        x,
        params,
        n_heads=4,
        n_kv_heads=n_kv,
        key_padding=keep,
        positions=positions,
        conventions=conventions,
    )
    rows = np.array([0, 3, 17, 29, 36])
    part = block_rows(
        x,
        params,
        rows,
        n_heads=4,
        n_kv_heads=n_kv,
        key_padding=keep,
        positions=positions,
        conventions=conventions,
    )
    # the same arithmetic per row; only the blocking of the matrix products differs
    np.testing.assert_allclose(part[0], whole[0, rows], rtol=0, atol=1e-12)
    np.testing.assert_allclose(part[1, :4], whole[1, rows[:4]], rtol=0, atol=1e-12)


def _gpt2(folder: Path) -> Path:
    torch.manual_seed(1)
    config = transformers.GPT2Config(
        n_embd=20,
        n_layer=3,
        n_head=5,
        n_inner=36,
        vocab_size=29,
        n_positions=CONTEXT,
        layer_norm_epsilon=1e-4,
        activation_function="gelu_new",
        bos_token_id=None,
        eos_token_id=None,
    )
    return save(transformers.GPT2LMHeadModel(config), folder)


def _llama(folder: Path, family: str = "Llama", **options) -> Path:
    torch.manual_seed(2)
    config = getattr(transformers, f"{family}Config")(
        hidden_size=24,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=40,
        vocab_size=31,
        max_position_embeddings=CONTEXT,
        rope_theta=5e5,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
        **options,
    )
    return save(getattr(transformers, f"{family}ForCausalLM")(config), folder)


def _harness(adapter, name: str = "causal_lm[eager]") -> Harness:
    subject = next(s for s in adapter.subjects() if s.name == name)
    return Harness(adapter, subject, seed=0)


def _floor(h: Harness) -> float:
    """The float64 floor the plugin sets for the subject (SPEC.md §10.12)."""
    return ISLAND_FLOOR if h.subject.conventions.float32_steps else FLOOR["float64"]


def _models(adapter) -> list:
    return list({id(m): m for m, _ in adapter.views.values()}.values())


@pytest.mark.parametrize("save_model", [_gpt2, _llama], ids=["gpt2", "llama"])
def test_full_context_judged_layer_by_layer(tmp_path, monkeypatch, save_model) -> None:
    monkeypatch.setenv("TCK_STACK_PLAN", "on")
    adapter = pretrained.auto(save_model(tmp_path / "model"))
    for name in ("causal_lm[eager]", "causal_lm[sdpa]"):
        h = _harness(adapter, name)
        inst = h.instance()
        inputs = h.inputs(inst, Shape(batch=2, lq=CONTEXT, lk=CONTEXT), seed=7)
        with float64_floor(_floor(h)):
            test = h.assert_matches_oracle(inst, inputs, what="full length", by_layer=True)
        call = h.record.calls[-1]
        assert call["passed"] and call["seq_len"] == CONTEXT
        assert "judged layer by layer" in call["what"] and "3 layers" in call["what"]
        assert test.shape[:2] == (2, len(judged_rows(CONTEXT, h.seed)))
        # the model forms its logits at the positions asked for alone (LayerStates.keep_rows)
        with h.adapter.layer_states(inst.handle) as states:
            states.keep_rows = lambda length: np.array([0, length - 1])
            ends = h.run(inst, inputs)
        np.testing.assert_array_equal(states.logits_rows, [0, CONTEXT - 1])
        np.testing.assert_allclose(ends, h.run(inst, inputs)[:, [0, -1]], rtol=1e-12)
    # below real size, and without TCK_STACK_PLAN, the whole comparison is made
    monkeypatch.setenv("TCK_STACK_PLAN", "off")
    h = _harness(adapter)
    inst = h.instance()
    inputs = h.inputs(inst, Shape(batch=1, lq=CONTEXT, lk=CONTEXT), seed=7)
    with float64_floor(_floor(h)):
        h.assert_matches_oracle(inst, inputs, what="full length", by_layer=True)
    assert "judged layer by layer" not in h.record.calls[-1]["what"]


def _rope_late(position: int):
    """A RoPE bug past ``position``: the angles one position behind from there on."""

    def hook(module, args, out):
        cos, sin = (t.clone() for t in out)
        cos[:, position:], sin[:, position:] = (
            out[0][:, position - 1 : -1],
            out[1][:, position - 1 : -1],
        )
        return cos, sin

    return hook


def _judgement(h: Harness, inst, inputs):
    with h.adapter.layer_states(inst.handle) as states:
        test = h.run(inst, inputs)
    assert states is not None and states.complete()
    return judge(inputs, test, states, inst.params, inst.config, inst.conventions)


def test_a_bug_past_a_position_fails_at_the_full_context(tmp_path, monkeypatch) -> None:
    """The cut keeps what matters at real size: a bug that lives only past a position
    passes every call shorter than it and fails the layer-by-layer judgement."""
    monkeypatch.setenv("TCK_STACK_PLAN", "on")
    adapter = pretrained.auto(_llama(tmp_path / "model"))
    for model in _models(adapter):
        model.model.rotary_emb.register_forward_hook(_rope_late(BUG_FROM))
    h = _harness(adapter)
    inst = h.instance()
    with float64_floor(_floor(h)):
        short = h.inputs(inst, Shape(batch=1, lq=BUG_FROM, lk=BUG_FROM), seed=7)
        h.assert_matches_oracle(inst, short, what="short", by_layer=True)  # passes
        full = h.inputs(inst, Shape(batch=1, lq=CONTEXT, lk=CONTEXT), seed=7)
        judgement = _judgement(h, inst, full)
        assert not judgement.passed
        failing = [what for what, c in judgement.parts if not c.passed]
        assert "layer 0's output" in failing  # where the angles are first used
        assert "the input to layer 0, every position" not in failing
        with pytest.raises(CheckFailure) as failure:  # the whole comparison's verdict
            h.assert_matches_oracle(inst, full, what="full length", by_layer=True)
    assert failure.value.code.endswith("oracle_mismatch") or "rope" in failure.value.code


def test_a_window_bug_past_a_position_fails(tmp_path, monkeypatch) -> None:
    """Mistral's sliding window dropped (every earlier key seen): invisible while the
    context is within the window, a failure of the judged rows past it."""
    monkeypatch.setenv("TCK_STACK_PLAN", "on")
    adapter = pretrained.auto(_llama(tmp_path / "model", "Mistral", sliding_window=BUG_FROM))
    h = _harness(adapter)
    inst = h.instance()
    for model in _models(adapter):
        for config in {
            id(m.config): m.config for m in model.modules() if hasattr(m, "config")
        }.values():
            config.sliding_window = None  # the model forgets its window; tck reads it from the file
    with float64_floor(_floor(h)):
        short = h.inputs(inst, Shape(batch=1, lq=BUG_FROM, lk=BUG_FROM), seed=7)
        assert _judgement(h, inst, short).passed
        full = h.inputs(inst, Shape(batch=1, lq=CONTEXT, lk=CONTEXT), seed=7)
        assert not _judgement(h, inst, full).passed


def _skip_layer_1(layers) -> None:
    """Layer 2 reads layer 0's output: layer 1 runs, and its output goes nowhere."""
    kept = {}

    def keep(module, args, out):
        kept["x"] = out[0] if isinstance(out, tuple) else out

    def swap(module, args, kwargs):
        if args:
            return (kept["x"], *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": kept["x"]}

    layers[0].register_forward_hook(keep)
    layers[2].register_forward_pre_hook(swap, with_kwargs=True)


def test_a_layer_fed_the_wrong_input_fails(tmp_path, monkeypatch) -> None:
    """Layer 2 fed layer 0's output (layer 1 skipped on the way): each layer is judged on
    the model's own output of the layer before, so the skip shows."""
    monkeypatch.setenv("TCK_STACK_PLAN", "on")
    adapter = pretrained.auto(_gpt2(tmp_path / "model"))
    for model in _models(adapter):
        _skip_layer_1(model.transformer.h)
    h = _harness(adapter)
    inst = h.instance()
    full = h.inputs(inst, Shape(batch=1, lq=CONTEXT, lk=CONTEXT), seed=7)
    judgement = _judgement(h, inst, full)
    failing = [what for what, c in judgement.parts if not c.passed]
    assert "layer 2's output" in failing, failing
