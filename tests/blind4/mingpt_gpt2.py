# fmt: off
# ruff: noqa: E501, B905, RUF005, RUF059
"""A GPT-2 written the way minGPT / nanoGPT ports of the OpenAI checkpoint write it.

OpenAI's ``Conv1D`` layers (a weight stored [in, out], ``x @ W + b``), one fused ``c_attn``
giving q, k and v, ``gelu_new`` (the tanh GELU) written out by hand, learned positions
``wpe``, a head tied to ``wte``, and HuggingFace-style ``past_key_values``: a tuple of
``(key, value)`` per layer, each [B, n_head, T, head_dim], grown with ``torch.cat``. The
attention mask follows transformers' GPT-2: a 0/1 ``attention_mask`` [B, T] over every token
so far, turned into an additive bias of ``finfo.min``; a query whose keys are all masked
gets zeros. In float16/bfloat16 the softmax is taken in float32.

Written for transformer-tck's fourth blind diagnosis benchmark (tests/blind4/PROTOCOL.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter
from tck.adapters.torch_module import Param


@dataclass
class GPTConfig:
    block_size: int = 512
    vocab_size: int = 40
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 32
    n_inner: int = 64
    layer_norm_epsilon: float = 1e-5


class Conv1D(nn.Module):
    """OpenAI's 1-d convolution: a linear layer whose weight is stored transposed."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.reshape(-1, x.size(-1)), self.weight)
        return x.view(size_out)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.head_dim = config.n_embd // config.n_head
        self.c_attn = Conv1D(3 * config.n_embd, config.n_embd)
        self.c_proj = Conv1D(config.n_embd, config.n_embd)

    def _split_heads(self, tensor):
        new_shape = tensor.size()[:-1] + (self.n_head, self.head_dim)
        return tensor.view(new_shape).permute(0, 2, 1, 3)  # (B, nh, T, hs)

    def _merge_heads(self, tensor):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        return tensor.view(tensor.size()[:-2] + (self.n_embd,))

    def _attn(self, query, key, value, attention_mask):
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        attn_weights = attn_weights / math.sqrt(value.size(-1))
        query_length, key_length = query.size(-2), key.size(-2)
        causal = torch.ones(query_length, key_length, dtype=torch.bool, device=query.device)
        causal = torch.tril(causal, diagonal=key_length - query_length)
        visible = causal[None, None] & attention_mask[:, None, None, :]
        mask_value = torch.finfo(attn_weights.dtype).min
        attn_weights = attn_weights.masked_fill(~visible, mask_value)
        upcast = torch.float32 if attn_weights.dtype in (torch.float16, torch.bfloat16) else attn_weights.dtype
        attn_weights = F.softmax(attn_weights.to(upcast), dim=-1).to(value.dtype)
        attn_weights = attn_weights * visible.any(dim=-1, keepdim=True)
        return torch.matmul(attn_weights, value)

    def forward(self, hidden_states, layer_past=None, attention_mask=None):
        query, key, value = self.c_attn(hidden_states).split(self.n_embd, dim=2)
        query = self._split_heads(query)
        key = self._split_heads(key)
        value = self._split_heads(value)
        if layer_past is not None:
            past_key, past_value = layer_past
            key = torch.cat((past_key, key), dim=-2)
            value = torch.cat((past_value, value), dim=-2)
        present = (key, value)
        if attention_mask is None:
            attention_mask = torch.ones(key.shape[0], key.shape[-2], dtype=torch.bool, device=key.device)
        attn_output = self._attn(query, key, value, attention_mask)
        attn_output = self._merge_heads(attn_output)
        attn_output = self.c_proj(attn_output)
        return attn_output, present


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = Conv1D(config.n_inner, config.n_embd)
        self.c_proj = Conv1D(config.n_embd, config.n_inner)

    def forward(self, x):
        h = gelu_new(self.c_fc(x))
        return self.c_proj(h)


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = MLP(config)

    def forward(self, x, layer_past=None, attention_mask=None):
        attn_output, present = self.attn(self.ln_1(x), layer_past=layer_past, attention_mask=attention_mask)
        x = x + attn_output
        x = x + self.mlp(self.ln_2(x))
        return x, present


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # weight tying

    def forward(self, idx, past_key_values=None, attention_mask=None, position_ids=None):
        b, t = idx.size()
        if past_key_values is None:
            past_length = 0
            past_key_values = tuple([None] * len(self.transformer.h))
        else:
            past_length = past_key_values[0][0].size(-2)
        if position_ids is None:
            position_ids = torch.arange(past_length, t + past_length, dtype=torch.long, device=idx.device)
            position_ids = position_ids.unsqueeze(0)
        tok_emb = self.transformer.wte(idx)
        pos_emb = self.transformer.wpe(position_ids)
        x = tok_emb + pos_emb
        presents = ()
        for block, layer_past in zip(self.transformer.h, past_key_values):
            x, present = block(x, layer_past=layer_past, attention_mask=attention_mask)
            presents = presents + (present,)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        return logits, presents


# ---- the adapter -------------------------------------------------------------------------

def _config(config) -> GPTConfig:
    return GPTConfig(block_size=config.max_len, vocab_size=config.vocab_size, n_layer=config.n_decoder_layers,
                     n_head=config.n_heads, n_embd=config.d_model, n_inner=config.d_ff)


def _conv(theirs: str, d_in: int) -> dict:
    return {"weight": Param(f"{theirs}.weight", permute=(1, 0)), "bias": f"{theirs}.bias"}


def _attn_map(prefix: str, theirs: str, d: int) -> dict:
    out = {}
    for i, name in enumerate("qkv"):
        out[f"{prefix}{name}.weight"] = Param(f"{theirs}c_attn.weight", slice=(1, i * d, (i + 1) * d), permute=(1, 0))
        out[f"{prefix}{name}.bias"] = Param(f"{theirs}c_attn.bias", slice=(0, i * d, (i + 1) * d))
    out[f"{prefix}o.weight"] = Param(f"{theirs}c_proj.weight", permute=(1, 0))
    out[f"{prefix}o.bias"] = f"{theirs}c_proj.bias"
    return out


def _block_map(prefix: str, theirs: str, d: int) -> dict:
    out = _attn_map(f"{prefix}self_attn.", f"{theirs}attn.", d)
    for ours, mine in (("norm1", "ln_1"), ("norm2", "ln_2")):
        out[f"{prefix}{ours}.weight"] = f"{theirs}{mine}.weight"
        out[f"{prefix}{ours}.bias"] = f"{theirs}{mine}.bias"
    for ours, mine in (("fc1", "c_fc"), ("fc2", "c_proj")):
        out[f"{prefix}ffn.{ours}.weight"] = Param(f"{theirs}mlp.{mine}.weight", permute=(1, 0))
        out[f"{prefix}ffn.{ours}.bias"] = f"{theirs}mlp.{mine}.bias"
    return out


def _lm_map(config) -> dict:
    out = {"embedding.weight": "transformer.wte.weight", "pos_embedding.weight": "transformer.wpe.weight"}
    for i in range(config.n_decoder_layers):
        out.update(_block_map(f"layers.{i}.", f"transformer.h.{i}.", config.d_model))
    out["norm.weight"] = "transformer.ln_f.weight"
    out["norm.bias"] = "transformer.ln_f.bias"
    return out


class _Positioned(nn.Module):
    """A block or an attention layer with its own learned-position-free call convention."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x, layer_past=None, attention_mask=None):
        out = self.inner(x, layer_past=layer_past, attention_mask=attention_mask)
        return out


def _layer_forward(module, x, key_padding=None):
    out, _ = module.inner(x, attention_mask=key_padding)
    return out


def _layer_step(module, cache, x, key_padding=None, positions=None):
    out, present = module.inner(x, layer_past=cache, attention_mask=key_padding)
    return out, present


def _lm_forward(model, ids, key_padding=None, positions=None):
    logits, _ = model(ids, attention_mask=key_padding, position_ids=positions)
    return logits


def _lm_step(model, cache, ids, key_padding=None, positions=None):
    logits, presents = model(ids, past_key_values=cache, attention_mask=key_padding, position_ids=positions)
    return logits, presents


adapter = TorchModuleAdapter("mingpt-gpt2", [
    TorchEntry(
        "layer_norm",
        make=lambda config: nn.LayerNorm(config.d_model, eps=1e-5),
        forward=lambda ln, x: ln(x),
    ),
    TorchEntry(
        "causal_self_attention",
        make=lambda config: _Positioned(CausalSelfAttention(_config(config))),
        forward=_layer_forward,
        step=_layer_step,
        param_map=lambda config: _attn_map("", "inner.", config.d_model),
    ),
    TorchEntry(
        "decoder_block",
        make=lambda config: _Positioned(Block(_config(config))),
        forward=_layer_forward,
        step=_layer_step,
        param_map=lambda config: _block_map("", "inner.", config.d_model),
    ),
    TorchEntry(
        "causal_lm",
        make=lambda config: GPT(_config(config)),
        forward=_lm_forward,
        step=_lm_step,
        derives_positions=True,
        param_map=_lm_map,
    ),
])
