"""A checkpoint's gradients are streamed out of its backward pass (``grad_each``) and judged
one at a time (``careful.gradients_each``), so a real-size stack's gradient check never
holds the subject's whole gradient set beside the reference's (docs/performance.md, "Real
sizes"). Exercised on small checkpoints."""

from __future__ import annotations

import weakref
from pathlib import Path

import numpy as np
import pytest
from support.hf_checkpoints import save

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from tck.adapters import pretrained  # noqa: E402
from tck.conformance.checks import test_gradients as gradient_check  # noqa: E402
from tck.conformance.toolkit import careful  # noqa: E402
from tck.conformance.toolkit.harness import GRADIENT_MEMO, Harness  # noqa: E402
from tck.reference.inputs import Shape  # noqa: E402

pytestmark = pytest.mark.spec("10.8")


def _gpt2(folder: Path) -> Path:
    torch.manual_seed(1)
    config = transformers.GPT2Config(
        n_embd=20, n_layer=2, n_head=5, n_inner=36, vocab_size=29, n_positions=24
    )
    return save(transformers.GPT2LMHeadModel(config), folder)


def _llama(folder: Path) -> Path:
    torch.manual_seed(2)
    config = transformers.LlamaConfig(
        hidden_size=24,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=40,
        vocab_size=31,
        max_position_embeddings=32,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
    )
    return save(transformers.LlamaForCausalLM(config), folder)


def _harness(adapter, name: str) -> Harness:
    subject = next(s for s in adapter.subjects() if s.name == name)
    return Harness(adapter, subject, seed=0)


@pytest.mark.parametrize(
    "family,name,dtype",
    [
        ("gpt2", "causal_lm[eager]", "float64"),
        ("gpt2", "decoder_block[sdpa]", "float64"),
        ("llama", "causal_lm[eager]", "float32"),
    ],
)
def test_grad_each_gives_what_grad_gives(tmp_path, family: str, name: str, dtype: str) -> None:
    """The same names and values as ``grad`` (the same backward pass: equal to 1e-12
    relative), each handed over with no parameter of the module holding a gradient, and
    the module's ``.grad`` left empty."""
    build = {"gpt2": (_gpt2, pretrained.gpt2), "llama": (_llama, pretrained.llama)}[family]
    adapter = build[1](build[0](tmp_path / family))
    tck = _harness(adapter, name)
    inst = tck.instance(dtype=dtype)
    inputs = tck.inputs(inst, Shape(), seed=4)
    cotangent = np.random.default_rng(5).standard_normal(tck.run(inst, inputs).shape)
    whole = adapter.grad(inst.handle, dict(inputs), cotangent)
    module = inst.handle.module
    streamed = {}

    def take(grad_name: str, value: np.ndarray) -> None:
        assert all(p.grad is None for p in module.parameters())
        streamed[grad_name] = np.array(value, copy=True)

    adapter.grad_each(inst.handle, dict(inputs), cotangent, take)
    assert sorted(streamed) == sorted(whole)
    for key, value in whole.items():
        np.testing.assert_allclose(streamed[key], value, rtol=1e-12, atol=0)
    assert all(p.grad is None for p in module.parameters())


def test_gradient_check_holds_one_subject_gradient_at_a_time(tmp_path, monkeypatch) -> None:
    """gradients.gradients on a checkpoint's whole model: when the subject's next gradient
    arrives, none of the ones before it is alive (the check keeps comparisons, not arrays),
    and the verdict is a pass with a ratio for every parameter."""
    adapter = pretrained.gpt2(_gpt2(tmp_path / "gpt2"))
    tck = _harness(adapter, "causal_lm[eager]")
    taken: list[weakref.ref] = []
    alive_at_arrival: list[int] = []
    streamed = careful.gradients_each

    def watched(h, inst, inputs, cotangent, take, only=None):
        def watch(name: str, value: np.ndarray) -> None:
            alive_at_arrival.append(sum(ref() is not None for ref in taken))
            taken.append(weakref.ref(value))
            take(name, value)

        streamed(h, inst, inputs, cotangent, watch, only)

    monkeypatch.setattr(careful, "gradients_each", watched)
    try:
        gradient_check.test_gradients(tck, "float64")
    finally:
        tck.release()
        GRADIENT_MEMO.clear()
    assert len(taken) == len(tck.record.metrics["ratios"]) > 10
    assert alive_at_arrival == [0] * len(taken)


def test_reference_shares_the_checkpoints_arrays(tmp_path) -> None:
    """The float64 reference behind the gold gradients reads the checkpoint's read-only
    canonical arrays themselves (no second copy of the weights); writable or float32
    parameters are copied as before."""
    adapter = pretrained.gpt2(_gpt2(tmp_path / "gpt2"))
    tck = _harness(adapter, "causal_lm[eager]")
    inst = tck.instance()
    _, handle = careful.careful_model(tck, inst, "float64")
    for name, p in handle.module.named_parameters():
        assert np.shares_memory(p.detach().numpy(), inst.params[name]), name
    tck.release()
    copied = {k: np.array(v) for k, v in inst.params.items()}  # writable: copied
    inst.params = copied
    _, handle = careful.careful_model(tck, inst, "float64")
    for name, p in handle.module.named_parameters():
        assert not np.shares_memory(p.detach().numpy(), copied[name]), name
        np.testing.assert_array_equal(p.detach().numpy(), copied[name])


def test_float32_copy_exports_the_checkpoints_own_numbers(tmp_path) -> None:
    """hf.llama's stack runs in float32: its canonical parameters are the float64
    checkpoint's own arrays (read-only views, no float64 copy of the float32 copy) where the
    checkpoint's numbers are float32 numbers (saved in float32), and a float64 conversion
    of the copy where they are not."""
    adapter = pretrained.llama(_llama(tmp_path / "llama"))
    tck = _harness(adapter, "causal_lm[eager]")
    inst = tck.instance(dtype="float32")
    model, _ = adapter.views["causal_lm[eager]"]
    own = {id(p.untyped_storage()): p for p in model.parameters()}
    for name, value in inst.params.items():
        assert value.dtype == np.float64 and not value.flags.writeable, name
        assert any(np.shares_memory(value, p.detach().numpy()) for p in own.values()), name
    names = sorted(inst.params)

    # numbers that float32 rounds: the copy's own values, converted
    other = pretrained.llama(tmp_path / "llama")
    model, _ = other.views["causal_lm[eager]"]
    with torch.no_grad():
        model.model.norm.weight.add_(1e-12)
    tck = _harness(other, "causal_lm[eager]")
    inst = tck.instance(dtype="float32")
    for value in inst.params.values():
        assert not any(np.shares_memory(value, p.detach().numpy()) for p in model.parameters())
        np.testing.assert_array_equal(value, np.float32(value).astype(np.float64))
    assert sorted(inst.params) == names


def _grad_scaled(factor: float):
    """A backward bug: the gradient flowing back out of a layer scaled by ``factor`` (its
    forward unchanged), as a custom autograd function with a wrong backward would give."""

    class Scaled(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            return grad * factor

    def hook(module, args, kwargs):
        return (Scaled.apply(args[0]), *args[1:]), kwargs

    return hook


def test_real_size_stack_judges_the_gradients_through_every_layer(tmp_path, monkeypatch) -> None:
    """At real size the stack's gradient check forms and judges every parameter's gradient
    but the later layers' (real_size.judged_gradients), and says so; a wrong backward in a
    later layer still fails it, through the gradients of the layers below and the tables."""
    monkeypatch.setenv("TCK_STACK_PLAN", "on")
    adapter = pretrained.gpt2(_gpt2(tmp_path / "gpt2"))
    tck = _harness(adapter, "causal_lm[eager]")
    try:
        gradient_check.test_gradients(tck, "float64")
    finally:
        tck.release()
        GRADIENT_MEMO.clear()
    judged = set(tck.record.metrics["ratios"])
    assert "params.embedding.weight" in judged and "params.layers.0.ffn.fc1.weight" in judged
    assert not any(name.startswith("params.layers.1.") for name in judged), sorted(judged)
    assert "layers after the first" in tck.record.metrics["not_judged"]
    # the backward of the last layer wrong: what comes back out of it is scaled
    for model in {id(m): m for m, _ in adapter.views.values()}.values():
        model.transformer.h[1].register_forward_pre_hook(_grad_scaled(1.5), with_kwargs=True)
    tck = _harness(adapter, "causal_lm[eager]")
    try:
        with pytest.raises(gradient_check.CheckFailure) as failure:
            gradient_check.test_gradients(tck, "float64")
    finally:
        tck.release()
        GRADIENT_MEMO.clear()
    assert failure.value.metrics["grad_of"] in judged
