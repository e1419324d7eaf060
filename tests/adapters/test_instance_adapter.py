"""``tck run --adapter module:attr`` where attr is a ready ``nn.Module`` instance:
its config read from the instance, its own weights checked and never written, the component
named with --component and the parameters with --map when tck does not know the module."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from support.forked_run import run_tck
from torch import nn

from tck.adapters import AdapterError, Unsupported, load_adapter
from tck.adapters.instance import InstanceError, adapt
from tck.reference import Config

pytestmark = pytest.mark.spec("0.2", "0.5", "10.3")

MODELS = textwrap.dedent(
    '''
    import math

    import torch
    from torch import nn

    torch.manual_seed(0)


    def trained(module):
        """Weights that are not the initialiser's: what training leaves."""
        with torch.no_grad():
            for p in module.parameters():
                p.add_(0.2 * torch.randn_like(p))
        return module


    trained_encoder_layer = trained(nn.TransformerEncoderLayer(
        32, 4, dim_feedforward=48, dropout=0.1, activation="gelu", batch_first=True,
        norm_first=True, layer_norm_eps=1e-6,
    ))
    seq_first_mha = trained(nn.MultiheadAttention(20, 5))  # batch_first=False, odd heads
    final_norm = trained(nn.LayerNorm(16, eps=1e-6))
    EncoderLayerClass = nn.TransformerEncoderLayer


    class Block(nn.Module):
        """A pre-LN layer of its own: fused qkv without bias, an FFN weight stored [in, out],
        a padding mask with True = padded."""

        def __init__(self, dim=24, heads=3, hidden_dim=40):
            super().__init__()
            self.dim, self.heads, self.hidden_dim = dim, heads, hidden_dim
            self.ln1 = nn.LayerNorm(dim, eps=1e-6)
            self.qkv = nn.Linear(dim, 3 * dim, bias=False)
            self.out = nn.Linear(dim, dim, bias=False)
            self.ln2 = nn.LayerNorm(dim, eps=1e-6)
            self.w1 = nn.Parameter(0.2 * torch.randn(dim, hidden_dim))
            self.b1 = nn.Parameter(0.1 * torch.randn(hidden_dim))
            self.fc2 = nn.Linear(hidden_dim, dim)

        def forward(self, x, pad=None):
            b, n, d = x.shape
            q, k, v = (
                t.reshape(b, n, self.heads, d // self.heads).transpose(1, 2)
                for t in self.qkv(self.ln1(x)).chunk(3, dim=-1)
            )
            scores = q @ k.transpose(-1, -2) / math.sqrt(d // self.heads)
            if pad is not None:
                scores = scores.masked_fill(pad[:, None, None, :], float("-inf"))
            heads = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d)
            x = x + self.out(heads)
            h = torch.nn.functional.gelu(self.ln2(x) @ self.w1 + self.b1)
            return x + self.fc2(h)


    block = trained(Block())


    class OutputBlock(Block):
        """The same layer returning what model-hub code returns: a mapping with its output
        and more (transformers' ModelOutput is one)."""

        def forward(self, x, pad=None):
            return {"last_hidden_state": super().forward(x, pad), "attentions": None}


    output_block = trained(OutputBlock())
    '''
)

BLOCK_MAP = {
    "params": {
        "self_attn.q.weight": {"name": "qkv.weight", "slice": [0, 0, 24]},
        "self_attn.k.weight": {"name": "qkv.weight", "slice": [0, 24, 48]},
        "self_attn.v.weight": {"name": "qkv.weight", "slice": [0, 48, 72]},
        "self_attn.o.weight": "out.weight",
        "norm1.weight": "ln1.weight",
        "norm1.bias": "ln1.bias",
        "ffn.fc1.weight": {"name": "w1", "permute": [1, 0]},
        "ffn.fc1.bias": "b1",
        "ffn.fc2.weight": "fc2.weight",
        "ffn.fc2.bias": "fc2.bias",
        "norm2.weight": "ln2.weight",
        "norm2.bias": "ln2.bias",
    },
    "config": {"attention_bias": False},
    "conventions": {
        "norm_placement": "pre",
        "activation": "gelu",
        "eps": 1e-6,
        "fully_masked_rows": "nan",
    },
    "inputs": {"key_padding": "pad"},
    "masks": "ignore",
}


@pytest.fixture()
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "my_models.py").write_text(MODELS)
    (tmp_path / "block_map.json").write_text(json.dumps(BLOCK_MAP))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    sys.modules.pop("my_models", None)
    return tmp_path


def _verdict(done: subprocess.CompletedProcess, out: Path) -> dict:
    document = json.loads((out / "results.json").read_text())
    bad = [
        f"{r['check']}[{r['subject']}]: {r['diagnosis']}"
        for r in document["results"]
        if r["status"] in ("fail", "error")
    ]
    assert done.returncode == 0 and not bad, "\n".join(bad) + done.stderr[-2000:]
    return document


def _passed(document: dict, check: str, subject: str) -> bool:
    return any(
        (r["check"], r["subject"], r["status"]) == (check, subject, "pass")
        for r in document["results"]
    )


def test_reads_config_and_never_writes(models: Path) -> None:
    """In process: the config comes from the instance, params() are its weights, load is
    refused, and a float16 build converts a copy only."""
    import my_models

    layer = my_models.trained_encoder_layer
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    adapter = load_adapter("my_models:trained_encoder_layer")
    subjects = {s.name: s for s in adapter.subjects()}
    assert set(subjects) == {"encoder_layer[slow_path]", "encoder_layer[fast_path]", "mha"}
    subject = subjects["encoder_layer[slow_path]"]
    assert subject.config == {"d_model": 32, "n_heads": 4, "d_ff": 48, "bias": True}
    conv = subject.conventions
    assert (conv.norm_placement, conv.activation, conv.eps) == ("pre", "gelu", 1e-6)
    config = Config(d_model=32, n_heads=4, d_ff=48)
    handle = adapter.build(subject, config, seed=0)
    params = adapter.params(handle)
    np.testing.assert_array_equal(params["ffn.fc1.weight"], layer.linear1.weight.detach().numpy())
    with pytest.raises(Unsupported, match="own weights"):
        adapter.load(handle, params)
    adapter.build(subject, config, seed=0, dtype="float16")
    after = layer.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # bitwise: nothing ran on it
    assert layer.linear1.weight.dtype == torch.float32


def test_transformer_encoder_layer_instance(models: Path) -> None:
    out = models / "out"
    done = run_tck(
        ["--adapter", "my_models:trained_encoder_layer", "-n", "0", "--out", str(out)], models
    )
    document = _verdict(done, out)
    assert document["summary"]["unverified"] == 0, document["summary"]
    for subject in ("encoder_layer[slow_path]", "encoder_layer[fast_path]", "mha"):
        assert _passed(document, "equality.oracle", subject), subject
    counts = {
        r["subject"]: r["metrics"]["param_count"]
        for r in document["results"]
        if r["check"] == "params.count" and r["status"] == "pass"
    }
    # 4 (32*32 + 32) + (32*48 + 48) + (48*32 + 32) + 2 * 2 * 32: its own size, not the default
    assert counts["encoder_layer[slow_path]"] == 7504, counts


@pytest.mark.parametrize("attr,subject", [("seq_first_mha", "mha"), ("final_norm", "layer_norm")])
def test_mha_and_layer_norm_instances(models: Path, attr: str, subject: str) -> None:
    out = models / "out"
    done = run_tck(["--adapter", f"my_models:{attr}", "-n", "0", "--out", str(out)], models)
    document = _verdict(done, out)
    assert _passed(document, "equality.oracle", subject)


def test_unknown_module_with_component_and_map(models: Path) -> None:
    out = models / "out"
    args = ["--adapter", "my_models:block", "--component", "encoder_layer", "-n", "0"]
    done = run_tck([*args, "--map", str(models / "block_map.json"), "--out", str(out)], models)
    document = _verdict(done, out)
    assert _passed(document, "equality.oracle", "encoder_layer")
    notes = [n for ns in document["adapter"]["notes"].values() for n in ns]
    assert any("d_model=24" in n and "n_heads=3" in n and "d_ff=40" in n for n in notes), notes
    # a map without params (only how to call it): the parameter-free checks run, the oracle
    # checks skip and say why
    calls = {k: v for k, v in BLOCK_MAP.items() if k != "params"}
    (models / "calls.json").write_text(json.dumps(calls))
    out = models / "out-nomap"
    done = run_tck([*args, "--map", str(models / "calls.json"), "--out", str(out)], models)
    document = json.loads((out / "results.json").read_text())
    assert document["summary"]["failed"] == document["summary"]["errors"] == 0
    skipped = {r["check"]: r for r in document["results"] if r["status"] == "skip"}
    assert "canonical parameters" in skipped["equality.oracle"]["diagnosis"]["message"]
    assert _passed(document, "masks.padding_invariance", "encoder_layer")
    assert _passed(document, "blocks.batch_independence", "encoder_layer")


@pytest.mark.parametrize(
    "args,words",
    [
        (["--adapter", "no_such_module:x"], "cannot import 'no_such_module'"),
        (["--adapter", "my_models:missing"], "has no attribute 'missing'"),
        (["--adapter", "my_models:EncoderLayerClass"], "not an instance"),
        (["--adapter", "my_models:block"], "--component"),
        (["--adapter", "my_models:block", "--component", "bogus"], "is not a component"),
        (["--adapter", "my_models:final_norm", "--component", "mha"], "as layer_norm, not mha"),
        (["--adapter", "reference", "--component", "mha"], "apply to --adapter onnx"),
        (["--adapter", "tck.adapters.reference:adapter", "--component", "mha"], "nn.Module"),
        (
            ["--adapter", "my_models:block", "--component", "encoder_layer", "--map", "nope.json"],
            "--map",
        ),
    ],
)
def test_usage_errors_are_one_line(models: Path, args: list[str], words: str) -> None:
    done = run_tck([*args, "--out", str(models / "out")], models)
    assert done.returncode == 2, done.stderr
    assert words in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_map_errors() -> None:
    layer = nn.Linear(4, 4)
    with pytest.raises(InstanceError, match="not canonical parameters"):
        _adapt_with_map(layer, {"params": {"x": "weight"}})
    with pytest.raises(InstanceError, match="lacks"):
        _adapt_with_map(layer, {"params": {"fc1.weight": "nope"}, "config": {"d_model": 4}})
    with pytest.raises(AdapterError, match="not an instance"):
        from tck.adapters import _instance

        _instance(nn.Linear, "m:Linear")


def _adapt_with_map(module: nn.Module, mapping: dict) -> object:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"config": {"d_model": 4}, **mapping}, f)
    return adapt(module, "m:l", "ffn", f.name)


def test_a_module_returning_a_model_output_is_unwrapped(models: Path) -> None:
    out = models / "out"
    args = ["--adapter", "my_models:output_block", "--component", "encoder_layer", "-n", "0"]
    done = run_tck([*args, "--map", str(models / "block_map.json"), "--out", str(out)], models)
    document = _verdict(done, out)
    assert _passed(document, "equality.oracle", "encoder_layer")


def test_outputs_tck_reads_and_what_it_refuses() -> None:
    from collections import OrderedDict

    from tck.adapters.instance import _output

    y = torch.zeros(2, 3)
    assert _output(y, "encoder_layer", "m:x") is y
    assert _output((y, None), "mha", "m:x") is y  # nn.MultiheadAttention's (output, weights)
    model_output = OrderedDict(logits=y, past_key_values=None)  # as ModelOutput holds them
    assert _output(model_output, "causal_lm", "m:x") is y
    with pytest.raises(TypeError, match="tck's instance adapter: m:x returned a dict"):
        _output({"scores": y}, "encoder_layer", "m:x")
    with pytest.raises(TypeError, match="returned a str, not a tensor"):
        _output("y", "encoder_layer", "m:x")


@pytest.mark.spec("0.5")
def test_vit_layer_with_qkv_bias_off_is_read() -> None:
    """transformers' ViTLayer with qkv_bias=False: the subject fixes attention_bias=False and
    attention_out_bias=True (SPEC.md §0.5), its params() are that layout, and its output is
    the oracle's on its own weights (float64 sdpa: rounding only)."""
    transformers = pytest.importorskip("transformers")
    from tck.adapters.instance import adapt
    from tck.reference.expected import expected
    from tck.reference.inputs import Shape, make_inputs

    torch.manual_seed(0)
    config = transformers.ViTConfig(
        hidden_size=24,
        num_attention_heads=3,
        intermediate_size=40,
        qkv_bias=False,
        attn_implementation="sdpa",
    )
    layer = transformers.models.vit.modeling_vit.ViTLayer(config).eval()
    adapter = adapt(layer, "vit_layer")
    subject = next(s for s in adapter.subjects() if s.name == "encoder_layer[sdpa]")
    assert subject.config["attention_bias"] is False
    assert subject.config["attention_out_bias"] is True
    ours = Config(d_model=24, n_heads=3, d_ff=40, attention_bias=False, attention_out_bias=True)
    handle = adapter.build(subject, ours, seed=0)
    params = adapter.params(handle)
    assert "self_attn.o.bias" in params and "self_attn.q.bias" not in params
    inputs = make_inputs(subject.component, ours, np.random.default_rng(2), Shape(lq=5, lk=5))
    gold = expected(subject.component, inputs, params, ours, subject.conventions)
    np.testing.assert_allclose(adapter.run(handle, inputs), gold, rtol=1e-9, atol=1e-9)


# transformers' decoder models and layers as instances (SPEC.md §11): their own configs (not
# hf_decoder's defaults: grouped-query heads, RoPE base 500, RMSNorm eps 1e-5, an untied head
# for Llama; eager attention and 2 layers for GPT-2) and trained weights.
HF_DECODER_MODELS = textwrap.dedent(
    """
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)


    def trained(module):
        with torch.no_grad():
            for p in module.parameters():
                p.add_(0.05 * torch.randn_like(p))
        return module.eval()


    llama = trained(LlamaForCausalLM(LlamaConfig(
        vocab_size=40, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        rms_norm_eps=1e-5, rope_theta=500.0, tie_word_embeddings=False,
    )))
    gpt2 = trained(GPT2LMHeadModel(GPT2Config(
        vocab_size=40, n_positions=64, n_embd=32, n_layer=2, n_head=4, n_inner=48,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None,
        eos_token_id=None, attn_implementation="eager",
    )))
    """
)


@pytest.fixture()
def hf_models(models: Path) -> Path:
    pytest.importorskip("transformers")
    (models / "hf_decoders.py").write_text(HF_DECODER_MODELS)
    sys.modules.pop("hf_decoders", None)
    return models


@pytest.mark.spec("10.12", "11.1", "11.4", "11.5")
@pytest.mark.parametrize(
    "attr,component,subject",
    [
        ("llama", "causal_lm", "causal_lm[sdpa]"),
        ("llama.model.layers[0]", "decoder_block", "decoder_block[sdpa]"),
        ("gpt2", "causal_lm", "causal_lm[eager]"),
        ("gpt2.transformer.h[1]", "decoder_block", "decoder_block[eager]"),
    ],
)
def test_transformers_decoder_instances(
    hf_models: Path, attr: str, component: str, subject: str
) -> None:
    """A transformers decoder model, or one of its layers (given the rotary embeddings its
    model computes), checked as causal_lm / decoder_block with its own config and weights:
    the oracle checks run and pass; Llama's float32 steps are declared (SPEC.md §10.12)."""
    if "[" in attr:  # a layer: a module attribute naming it
        name = attr.split(".")[0] + "_layer"
        with (hf_models / "hf_decoders.py").open("a") as f:
            f.write(f"\n{name} = {attr}\n")
        attr = name
    out = hf_models / "out"
    args = ["--adapter", f"hf_decoders:{attr}", "--component", component, "-n", "0"]
    done = run_tck([*args, "--only", component, "--out", str(out)], hf_models)
    document = _verdict(done, out)
    assert document["summary"]["unverified"] == 0, document["summary"]
    for check in ("equality.oracle", "gradients.gradients", "decoder.kv_cache"):
        assert _passed(document, check, subject), check
    declared = [
        r["metrics"].get("declared")
        for r in document["results"]
        if r["check"] == "numerics.float32_islands" and r["status"] == "convention"
    ]
    expected_steps = ["norm_statistics", "rope_angles"] if "llama" in attr else None
    assert declared == ([expected_steps] if expected_steps else []), declared


def test_transformers_decoder_config_is_read_and_refusals() -> None:
    """The instance's own sizes and conventions reach the subjects; a RoPE scaling tck does
    not check and an attention implementation it does not run are refused in one line."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=40,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=1e-5,
        rope_theta=500.0,
        tie_word_embeddings=False,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    adapter = adapt(model, "m:llama")
    subjects = {s.name: s for s in adapter.subjects()}
    assert set(subjects) == {
        "gated_ffn",
        "causal_self_attention[sdpa]",
        "decoder_block[sdpa]",
        "causal_lm[sdpa]",
    }
    lm = subjects["causal_lm[sdpa]"]
    assert lm.config["n_kv_heads"] == 2 and lm.config["tie_weights"] is False
    assert lm.conventions.eps == 1e-5 and lm.conventions.pe_base == 500.0
    assert lm.conventions.float32_steps == ("norm_statistics", "rope_angles")
    layer = adapt(model.model.layers[1], "m:layer")
    assert {s.component for s in layer.subjects()} == {
        "gated_ffn",
        "causal_self_attention",
        "decoder_block",
    }
    with pytest.raises(InstanceError, match="not causal_lm"):
        adapt(model.model.layers[1], "m:layer", component="causal_lm")
    scaled = transformers.LlamaForCausalLM(
        transformers.LlamaConfig(
            vocab_size=40,
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=1,
            num_attention_heads=4,
            rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0},
        )
    )
    with pytest.raises(InstanceError, match=r"rope_type='dynamic'.*SPEC.md §2.6"):
        adapt(scaled, "m:scaled")
    model.config._attn_implementation = "flex_attention"
    with pytest.raises(InstanceError, match="attn_implementation='flex_attention'"):
        adapt(model, "m:llama")
