"""The one ``--map`` format (adapters/param_map.py): its schema's refusals, one line each
naming the first wrong field, and the same map read the same way by a module instance and
by the ONNX file exported from that module (a slice of a fused qkv honoured in both)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tck.adapters.param_map import MAP_SCHEMA, Ref, check_map, read_map, refs

pytestmark = pytest.mark.spec("0.5", "10.3")

ROOT = Path(__file__).resolve().parents[2]

# A map using every field: a fused qkv weight and bias cut by slices, a weight stored
# [in, out], an absent bias, a reshape, calling names, a mask polarity.
FULL = {
    "params": {
        "q.weight": {"name": "qkv", "slice": [0, 0, 8]},
        "o.weight": {"name": "out", "permute": [1, 0]},
        "o.bias": None,
        "v.bias": {"name": "b", "shape": [8]},
        "k.weight": "k",
    },
    "config": {"n_heads": 2, "attention_out_bias": False},
    "conventions": {"fully_masked_rows": "nan", "eps": 1e-6},
    "inputs": {"key_padding": "pad"},
    "masks": "ignore",
}


def test_the_schema_takes_every_field_it_documents() -> None:
    assert check_map(FULL) is FULL
    assert refs(FULL) == {
        "q.weight": Ref("qkv", slice=(0, 0, 8)),
        "o.weight": Ref("out", permute=(1, 0)),
        "o.bias": None,
        "v.bias": Ref("b", shape=(8,)),
        "k.weight": Ref("k"),
    }
    assert check_map({}) == {} and refs(None) == {}


@pytest.mark.parametrize(
    ("mapping", "words"),
    [
        ({"parms": {}}, "unknown key 'parms'"),
        ([1, 2], "is not of type 'object'"),
        ({"params": {"q.weight": 3}}, "params['q.weight'] is a tensor name, null (absent)"),
        ({"params": {"q.weight": ""}}, "params['q.weight']"),
        ({"params": {"q.weight": {"slice": [0, 0, 8]}}}, "needs its tensor's 'name'"),
        ({"params": {"q.weight": {"name": "w", "stride": 2}}}, "unknown key 'stride'"),
        ({"params": {"q.weight": {"name": "w", "slice": [0, 8]}}}, "slice is [dim, start, stop]"),
        ({"params": {"q.weight": {"name": "w", "slice": [0, 8, 4]}}}, "needs start < stop"),
        ({"params": {"q.weight": {"name": "w", "slice": [0, -1, 4]}}}, "slice[1]"),
        ({"params": {"q.weight": {"name": "w", "slice": [0, 0, "8"]}}}, "slice[2]"),
        ({"params": {"q.weight": {"name": "w", "permute": [0, 2]}}}, "an order of the dims"),
        ({"params": {"q.weight": {"name": "w", "permute": [1, 1]}}}, "permute"),
        ({"params": {"q.weight": {"name": "w", "shape": [0, 8]}}}, "shape[0]"),
        ({"config": {"d_modle": 8}}, "config: unknown key 'd_modle'"),
        ({"conventions": {"norm": "pre"}}, "conventions: unknown key 'norm'"),
        ({"inputs": {"x": 1}}, "inputs['x']"),
        ({"masks": "invert"}, "masks: 'invert' is not one of"),
    ],
)
def test_the_schema_refuses_with_the_field_named(mapping: object, words: str) -> None:
    with pytest.raises(ValueError) as caught:
        check_map(mapping, what="--map m.json")
    message = str(caught.value)
    assert message.startswith("--map m.json: ") and words in message, message
    assert "\n" not in message, message


def test_the_file_is_read_bounded_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps(FULL))
    assert read_map(path) == FULL and read_map(None) is None
    path.write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        read_map(path)
    path.write_text('{"masks": "keep", "extra": 1}')
    with pytest.raises(ValueError, match="unknown key 'extra'"):
        read_map(path)


def test_the_published_schema_is_the_one_the_parser_uses() -> None:
    published = json.loads((ROOT / "docs" / "map.schema.json").read_text())
    assert published == json.loads(json.dumps(MAP_SCHEMA)), "run scripts/map_schema.py"


def test_both_adapters_refuse_a_bad_map_in_the_same_words(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from torch import nn

    from tck.adapters.instance import InstanceError, adapt
    from tck.adapters.onnx_file import OnnxFileError
    from tck.adapters.onnx_file import read_map as onnx_read_map

    path = tmp_path / "m.json"
    path.write_text('{"params": {"q.weight": {"name": "w", "slice": [0, 8]}}}')
    with pytest.raises(InstanceError) as from_module:
        adapt(nn.Linear(4, 4), "m:l", "mha", str(path))
    with pytest.raises(OnnxFileError) as from_onnx:
        onnx_read_map(path)
    assert str(from_module.value) == str(from_onnx.value)


# ------------------------------------------------------------- one map, two implementations

MODEL = textwrap.dedent(
    '''
    import math

    import torch
    from torch import nn
    from torch.nn import functional as F


    class FusedAttention(nn.Module):
        """Multi-head attention with one fused [3D, D] qkv weight and bias, an output
        projection without bias, a padding mask that says True = padded."""

        def __init__(self, dim=8, heads=2):
            super().__init__()
            self.dim, self.heads = dim, heads
            g = torch.Generator().manual_seed(5)
            self.qkv = nn.Parameter(0.3 * torch.randn(3 * dim, dim, generator=g).double())
            self.qkv_bias = nn.Parameter(0.1 * torch.randn(3 * dim, generator=g).double())
            self.out = nn.Parameter(0.3 * torch.randn(dim, dim, generator=g).double())

        def forward(self, query, key, value, pad=None):
            wq, wk, wv = self.qkv.chunk(3)
            bq, bk, bv = self.qkv_bias.chunk(3)
            b, n, d = query.shape
            m, h = key.shape[1], self.heads
            q = F.linear(query, wq, bq).reshape(b, n, h, d // h).transpose(1, 2)
            k = F.linear(key, wk, bk).reshape(b, m, h, d // h).transpose(1, 2)
            v = F.linear(value, wv, bv).reshape(b, m, h, d // h).transpose(1, 2)
            scores = q @ k.transpose(-1, -2) / math.sqrt(d // h)
            if pad is not None:
                scores = scores.masked_fill(pad[:, None, None, :], float("-inf"))
            heads = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d)
            return heads @ self.out.T


    fused = FusedAttention()
    '''
)
# d_k = 4: the scale 1/sqrt(d_k) = 0.5 is exact in any float constant the exporter writes
FUSED_MAP = {
    "params": {
        **{
            f"{part}.{kind}": {"name": tensor, "slice": [0, 8 * i, 8 * (i + 1)]}
            for i, part in enumerate("qkv")
            for kind, tensor in (("weight", "qkv"), ("bias", "qkv_bias"))
        },
        "o.weight": "out",
    },
    "config": {"n_heads": 2, "attention_out_bias": False},
    "conventions": {"fully_masked_rows": "nan"},
    "inputs": {"key_padding": "pad"},
    "masks": "ignore",
}


def _export(folder: Path) -> Path:
    """The module exported as users do (``torch.onnx.export``, dynamo, parameters kept under
    their names), with distinct key and value inputs and dynamic batch and lengths."""
    import onnx
    import torch

    sys.path.insert(0, str(folder))
    try:
        from fused_models import fused
    finally:
        sys.path.remove(str(folder))
    g = torch.Generator().manual_seed(1)
    query = torch.randn(2, 5, 8, generator=g, dtype=torch.float64)
    key, value = (torch.randn(2, 6, 8, generator=g, dtype=torch.float64) for _ in range(2))
    pad = torch.tensor([[False] * 6, [False] * 3 + [True] * 3])
    batch, seq, keys = (torch.export.Dim(n, min=1) for n in ("batch", "seq", "keys"))
    program = torch.onnx.export(
        fused,
        (query, key, value, pad),
        dynamo=True,
        optimize=False,
        input_names=["query", "key", "value", "pad"],
        dynamic_shapes=(
            {0: batch, 1: seq},
            {0: batch, 1: keys},
            {0: batch, 1: keys},
            {0: batch, 1: keys},
        ),
    )
    path = folder / "fused.onnx"
    onnx.save(program.model_proto, str(path))
    return path


def _results(folder: Path, adapter: str, name: str) -> dict:
    out = folder / name
    args = ["--adapter", adapter, "--component", "mha", "--map", "map.json"]
    done = subprocess.run(
        [sys.executable, "-m", "tck", "run", *args, "--only", "mha", "-n", "0", "--out", str(out)],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "results.json").read_text())


def test_one_map_reads_the_same_in_a_module_and_its_onnx_file(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    (tmp_path / "fused_models.py").write_text(MODEL)
    (tmp_path / "map.json").write_text(json.dumps(FUSED_MAP))
    path = _export(tmp_path)

    from tck.adapters.onnx_file import OnnxFileAdapter

    # the slices read the fused initializers back as the module's own q, k, v
    adapter = OnnxFileAdapter(path, "mha", FUSED_MAP)
    (subject,) = adapter.subjects()
    from tck.reference import Config

    handle = adapter.build(subject, Config(**adapter.fixed), seed=0)
    module_rows = _results(tmp_path, "fused_models:fused", "out-module")
    onnx_rows = _results(tmp_path, f"onnx:{path.name}", "out-onnx")
    sys.path.insert(0, str(tmp_path))
    try:
        from fused_models import fused
    finally:
        sys.path.remove(str(tmp_path))
    read = adapter.params(handle)
    qkv = fused.qkv.detach().numpy()
    for i, part in enumerate("qkv"):
        np.testing.assert_array_equal(read[f"{part}.weight"], qkv[8 * i : 8 * (i + 1)])

    def verdicts(document: dict) -> dict[str, set[str]]:
        rows: dict[str, set[str]] = {}
        for row in document["results"]:
            rows.setdefault(row["check"], set()).add(row["status"])
        return rows

    for document in (module_rows, onnx_rows):
        summary = document["summary"]
        assert summary["failed"] == summary["errors"] == summary["unverified"] == 0, summary
    by_module, by_onnx = verdicts(module_rows), verdicts(onnx_rows)
    # the oracle comparison, the mask polarity the map declares and the convention it
    # declares hold in both; where both ran a check, its verdicts are the same
    for check in ("equality.oracle", "masks.polarity", "masks.padding_invariance"):
        assert by_module[check] == by_onnx[check] == {"pass"}, check
    assert by_module["fingerprint.fully_masked_rows"] == {"convention"}
    assert by_onnx["fingerprint.fully_masked_rows"] == {"convention"}
    both = {
        c
        for c in set(by_module) & set(by_onnx)
        if by_module[c] - {"skip"} and by_onnx[c] - {"skip"}
    }
    assert len(both) >= 10, both
    assert {c: by_module[c] - {"skip"} for c in both} == {c: by_onnx[c] - {"skip"} for c in both}


def _layer_norm_graph(path: Path) -> None:
    """A float64 LayerNorm graph with its scale stored [1, D] and no bias input."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    scale = numpy_helper.from_array(np.linspace(0.5, 2.0, 4).reshape(1, 4), "g")
    flat = numpy_helper.from_array(np.array([4], dtype=np.int64), "flat")
    graph = helper.make_graph(
        [
            helper.make_node("Reshape", ["g", "flat"], ["g4"]),
            helper.make_node("LayerNormalization", ["x", "g4"], ["y"], axis=-1, epsilon=1e-5),
        ],
        "layer_norm",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, ["b", "n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, ["b", "n", 4])],
        [scale, flat],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(path))


def test_an_onnx_file_honours_shape_and_null(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    from tck.adapters.base import Unsupported
    from tck.adapters.onnx_file import OnnxFileAdapter, OnnxFileError
    from tck.reference import Config

    path = tmp_path / "ln.onnx"
    _layer_norm_graph(path)
    mapping = {"params": {"weight": {"name": "g", "shape": [4]}, "bias": None}}
    adapter = OnnxFileAdapter(path, "layer_norm", mapping)
    handle = adapter.build(adapter.subjects()[0], Config(**adapter.fixed), seed=0)
    read = adapter.params(handle)
    np.testing.assert_array_equal(read["weight"], np.linspace(0.5, 2.0, 4))
    np.testing.assert_array_equal(read["bias"], np.zeros(4))  # null: absent, reads as zeros
    adapter.load(handle, {"weight": np.full(4, 3.0), "bias": np.zeros(4)})
    assert adapter.params(handle)["weight"].tolist() == [3.0] * 4
    x = np.random.default_rng(0).standard_normal((2, 3, 4))
    centred = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(adapter.run(handle, {"x": x}), 3.0 * centred, atol=1e-12)
    with pytest.raises(Unsupported, match="loads only as zeros"):
        adapter.load(handle, {"bias": np.ones(4)})
    # the same rules as for a module: every canonical parameter named, no other
    for bad, words in (
        ({"params": {"weight": "g"}}, "lacks canonical parameters"),
        ({"params": {"weight": "g", "bias": None, "gamma": "g"}}, "not canonical parameters"),
        ({"params": {"weight": "nope", "bias": None}}, "the graph lacks"),
        ({"conventions": {"eps": "small"}}, "not Conventions"),
    ):
        with pytest.raises(OnnxFileError, match=words):
            OnnxFileAdapter(path, "layer_norm", bad)


@pytest.mark.spec("0.2", "5.4")
def test_a_plain_name_reads_and_loads_across_singleton_dimensions() -> None:
    """A module's 0-d gain mapped by its plain name to ScaleNorm's canonical ``weight [1]``:
    read as [1], loaded back into the 0-d slot; a shape apart by more than singletons is still
    refused, naming both shapes."""
    import torch
    from torch import nn

    from tck.adapters import TorchEntry, TorchModuleAdapter
    from tck.reference import Config

    class Gain(nn.Module):
        def __init__(self, shape: tuple[int, ...]) -> None:
            super().__init__()
            self.g = nn.Parameter(torch.full(shape, 2.0))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x / torch.norm(x, dim=-1, keepdim=True).clamp(min=1e-5) * self.g

    def adapter(shape: tuple[int, ...]) -> TorchModuleAdapter:
        entry = TorchEntry(
            "scale_norm",
            make=lambda c: Gain(shape),
            forward=lambda m, x: m(x),
            param_map={"weight": "g"},
        )
        return TorchModuleAdapter("gain", [entry])

    scalar = adapter(())
    handle = scalar.build(scalar.subjects()[0], Config(d_model=8), seed=0)
    assert scalar.params(handle)["weight"].shape == (1,)
    scalar.load(handle, {"weight": np.array([3.5])})
    assert handle.module.g.shape == () and float(handle.module.g) == 3.5
    wide = adapter((2,))
    handle = wide.build(wide.subjects()[0], Config(d_model=8), seed=0)
    refused = r"weight has shape \(1,\), the module's g slot has \(2,\)"
    with pytest.raises(ValueError, match=refused) as raised:
        wide.load(handle, {"weight": np.array([3.5])})
    assert raised.value.code == "params.shape_differs"  # an AdapterFailure too: a check's error


def test_a_parameter_the_module_lacks_is_named_with_its_code() -> None:
    """A module built without a parameter the map names for its config (a bias left out)
    fails to load with ``params.names_differ``, naming the slot (SPEC.md §0.2); each check
    that loads records it as that error, not as an adapter crash."""
    from torch import nn

    from tck.adapters import TorchEntry, TorchModuleAdapter
    from tck.adapters.base import AdapterFailure
    from tck.reference import Config

    entry = TorchEntry(
        "ffn",
        make=lambda c: nn.Sequential(
            nn.Linear(c.d_model, c.d_ff), nn.ReLU(), nn.Linear(c.d_ff, c.d_model, bias=False)
        ),
        forward=lambda m, x: m(x),
        param_map={"fc1.weight": "0.weight", "fc1.bias": "0.bias", "fc2.weight": "2.weight",
                   "fc2.bias": "2.bias"},
    )  # fmt: skip
    adapter = TorchModuleAdapter("no-bias", [entry])
    config = Config(d_model=8, d_ff=16)
    handle = adapter.build(adapter.subjects()[0], config, seed=0)
    params = {
        "fc1.weight": np.ones((16, 8)), "fc1.bias": np.zeros(16),
        "fc2.weight": np.ones((8, 16)), "fc2.bias": np.zeros(8),
    }  # fmt: skip
    with pytest.raises(AdapterFailure, match=r"no parameter '2\.bias'") as raised:
        adapter.load(handle, params)
    assert raised.value.code == "params.names_differ"


def test_a_stack_built_without_its_final_norm_is_named_as_that() -> None:
    """A pre-LN encoder whose module has no final norm while its map names the canonical
    ``norm.*`` (the norm's constructor condition inverted) fails to load with
    ``blocks.final_norm_missing`` (SPEC.md §7.3); with a module parameter the map leaves
    unnamed (the map may mean it: a typo), the same gap stays ``params.names_differ``."""
    from torch import nn

    from tck.adapters import TorchEntry, TorchModuleAdapter
    from tck.adapters.base import AdapterFailure
    from tck.adapters.mutants import tutorial
    from tck.reference import Config, param_shapes
    from tck.reference.conventions import Conventions

    config = Config(d_model=8, n_heads=2, d_ff=16, n_layers=2)
    pre = Conventions(norm_placement="pre")
    params = {k: np.ones(s) for k, s in param_shapes("encoder", config, pre).items()}

    def load(make_norm) -> AdapterFailure:  # type: ignore[no-untyped-def]
        def make(c: Config) -> nn.Module:
            stack = tutorial.Encoder(c.n_layers, c.d_model, c.n_heads, c.d_ff)
            del stack.norm
            if make_norm is not None:
                stack.final_ln = make_norm(c.d_model)  # built under another name
            return stack

        entry = TorchEntry(
            "encoder",
            make=make,
            forward=lambda m, x: m(x),
            param_map=tutorial.stack_map,
            conventions=pre,
        )
        adapter = TorchModuleAdapter("stack", [entry])
        handle = adapter.build(adapter.subjects()[0], config, seed=0)
        with pytest.raises(AdapterFailure, match=r"no parameter 'norm\.") as raised:
            adapter.load(handle, params)
        return raised.value

    assert load(None).code == "blocks.final_norm_missing"
    assert load(nn.LayerNorm).code == "params.names_differ"
