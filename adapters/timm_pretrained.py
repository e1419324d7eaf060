"""A timm checkpoint as it is: ``tck run --adapter timm.vit --model PATH``.

PATH is one of

- a folder as timm saves one (``timm.models.save_for_hf`` / ``push_to_hf_hub``, or the same
  layout by hand): ``config.json`` naming the ``architecture`` (a timm model name, with its
  ``num_classes`` and ``model_args``) and ``model.safetensors``;
- a weights file, ``*.safetensors`` (preferred) or a state dict saved with ``torch.save``
  (``*.pth``, ``*.pt``, ``*.bin``), read with ``torch.load(weights_only=True)``: never an
  arbitrary pickle. Beside it, a timm ``config.json`` is used when there is one; otherwise
  the model's arguments are read from the tensors' shapes (width, depth, patch size, image
  size, MLP width, classes, biases) and the one thing shapes cannot tell, the number of
  heads, from the safetensors metadata (``save_file(sd, PATH, metadata={"num_heads": "12"})``;
  an ``"architecture"`` entry names a timm model instead).

Nothing is downloaded: the model is built with ``timm.create_model(..., pretrained=False)``
(or ``VisionTransformer(**args)``) and the file's weights loaded into it, strictly. Then its
configuration is read from the instance (sizes, LayerNorm eps, the activation, SPEC.md §0.5)
and the checks run on the subjects of ``tck.adapters.timm_vit`` with those weights, which
tck never overwrites (``load`` is ``Unsupported``; every build is a copy). A model that is not
the canonical ViT (LayerScale, register tokens, average pooling, a pre-norm, q/k norms, ...)
is refused in one line naming what differs, rather than reported as failing.

This module imports neither timm nor safetensors until a checkpoint is opened, so that the
command line can refuse a bad path in one line (exit 2) wherever tck is installed.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import re
from pathlib import Path
from typing import Any

from tck.usage import read_user_json

from .pretrained import ModelError, _AsIs
from .torch_module import TorchModuleAdapter

WEIGHTS = (".safetensors", ".pth", ".pt", ".bin", ".pth.tar")
PREFERRED = ("model.safetensors", "pytorch_model.bin", "pytorch_model.pth", "model.pth")
ACTIVATIONS = {"none": "gelu", "tanh": "gelu_tanh"}  # nn.GELU(approximate=...)


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """Where the weights are, and the timm config.json beside them (None: none)."""

    weights: Path
    config: dict[str, Any] | None

    @property
    def label(self) -> str:
        return self.weights.parent.name if self.weights.name in PREFERRED else self.weights.name


def checkpoint(path: str | os.PathLike[str] | None = None) -> Checkpoint:
    """The checkpoint at ``path``; ``ModelError`` in one line if unusable.

    Reads only the file names and config.json: no weights, no timm."""
    if not path:
        raise ModelError("no checkpoint: pass --model PATH")
    path = Path(path)
    if path.is_dir():
        config = _config(path / "config.json") if (path / "config.json").is_file() else None
        return Checkpoint(_weights_in(path), config)
    if path.is_file():
        if not path.name.endswith(WEIGHTS):
            raise ModelError(
                f"--model {str(path)!r} is not a weights file ({', '.join(WEIGHTS)}) nor a "
                "folder; pass a timm checkpoint folder (config.json + model.safetensors) or file"
            )
        beside = path.parent / "config.json"
        return Checkpoint(path, _config(beside) if beside.is_file() else None)
    raise ModelError(
        f"--model {str(path)!r} does not exist; pass a timm checkpoint folder (config.json + "
        "model.safetensors, as timm.models.save_for_hf writes) or a .safetensors file"
    )


def _weights_in(folder: Path) -> Path:
    for name in PREFERRED:
        if (folder / name).is_file():
            found = folder / name
            break
    else:
        found = next(
            (f for ext in WEIGHTS for f in sorted(folder.glob(f"*{ext}")) if f.is_file()), None
        )
    if found is None:
        raise ModelError(
            f"--model {str(folder)!r} holds no weights (*.safetensors, *.pth, *.bin); save "
            "them with timm.models.save_for_hf(model, DIR) or safetensors.torch.save_file"
        )
    safe = sorted(folder.glob("*.safetensors"))
    return safe[0] if safe and not found.name.endswith(".safetensors") else found


def _config(path: Path) -> dict[str, Any]:
    config = read_user_json(
        path,
        what=repr(str(path)),
        hint="give the config.json timm.models.save_for_hf writes",
        error=ModelError,
    )
    if not isinstance(config, dict):
        raise ModelError(f"{str(path)!r} holds a {type(config).__name__}, not a JSON object")
    if "architecture" not in config:
        hint = (
            "it is a transformers config: use --adapter hf.vit"
            if "model_type" in config
            else "timm writes the model name there"
        )
        raise ModelError(f"{str(path)!r} has no 'architecture' ({hint})")
    if not isinstance(config["architecture"], str):
        raise ModelError(f"{str(path)!r}: 'architecture' is not a timm model name")
    if not isinstance(config.get("model_args", {}), dict):
        raise ModelError(f"{str(path)!r}: 'model_args' is not a JSON object")
    return config


# ----------------------------------------------------------------- reading the weights


def read_weights(path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """(state dict of CPU tensors, safetensors metadata) of ``path``, never unpickling."""
    import torch

    if path.name.endswith(".safetensors"):
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(path), framework="pt", device="cpu") as f:
                return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata() or {})
        except (SafetensorError, OSError, ValueError) as err:
            raise ModelError(f"{str(path)!r} is not a safetensors file: {_first(err)}") from None
    try:
        loaded = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as err:  # UnpicklingError for anything but tensors and plain containers
        raise ModelError(
            f"{str(path)!r} cannot be read with torch.load(weights_only=True) "
            f"({type(err).__name__}: it holds more than tensors, or is no torch file); tck never "
            "unpickles other objects: save model.state_dict() with safetensors.torch.save_file"
        ) from None
    if isinstance(loaded, dict):
        for key in ("state_dict", "model", "state_dict_ema"):  # timm's train checkpoints
            if isinstance(loaded.get(key), dict):
                loaded = loaded[key]
                break
    if not isinstance(loaded, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in loaded.items()
    ):
        raise ModelError(f"{str(path)!r} holds no state dict (names -> tensors)")
    return dict(loaded), {}


def _first(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else type(err).__name__


def vit_args(shapes: dict[str, tuple[int, ...]], metadata: dict[str, str]) -> dict[str, Any]:
    """``VisionTransformer`` arguments read from a state dict's shapes, and from its
    safetensors metadata what shapes cannot tell (``num_heads``, or any other argument as
    JSON). ``ModelError`` when the tensors are not a timm VisionTransformer's."""
    patch = shapes.get("patch_embed.proj.weight")
    pos = shapes.get("pos_embed")
    if patch is None or len(patch) != 4 or pos is None or len(pos) != 3:
        raise ModelError(
            "the weights are not a timm VisionTransformer's (no patch_embed.proj.weight "
            "[D, C, P, P] and pos_embed [1, N, D])"
        )
    dim, chans, size_h, size_w = patch
    depth = 1 + max((int(m.group(1)) for k in shapes if (m := re.match(r"blocks\.(\d+)\.", k))),
                    default=-1)  # fmt: skip
    if depth == 0 or "blocks.0.mlp.fc1.weight" not in shapes:
        raise ModelError("the weights have no blocks.N.mlp.fc1.weight: not a timm ViT")
    hidden = shapes["blocks.0.mlp.fc1.weight"][0]
    prefix = int("cls_token" in shapes) + (shapes["reg_token"][1] if "reg_token" in shapes else 0)
    grid = math.isqrt(pos[1] - prefix)
    if size_h != size_w or grid * grid != pos[1] - prefix:
        raise ModelError(
            f"pos_embed has {pos[1]} positions: not {prefix} prefix token(s) and a square grid "
            "of patches (give img_size in the metadata or a timm config.json)"
        )
    args: dict[str, Any] = {
        "img_size": grid * size_h,
        "patch_size": size_h,
        "in_chans": chans,
        "embed_dim": dim,
        "depth": depth,
        "mlp_ratio": hidden / dim,
        "qkv_bias": "blocks.0.attn.qkv.bias" in shapes,
        "class_token": "cls_token" in shapes,
        "reg_tokens": prefix - int("cls_token" in shapes),
        "global_pool": "token" if "cls_token" in shapes else "avg",
        "num_classes": shapes["head.weight"][0] if "head.weight" in shapes else 0,
        "fc_norm": "fc_norm.weight" in shapes,
        "pre_norm": "norm_pre.weight" in shapes,
        "final_norm": "norm.weight" in shapes or "fc_norm.weight" in shapes,
        "init_values": 1.0 if "blocks.0.ls1.gamma" in shapes else None,
        "qk_norm": "blocks.0.attn.q_norm.weight" in shapes,
    }
    for key, text in metadata.items():
        if key in ("format", "architecture"):
            continue
        try:
            args[key] = json.loads(text)
        except json.JSONDecodeError:
            args[key] = text
    if "num_heads" not in args:
        raise ModelError(
            "the number of heads cannot be read from the weights' shapes: save the checkpoint "
            "as timm does (timm.models.save_for_hf: config.json names the architecture), or "
            "with safetensors.torch.save_file(sd, PATH, metadata={'num_heads': '12'})"
        )
    if not isinstance(args["num_heads"], int) or args["num_heads"] < 1 or dim % args["num_heads"]:
        raise ModelError(f"num_heads={args['num_heads']!r} does not divide the width {dim}")
    return args


# ------------------------------------------------------------------ building the model


def load_model(point: Checkpoint) -> Any:
    """The timm model of ``point`` with its weights, float64, eval mode."""
    import torch

    try:
        import timm
        from timm.models.vision_transformer import VisionTransformer
    except Exception as err:  # missing, or a torchvision built for another torch
        raise ImportError(
            f"timm.vit --model needs timm, and importing it failed ({type(err).__name__}: "
            f"{_first(err)}); install timm with a torchvision built for torch "
            f"{torch.__version__}"
        ) from None
    state, metadata = read_weights(point.weights)
    architecture = (point.config or {}).get("architecture") or metadata.get("architecture")
    try:
        if architecture:
            config = point.config or {}
            kwargs = dict(config.get("model_args", {}))
            if "num_classes" in config:
                kwargs["num_classes"] = config["num_classes"]
            elif "head.weight" in state:
                kwargs.setdefault("num_classes", state["head.weight"].shape[0])
            model = timm.create_model(architecture, pretrained=False, **kwargs)
        else:
            shapes = {k: tuple(v.shape) for k, v in state.items()}
            model = VisionTransformer(**vit_args(shapes, metadata))
    except ModelError:
        raise
    except Exception as err:  # unknown model names, bad arguments: timm raises many kinds
        what = architecture or "VisionTransformer"
        raise ModelError(f"cannot build {what} for {point.label}: {_first(err)}") from None
    if not isinstance(model, VisionTransformer):
        raise ModelError(
            f"{architecture} is a {type(model).__name__}, not timm's VisionTransformer: "
            "timm.vit checks ViTs"
        )
    result = model.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise ModelError(
            f"the weights of {point.label} do not fit {architecture or 'VisionTransformer'}: "
            f"missing {_few(result.missing_keys)}, unexpected {_few(result.unexpected_keys)}"
        )
    return model.to(torch.float64).eval()


def _few(names: list[str]) -> str:
    return (", ".join(names[:4]) + (f" (+{len(names) - 4})" if len(names) > 4 else "")) or "none"


def describe(model: Any, label: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(fixed Config fields, conventions) read from a timm VisionTransformer instance;
    ``ModelError`` naming the first way it is not the canonical ViT (SPEC.md §9)."""
    from torch import nn

    from .timm_vit import _model_map

    blocks = list(model.blocks)
    attn = blocks[0].attn
    fixed = {
        "d_model": int(model.embed_dim),
        "n_heads": int(attn.num_heads),
        "d_ff": int(blocks[0].mlp.fc1.out_features),
        "n_layers": len(blocks),
        "image_size": int(model.patch_embed.img_size[0]),
        "patch_size": int(model.patch_embed.patch_size[0]),
        "channels": int(model.patch_embed.proj.in_channels),
        "n_classes": int(getattr(model.head, "out_features", 0)),
    }
    if attn.qkv.bias is None:  # SPEC.md §0.5: qkv_bias=False; proj keeps its bias
        fixed.update(attention_bias=False, attention_out_bias=True)
    refusals = []
    if model.global_pool != "token" or not model.has_class_token:
        refusals.append(
            f"global_pool={model.global_pool!r} (the canonical ViT reads its class token)"
        )
    if getattr(model, "num_reg_tokens", 0) or getattr(model, "no_embed_class", False):
        refusals.append("register tokens or a class token without a position embedding")
    if getattr(model, "dynamic_img_size", False):
        refusals.append("dynamic_img_size=True")
    if model.patch_embed.img_size[0] != model.patch_embed.img_size[1]:
        refusals.append(f"a non-square image size {tuple(model.patch_embed.img_size)}")
    if fixed["n_classes"] == 0:
        refusals.append("no classifier head (num_classes=0)")
    norms = [m for m in model.modules() if isinstance(m, nn.LayerNorm)]
    if any(not isinstance(m, nn.LayerNorm) for b in blocks for m in (b.norm1, b.norm2)):
        refusals.append("a norm that is not LayerNorm")
    eps = {float(m.eps) for m in norms}
    if len(eps) > 1:
        refusals.append(f"LayerNorms with different eps {sorted(eps)}")
    acts = {type(b.mlp.act).__name__ + getattr(b.mlp.act, "approximate", "") for b in blocks}
    act = blocks[0].mlp.act
    if len(acts) > 1 or type(act) is not nn.GELU:
        refusals.append(f"the MLP activation {type(act).__name__} (tck checks nn.GELU)")
    if attn.num_heads * attn.head_dim != fixed["d_model"]:
        refusals.append(f"heads of width {attn.head_dim} x {attn.num_heads} != {fixed['d_model']}")
    if not math.isclose(float(attn.scale), attn.head_dim**-0.5, rel_tol=1e-12):
        refusals.append(f"attention scale {attn.scale} != head_dim ** -0.5")
    if refusals:
        raise ModelError(f"{label} is not the canonical ViT tck checks: {refusals[0]}")
    # Every parameter must be one the canonical map reads: anything else (LayerScale gammas,
    # q/k norms, a pre-norm, fc_norm, a gate, register tokens) changes what the model computes.
    from tck.reference import Config

    mapped = set()
    for ref in _model_map(Config(**fixed)).values():
        mapped.add(ref if isinstance(ref, str) else ref.name)
    own = {name for name, _ in model.named_parameters()}
    extra, lacking = sorted(own - mapped), sorted(mapped - own)
    if extra:
        raise ModelError(
            f"{label} has parameters the canonical ViT does not ({_few(extra)}): LayerScale, "
            "q/k norms, pre-norms and the like are not what SPEC.md §9 specifies"
        )
    if lacking:
        raise ModelError(
            f"{label} lacks {_few(lacking)} (a bias the canonical layout has: timm.vit "
            "drops the q, k, v biases alone, qkv_bias=False, SPEC.md §0.5)"
        )
    conventions = {
        "eps": eps.pop() if eps else 1e-6,
        "activation": ACTIVATIONS.get(getattr(act, "approximate", "none"), "gelu"),
    }
    return fixed, conventions


# ------------------------------------------------------------------------ the adapter


def _shell(model: Any, component: str, fused: bool) -> Any:
    """A copy of the part of ``model`` a subject needs, under the same attribute names (so
    timm_vit's forwards and param maps apply), with its attention fused or not."""
    from torch import nn

    if component == "vit":
        part = copy.deepcopy(model)
    else:
        part = nn.Module()
        if component == "patch_embed":
            part.patch_embed = copy.deepcopy(model.patch_embed)
        elif component == "encoder":
            part.blocks = copy.deepcopy(model.blocks)
            part.norm = copy.deepcopy(model.norm)
        else:  # mha, encoder_layer: the first block
            part.blocks = nn.Sequential(copy.deepcopy(model.blocks[0]))
    for module in part.modules():
        if hasattr(module, "fused_attn"):
            module.fused_attn = fused
    return part


class _PretrainedTimm(_AsIs, TorchModuleAdapter):
    pass


def vit(path: str | os.PathLike[str] | None = None) -> TorchModuleAdapter:
    """timm.vit on the checkpoint at ``path``."""
    from . import timm_vit

    point = checkpoint(path)
    model = load_model(point)
    fixed, conv = describe(model, point.label)
    entries = []
    for entry in timm_vit._entries():
        variant = (entry.name or entry.component).partition("[")[2].rstrip("]") or "fused"
        conventions = entry.conventions
        if conventions is not None and entry.component != "mha":
            conventions = dataclasses.replace(conventions, **conv)
        sizes = ", ".join(f"{k}={v}" for k, v in fixed.items())
        entries.append(
            dataclasses.replace(
                entry,
                make=lambda c, comp=entry.component, fused=timm_vit.VARIANTS[variant]: _shell(
                    model, comp, fused
                ),
                conventions=conventions,
                config=fixed,
                notes=(*entry.notes, f"the checkpoint as saved, with its own weights: {sizes}"),
            )
        )
    adapter = _PretrainedTimm(f"timm.vit:{point.label}", entries)
    adapter.fixed, adapter.folder = fixed, Path(point.label)
    return adapter


__all__ = ["Checkpoint", "checkpoint", "describe", "load_model", "vit", "vit_args"]
