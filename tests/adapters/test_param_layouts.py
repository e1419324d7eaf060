"""Parameter maps that describe real layouts (Param: slice, permute, reshape; ABSENT), bias
per part (Config.attention_bias, ffn_bias, norm_bias, head_bias: SPEC.md §0.5), and the
manual's "A model with its own layout" (docs/guide/layouts.md) adapter, run verbatim with no
failure."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from tck.adapters import ABSENT, Param, TorchEntry, TorchModuleAdapter, Unsupported
from tck.adapters.reference import entry as reference_entry
from tck.reference import Config, canonical_conventions, init_params, param_count, param_shapes
from tck.reference.expected import expected
from tck.reference.inputs import Shape, make_inputs

pytestmark = pytest.mark.spec("0.2", "0.5", "10.3")

MANUAL = Path(__file__).resolve().parents[2] / "docs" / "guide" / "layouts.md"
SECTION = "## A model with its own layout"
MAX_ADAPTER_LINES = 30


class Stored(nn.Module):
    """An FFN stored its own way: fc1 as [in, out], fc2 fused into w2 (its second half), no
    fc2 bias. The adapter's forward computes with it."""

    def __init__(self, d: int, f: int):
        super().__init__()
        self.w = nn.Parameter(torch.randn(d, f, dtype=torch.float64))  # [in, out]
        self.b = nn.Parameter(torch.randn(f, dtype=torch.float64))
        self.w2 = nn.Parameter(torch.randn(2 * d, f, dtype=torch.float64))  # fused [in, out]s


def _ffn_adapter() -> TorchModuleAdapter:
    def forward(m, x):  # fc2(relu(fc1 x)): fc1 = (w, b), fc2 = the first half of w2, no bias
        d = x.shape[-1]
        return torch.relu(x @ m.w + m.b) @ m.w2[d:].T

    return TorchModuleAdapter(
        "stored",
        [
            TorchEntry(
                "ffn",
                make=lambda c: Stored(c.d_model, c.d_ff),
                forward=forward,
                param_map=lambda c: {
                    "fc1.weight": Param("w", permute=(1, 0)),
                    "fc1.bias": "b",
                    "fc2.weight": Param("w2", slice=(0, c.d_model, 2 * c.d_model)),
                    "fc2.bias": ABSENT,
                },
            )
        ],
    )


def test_param_transforms_round_trip_and_compute() -> None:
    adapter = _ffn_adapter()
    subject = adapter.subjects()[0]
    config = Config(d_model=6, d_ff=10, n_heads=2)
    handle = adapter.build(subject, config, seed=0)
    params = init_params("ffn", config, subject.conventions, seed=1)
    params["fc2.bias"] = np.zeros_like(params["fc2.bias"])  # the module has none
    adapter.load(handle, params)
    back = adapter.params(handle)
    assert set(back) == set(params)
    for name, value in params.items():
        assert back[name].shape == value.shape
        np.testing.assert_allclose(back[name], value, rtol=0, atol=1e-14)  # a copy, float64
    # the module computes the canonical FFN with these parameters (float64 on both sides)
    x = make_inputs("ffn", config, np.random.default_rng(0), Shape())
    gold = expected("ffn", x, params, config, subject.conventions)
    np.testing.assert_allclose(adapter.run(handle, x), gold, rtol=0, atol=1e-12)
    # a non-zero value for an absent bias cannot be held: Unsupported, nothing written
    before = adapter.params(handle)
    with pytest.raises(Unsupported, match=r"fc2\.bias"):
        adapter.load(handle, init_params("ffn", config, subject.conventions, seed=2))
    after = adapter.params(handle)
    assert all(np.array_equal(before[k], after[k]) for k in before)
    with pytest.raises(Unsupported, match="no gradient"):
        adapter.grad(handle, x, np.ones_like(gold))


def test_param_gradients_follow_the_layout() -> None:
    adapter = _ffn_adapter()
    entry = adapter._entries["ffn"]
    adapter._entries["ffn"] = TorchEntry(  # the same, with fc2.bias dropped from the map
        "ffn",
        make=entry.make,
        forward=entry.forward,
        param_map=lambda c: {k: v for k, v in entry.param_map(c).items() if k != "fc2.bias"},
    )
    config = Config(d_model=6, d_ff=10, n_heads=2)
    handle = adapter.build(adapter.subjects()[0], config, seed=0)
    x = make_inputs("ffn", config, np.random.default_rng(0), Shape())
    out = adapter.run(handle, x)
    cot = np.random.default_rng(1).standard_normal(out.shape)
    grads = adapter.grad(handle, x, cot)
    assert grads["params.fc1.weight"].shape == (10, 6)  # canonical [out, in]
    assert grads["params.fc2.weight"].shape == (6, 10)
    # against finite differences of the canonical parameter, through load
    params = adapter.params(handle)
    eps, (i, j) = 1e-6, (2, 3)
    for sign in (1, -1):
        p = {k: v.copy() for k, v in params.items()}
        p["fc1.weight"][i, j] += sign * eps
        adapter.load(handle, p)
        value = float(np.sum(adapter.run(handle, x) * cot))
        if sign == 1:
            plus = value
        else:
            minus = value
    numeric = (plus - minus) / (2 * eps)
    assert abs(numeric - grads["params.fc1.weight"][i, j]) < 1e-6 * max(1.0, abs(numeric))


BIAS_BASE = Config(d_model=8, n_heads=2, d_ff=12, vocab_size=11, image_size=8, n_classes=3)


@pytest.mark.parametrize(
    "component, ffn_kind",
    [
        *(
            (c, "plain")
            for c in ("mha", "ffn", "layer_norm", "encoder_layer", "encoder", "vit", "seq2seq")
        ),
        # decoder-only (§11): its attention and its gated FFN follow the same two fields
        ("causal_self_attention", "plain"),
        ("gated_ffn", "gated"),
        ("decoder_block", "plain"),
        ("decoder_block", "gated"),
        ("causal_lm", "gated"),
    ],
)
def test_bias_per_part(component: str, ffn_kind: str) -> None:
    """The reference model, the oracle and the parameter shapes agree on each bias layout."""
    conventions = dataclasses.replace(canonical_conventions(component), ffn_kind=ffn_kind)
    base = BIAS_BASE
    default = param_count(component, base, conventions)
    for fields in (
        {"attention_bias": False},
        {"ffn_bias": False},
        {"norm_bias": False},
        {"head_bias": False},
        {"bias": False, "ffn_bias": True},
        {"attention_bias": False, "attention_out_bias": True},  # ViT's qkv_bias=False
        {"attention_bias": True, "attention_out_bias": False},  # Qwen2
    ):
        config = Config(**{**base.to_dict(), **fields})
        shapes = param_shapes(component, config, conventions)
        assert all(
            not name.endswith("bias") or _keeps(name, component, config) for name in shapes
        ), (fields, sorted(shapes))
        adapter = TorchModuleAdapter("ref", [reference_entry(component, conventions)])
        handle = adapter.build(adapter.subjects()[0], config, seed=0)
        params = init_params(component, config, conventions, seed=0)
        adapter.load(handle, params)  # the model holds exactly these names and shapes
        assert adapter.param_count(handle) == param_count(component, config, conventions)
        x = make_inputs(component, config, np.random.default_rng(0), Shape())
        gold = expected(component, x, params, config, conventions)
        np.testing.assert_allclose(adapter.run(handle, x), gold, rtol=0, atol=1e-10)
    assert param_count(component, Config(**base.to_dict()), conventions) == default


def _agrees_per_part(adapter: TorchModuleAdapter, name: str, fields: dict[str, bool]) -> None:
    """``name`` of ``adapter`` built with ``fields`` holds the canonical layout of that config
    (load takes exactly its names) and computes the oracle's output with it."""
    subject = next(s for s in adapter.subjects() if s.name == name)
    config = dataclasses.replace(BIAS_BASE, **fields)
    handle = adapter.build(subject, config, seed=0)
    params = init_params(subject.component, config, subject.conventions, seed=1)
    adapter.load(handle, params)
    x = make_inputs(subject.component, config, np.random.default_rng(2), Shape())
    gold = expected(subject.component, x, params, config, subject.conventions)
    np.testing.assert_allclose(adapter.run(handle, x), gold, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize(
    "fields",
    [
        {"attention_bias": False},
        {"bias": False, "attention_bias": True},
        {"attention_bias": False, "attention_out_bias": True},
        {"attention_bias": True, "attention_out_bias": False},
    ],
)
def test_bias_per_part_reaches_user_style_modules(fields: dict[str, bool]) -> None:
    """Adapters build the part without (or with) a bias that the config says: torch.nn's
    MultiheadAttention(bias=...), the tutorial GPT's attention and SwiGLU (SPEC.md §0.5)."""
    from tck.adapters.mutants.gpt_tutorial import attention_entry, gated_ffn_entry, gpt_entry
    from tck.adapters.torch_nn import adapter as torch_nn

    config = dataclasses.replace(BIAS_BASE, **fields)
    if config.has_attention_bias == config.has_attention_out_bias:
        _agrees_per_part(torch_nn, "mha", fields)
    else:  # one bias switch for in_proj and out_proj: refused in words, never built
        subject = next(s for s in torch_nn.subjects() if s.name == "mha")
        with pytest.raises(Unsupported, match="one bias switch"):
            torch_nn.build(subject, config, seed=0)
    tutorial = TorchModuleAdapter(
        "gpt_tutorial", [attention_entry(), gated_ffn_entry(), gpt_entry()]
    )
    _agrees_per_part(tutorial, "causal_self_attention", fields)
    if config.has_attention_out_bias and config.has_ffn_bias and config.norm_bias:
        _agrees_per_part(tutorial, "causal_lm", fields)  # the book GPT's qkv_bias switch
    else:
        with pytest.raises(Unsupported, match="always biases"):
            tutorial.build(
                next(s for s in tutorial.subjects() if s.name == "causal_lm"), config, seed=0
            )
    ffn_fields = {k.replace("attention", "ffn"): v for k, v in fields.items() if "out" not in k}
    _agrees_per_part(tutorial, "gated_ffn", ffn_fields)


def test_attention_out_bias_follows_attention_bias() -> None:
    """SPEC.md §0.5: attention_out_bias None follows attention_bias (which follows bias), so a
    config written before the field existed has the layout it had; set, it switches o alone,
    and it leaves to_dict only when set."""
    assert Config(attention_bias=False).has_attention_out_bias is False
    assert Config(bias=False).has_attention_out_bias is False
    assert Config(bias=False, attention_bias=True).has_attention_out_bias is True
    qwen2 = Config(attention_bias=True, attention_out_bias=False)
    shapes = param_shapes("causal_self_attention", qwen2, canonical_conventions("causal_lm"))
    assert {"q.bias", "k.bias", "v.bias"} <= set(shapes) and "o.bias" not in shapes
    vit = Config(attention_bias=False, attention_out_bias=True)
    shapes = param_shapes("mha", vit)
    assert "o.bias" in shapes and not {"q.bias", "k.bias", "v.bias"} & set(shapes)
    assert "attention_out_bias" not in Config().to_dict()
    assert Config(**qwen2.to_dict()) == qwen2


@pytest.mark.parametrize("field", ["attention_bias", "ffn_bias", "norm_bias", "attention_out_bias"])
def test_one_bias_switch_refuses_a_part_without_bias(field: str) -> None:
    """nn.TransformerEncoderLayer has one bias switch for every part: a config without the
    bias of one part is Unsupported, in words that say why, never built with it."""
    from tck.adapters.torch_nn import adapter as torch_nn

    subject = next(s for s in torch_nn.subjects() if s.name == "encoder_layer")
    config = dataclasses.replace(BIAS_BASE, **{field: False})
    with pytest.raises(Unsupported, match="one bias switch"):
        torch_nn.build(subject, config, seed=0)


def _keeps(name: str, component: str, c: Config) -> bool:
    leaf = name.rsplit(".", 2)[-2] if "." in name else ""
    if leaf in ("q", "k", "v"):
        return c.has_attention_bias
    if leaf == "o":
        return c.has_attention_out_bias
    if leaf in ("fc1", "fc2", "gate", "up", "down"):
        return c.has_ffn_bias
    if name == "head.bias":
        return c.head_bias
    if leaf.startswith("norm") or component == "layer_norm":
        return c.norm_bias
    return True


def _section() -> str:
    text = MANUAL.read_text(encoding="utf-8")
    assert SECTION in text, f"docs/guide/layouts.md has no section {SECTION!r}"
    return text.split(SECTION, 1)[1].split("\n## ", 1)[0]


def test_readme_layout_adapter_is_about_30_lines() -> None:
    [snippet] = re.findall(r"```python\n(.*?)```", _section(), flags=re.DOTALL)
    adapter = snippet.split("# ---- the adapter", 1)[1].splitlines()[1:]
    code = [line for line in adapter if line.strip() and not line.strip().startswith("#")]
    assert len(code) <= MAX_ADAPTER_LINES, "\n".join(code)
    assert "Param(" in snippet and "attention_bias" in snippet


def test_readme_layout_adapter_runs_with_no_failure(tmp_path: Path) -> None:
    section = _section()
    [snippet] = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    (tmp_path / "my_block.py").write_text(snippet, encoding="utf-8")
    [command] = [
        line.strip()
        for block in re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)
        for line in block.splitlines()
        if line.strip().startswith("python -m tck run ")
    ]
    argv = shlex.split(command)[1:]
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, *argv, "-n", "0", "--out", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    document = json.loads((out / "results.json").read_text())
    summary = document["summary"]
    assert summary["failed"] == 0 and summary["errors"] == 0, summary
    assert summary["unverified"] == 0, summary
    passed = {r["check"] for r in document["results"] if r["status"] == "pass"}
    assert {"equality.oracle", "params.count", "params.round_trip"} <= passed, passed
    assert any(c.startswith("gradients.") for c in passed), passed


class _KernelFFN(nn.Module):
    """An FFN with kernels stored [in, out] as Flax and Paddle store them; ``linear`` says how
    its first product multiplies (right: ``x @ w``; the torch habit: ``F.linear``, x @ w.T);
    ``wrong_input`` hands the second layer the FFN's input instead of the hidden units."""

    def __init__(self, c: Config, linear: bool = False, wrong_input: bool = False):
        super().__init__()
        self.kernel_1 = nn.Parameter(torch.zeros(c.d_model, c.d_ff))
        self.bias_1 = nn.Parameter(torch.zeros(c.d_ff))
        self.kernel_2 = nn.Parameter(torch.zeros(c.d_ff, c.d_model))
        self.bias_2 = nn.Parameter(torch.zeros(c.d_model))
        self.linear, self.wrong_input = linear, wrong_input

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.linear:
            hidden = torch.relu(nn.functional.linear(x, self.kernel_1, self.bias_1))
        else:
            hidden = torch.relu(x @ self.kernel_1 + self.bias_1)
        return (x if self.wrong_input else hidden) @ self.kernel_2 + self.bias_2


def _kernel_ffn(**kw: bool) -> tuple[TorchModuleAdapter, object]:
    entry = TorchEntry(
        "ffn",
        make=lambda c: _KernelFFN(c, **kw),
        forward=lambda m, x: m(x),
        param_map={
            "fc1.weight": Param("kernel_1", permute=(1, 0)),
            "fc1.bias": "bias_1",
            "fc2.weight": Param("kernel_2", permute=(1, 0)),
            "fc2.bias": "bias_2",
        },
    )
    adapter = TorchModuleAdapter("kernels", [entry])
    config = Config(d_model=8, d_ff=24)
    handle = adapter.build(adapter.subjects()[0], config, seed=0)
    adapter.load(handle, init_params("ffn", config, np.random.default_rng(0)))
    return adapter, handle


def test_a_kernel_multiplied_in_the_other_orientation_is_named() -> None:
    """SPEC.md §0.2: an [in, out] kernel multiplied through F.linear raises on its shapes;
    the adapter names the weight and its orientation (params.weight_reshaped)."""
    adapter, handle = _kernel_ffn(linear=True)
    x = {"x": np.ones((2, 3, 8))}
    with pytest.raises(ValueError) as raised:
        adapter.run(handle, x)
    assert getattr(raised.value, "code", None) == "params.weight_reshaped"
    assert "kernel_1" in str(raised.value) and "input width 8" in str(raised.value)
    right, handle = _kernel_ffn()
    assert right.run(handle, x).shape == (2, 3, 8)


def test_a_right_kernel_given_the_wrong_input_is_not_called_transposed() -> None:
    """The same torch error from a right kernel handed a tensor of its output width (the
    FFN's input to its second layer): the canonical widths say it is not the orientation."""
    adapter, handle = _kernel_ffn(wrong_input=True)
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
        adapter.run(handle, {"x": np.ones((2, 3, 8))})
