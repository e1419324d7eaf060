# fmt: off
# ruff: noqa
"""GPT-2 as karpathy/nanoGPT's model.py writes it, with the KV cache and padding mask that its
forks bolt on for batched generation: a LayerNorm with an optional bias
(`F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)`), one fused `c_attn`
split into q, k, v, the `flash` path (`F.scaled_dot_product_attention`, `is_causal=True` when
nothing else is masked, else a boolean mask) beside the manual path (the `bias` tril buffer,
`masked_fill(-inf)`, softmax, `attn_dropout`), an MLP with exact GELU, learned positions
`wpe`, the token table tied to `lm_head` (`self.transformer.wte.weight =
self.lm_head.weight`). The cache is a tuple of (k, v) per layer concatenated along the
sequence axis; position ids continue from the cache's length when none are given.

Kept inside SPEC: the manual path's softmax is taken in float32 for 16-bit inputs (nanoGPT
keeps the input dtype); dropout is 0.1 but off in eval. The attention and block subjects use
the flash path, the language model the manual one; the manual path fills padded keys with
`finfo.min` (the forks' choice: a `-inf` there turns a left pad's query row into NaN, which
the next layer's values carry into every real token), so a pad's own row is not promised
(`fully_masked_rows="undefined"`).
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

from tck.adapters import Chunk, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


class LayerNorm(nn.Module):
    """ LayerNorm but with an optional bias. PyTorch doesn't support simply bias=False """

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        # key, query, value projections for all heads, but in a batch
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        # output projection
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        # regularization
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.flash = config.flash
        # causal mask to ensure that attention is only applied to the left in the input sequence
        self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                                    .view(1, 1, config.block_size, config.block_size), persistent=False)

    def forward(self, x, attn_mask=None, past_kv=None):
        B, T, C = x.size() # batch size, sequence length, embedding dimensionality (n_embd)

        # calculate query, key, values for all heads in batch and move head forward to be the batch dim
        q, k, v  = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)

        past_length = 0
        if past_kv is not None:
            past_k, past_v = past_kv
            past_length = past_k.size(-2)
            k, v = torch.cat((past_k, k), dim=-2), torch.cat((past_v, v), dim=-2)
        present = (k, v)
        S = k.size(-2)

        # causal self-attention; Self-attend: (B, nh, T, hs) x (B, nh, hs, S) -> (B, nh, T, S)
        if self.flash:
            # efficient attention using Flash Attention CUDA kernels
            if attn_mask is None and past_length == 0:
                y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0, is_causal=True)
            else:
                causal = self.bias[:, :, past_length:past_length + T, :S] != 0
                if attn_mask is not None:
                    causal = causal & attn_mask[:, None, None, :].bool()
                y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=causal, dropout_p=self.dropout if self.training else 0)
        else:
            # manual implementation of attention
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:,:,past_length:past_length + T,:S] == 0, float('-inf'))
            if attn_mask is not None:
                att = att.masked_fill(attn_mask[:, None, None, :] == 0, torch.finfo(att.dtype).min)
            half = att.dtype in (torch.float16, torch.bfloat16)
            att = F.softmax(att.float() if half else att, dim=-1).to(v.dtype)
            att = self.attn_dropout(att)
            y = att @ v # (B, nh, T, S) x (B, nh, S, hs) -> (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C) # re-assemble all head outputs side by side

        # output projection
        y = self.resid_dropout(self.c_proj(y))
        return y, present


class MLP(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.c_fc    = nn.Linear(config.n_embd, config.n_hidden, bias=config.bias)
        self.gelu    = nn.GELU()
        self.c_proj  = nn.Linear(config.n_hidden, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        x = self.c_fc(x)
        x = self.gelu(x)
        x = self.c_proj(x)
        x = self.dropout(x)
        return x


class Block(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x, attn_mask=None, past_kv=None):
        attn_out, present = self.attn(self.ln_1(x), attn_mask=attn_mask, past_kv=past_kv)
        x = x + attn_out
        x = x + self.mlp(self.ln_2(x))
        return x, present


@dataclass
class GPTConfig:
    block_size: int = 512
    vocab_size: int = 40
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 32
    n_hidden: int = 64
    dropout: float = 0.1
    bias: bool = True # True: bias in Linears and LayerNorms, like GPT-2. False: a bit better and faster
    flash: bool = True


class GPT(nn.Module):

    def __init__(self, config):
        super().__init__()
        assert config.vocab_size is not None
        assert config.block_size is not None
        self.config = config

        self.transformer = nn.ModuleDict(dict(
            wte = nn.Embedding(config.vocab_size, config.n_embd),
            wpe = nn.Embedding(config.block_size, config.n_embd),
            drop = nn.Dropout(config.dropout),
            h = nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f = LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        # with weight tying when using torch.compile() some warnings get generated:
        # "UserWarning: functional_call was passed multiple values for tied weights.
        # This behavior is deprecated and will be an error in future versions"
        # not 100% sure what this is, so far seems to be harmless. TODO investigate
        self.transformer.wte.weight = self.lm_head.weight # https://paperswithcode.com/method/weight-tying

    def forward(self, idx, attn_mask=None, position_ids=None, past_key_values=None):
        device = idx.device
        b, t = idx.size()
        past_length = 0 if past_key_values is None else past_key_values[0][0].size(-2)
        assert past_length + t <= self.config.block_size, f"Cannot forward sequence of length {t}, block size is only {self.config.block_size}"
        if position_ids is None:
            position_ids = torch.arange(past_length, past_length + t, dtype=torch.long, device=device).unsqueeze(0) # shape (1, t)

        # forward the GPT model itself
        tok_emb = self.transformer.wte(idx) # token embeddings of shape (b, t, n_embd)
        pos_emb = self.transformer.wpe(position_ids) # position embeddings of shape (1, t, n_embd)
        x = self.transformer.drop(tok_emb + pos_emb)
        presents = []
        for i, block in enumerate(self.transformer.h):
            x, present = block(x, attn_mask=attn_mask, past_kv=None if past_key_values is None else past_key_values[i])
            presents.append(present)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        return logits, tuple(presents)


# ---- the adapter -------------------------------------------------------------------------

def gpt_config(config, flash=True):
    return GPTConfig(
        block_size=config.max_len, vocab_size=config.vocab_size, n_layer=config.n_layers,
        n_head=config.n_heads, n_embd=config.d_model, n_hidden=config.d_ff, flash=flash,
    )


def t(a):
    return None if a is None else torch.as_tensor(a)


class AttnSubject(nn.Module):
    """The attention alone, called as the block calls it."""

    def __init__(self, config):
        super().__init__()
        self.attn = CausalSelfAttention(config)

    def forward(self, x, attn_mask=None, past_kv=None):
        return self.attn(x, attn_mask=attn_mask, past_kv=past_kv)


def step_layer(m, cache, x, key_padding=None, positions=None):
    out, present = m(x, attn_mask=t(key_padding), past_kv=cache)
    return out, present


def step_lm(m, cache, ids, key_padding=None, positions=None):
    logits, presents = m(ids, attn_mask=t(key_padding), position_ids=t(positions), past_key_values=cache)
    return logits, presents


def layer_map(own, canon):
    out = {}
    for p in ("weight", "bias"):
        out |= {f"{canon}self_attn.{n}.{p}": Chunk(f"{own}attn.c_attn.{p}", i, 3) for i, n in enumerate("qkv")}
        out |= {
            f"{canon}self_attn.o.{p}": f"{own}attn.c_proj.{p}",
            f"{canon}norm1.{p}": f"{own}ln_1.{p}",
            f"{canon}norm2.{p}": f"{own}ln_2.{p}",
            f"{canon}ffn.fc1.{p}": f"{own}mlp.c_fc.{p}",
            f"{canon}ffn.fc2.{p}": f"{own}mlp.c_proj.{p}",
        }
    return out


def lm_map(config):
    out = {
        "embedding.weight": "lm_head.weight",
        "pos_embedding.weight": "transformer.wpe.weight",
        "norm.weight": "transformer.ln_f.weight",
        "norm.bias": "transformer.ln_f.bias",
    }
    for i in range(config.n_layers):
        out |= layer_map(f"transformer.h.{i}.", f"layers.{i}.")
    return out


GPT2 = dict(norm_placement="pre", activation="gelu", embedding_scale="none", positions="learned")

adapter = TorchModuleAdapter("nanogpt-kv", [
    TorchEntry(
        "layer_norm",
        make=lambda config: LayerNorm(config.d_model, bias=True),
        forward=lambda m, x: m(x),
        conventions=Conventions(eps=1e-5),
    ),
    TorchEntry(
        "ffn",
        make=lambda config: MLP(gpt_config(config)),
        forward=lambda m, x: m(x),
        param_map={"fc1.weight": "c_fc.weight", "fc1.bias": "c_fc.bias", "fc2.weight": "c_proj.weight", "fc2.bias": "c_proj.bias"},
        conventions=Conventions(activation="gelu"),
    ),
    TorchEntry(
        "causal_self_attention",
        make=lambda config: AttnSubject(gpt_config(config)),
        forward=lambda m, x, key_padding=None: m(x, attn_mask=t(key_padding))[0],
        step=step_layer,
        param_map={**{f"{n}.{p}": Chunk(f"attn.c_attn.{p}", i, 3) for i, n in enumerate("qkv") for p in ("weight", "bias")},
                   "o.weight": "attn.c_proj.weight", "o.bias": "attn.c_proj.bias"},
        conventions=Conventions(**GPT2),
    ),
    TorchEntry(
        "decoder_block",
        make=lambda config: Block(gpt_config(config)),
        forward=lambda m, x, key_padding=None: m(x, attn_mask=t(key_padding))[0],
        step=step_layer,
        param_map=layer_map("", ""),
        conventions=Conventions(**GPT2),
    ),
    TorchEntry(
        "causal_lm",
        make=lambda config: GPT(gpt_config(config, flash=False)),
        forward=lambda m, ids, key_padding=None, positions=None: m(ids, attn_mask=t(key_padding), position_ids=t(positions))[0],
        step=step_lm,
        derives_positions=True,
        param_map=lm_map,
        conventions=Conventions(**GPT2, fully_masked_rows="undefined"),
        config={"tie_weights": True},
    ),
])
