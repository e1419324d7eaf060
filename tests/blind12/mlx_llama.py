# fmt: off
# ruff: noqa
"""A Llama decoder as Apple's mlx-lm writes it (``mlx_lm/models/llama.py``, ``base.py``,
``cache.py``, and mlx's ``nn.RoPE``), ported to torch for the twelfth blind benchmark: a
``ModelArgs`` dataclass, an ``nn.RoPE(dims, traditional=True, base=...)``-style rope module
(neighbouring pairs) called with the cache's ``offset``, attention through a
``scaled_dot_product_attention(q, k, v, scale=..., mask=...)`` helper taking ``mask="causal"``
or a boolean array from ``create_attention_mask``, a ``KVCache`` that preallocates in steps of
256 slots and grows, ``MLP`` with ``w1``/``w2``/``w3``, ``TransformerBlock`` with
``attention_norm``/``ffn_norm``, and the head tied to the embedding (``embed_tokens.as_linear``).
Correct; the bugs of bugs.json are one-line edits of this file.

mlx arrays are row-major and ``x.transpose(0, 2, 1, 3)`` is ``x.permute(0, 2, 1, 3)`` here;
mlx's batched generation (``BatchKVCache``) gives each row its own rope offset (``offset -
left_padding``), which is what ``offset`` as a [B] tensor means below.
"""

import math
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from tck.adapters import ConfigSpace, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


@dataclass
class ModelArgs:
    model_type: str = "llama"
    hidden_size: int = 32
    num_hidden_layers: int = 2
    intermediate_size: int = 64
    num_attention_heads: int = 4
    rms_norm_eps: float = 1e-5
    vocab_size: int = 40
    head_dim: Optional[int] = None
    max_position_embeddings: Optional[int] = None
    num_key_value_heads: Optional[int] = None
    attention_bias: bool = False
    mlp_bias: bool = False
    rope_theta: float = 10000
    rope_traditional: bool = True
    tie_word_embeddings: bool = True

    def __post_init__(self):
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads


def _precise(dtype):
    # mlx's precise softmax and fast.rms_norm accumulate in float32; float64 stays float64
    return torch.promote_types(dtype, torch.float32)


class RMSNorm(nn.Module):
    """mlx.nn.RMSNorm (mx.fast.rms_norm): weight * x * rsqrt(mean(x^2) + eps)."""

    def __init__(self, dims, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones((dims,)))
        self.eps = eps

    def forward(self, x):
        xf = x.to(_precise(x.dtype))
        n = torch.rsqrt(xf.square().mean(-1, keepdim=True) + self.eps)
        return (self.weight * (xf * n)).to(x.dtype)


class RoPE(nn.Module):
    """mlx.nn.RoPE: rotates the first ``dims`` features at positions offset + 0 .. L-1;
    ``traditional=True`` rotates neighbouring pairs (x[2i], x[2i+1])."""

    def __init__(self, dims, traditional=False, base=10000, scale=1.0):
        super().__init__()
        self.dims = dims
        self.traditional = traditional
        self.base = base
        self.scale = scale

    def forward(self, x, offset=0):
        L = x.shape[-2]
        offset = torch.as_tensor(offset, dtype=torch.float64).reshape(-1, 1)
        positions = (torch.arange(L, dtype=torch.float64) + offset) * self.scale
        freqs = torch.exp(-torch.arange(0.0, self.dims, 2, dtype=torch.float64) * (math.log(self.base) / self.dims))
        theta = positions[..., None] * freqs
        costheta, sintheta = torch.cos(theta).to(x.dtype), torch.sin(theta).to(x.dtype)
        costheta, sintheta = costheta[:, None], sintheta[:, None]
        if self.traditional:
            x1 = x[..., 0 : self.dims : 2]
            x2 = x[..., 1 : self.dims : 2]
            rx1 = x1 * costheta - x2 * sintheta
            rx2 = x1 * sintheta + x2 * costheta
            rx = torch.stack([rx1, rx2], dim=-1).flatten(-2)
        else:
            x1 = x[..., : self.dims // 2]
            x2 = x[..., self.dims // 2 : self.dims]
            rx = torch.cat([x1 * costheta - x2 * sintheta, x1 * sintheta + x2 * costheta], dim=-1)
        if self.dims < x.shape[-1]:
            rx = torch.cat([rx, x[..., self.dims :]], dim=-1)
        return rx


class KVCache:
    """mlx_lm.models.cache.KVCache: keys and values in buffers preallocated in steps of 256
    slots, grown by concatenation; ``offset`` slots are filled."""

    step = 256

    def __init__(self):
        self.keys = None
        self.values = None
        self.offset = 0

    def update_and_fetch(self, keys, values):
        prev = self.offset
        if self.keys is None or (prev + keys.shape[2]) > self.keys.shape[2]:
            B, n_kv_heads, _, k_head_dim = keys.shape
            v_head_dim = values.shape[3]
            n_steps = (self.step + keys.shape[2] - 1) // self.step
            k_shape = (B, n_kv_heads, n_steps * self.step, k_head_dim)
            v_shape = (B, n_kv_heads, n_steps * self.step, v_head_dim)
            new_k = torch.zeros(k_shape, dtype=keys.dtype)
            new_v = torch.zeros(v_shape, dtype=values.dtype)
            if self.keys is not None:
                if prev % self.step != 0:
                    self.keys = self.keys[..., :prev, :]
                    self.values = self.values[..., :prev, :]
                self.keys = torch.cat([self.keys, new_k], dim=2)
                self.values = torch.cat([self.values, new_v], dim=2)
            else:
                self.keys, self.values = new_k, new_v

        self.offset += keys.shape[2]
        self.keys[..., prev : self.offset, :] = keys
        self.values[..., prev : self.offset, :] = values
        return self.keys[..., : self.offset, :], self.values[..., : self.offset, :]


def make_prompt_cache(model):
    return [KVCache() for _ in range(len(model.layers))]


def create_causal_mask(N, offset=0, window_size=None, lengths=None):
    rinds = torch.arange(offset + N)
    linds = torch.arange(offset, offset + N) if offset else rinds
    linds = linds[:, None]
    rinds = rinds[None]
    mask = linds >= rinds
    if window_size is not None:
        mask = mask & (linds < rinds + window_size)
    return mask


def create_attention_mask(h, cache=None, key_padding=None):
    """"causal" for a prompt without padding (the attention builds it), None for one token,
    else a boolean array [B or 1, 1, N, offset + N] (True = may attend)."""
    T = h.shape[1]
    offset = 0
    if cache is not None and cache[0] is not None:
        offset = cache[0].offset
    if key_padding is None:
        return "causal" if T > 1 else None
    mask = create_causal_mask(T, offset)
    return mask[None, None] & key_padding[:, None, None, :]


def scaled_dot_product_attention(queries, keys, values, scale, mask):
    """mlx_lm.models.base's reference attention: grouped heads by reshaping the queries to
    (B, n_kv_heads, n_repeats, L, D), keys and values broadcast over the repeats."""
    B, n_q_heads, L, D = queries.shape
    n_kv_heads = keys.shape[-3]
    n_repeats = n_q_heads // n_kv_heads

    queries = queries * scale
    if n_repeats > 1:
        queries = torch.reshape(queries, (B, n_kv_heads, n_repeats, L, D))
        keys = torch.unsqueeze(keys, dim=-3)
        values = torch.unsqueeze(values, dim=-3)

    scores = torch.matmul(queries, keys.transpose(-1, -2))
    if mask is not None:
        if isinstance(mask, str):
            qL, kL = scores.shape[-2:]
            q_indices = torch.arange(kL - qL, kL)
            k_indices = torch.arange(kL)
            mask = q_indices[:, None] >= k_indices[None]
        if n_repeats > 1 and mask.ndim >= 3:
            mask = torch.unsqueeze(mask, dim=-3)
        scores = torch.where(mask, scores, torch.finfo(scores.dtype).min)
    scores = torch.softmax(scores.to(_precise(scores.dtype)), dim=-1).to(scores.dtype)
    out = torch.matmul(scores, values)
    if n_repeats > 1:
        out = torch.reshape(out, (B, n_q_heads, L, D))
    return out


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        dim = args.hidden_size
        self.n_heads = n_heads = args.num_attention_heads
        self.n_kv_heads = n_kv_heads = args.num_key_value_heads
        self.head_dim = head_dim = args.head_dim or args.hidden_size // n_heads
        self.scale = head_dim**-0.5
        attention_bias = args.attention_bias

        self.wq = nn.Linear(dim, n_heads * head_dim, bias=attention_bias)
        self.wk = nn.Linear(dim, n_kv_heads * head_dim, bias=attention_bias)
        self.wv = nn.Linear(dim, n_kv_heads * head_dim, bias=attention_bias)
        self.wo = nn.Linear(n_heads * head_dim, dim, bias=attention_bias)

        self.rope = RoPE(head_dim, traditional=args.rope_traditional, base=args.rope_theta)

    def forward(self, x, mask=None, cache=None, offset=None):
        B, L, D = x.shape

        queries, keys, values = self.wq(x), self.wk(x), self.wv(x)

        # Prepare the queries, keys and values for the attention computation
        queries = queries.reshape(B, L, self.n_heads, -1).permute(0, 2, 1, 3)
        keys = keys.reshape(B, L, self.n_kv_heads, -1).permute(0, 2, 1, 3)
        values = values.reshape(B, L, self.n_kv_heads, -1).permute(0, 2, 1, 3)

        if cache is not None:
            rope_offset = cache.offset if offset is None else offset
            queries = self.rope(queries, offset=rope_offset)
            keys = self.rope(keys, offset=rope_offset)
            keys, values = cache.update_and_fetch(keys, values)
        else:
            queries = self.rope(queries, offset=0 if offset is None else offset)
            keys = self.rope(keys, offset=0 if offset is None else offset)

        output = scaled_dot_product_attention(queries, keys, values, scale=self.scale, mask=mask)
        output = output.permute(0, 2, 1, 3).reshape(B, L, -1)
        return self.wo(output)


class MLP(nn.Module):
    def __init__(self, dim, hidden_dim, bias=False):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=bias)
        self.w2 = nn.Linear(hidden_dim, dim, bias=bias)
        self.w3 = nn.Linear(dim, hidden_dim, bias=bias)

    def forward(self, x):
        return self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.n_heads = args.num_attention_heads
        self.dim = args.hidden_size
        self.attention = Attention(args)
        self.feed_forward = MLP(args.hidden_size, args.intermediate_size, args.mlp_bias)
        self.attention_norm = RMSNorm(args.hidden_size, eps=args.rms_norm_eps)
        self.ffn_norm = RMSNorm(args.hidden_size, eps=args.rms_norm_eps)
        self.args = args

    def forward(self, x, mask=None, cache=None, offset=None):
        r = self.attention(self.attention_norm(x), mask, cache, offset)
        h = x + r
        r = self.feed_forward(self.ffn_norm(h))
        out = h + r
        return out


class LlamaModel(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.vocab_size = args.vocab_size
        self.num_hidden_layers = args.num_hidden_layers
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList([TransformerBlock(args=args) for _ in range(args.num_hidden_layers)])
        self.norm = RMSNorm(args.hidden_size, eps=args.rms_norm_eps)

    def forward(self, inputs, cache=None, key_padding=None, offset=None):
        h = self.tok_embeddings(inputs)

        if cache is None:
            cache = [None] * len(self.layers)

        mask = create_attention_mask(h, cache, key_padding)

        for layer, c in zip(self.layers, cache):
            h = layer(h, mask, cache=c, offset=offset)

        return self.norm(h)


class Model(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.model_type = args.model_type
        self.model = LlamaModel(args)
        if not args.tie_word_embeddings:
            self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)

    def forward(self, inputs, cache=None, key_padding=None, offset=None):
        out = self.model(inputs, cache, key_padding, offset)
        if self.args.tie_word_embeddings:
            out = out @ self.model.tok_embeddings.weight.T  # embed_tokens.as_linear(out)
        else:
            out = self.lm_head(out)
        return out

    @property
    def layers(self):
        return self.model.layers


class AttentionUnit(nn.Module):
    """One attention (or one block) called as LlamaModel calls its layers: the mask from
    create_attention_mask, the cache's offset to the rope."""

    def __init__(self, args: ModelArgs, whole_block):
        super().__init__()
        self.inner = TransformerBlock(args) if whole_block else Attention(args)

    def forward(self, x, cache=None, key_padding=None, offset=None):
        mask = create_attention_mask(x, [cache], key_padding)
        return self.inner(x, mask, cache, offset)


# ---- the adapter --------------------------------------------------------------------------


def _args(config):
    return ModelArgs(
        hidden_size=config.d_model, num_hidden_layers=config.n_layers, intermediate_size=config.d_ff,
        num_attention_heads=config.n_heads, vocab_size=config.vocab_size,
        num_key_value_heads=config.n_kv_heads or config.n_heads, tie_word_embeddings=True,
    )


def _offset(positions, n):
    """mlx's per-row rope offset (BatchKVCache: offset - left_padding) from the kit's position
    ids: the last token's position minus n - 1 (the ids of a row's real tokens are contiguous)."""
    return None if positions is None else positions[:, -1] - (n - 1)


def _attn_map(canon, mine):
    return {f"{canon}{c}.weight": f"{mine}w{c}.weight" for c in "qkvo"}


def _ffn_map(canon, mine):
    return {f"{canon}gate.weight": f"{mine}w1.weight", f"{canon}down.weight": f"{mine}w2.weight",
            f"{canon}up.weight": f"{mine}w3.weight"}


def _block_map(canon, mine):
    return {**_attn_map(f"{canon}self_attn.", f"{mine}attention."),
            **_ffn_map(f"{canon}ffn.", f"{mine}feed_forward."),
            f"{canon}norm1.weight": f"{mine}attention_norm.weight",
            f"{canon}norm2.weight": f"{mine}ffn_norm.weight"}


def _lm_map(config):
    out = {"embedding.weight": "model.tok_embeddings.weight", "norm.weight": "model.norm.weight"}
    for i in range(config.n_layers):
        out.update(_block_map(f"layers.{i}.", f"model.layers.{i}."))
    return out


def _unit_forward(module, x, key_padding=None, positions=None):
    return module(x, None, key_padding, _offset(positions, x.shape[1]))


def _unit_step(module, cache, x, key_padding=None, positions=None):
    cache = KVCache() if cache is None else cache
    return module(x, cache, key_padding, _offset(positions, x.shape[1])), cache


def _lm_forward(module, ids, key_padding=None, positions=None):
    return module(ids, None, key_padding, _offset(positions, ids.shape[1]))


def _lm_step(module, cache, ids, key_padding=None, positions=None):
    cache = make_prompt_cache(module) if cache is None else cache
    return module(ids, cache, key_padding, _offset(positions, ids.shape[1])), cache


def _rope_forward(module, x, positions):
    # any position ids: every (row, token) its own length-1 call at offset = its position
    B, H, L, d = x.shape
    positions = positions.expand(B, L) if positions.dim() == 1 else positions
    one_each = x.permute(0, 2, 1, 3).reshape(B * L, H, 1, d)
    out = module(one_each, offset=positions.reshape(-1))
    return out.reshape(B, L, H, d).permute(0, 2, 1, 3)


FIXED = {"n_kv_heads": 2, "bias": False, "tie_weights": True}
DECODER = Conventions(
    norm_placement="pre", norm_kind="rms_norm", eps=1e-5, positions="rope", rope_layout="interleaved",
    ffn_kind="gated", gate_activation="silu", embedding_scale="none", fully_masked_rows="uniform",
)
SPACE = ConfigSpace(split_heads=True, tied=True)

adapter = TorchModuleAdapter("mlx-llama", [
    TorchEntry(
        "rms_norm", make=lambda c: RMSNorm(c.d_model, eps=1e-5), forward=lambda m, x: m(x),
        conventions=Conventions(norm_kind="rms_norm", eps=1e-5),
    ),
    TorchEntry(
        "rope", make=lambda c: RoPE(c.d_model // c.n_heads, traditional=True, base=10000),
        forward=_rope_forward, conventions=Conventions(rope_layout="interleaved"),
    ),
    TorchEntry(
        "gated_ffn", make=lambda c: MLP(c.d_model, c.d_ff), forward=lambda m, x: m(x),
        param_map=_ffn_map("", ""), conventions=DECODER, config=FIXED,
    ),
    TorchEntry(
        "causal_self_attention", make=lambda c: AttentionUnit(_args(c), False),
        forward=_unit_forward, step=_unit_step, derives_positions=True,
        param_map=_attn_map("", "inner."), conventions=DECODER, config=FIXED, supports=SPACE,
    ),
    TorchEntry(
        "decoder_block", make=lambda c: AttentionUnit(_args(c), True),
        forward=_unit_forward, step=_unit_step, derives_positions=True,
        param_map=_block_map("", "inner."), conventions=DECODER, config=FIXED, supports=SPACE,
    ),
    TorchEntry(
        "causal_lm", make=lambda c: Model(_args(c)),
        forward=_lm_forward, step=_lm_step, derives_positions=True,
        param_map=_lm_map, conventions=DECODER, config=FIXED, supports=SPACE,
    ),
])
