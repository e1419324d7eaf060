"""README's post-LN encoder layer with the feed-forward activation switched to ``nn.GELU()``
(BERT's choice), and the adapter copied from README unchanged: the layer computes GELU where
it declares the paper's ReLU.

Bug source: the README's own "Point tck at your model" adapter, which declares no activation;
SPEC.md Appendix A (BERT, ViT and timm use exact GELU, the 2017 paper ReLU);
codertimo/BERT-pytorch issue #30 (tutorial code copied between BERT and Annotated-Transformer
codebases without reconciling their conventions).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


class EncoderLayer(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_ff: int):
        super().__init__()
        self.h = n_heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d_model, d_model) for _ in range(4))
        # the bug (undeclared): GELU where the adapter declares the canonical ReLU
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x, mask=None):  # mask [B, L]: 1 = token, 0 = padding
        B, L, D = x.shape
        q, k, v = (w(x).view(B, L, self.h, -1).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(mask[:, None, None, :] == 0, float("-inf"))
        heads = torch.softmax(scores, dim=-1) @ v
        x = self.ln1(x + self.wo(heads.transpose(1, 2).reshape(B, L, D)))
        return self.ln2(x + self.ff(x))


ONLY = ("encoder_layer",)
LABEL = "ffn.activation_gelu"

yours = {"norm1": "ln1", "norm2": "ln2", "ffn.fc1": "ff.0", "ffn.fc2": "ff.2"}
yours |= {f"self_attn.{p}": f"w{p}" for p in "qkvo"}
adapter = TorchModuleAdapter(
    "heldout.encoder_layer_gelu_undeclared",
    [
        TorchEntry(
            "encoder_layer",
            make=lambda config: EncoderLayer(config.d_model, config.n_heads, config.d_ff),
            forward=lambda layer, x, key_padding=None: layer(x, mask=key_padding),
            param_map={
                f"{k}.{p}": f"{v}.{p}" for k, v in yours.items() for p in ("weight", "bias")
            },
            conventions=Conventions(fully_masked_rows="nan"),
        )
    ],
)
