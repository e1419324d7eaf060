"""The built-in ``timm.vit`` adapter: timm's ``VisionTransformer``, randomly initialised from a
small config (nothing is downloaded), in float64 and eval mode, with its attention fused
(``F.scaled_dot_product_attention``) and unfused (timm's matmul-softmax-matmul).

timm imports torchvision, which must be a build made for the installed torch; where it is
missing or broken, loading this adapter fails with one line saying so (``tck run`` exits 2)
rather than running every check as a skip: a run that checks nothing must not look green.

Masks: timm's ``attn_mask`` follows ``F.scaled_dot_product_attention`` (boolean, True = takes
part in attention), our keep polarity, so keep-masks pass as is; ``is_causal`` alone uses
timm's own causal mask, and with another mask it is folded in top-left (timm lets is_causal
win over attn_mask). The unfused path fills masked scores with -inf, so a query whose keys are
all masked gets NaN; the fused path gets zeros from PyTorch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from tck.usage import INSTALL

try:  # one clear line from load_adapter when timm (or the torchvision it imports) is unusable
    from timm.models.vision_transformer import VisionTransformer
except Exception as err:  # a torchvision built for another torch fails in many ways
    first_line = (str(err).strip().splitlines() or [""])[0]
    raise ImportError(
        f"timm.vit needs timm, and importing it failed ({type(err).__name__}: {first_line}); "
        f"timm imports torchvision, which must be a build made for torch {torch.__version__}: "
        f"install both in an environment of their own: {INSTALL['timm']}"
    ) from err

from tck.reference import Config, Conventions

from .base import Unsupported
from .config_space import ConfigSpace, parts_without_bias
from .torch_module import (
    Chunk,
    ParamMap,
    TorchEntry,
    TorchModuleAdapter,
    linear_params,
    stack_params,
)

VARIANTS = {"fused": True, "unfused": False}
EPS = 1e-6  # timm's LayerNorm default, as in the JAX ViT

MASK_NOTE = (
    "timm's attn_mask is boolean with F.scaled_dot_product_attention's polarity (True = may "
    "attend), so keep-masks pass as is; causal alone is timm's is_causal (top-left), with "
    "another mask it is and'ed in top-left, since timm's is_causal overrides attn_mask."
)
ROWS_NOTE = {
    "fused": "fused_attn=True: F.scaled_dot_product_attention returns zeros for a query whose "
    "keys are all masked.",
    "unfused": "fused_attn=False: masked scores are filled with -inf, so a query whose keys are "
    "all masked gets NaN (fully_masked_rows='nan').",
}
ROWS = {"fused": "zero", "unfused": "nan"}


# What the subjects can be (Subject.supports, SPEC.md §0.6), as _vision_transformer enforces
# it on a direct build: heads of dim / num_heads, and every bias but q, k, v (qkv_bias).
SPACE = ConfigSpace(
    split_heads=True,
    biases={"attention_out": True, "ffn": True, "norm": True, "head": True},
)


def _vision_transformer(config: Config, fused: bool) -> VisionTransformer:
    dk, dv, h, d = config.head_dim_k, config.head_dim_v, config.n_heads, config.d_model
    if dk != dv or dk * h != d:
        raise Unsupported(
            f"timm's Attention cuts dim={d} into num_heads={h} heads of one width: it cannot "
            f"express d_k={dk}, d_v={dv}"
        )
    without = parts_without_bias(config, ("attention_out", "ffn", "norm"))
    if without or not config.head_bias:  # SPEC.md §0.5: only qkv_bias is a switch
        shown = ", ".join([*without, *([] if config.head_bias else ["head_bias"])])
        raise Unsupported(
            "timm's VisionTransformer keeps its output projection, MLP, norm and head biases "
            f"(only q, k and v can drop theirs, qkv_bias): {shown}=False is not offered"
        )
    model = VisionTransformer(
        img_size=config.image_size,
        patch_size=config.patch_size,
        in_chans=config.channels,
        num_classes=config.n_classes,
        embed_dim=d,
        depth=config.n_layers,
        num_heads=h,
        mlp_ratio=config.d_ff / d,
        qkv_bias=config.has_attention_bias,  # SPEC.md §0.5: q, k, v; proj keeps its bias
        global_pool="token",
    )
    hidden = {block.mlp.fc1.out_features for block in model.blocks}
    if hidden - {config.d_ff}:
        raise Unsupported(
            f"timm sizes the MLP as int(dim * mlp_ratio) = {hidden.pop()}, not d_ff={config.d_ff}"
        )
    for module in model.modules():
        if hasattr(module, "fused_attn"):
            module.fused_attn = fused
    return model


def _one_block(fused: bool) -> Callable[[Config], nn.Module]:
    return lambda config: _vision_transformer(dataclasses.replace(config, n_layers=1), fused)


def _mask(
    x: Tensor, key_padding: Tensor | None, attn_mask: Tensor | None, causal: bool
) -> tuple[Tensor | None, bool]:
    """(attn_mask, is_causal) for timm: a boolean keep-mask [B, 1, L, L] or None."""
    length = x.shape[1]
    keep = None
    if key_padding is not None:
        keep = key_padding[:, None, None, :]
    if attn_mask is not None:
        keep = attn_mask if keep is None else keep & attn_mask
    if keep is None:
        return None, causal
    if causal:
        keep = keep & torch.ones(length, length, dtype=torch.bool, device=x.device).tril()
    return keep, False


# ---------------------------------------------------------------------------- param maps


def _attention_map(ours: str, theirs: str, qkv_bias: bool = True) -> ParamMap:
    """q, k and v are the three dim-0 thirds of timm's fused qkv projection, in that order
    (their biases too when qkv_bias, SPEC.md §0.5)."""
    mapping: ParamMap = {}
    for index, name in enumerate("qkv"):
        for leaf in ("weight", "bias") if qkv_bias else ("weight",):
            mapping[f"{ours}{name}.{leaf}"] = Chunk(f"{theirs}qkv.{leaf}", index, 3)
    return {**mapping, **linear_params(f"{ours}o.", f"{theirs}proj.")}


def _block_map(ours: str, theirs: str, qkv_bias: bool = True) -> ParamMap:
    return {
        **_attention_map(f"{ours}self_attn.", f"{theirs}attn.", qkv_bias),
        **linear_params(f"{ours}norm1.", f"{theirs}norm1."),
        **linear_params(f"{ours}ffn.fc1.", f"{theirs}mlp.fc1."),
        **linear_params(f"{ours}ffn.fc2.", f"{theirs}mlp.fc2."),
        **linear_params(f"{ours}norm2.", f"{theirs}norm2."),
    }


def _encoder_map(config: Config, ours: str = "") -> ParamMap:
    def block(ours_i: str, theirs_i: str) -> ParamMap:
        return _block_map(ours_i, theirs_i, config.has_attention_bias)

    return stack_params(block, config.n_layers, ours, "blocks.{i}.", "norm.")


def _model_map(config: Config) -> ParamMap:
    return {
        **linear_params("patch_embed.", "patch_embed.proj."),
        "cls_token": "cls_token",
        "pos_embed": "pos_embed",
        **_encoder_map(config, "encoder."),
        **linear_params("head.", "head."),
    }


# ------------------------------------------------------------------------------ forwards


def _mha(
    m: VisionTransformer,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_padding: Tensor | None = None,
    attn_mask: Tensor | None = None,
    causal: bool = False,
) -> Tensor:
    if not (torch.equal(query, key) and torch.equal(key, value)):
        raise Unsupported(
            "timm's Attention is self-attention: one tensor gives queries, keys and values "
            "through its fused qkv projection, so distinct query, key and value cannot be passed"
        )
    mask, is_causal = _mask(query, key_padding, attn_mask, causal)
    return m.blocks[0].attn(query, attn_mask=mask, is_causal=is_causal)


def _block(
    m: VisionTransformer,
    x: Tensor,
    key_padding: Tensor | None = None,
    attn_mask: Tensor | None = None,
    causal: bool = False,
) -> Tensor:
    mask, is_causal = _mask(x, key_padding, attn_mask, causal)
    return m.blocks[0](x, attn_mask=mask, is_causal=is_causal)


def _encoder(
    m: VisionTransformer,
    x: Tensor,
    key_padding: Tensor | None = None,
    attn_mask: Tensor | None = None,
    causal: bool = False,
) -> Tensor:
    mask, is_causal = _mask(x, key_padding, attn_mask, causal)
    for block in m.blocks:  # forward_features after the embeddings: blocks, then the final norm
        x = block(x, attn_mask=mask, is_causal=is_causal)
    return m.norm(x)


def _entries() -> list[TorchEntry]:
    entries = [
        TorchEntry(
            "patch_embed",
            make=_one_block(True),
            forward=lambda m, images: m.patch_embed(images),
            holds=lambda m: m.patch_embed,
            supports=SPACE,
            param_map=linear_params("", "patch_embed.proj."),
            notes=("timm's PatchEmbed: a Conv2d with stride = patch, flattened row by row.",),
        )
    ]
    for variant, fused in VARIANTS.items():
        rows: Any = ROWS[variant]
        layer = Conventions(
            norm_placement="pre", activation="gelu", eps=EPS, fully_masked_rows=rows
        )
        notes = (ROWS_NOTE[variant], MASK_NOTE)
        entries += [
            TorchEntry(
                "mha",
                name=f"mha[{variant}]",
                make=_one_block(fused),
                forward=_mha,
                holds=lambda m: m.blocks[0].attn,
                supports=SPACE,
                param_map=lambda c: _attention_map("", "blocks.0.attn.", c.has_attention_bias),
                conventions=Conventions(fully_masked_rows=rows),
                notes=("timm's Attention (self-attention only).", *notes),
            ),
            TorchEntry(
                "encoder_layer",
                name=f"encoder_layer[{variant}]",
                make=_one_block(fused),
                forward=_block,
                holds=lambda m: m.blocks[0],
                supports=SPACE,
                param_map=lambda c: _block_map("", "blocks.0.", c.has_attention_bias),
                conventions=layer,
                notes=("timm's Block: pre-LN, nn.GELU, LayerNorm eps 1e-6.", *notes),
            ),
            TorchEntry(
                "encoder",
                name=f"encoder[{variant}]",
                make=lambda c, fused=fused: _vision_transformer(c, fused),
                forward=_encoder,
                holds=lambda m: (m.blocks, m.norm),
                supports=SPACE,
                param_map=_encoder_map,
                conventions=layer,
                notes=("VisionTransformer.blocks, then its final norm.", *notes),
            ),
            TorchEntry(
                "vit",
                name=f"vit[{variant}]",
                make=lambda c, fused=fused: _vision_transformer(c, fused),
                forward=lambda m, images: m(images),
                supports=SPACE,
                param_map=_model_map,
                conventions=Conventions(norm_placement="pre", activation="gelu", eps=EPS),
                notes=(
                    "VisionTransformer(global_pool='token', class_token=True): patch "
                    "embedding, class token, learned position embedding, pre-LN blocks, final "
                    "norm, head on the class token.",
                    ROWS_NOTE[variant],
                ),
            ),
        ]
    return entries


adapter = TorchModuleAdapter("timm.vit", _entries())
