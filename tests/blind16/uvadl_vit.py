# fmt: off
# ruff: noqa
"""The Vision Transformer of the University of Amsterdam deep-learning tutorials (Phillip
Lippe, "Tutorial 15: Vision Transformers"): ``img_to_patch`` by reshape/permute/flatten, an
``AttentionBlock`` on ``nn.MultiheadAttention`` in its sequence-first layout (the model
transposes to [T, B, D]), pre-LN, a GELU MLP, a class token, ``pos_embedding[:, : T + 1]``
and the head applied to ``out[0]``, the class token in the sequence-first layout."""

import torch
import torch.nn as nn


def img_to_patch(x, patch_size, flatten_channels=True):
    """
    Inputs:
        x - torch.Tensor representing the image of shape [B, C, H, W]
        patch_size - Number of pixels per dimension of the patches (integer)
        flatten_channels - If True, the patches will be returned in a flattened format
                           as a feature vector instead of a image grid.
    """
    B, C, H, W = x.shape
    x = x.reshape(B, C, H // patch_size, patch_size, W // patch_size, patch_size)
    x = x.permute(0, 2, 4, 1, 3, 5)  # [B, H', W', C, p_H, p_W]
    x = x.flatten(1, 2)  # [B, H'*W', C, p_H, p_W]
    if flatten_channels:
        x = x.flatten(2, 4)  # [B, H'*W', C*p_H*p_W]
    return x


class AttentionBlock(nn.Module):
    def __init__(self, embed_dim, hidden_dim, num_heads, dropout=0.0):
        """
        Inputs:
            embed_dim - Dimensionality of input and attention feature vectors
            hidden_dim - Dimensionality of hidden layer in feed-forward network
                         (usually 2-4x larger than embed_dim)
            num_heads - Number of heads to use in the Multi-Head Attention block
            dropout - Amount of dropout to apply in the feed-forward network
        """
        super().__init__()

        self.layer_norm_1 = nn.LayerNorm(embed_dim)
        self.attn = nn.MultiheadAttention(embed_dim, num_heads)
        self.layer_norm_2 = nn.LayerNorm(embed_dim)
        self.linear = nn.Sequential(
            nn.Linear(embed_dim, hidden_dim),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(hidden_dim, embed_dim),
            nn.Dropout(dropout),
        )

    def forward(self, x, key_padding_mask=None, attn_mask=None):
        inp_x = self.layer_norm_1(x)
        x = x + self.attn(inp_x, inp_x, inp_x, key_padding_mask=key_padding_mask, attn_mask=attn_mask)[0]
        x = x + self.linear(self.layer_norm_2(x))
        return x


class VisionTransformer(nn.Module):
    def __init__(
        self,
        embed_dim,
        hidden_dim,
        num_channels,
        num_heads,
        num_layers,
        num_classes,
        patch_size,
        num_patches,
        dropout=0.0,
    ):
        """
        Inputs:
            embed_dim - Dimensionality of the input feature vectors to the Transformer
            hidden_dim - Dimensionality of the hidden layer in the feed-forward networks
                         within the Transformer
            num_channels - Number of channels of the input (3 for RGB)
            num_heads - Number of heads to use in the Multi-Head Attention block
            num_layers - Number of layers to use in the Transformer
            num_classes - Number of classes to predict
            patch_size - Number of pixels that the patches have per dimension
            num_patches - Maximum number of patches an image can have
            dropout - Amount of dropout to apply in the feed-forward network and
                      on the input encoding
        """
        super().__init__()

        self.patch_size = patch_size

        # Layers/Networks
        self.input_layer = nn.Linear(num_channels * (patch_size**2), embed_dim)
        self.transformer = nn.Sequential(
            *(AttentionBlock(embed_dim, hidden_dim, num_heads, dropout=dropout) for _ in range(num_layers))
        )
        self.mlp_head = nn.Sequential(nn.LayerNorm(embed_dim), nn.Linear(embed_dim, num_classes))
        self.dropout = nn.Dropout(dropout)

        # Parameters/Embeddings
        self.cls_token = nn.Parameter(torch.randn(1, 1, embed_dim))
        self.pos_embedding = nn.Parameter(torch.randn(1, 1 + num_patches, embed_dim))

    def forward(self, x):
        # Preprocess input
        x = img_to_patch(x, self.patch_size)
        B, T, _ = x.shape
        x = self.input_layer(x)

        # Add CLS token and positional encoding
        cls_token = self.cls_token.repeat(B, 1, 1)
        x = torch.cat([cls_token, x], dim=1)
        x = x + self.pos_embedding[:, : T + 1]

        # Apply Transforrmer
        x = self.dropout(x)
        x = x.transpose(0, 1)
        x = self.transformer(x)

        # Perform classification prediction
        cls = x[0]
        out = self.mlp_head(cls)
        return out


# ---- the adapter: the kit speaks [B, L, D]; the blocks take [T, B, D]

from tck.adapters import Chunk, ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def make_vit(config):
    num_patches = (config.image_size // config.patch_size) ** 2
    return VisionTransformer(
        embed_dim=config.d_model, hidden_dim=config.d_ff, num_channels=config.channels,
        num_heads=config.n_heads, num_layers=config.n_layers, num_classes=config.n_classes,
        patch_size=config.patch_size, num_patches=num_patches, dropout=0.2,
    )


class PatchEmbed(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.patch_size = config.patch_size
        self.input_layer = make_vit(config).input_layer

    def forward(self, images):
        return self.input_layer(img_to_patch(images, self.patch_size))


def run_blocks(blocks, x, key_padding=None, causal=False):
    x = torch.as_tensor(x).transpose(0, 1)
    T = x.size(0)
    key_padding_mask = None if key_padding is None else ~torch.as_tensor(key_padding, dtype=torch.bool)
    attn_mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1) if causal else None
    for block in (blocks if isinstance(blocks, nn.Sequential) else [blocks]):
        x = block(x, key_padding_mask=key_padding_mask, attn_mask=attn_mask)
    return x.transpose(0, 1)


def _block_map(prefix, out_prefix=""):
    m = {}
    for p in ("weight", "bias"):
        m |= {f"{out_prefix}self_attn.{n}.{p}": Chunk(f"{prefix}attn.in_proj_{p}", i, 3) for i, n in enumerate("qkv")}
        m[f"{out_prefix}self_attn.o.{p}"] = f"{prefix}attn.out_proj.{p}"
        m[f"{out_prefix}norm1.{p}"] = f"{prefix}layer_norm_1.{p}"
        m[f"{out_prefix}norm2.{p}"] = f"{prefix}layer_norm_2.{p}"
        m[f"{out_prefix}ffn.fc1.{p}"] = f"{prefix}linear.0.{p}"
        m[f"{out_prefix}ffn.fc2.{p}"] = f"{prefix}linear.3.{p}"
    return m


def _stack_map(config, prefix="", out_prefix=""):
    m = {}
    for i in range(config.n_layers):
        m |= _block_map(f"{prefix}{i}.", f"{out_prefix}layers.{i}.")
    return m


def _vit_map(config):
    m = {"patch_embed.weight": Param("input_layer.weight"), "patch_embed.bias": "input_layer.bias"}
    m |= {"cls_token": "cls_token", "pos_embed": "pos_embedding"}
    m |= _stack_map(config, "transformer.", "encoder.")
    m |= {"encoder.norm.weight": "mlp_head.0.weight", "encoder.norm.bias": "mlp_head.0.bias"}
    m |= {"head.weight": "mlp_head.1.weight", "head.bias": "mlp_head.1.bias"}
    return m


PRE = Conventions(norm_placement="pre", activation="gelu", fully_masked_rows="nan")
SPACE = ConfigSpace(split_heads=True)

adapter = TorchModuleAdapter("uvadl-vit", [
    TorchEntry(
        "patch_embed",
        make=PatchEmbed,
        forward=lambda m, images: m(torch.as_tensor(images)),
        param_map={"weight": Param("input_layer.weight"), "bias": "input_layer.bias"},
    ),
    TorchEntry(
        "encoder_layer",
        make=lambda config: make_vit(config).transformer[0],
        forward=run_blocks,
        param_map=_block_map(""),
        conventions=PRE,
        supports=SPACE,
    ),
    TorchEntry(
        "encoder",
        make=lambda config: make_vit(config).transformer,
        forward=run_blocks,
        param_map=_stack_map,
        conventions=Conventions(norm_placement="pre", activation="gelu", fully_masked_rows="nan", final_norm="never"),
        supports=SPACE,
    ),
    TorchEntry(
        "vit",
        make=make_vit,
        forward=lambda m, images: m(torch.as_tensor(images)),
        param_map=_vit_map,
        supports=SPACE,
    ),
])
