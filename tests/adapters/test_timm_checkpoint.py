"""``tck run --adapter timm.vit --model PATH`` without timm: the path, the timm
config.json and the model arguments read from a state dict's shapes, and the one-line
refusals (exit 2). The end-to-end runs are in test_timm_adapter.py (tox -e timm)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tck.adapters.pretrained import ModelError
from tck.adapters.timm_pretrained import checkpoint, read_weights, vit_args

pytestmark = pytest.mark.spec("0.2", "9.1")


def _shapes(d: int = 48, depth: int = 3, patch: int = 4, grid: int = 3, hidden: int = 96):
    shapes = {
        "patch_embed.proj.weight": (d, 3, patch, patch),
        "patch_embed.proj.bias": (d,),
        "cls_token": (1, 1, d),
        "pos_embed": (1, grid * grid + 1, d),
        "norm.weight": (d,),
        "head.weight": (7, d),
    }
    for i in range(depth):
        shapes[f"blocks.{i}.attn.qkv.weight"] = (3 * d, d)
        shapes[f"blocks.{i}.attn.qkv.bias"] = (3 * d,)
        shapes[f"blocks.{i}.mlp.fc1.weight"] = (hidden, d)
    return shapes


def test_vit_args_from_shapes_and_metadata() -> None:
    args = vit_args(_shapes(), {"num_heads": "6", "format": "pt"})
    assert args["embed_dim"] == 48 and args["depth"] == 3 and args["num_heads"] == 6
    assert args["img_size"] == 12 and args["patch_size"] == 4 and args["in_chans"] == 3
    assert int(args["embed_dim"] * args["mlp_ratio"]) == 96 and args["num_classes"] == 7
    assert args["qkv_bias"] and args["class_token"] and args["global_pool"] == "token"
    assert args["init_values"] is None and not args["pre_norm"] and not args["fc_norm"]
    # LayerScale and register tokens are read too (the adapter then refuses the model)
    shapes = {**_shapes(), "blocks.0.ls1.gamma": (48,), "reg_token": (1, 4, 48)}
    shapes["pos_embed"] = (1, 9 + 5, 48)
    args = vit_args(shapes, {"num_heads": "4"})
    assert args["init_values"] is not None and args["reg_tokens"] == 4 and args["img_size"] == 12


@pytest.mark.parametrize(
    "shapes,metadata,words",
    [
        (_shapes(), {}, "number of heads cannot be read"),
        (_shapes(), {"num_heads": "5"}, "does not divide the width 48"),
        ({"pos_embed": (1, 5, 8)}, {"num_heads": "2"}, "not a timm VisionTransformer"),
        ({**_shapes(), "pos_embed": (1, 9, 48)}, {"num_heads": "2"}, "square grid"),
    ],
)
def test_vit_args_refusals(shapes, metadata, words) -> None:
    with pytest.raises(ModelError, match=words):
        vit_args(shapes, metadata)


def test_checkpoint_paths(tmp_path: Path) -> None:
    folder = tmp_path / "ck"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architecture": "vit_tiny_patch16_224"}))
    (folder / "pytorch_model.bin").write_bytes(b"")
    (folder / "model.safetensors").write_bytes(b"")
    point = checkpoint(folder)  # safetensors preferred over the torch file
    assert point.weights.name == "model.safetensors" and point.label == "ck"
    assert point.config == {"architecture": "vit_tiny_patch16_224"}
    single = tmp_path / "w.safetensors"
    single.write_bytes(b"")
    assert checkpoint(single).config is None and checkpoint(single).label == "w.safetensors"


def test_weights_only_never_unpickles(tmp_path: Path) -> None:
    import argparse

    import torch

    path = tmp_path / "train.pth.tar"  # timm's train.py stores its argparse.Namespace there
    torch.save({"state_dict": {"w": torch.ones(2)}, "args": argparse.Namespace(lr=1)}, path)
    with pytest.raises(ModelError, match="weights_only=True"):
        read_weights(path)
    path = tmp_path / "sd.pth"
    torch.save({"state_dict": {"w": torch.ones(2)}, "epoch": 3}, path)  # timm's train layout
    state, metadata = read_weights(path)
    assert list(state) == ["w"] and metadata == {}


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tck", "run", "--adapter", "timm.vit", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_bad_paths_are_one_line_exit_2(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({"model_type": "vit"}))
    (hf / "model.safetensors").write_bytes(b"")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    (tmp_path / "notes.txt").write_text("x")
    for model, words in (
        ("nope", "does not exist"),
        ("empty", "holds no weights"),
        ("hf", "use --adapter hf.vit"),
        ("broken", "not valid JSON"),
        ("notes.txt", "is not a weights file"),
    ):
        done = _run(["--model", str(tmp_path / model), "--out", str(tmp_path / "out")], tmp_path)
        assert done.returncode == 2, (model, done.stderr)
        assert words in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
