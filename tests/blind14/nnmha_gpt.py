# fmt: off
# ruff: noqa
"""A GPT-2-like decoder built on torch.nn.MultiheadAttention (batch_first, need_weights=False).

The causal mask is a boolean attn_mask (True = NOT allowed, PyTorch's convention), padding a
key_padding_mask (True = pad); learned positions (wpe), pre-LN nn.LayerNorm, a tanh-GELU MLP
and an lm_head tied to wte. The KV cache is written the way such code writes it: each layer
caches its post-norm INPUT hidden states and hands key = value = cat([past_h, h]) to the MHA
module, which projects keys and values itself; the new queries' attn_mask is bottom-right.
"""

import torch
import torch.nn as nn

from tck.adapters import Chunk, ConfigSpace, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def causal_attn_mask(n_new, n_total, device):
    # True = the query may NOT attend that key; the n_new queries are the last of n_total
    return torch.ones(n_new, n_total, dtype=torch.bool, device=device).triu(n_total - n_new + 1)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.attn = nn.MultiheadAttention(n_embd, n_head, dropout=0.0, bias=True, batch_first=True)

    def forward(self, h, past_h=None, pad=None):
        # h: [B, n, D] the new tokens' (normed) hidden states; past_h: [B, T - n, D] or None
        kv = h if past_h is None else torch.cat([past_h, h], dim=1)
        mask = causal_attn_mask(h.size(1), kv.size(1), h.device)
        key_padding_mask = None if pad is None else ~pad
        y, _ = self.attn(h, kv, kv, key_padding_mask=key_padding_mask, attn_mask=mask, need_weights=False)
        if pad is not None:
            # a query with no key left (a left pad under the causal mask) comes out of the
            # MHA module as NaN, which the next layer's values would spread: zero those rows
            no_key = (mask.unsqueeze(0) | key_padding_mask.unsqueeze(1)).all(dim=-1)
            y = y.masked_fill(no_key.unsqueeze(-1), 0.0)
        return y, kv


class MLP(nn.Module):
    def __init__(self, n_embd, n_inner):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, n_inner)
        self.act = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(n_inner, n_embd)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, n_inner, eps):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, eps=eps)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd, eps=eps)
        self.mlp = MLP(n_embd, n_inner)

    def forward(self, x, past_h=None, pad=None):
        a, present = self.attn(self.ln_1(x), past_h, pad)
        x = x + a
        x = x + self.mlp(self.ln_2(x))
        return x, present


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_embd, n_head, n_inner, n_layer, eps=1e-5):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList([Block(n_embd, n_head, n_inner, eps) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd, eps=eps)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied

    def forward(self, idx, past=None, pad=None, position_ids=None):
        B, n = idx.shape
        past_len = 0 if past is None else past[0].size(1)
        if position_ids is None:
            position_ids = torch.arange(past_len, past_len + n, device=idx.device).unsqueeze(0).expand(B, n)
        x = self.drop(self.wte(idx) + self.wpe(position_ids))
        presents = []
        for i, block in enumerate(self.h):
            x, present = block(x, None if past is None else past[i], pad)
            presents.append(present)
        logits = self.lm_head(self.ln_f(x))
        return logits, presents


# ---- the adapter

def _attn_map(prefix, mine):
    m = {}
    for i, n in enumerate("qkv"):
        m[f"{prefix}{n}.weight"] = Chunk(f"{mine}attn.in_proj_weight", i, 3)
        m[f"{prefix}{n}.bias"] = Chunk(f"{mine}attn.in_proj_bias", i, 3)
    m[f"{prefix}o.weight"] = f"{mine}attn.out_proj.weight"
    m[f"{prefix}o.bias"] = f"{mine}attn.out_proj.bias"
    return m


def _block_map(prefix, mine):
    m = _attn_map(f"{prefix}self_attn.", f"{mine}attn.")
    for p in ("weight", "bias"):
        m[f"{prefix}norm1.{p}"] = f"{mine}ln_1.{p}"
        m[f"{prefix}norm2.{p}"] = f"{mine}ln_2.{p}"
        m[f"{prefix}ffn.fc1.{p}"] = f"{mine}mlp.c_fc.{p}"
        m[f"{prefix}ffn.fc2.{p}"] = f"{mine}mlp.c_proj.{p}"
    return m


def _lm_map(config):
    m = {"embedding.weight": "wte.weight", "pos_embedding.weight": "wpe.weight"}
    for i in range(config.n_layers):
        m |= _block_map(f"layers.{i}.", f"h.{i}.")
    m |= {"norm.weight": "ln_f.weight", "norm.bias": "ln_f.bias"}
    return m


def _pad(key_padding):
    return None if key_padding is None else torch.as_tensor(key_padding, dtype=torch.bool)


def attn_forward(module, x, key_padding=None, positions=None):
    return module(x, None, _pad(key_padding))[0]


def attn_step(module, cache, x, key_padding=None, positions=None):
    y, kv = module(x, cache, _pad(key_padding))
    return y, kv


def block_forward(module, x, key_padding=None, positions=None):
    return module(x, None, _pad(key_padding))[0]


def block_step(module, cache, x, key_padding=None, positions=None):
    return module(x, cache, _pad(key_padding))


def lm_forward(module, ids, key_padding=None, positions=None):
    pos = None if positions is None else torch.as_tensor(positions, dtype=torch.long)
    return module(torch.as_tensor(ids, dtype=torch.long), None, _pad(key_padding), pos)[0]


def lm_step(module, cache, ids, key_padding=None, positions=None):
    pos = None if positions is None else torch.as_tensor(positions, dtype=torch.long)
    return module(torch.as_tensor(ids, dtype=torch.long), cache, _pad(key_padding), pos)


DECODER = Conventions(norm_placement="pre", activation="gelu_tanh", embedding_scale="none", positions="learned", fully_masked_rows="zero")
SPACE = ConfigSpace(split_heads=True, tied=True, max_len=512)

adapter = TorchModuleAdapter("nnmha-gpt", [
    TorchEntry(
        "layer_norm",
        make=lambda config: nn.LayerNorm(config.d_model, eps=1e-5),
        forward=lambda module, x: module(x),
        conventions=Conventions(eps=1e-5),
    ),
    TorchEntry(
        "causal_self_attention",
        make=lambda config: CausalSelfAttention(config.d_model, config.n_heads),
        forward=attn_forward,
        step=attn_step,
        param_map=_attn_map("", ""),
        conventions=DECODER,
        supports=ConfigSpace(split_heads=True, max_len=512),
    ),
    TorchEntry(
        "decoder_block",
        make=lambda config: Block(config.d_model, config.n_heads, config.d_ff, 1e-5),
        forward=block_forward,
        step=block_step,
        param_map=_block_map("", ""),
        conventions=DECODER,
        supports=ConfigSpace(split_heads=True, max_len=512),
    ),
    TorchEntry(
        "causal_lm",
        make=lambda config: GPT(config.vocab_size, config.max_len, config.d_model, config.n_heads, config.d_ff, config.n_layers),
        forward=lm_forward,
        step=lm_step,
        derives_positions=True,  # without position ids a step numbers its tokens after the cache
        param_map=_lm_map,
        conventions=DECODER,
        supports=SPACE,
    ),
])
