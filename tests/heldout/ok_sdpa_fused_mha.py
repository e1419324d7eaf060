"""CORRECT: multi-head attention over one fused in-projection (``in_proj [3D, D]``, as
nn.MultiheadAttention stores it) and ``F.scaled_dot_product_attention`` with a boolean
keep-mask: key padding, an explicit [Lq, Lk] mask, and a top-left causal mask.

Style source: the PyTorch "scaled_dot_product_attention" tutorial and nn.MultiheadAttention's
``in_proj_weight`` layout. It must pass with zero failures.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tck.adapters import Param, TorchEntry, TorchModuleAdapter


class FusedMHA(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.in_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, keep=None):
        B, Lq, D = query.shape
        Lk = key.shape[1]
        w_q, w_k, w_v = self.in_proj.weight.chunk(3)
        b_q, b_k, b_v = self.in_proj.bias.chunk(3)

        def heads(x, w, b, n):
            return F.linear(x, w, b).view(B, n, self.n_heads, -1).transpose(1, 2)

        q = heads(query, w_q, b_q, Lq)
        k = heads(key, w_k, b_k, Lk)
        v = heads(value, w_v, b_v, Lk)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        return self.out_proj(out.transpose(1, 2).reshape(B, Lq, D))


def forward(m, query, key, value, key_padding=None, attn_mask=None, causal=False):
    keep = attn_mask
    if causal:
        tril = torch.ones(query.shape[1], key.shape[1], dtype=torch.bool, device=query.device)
        tril = tril.tril()
        keep = tril if keep is None else keep & tril
    if key_padding is not None:
        pad = key_padding[:, None, None, :]
        keep = pad if keep is None else pad & keep
    return m(query, key, value, keep)


def param_map(c):
    d = c.d_model
    ours = {"o.weight": "out_proj.weight", "o.bias": "out_proj.bias"}
    for i, n in enumerate("qkv"):
        ours[f"{n}.weight"] = Param("in_proj.weight", slice=(0, i * d, (i + 1) * d))
        ours[f"{n}.bias"] = Param("in_proj.bias", slice=(0, i * d, (i + 1) * d))
    return ours


ONLY = ("mha",)
LABEL = None

adapter = TorchModuleAdapter(
    "heldout.ok_sdpa_fused_mha",
    [
        TorchEntry(
            "mha",
            make=lambda c: FusedMHA(c.d_model, c.n_heads),
            forward=forward,
            param_map=param_map,
        )
    ],
)
