# fmt: off
# ruff: noqa
"""TransformerLens' HookedTransformer in a Llama configuration (RMSNorm, rotary, gated MLP,
grouped-query attention, untied unembed), written the way transformer_lens writes it:
HookPoints everywhere, einsum over W_Q[n_heads, d_model, d_head], its own RMSNorm and
attention classes, HookedTransformerKeyValueCache. Written from memory for the 28th blind set."""
import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Union

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------- fancy_einsum (named axes)
def einsum(equation: str, *operands):
    """fancy_einsum.einsum: axes written as words, 'batch pos d_model, ... -> ...'."""
    letters = {}
    def convert(side):
        out = []
        for term in side.split(","):
            out.append("".join(letters.setdefault(n, chr(ord("a") + len(letters))) for n in term.split()))
        return ",".join(out)
    lhs, rhs = equation.split("->")
    lhs = convert(lhs)
    rhs = convert(rhs)
    return torch.einsum(f"{lhs}->{rhs}", *operands)


# ---------------------------------------------------------------- config
@dataclass
class HookedTransformerConfig:
    n_layers: int
    d_model: int
    n_ctx: int
    d_head: int
    n_heads: int = -1
    d_mlp: Optional[int] = None
    d_vocab: int = -1
    act_fn: Optional[str] = "silu"
    eps: float = 1e-5
    use_attn_scale: bool = True
    attn_scale: float = -1.0
    normalization_type: Optional[str] = "RMS"
    positional_embedding_type: str = "rotary"
    rotary_dim: Optional[int] = None
    rotary_base: int = 10000
    rotary_adjacent_pairs: bool = False
    gated_mlp: bool = True
    n_key_value_heads: Optional[int] = None
    original_architecture: str = "LlamaForCausalLM"
    final_rms: bool = True
    dtype: torch.dtype = torch.float32
    default_prepend_bos: bool = True

    def __post_init__(self):
        if self.n_heads == -1:
            self.n_heads = self.d_model // self.d_head
        if self.d_mlp is None:
            self.d_mlp = self.d_model * 4
        if self.rotary_dim is None:
            self.rotary_dim = self.d_head
        if self.use_attn_scale and self.attn_scale == -1.0:
            self.attn_scale = np.sqrt(self.d_head)


# ---------------------------------------------------------------- hooks
class HookPoint(nn.Module):
    """A helper class to access intermediate activations: an identity the user can hook."""
    def __init__(self):
        super().__init__()
        self.fwd_hooks = []
        self.bwd_hooks = []
        self.ctx = {}
        self.name = None

    def forward(self, x):
        return x


# ---------------------------------------------------------------- utils
def get_offset_position_ids(past_kv_pos_offset: int, attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids for a left-padded batch: every row's first real token at position 0."""
    shifted_position_ids = attention_mask.cumsum(dim=1) - 1
    position_ids = shifted_position_ids.masked_fill(shifted_position_ids < 0, 0)
    return position_ids[:, past_kv_pos_offset:]


def gelu_new(input):
    return 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))


# ---------------------------------------------------------------- kv cache
@dataclass
class HookedTransformerKeyValueCacheEntry:
    past_keys: torch.Tensor
    past_values: torch.Tensor
    frozen: bool = False

    @classmethod
    def init_cache_entry(cls, cfg, device, batch_size: int = 1):
        n_heads = cfg.n_key_value_heads if cfg.n_key_value_heads is not None else cfg.n_heads
        return cls(
            past_keys=torch.empty((batch_size, 0, n_heads, cfg.d_head), device=device, dtype=cfg.dtype),
            past_values=torch.empty((batch_size, 0, n_heads, cfg.d_head), device=device, dtype=cfg.dtype),
        )

    def append(self, new_keys: torch.Tensor, new_values: torch.Tensor):
        updated_keys: torch.Tensor = torch.cat([self.past_keys, new_keys], dim=1)
        updated_values: torch.Tensor = torch.cat([self.past_values, new_values], dim=1)
        if not self.frozen:
            self.past_keys = updated_keys
            self.past_values = updated_values
        return updated_keys, updated_values


@dataclass
class HookedTransformerKeyValueCache:
    entries: List[HookedTransformerKeyValueCacheEntry]
    previous_attention_mask: torch.Tensor
    previous_position_ids: torch.Tensor
    frozen: bool = False

    @classmethod
    def init_cache(cls, cfg, device, batch_size: int = 1):
        return cls(
            entries=[HookedTransformerKeyValueCacheEntry.init_cache_entry(cfg, device, batch_size) for _ in range(cfg.n_layers)],
            previous_attention_mask=torch.empty((batch_size, 0), device=device, dtype=torch.int),
            previous_position_ids=torch.empty((batch_size, 0), device=device, dtype=torch.long),
        )

    def append_attention_mask(self, attention_mask: torch.Tensor):
        attention_mask = attention_mask.to(self.previous_attention_mask.device)
        updated_attention_mask = torch.cat([self.previous_attention_mask, attention_mask], dim=-1)
        if not self.frozen:
            self.previous_attention_mask = updated_attention_mask
        return updated_attention_mask

    def append_position_ids(self, position_ids: torch.Tensor):
        updated_position_ids = torch.cat([self.previous_position_ids, position_ids], dim=-1)
        if not self.frozen:
            self.previous_position_ids = updated_position_ids
        return updated_position_ids

    def __getitem__(self, idx):
        return self.entries[idx]


# ---------------------------------------------------------------- components
class Embed(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.W_E = nn.Parameter(torch.empty(self.cfg.d_vocab, self.cfg.d_model, dtype=self.cfg.dtype))

    def forward(self, tokens):
        return self.W_E[tokens, :]


class Unembed(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.W_U = nn.Parameter(torch.empty(self.cfg.d_model, self.cfg.d_vocab, dtype=self.cfg.dtype))
        # Llama has no unembedding bias: transformer_lens loads zeros into b_U (kept as a buffer here)
        self.register_buffer("b_U", torch.zeros(self.cfg.d_vocab, dtype=self.cfg.dtype))

    def forward(self, residual):
        return einsum("batch pos d_model, d_model vocab -> batch pos vocab", residual, self.W_U) + self.b_U


class RMSNorm(nn.Module):
    def __init__(self, cfg, length: Optional[int] = None):
        super().__init__()
        self.cfg = cfg
        self.eps = self.cfg.eps
        if length is None:
            self.length = self.cfg.d_model
        else:
            self.length = length
        self.w = nn.Parameter(torch.ones(self.length, dtype=cfg.dtype))
        # Adds a hook point for the normalisation scale factor
        self.hook_scale = HookPoint()  # [batch, pos, 1]
        self.hook_normalized = HookPoint()  # [batch, pos, length]

    def forward(self, x):
        if self.cfg.dtype not in [torch.float32, torch.float64]:
            x = x.to(torch.float32)
        scale = self.hook_scale((x.pow(2).mean(-1, keepdim=True) + self.eps).sqrt())
        x = self.hook_normalized(x / scale).to(self.cfg.dtype)
        return x * self.w


class GatedMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.W_in = nn.Parameter(torch.empty(self.cfg.d_model, self.cfg.d_mlp, dtype=self.cfg.dtype))
        self.W_gate = nn.Parameter(torch.empty(self.cfg.d_model, self.cfg.d_mlp, dtype=self.cfg.dtype))
        self.W_out = nn.Parameter(torch.empty(self.cfg.d_mlp, self.cfg.d_model, dtype=self.cfg.dtype))
        # Llama's MLP has no biases: transformer_lens loads zeros into b_in and b_out (buffers here)
        self.register_buffer("b_in", torch.zeros(self.cfg.d_mlp, dtype=self.cfg.dtype))
        self.register_buffer("b_out", torch.zeros(self.cfg.d_model, dtype=self.cfg.dtype))
        self.hook_pre = HookPoint()  # [batch, pos, d_mlp]
        self.hook_pre_linear = HookPoint()  # [batch, pos, d_mlp]
        self.hook_post = HookPoint()  # [batch, pos, d_mlp]
        if self.cfg.act_fn == "silu":
            self.act_fn = F.silu
        elif self.cfg.act_fn == "gelu":
            self.act_fn = F.gelu
        elif self.cfg.act_fn == "gelu_new":
            self.act_fn = gelu_new
        else:
            raise ValueError(f"Invalid activation function name: {self.cfg.act_fn}")

    def forward(self, x):
        # Technically, all these einsums could be done with a single matmul, but this is more readable.
        pre_act = self.hook_pre(einsum("batch pos d_model, d_model d_mlp -> batch pos d_mlp", x, self.W_gate))
        pre_linear = self.hook_pre_linear(einsum("batch pos d_model, d_model d_mlp -> batch pos d_mlp", x, self.W_in))
        post_act = self.hook_post((self.act_fn(pre_act) * pre_linear) + self.b_in)
        return einsum("batch pos d_mlp, d_mlp d_model -> batch pos d_model", post_act, self.W_out) + self.b_out


class AbstractAttention(nn.Module):
    def __init__(self, cfg, attn_type: str = "global", layer_id: Optional[int] = None):
        super().__init__()
        self.cfg = cfg
        self.W_Q = nn.Parameter(torch.empty(self.cfg.n_heads, self.cfg.d_model, self.cfg.d_head, dtype=self.cfg.dtype))
        self.W_O = nn.Parameter(torch.empty(self.cfg.n_heads, self.cfg.d_head, self.cfg.d_model, dtype=self.cfg.dtype))
        self.b_Q = nn.Parameter(torch.zeros(self.cfg.n_heads, self.cfg.d_head, dtype=self.cfg.dtype))
        self.b_O = nn.Parameter(torch.zeros(self.cfg.d_model, dtype=self.cfg.dtype))
        self.attn_type = attn_type
        # Create a max_ctx x max_ctx mask, with True iff that query position can attend to that key position (query is first axis, key is second axis)
        causal_mask = torch.tril(torch.ones((self.cfg.n_ctx, self.cfg.n_ctx)).bool())
        self.register_buffer("mask", causal_mask)
        self.register_buffer("IGNORE", torch.tensor(-torch.inf))
        self.layer_id = layer_id
        if self.cfg.use_attn_scale:
            self.attn_scale = self.cfg.attn_scale  # Defaults to sqrt(d_head)
        else:
            self.attn_scale = 1.0
        self.hook_k = HookPoint()  # [batch, pos, head_index, d_head]
        self.hook_q = HookPoint()  # [batch, pos, head_index, d_head]
        self.hook_v = HookPoint()  # [batch, pos, head_index, d_head]
        self.hook_z = HookPoint()  # [batch, pos, head_index, d_head]
        self.hook_attn_scores = HookPoint()  # [batch, head_index, query_pos, key_pos]
        self.hook_pattern = HookPoint()  # [batch, head_index, query_pos, key_pos]
        self.hook_result = HookPoint()  # [batch, pos, head_index, d_model]
        if self.cfg.positional_embedding_type == "rotary":
            # Applies a rotation to each two-element chunk of keys and queries pre dot producting to bake in relative position.
            self.hook_rot_k = HookPoint()
            self.hook_rot_q = HookPoint()
            sin, cos = self.calculate_sin_cos_rotary(self.cfg.rotary_dim, self.cfg.n_ctx, base=self.cfg.rotary_base, dtype=self.cfg.dtype)
            self.register_buffer("rotary_sin", sin)
            self.register_buffer("rotary_cos", cos)

    def forward(self, query_input, key_input, value_input, past_kv_cache_entry=None, attention_mask=None, position_ids=None):
        q, k, v = self.calculate_qkv_matrices(query_input, key_input, value_input)
        if past_kv_cache_entry is not None:
            # Appends the new keys and values to the cached values, and automatically updates the cache
            kv_cache_pos_offset = past_kv_cache_entry.past_keys.size(1)
            k, v = past_kv_cache_entry.append(k, v)
        else:
            # Not using a cache
            kv_cache_pos_offset = 0
        if self.cfg.positional_embedding_type == "rotary":
            q = self.hook_rot_q(self.apply_rotary(q, kv_cache_pos_offset, attention_mask, position_ids))
            k = self.hook_rot_k(self.apply_rotary(k, 0, attention_mask, position_ids))  # keys are cached unrotated
        if self.cfg.dtype not in [torch.float32, torch.float64]:
            # If using 16 bits, increase the precision to avoid numerical instabilities
            q = q.to(torch.float32)
            k = k.to(torch.float32)
        attn_scores = self.calculate_attention_scores(q, k)  # [batch, head_index, query_pos, key_pos]
        if self.cfg.positional_embedding_type != "alibi" and self.attn_type == "global":
            # If causal attention, we mask it to only attend backwards. If bidirectional, we don't mask.
            attn_scores = self.apply_causal_mask(attn_scores, kv_cache_pos_offset, attention_mask)  # [batch, head_index, query_pos, key_pos]
        attn_scores = self.hook_attn_scores(attn_scores)
        pattern = F.softmax(attn_scores, dim=-1)
        pattern = torch.where(torch.isnan(pattern), torch.zeros_like(pattern), pattern)
        pattern = self.hook_pattern(pattern)  # [batch, head_index, query_pos, key_pos]
        pattern = pattern.to(self.cfg.dtype)
        pattern = pattern.to(v.device)
        z = self.calculate_z_scores(v, pattern)  # [batch, pos, head_index, d_head]
        w = self.W_O.reshape(self.cfg.n_heads * self.cfg.d_head, self.cfg.d_model).T  # "head_index d_head d_model -> d_model (head_index d_head)"
        out = F.linear(z.reshape(z.shape[0], z.shape[1], self.cfg.d_head * self.cfg.n_heads), w, self.b_O)
        return out

    def calculate_qkv_matrices(self, query_input, key_input, value_input):
        q = self.hook_q(einsum("batch pos d_model, head_index d_model d_head -> batch pos head_index d_head", query_input, self.W_Q) + self.b_Q)
        k = self.hook_k(einsum("batch pos d_model, head_index d_model d_head -> batch pos head_index d_head", key_input, self.W_K) + self.b_K)
        v = self.hook_v(einsum("batch pos d_model, head_index d_model d_head -> batch pos head_index d_head", value_input, self.W_V) + self.b_V)
        return q, k, v

    def calculate_attention_scores(self, q, k):
        q_ = q.permute(0, 2, 1, 3)  # "batch query_pos head_index d_head -> batch head_index query_pos d_head"
        k_ = k.permute(0, 2, 3, 1)  # "batch key_pos head_index d_head -> batch head_index d_head key_pos"
        attn_scores = q_ @ k_ / self.attn_scale
        return attn_scores

    def calculate_z_scores(self, v, pattern):
        v_ = v.permute(0, 2, 1, 3)  # "batch key_pos head_index d_head -> batch head_index key_pos d_head"
        pattern_ = pattern  # [batch, head_index, query_pos, key_pos]
        z = self.hook_z((pattern_ @ v_).permute(0, 2, 1, 3))  # "batch head_index query_pos d_head -> batch query_pos head_index d_head"
        return z

    def apply_causal_mask(self, attn_scores, past_kv_pos_offset: int = 0, attention_mask=None):
        # The query context length is the number of positions we take queries from - if not using a past_kv_cache this is just the context length (for the current prompt), but if we're caching it can be different.
        query_ctx_length = attn_scores.size(-2)
        # The key context length is the number of positions in the past - this includes all positions in the cache
        # If not caching, query_ctx_length == key_ctx_length
        key_ctx_length = attn_scores.size(-1)
        if query_ctx_length + past_kv_pos_offset != key_ctx_length:
            raise ValueError(f"query_ctx_length {query_ctx_length} + past_kv_pos_offset {past_kv_pos_offset} != key_ctx_length {key_ctx_length} - you likely have a bug.")
        # Index back to front to ensure local attention works
        final_mask = self.mask[None, None, -query_ctx_length:, -key_ctx_length:]  # [1, 1, pos, pos]
        if attention_mask is not None:
            # Apply a causal mask to the attention scores considering the padding
            final_mask = final_mask & attention_mask[:, None, None, :].bool()
        attn_scores = attn_scores.to(final_mask.device)
        return torch.where(final_mask, attn_scores, self.IGNORE)

    def calculate_sin_cos_rotary(self, rotary_dim: int, n_ctx: int, base: int = 10000, dtype: torch.dtype = torch.float32):
        """Calculate the sine and cosine waves to use in a rotary embedding. See https://blog.eleuther.ai/rotary-embeddings/ for details
        Note: For some inexplicable reason, in GPT-J each ADJACENT pair of elements in k and q are rotated, in GPT-NeoX the pair of elements at k and k+n//2 are rotated (ie folding the full length in half, and then looking at pairs accordingly). I have absolutely no clue why, it should be completely equivalent.
        To resolve this, I've coded it to default to the GPT-J mode, but to explicitly check whether it's GPT-NeoX and then do the GPT-NeoX thing if it is."""
        high_precision = torch.float32 if dtype != torch.float64 else torch.float64
        pos = torch.arange(n_ctx, dtype=high_precision)
        dim = torch.arange(rotary_dim // 2, dtype=high_precision)
        freq = base ** (dim / (rotary_dim / 2))
        if self.cfg.rotary_adjacent_pairs:
            freq = freq.repeat_interleave(2)  # "d -> (d 2)"
        else:
            freq = torch.cat([freq, freq])  # "d -> (2 d)"
        # Create a n_ctx x rotary_dim tensor, where each column is an arithmetic sequence of angles in that frequency
        angles = pos[:, None] / freq[None, :]
        return torch.sin(angles).to(dtype), torch.cos(angles).to(dtype)

    def rotate_every_two(self, x):
        """Rotary helper function, splits x into blocks of size 2 along the final axis and maps [x0, x1] to [-x1, x0]
        The final axis of x must have even length.
        GPT-NeoX and GPT-J do rotary subtly differently, see calculate_sin_cos_rotary for details."""
        rot_x = x.clone()
        if self.cfg.rotary_adjacent_pairs:
            rot_x[..., ::2] = -x[..., 1::2]
            rot_x[..., 1::2] = x[..., ::2]
        else:
            n = x.size(-1) // 2
            rot_x[..., :n] = -x[..., n:]
            rot_x[..., n:] = x[..., :n]
        return rot_x

    def apply_rotary(self, x, past_kv_pos_offset=0, attention_mask=None, position_ids=None):
        # Only apply rotary to first rotary_dim dimensions (eg, if rotary_dim=64 and d_head=256, only apply to first 1/4 of dimensions)
        if x.device != self.rotary_sin.device:
            x = x.to(self.rotary_sin.device)
        x_pos = x.size(1)
        x_rot = x[..., : self.cfg.rotary_dim]
        x_pass = x[..., self.cfg.rotary_dim :]
        x_flip = self.rotate_every_two(x_rot)
        if position_ids is not None:
            # explicit position ids (the whole sequence so far): the last x_pos of them
            offset_position_ids = position_ids[:, -x_pos:]
            mask_rotary_cos = self.rotary_cos[offset_position_ids, None, :]
            mask_rotary_sin = self.rotary_sin[offset_position_ids, None, :]
            x_rotated = x_rot * mask_rotary_cos + x_flip * mask_rotary_sin
        elif attention_mask is None:
            rotary_cos = self.rotary_cos[None, past_kv_pos_offset : past_kv_pos_offset + x_pos, None, :]
            rotary_sin = self.rotary_sin[None, past_kv_pos_offset : past_kv_pos_offset + x_pos, None, :]
            x_rotated = x_rot * rotary_cos + x_flip * rotary_sin
        else:
            offset_position_ids = get_offset_position_ids(past_kv_pos_offset, attention_mask)
            offset_position_ids = offset_position_ids.to(self.rotary_cos.device)
            mask_rotary_cos = self.rotary_cos[offset_position_ids, None, :]
            mask_rotary_sin = self.rotary_sin[offset_position_ids, None, :]
            x_rotated = x_rot * mask_rotary_cos + x_flip * mask_rotary_sin
        return torch.cat([x_rotated, x_pass], dim=-1)


class GroupedQueryAttention(AbstractAttention):
    def __init__(self, cfg, attn_type: str = "global", layer_id: Optional[int] = None):
        cfg.n_key_value_heads = cfg.n_key_value_heads or cfg.n_heads
        super().__init__(cfg, attn_type, layer_id)
        self.repeat_kv_heads = cfg.n_heads // cfg.n_key_value_heads
        self._W_K = nn.Parameter(torch.empty(cfg.n_key_value_heads, self.cfg.d_model, self.cfg.d_head, dtype=cfg.dtype))
        self._W_V = nn.Parameter(torch.empty(cfg.n_key_value_heads, self.cfg.d_model, self.cfg.d_head, dtype=cfg.dtype))
        self._b_K = nn.Parameter(torch.zeros(cfg.n_key_value_heads, self.cfg.d_head, dtype=cfg.dtype))
        self._b_V = nn.Parameter(torch.zeros(cfg.n_key_value_heads, self.cfg.d_head, dtype=cfg.dtype))

    @property
    def W_K(self):
        return torch.repeat_interleave(self._W_K, dim=0, repeats=self.repeat_kv_heads)

    @property
    def W_V(self):
        return torch.repeat_interleave(self._W_V, dim=0, repeats=self.repeat_kv_heads)

    @property
    def b_K(self):
        return torch.repeat_interleave(self._b_K, dim=0, repeats=self.repeat_kv_heads)

    @property
    def b_V(self):
        return torch.repeat_interleave(self._b_V, dim=0, repeats=self.repeat_kv_heads)

    def calculate_qkv_matrices(self, query_input, key_input, value_input):
        # keys and values keep their n_key_value_heads heads (the cache stores them so); expanded in the scores
        q = self.hook_q(einsum("batch pos d_model, head_index d_model d_head -> batch pos head_index d_head", query_input, self.W_Q) + self.b_Q)
        k = self.hook_k(einsum("batch pos d_model, head_index d_model d_head -> batch pos head_index d_head", key_input, self._W_K) + self._b_K)
        v = self.hook_v(einsum("batch pos d_model, head_index d_model d_head -> batch pos head_index d_head", value_input, self._W_V) + self._b_V)
        return q, k, v

    def calculate_attention_scores(self, q, k):
        k = torch.repeat_interleave(k, dim=2, repeats=self.repeat_kv_heads)
        return super().calculate_attention_scores(q, k)

    def calculate_z_scores(self, v, pattern):
        v = torch.repeat_interleave(v, dim=2, repeats=self.repeat_kv_heads)
        return super().calculate_z_scores(v, pattern)


class TransformerBlock(nn.Module):
    def __init__(self, cfg, block_index):
        super().__init__()
        self.cfg = cfg
        self.ln1 = RMSNorm(cfg)
        self.ln2 = RMSNorm(cfg)
        self.attn = GroupedQueryAttention(cfg, "global", block_index)
        self.mlp = GatedMLP(cfg)
        self.hook_attn_in = HookPoint()  # [batch, pos, d_model]
        self.hook_q_input = HookPoint()  # [batch, pos, d_model]
        self.hook_k_input = HookPoint()  # [batch, pos, d_model]
        self.hook_v_input = HookPoint()  # [batch, pos, d_model]
        self.hook_mlp_in = HookPoint()  # [batch, pos, d_model]
        self.hook_attn_out = HookPoint()  # [batch, pos, d_model]
        self.hook_mlp_out = HookPoint()  # [batch, pos, d_model]
        self.hook_resid_pre = HookPoint()  # [batch, pos, d_model]
        self.hook_resid_mid = HookPoint()  # [batch, pos, d_model]
        self.hook_resid_post = HookPoint()  # [batch, pos, d_model]

    def forward(self, resid_pre, shortformer_pos_embed=None, past_kv_cache_entry=None, attention_mask=None, position_ids=None):
        resid_pre = self.hook_resid_pre(resid_pre)  # [batch, pos, d_model]
        attn_in = resid_pre
        query_input = attn_in
        key_input = attn_in
        value_input = attn_in
        attn_out = (
            # hook the residual stream states that are used to calculate the
            # queries, keys and values, independently.
            # Then take the layer norm of these inputs, and pass these to the attention module.
            self.attn(
                query_input=self.ln1(query_input),
                key_input=self.ln1(key_input),
                value_input=self.ln1(value_input),
                past_kv_cache_entry=past_kv_cache_entry,
                attention_mask=attention_mask,
                position_ids=position_ids,
            )
        )  # [batch, pos, d_model]
        attn_out = self.hook_attn_out(attn_out)
        resid_mid = self.hook_resid_mid(resid_pre + attn_out)  # [batch, pos, d_model]
        mlp_in = self.hook_mlp_in(resid_mid)
        normalized_resid_mid = self.ln2(mlp_in)
        mlp_out = self.hook_mlp_out(self.mlp(normalized_resid_mid))  # [batch, pos, d_model]
        resid_post = self.hook_resid_post(resid_mid + mlp_out)  # [batch, pos, d_model]
        return resid_post


class HookedTransformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = Embed(self.cfg)
        self.hook_embed = HookPoint()  # [batch, pos, d_model]
        self.blocks = nn.ModuleList([TransformerBlock(self.cfg, block_index) for block_index in range(self.cfg.n_layers)])
        self.ln_final = RMSNorm(self.cfg)
        self.unembed = Unembed(self.cfg)

    def forward(self, input, attention_mask=None, past_kv_cache=None, position_ids=None, stop_at_layer=None):
        tokens = input
        if tokens.shape[1] + (past_kv_cache.entries[0].past_keys.shape[1] if past_kv_cache is not None else 0) > self.cfg.n_ctx:
            raise ValueError(f"sequence longer than n_ctx={self.cfg.n_ctx}")
        if past_kv_cache is not None:
            # If we're doing caching, then we reuse keys and values from previous runs, as that's the only way that past activations will affect the final logits. The cache contains those so we don't need to recompute them. This is useful for generating text. As we have absolute positional encodings, to implement this we have a `pos_offset` variable, defaulting to zero, which says to offset which positional encodings are used (cached keys and values were calculated with their own positional encodings).
            pos_offset = past_kv_cache.entries[0].past_keys.shape[1]
            if attention_mask is not None:
                attention_mask = past_kv_cache.append_attention_mask(attention_mask)
            if position_ids is not None:
                position_ids = past_kv_cache.append_position_ids(position_ids)
        else:
            pos_offset = 0
        embed = self.hook_embed(self.embed(tokens))  # [batch, pos, d_model]
        residual = embed
        shortformer_pos_embed = None
        for i, block in list(zip(range(self.cfg.n_layers), self.blocks))[:stop_at_layer]:
            # Note that each block includes skip connections, so we don't need residual + block(residual)
            residual = block(
                residual,
                # Cache contains a list of HookedTransformerKeyValueCache objects, one for each block
                past_kv_cache_entry=past_kv_cache[i] if past_kv_cache is not None else None,
                shortformer_pos_embed=shortformer_pos_embed,
                attention_mask=attention_mask,
                position_ids=position_ids,
            )  # [batch, pos, d_model]
        if stop_at_layer is not None:
            # When we stop at an early layer, we end here rather than doing further computation
            return residual
        if self.cfg.normalization_type is not None:
            residual = self.ln_final(residual)  # [batch, pos, d_model]
        logits = self.unembed(residual)  # [batch, pos, d_vocab]
        return logits


# ---------------------------------------------------------------- adapter (glue, not transformer_lens)
from tck.adapters import ConfigSpace, Param, TorchEntry, TorchModuleAdapter  # noqa: E402
from tck.reference import Conventions  # noqa: E402


def _cfg(config):
    return HookedTransformerConfig(
        n_layers=config.n_layers, d_model=config.d_model, n_ctx=config.max_len, d_head=config.d_model // config.n_heads,
        n_heads=config.n_heads, d_mlp=config.d_ff, d_vocab=config.vocab_size, act_fn="silu", eps=1e-5,
        normalization_type="RMS", positional_embedding_type="rotary", rotary_adjacent_pairs=False, gated_mlp=True,
        n_key_value_heads=config.n_kv_heads, dtype=torch.float64,  # tables built in float64, cast with the module
    )


class _Built(nn.Module):
    """Makes the HookedTransformerConfig follow the dtype the adapter casts the module to."""
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def _sync(self):
        dtype = next(self.inner.parameters()).dtype
        for m in self.inner.modules():
            if hasattr(m, "cfg"):
                m.cfg.dtype = dtype

    def forward(self, *args, **kwargs):
        self._sync()
        return self.inner(*args, **kwargs)


def _init(module):
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith(("w",)):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype))
    return module


def _attention_params(config, theirs):
    H, D = config.n_heads, config.d_model
    dh = D // H
    kv = config.n_kv_heads or H
    return {
        "q.weight": Param(f"{theirs}W_Q", permute=(0, 2, 1), shape=(H * dh, D)),
        "k.weight": Param(f"{theirs}_W_K", permute=(0, 2, 1), shape=(kv * dh, D)),
        "v.weight": Param(f"{theirs}_W_V", permute=(0, 2, 1), shape=(kv * dh, D)),
        "o.weight": Param(f"{theirs}W_O", permute=(2, 0, 1), shape=(D, H * dh)),
        "q.bias": Param(f"{theirs}b_Q", shape=(H * dh,)),
        "k.bias": Param(f"{theirs}_b_K", shape=(kv * dh,)),
        "v.bias": Param(f"{theirs}_b_V", shape=(kv * dh,)),
        "o.bias": Param(f"{theirs}b_O"),
    }


def _mlp_params(theirs):
    return {
        "gate.weight": Param(f"{theirs}W_gate", permute=(1, 0)),
        "up.weight": Param(f"{theirs}W_in", permute=(1, 0)),
        "down.weight": Param(f"{theirs}W_out", permute=(1, 0)),
    }


def _block_params(config, ours, theirs):
    m = {f"{ours}self_attn.{k}": v for k, v in _attention_params(config, f"{theirs}attn.").items()}
    m |= {f"{ours}ffn.{k}": v for k, v in _mlp_params(f"{theirs}mlp.").items()}
    m |= {f"{ours}norm1.weight": f"{theirs}ln1.w", f"{ours}norm2.weight": f"{theirs}ln2.w"}
    return m


def _lm_params(config):
    m = {"embedding.weight": "inner.embed.W_E", "norm.weight": "inner.ln_final.w", "lm_head.weight": Param("inner.unembed.W_U", permute=(1, 0))}
    for i in range(config.n_layers):
        m |= _block_params(config, f"layers.{i}.", f"inner.blocks.{i}.")
    return m


def _glue_attention(module, x, key_padding=None, positions=None, cache=None):
    """One call of the attention or block subject: the cache is a HookedTransformerKeyValueCache of one entry."""
    module._sync()
    inner = module.inner
    attention_mask = None if key_padding is None else torch.as_tensor(key_padding).long()
    if cache is not None and positions is not None:
        positions = cache.append_position_ids(torch.as_tensor(positions))
    entry = None if cache is None else cache.entries[0]
    if isinstance(inner, TransformerBlock):
        return inner(x, past_kv_cache_entry=entry, attention_mask=attention_mask, position_ids=positions)
    return inner(x, x, x, past_kv_cache_entry=entry, attention_mask=attention_mask, position_ids=positions)


def _new_cache(module, batch):
    module._sync()
    cfg = module.inner.cfg
    cache = HookedTransformerKeyValueCache.init_cache(cfg, "cpu", batch)
    cache.entries = cache.entries[:1]
    return cache


def _step_sub(module, cache, x, key_padding=None, positions=None):
    if cache is None:
        cache = _new_cache(module, x.shape[0])
    return _glue_attention(module, x, key_padding, positions, cache), cache


def _step_lm(module, cache, ids, key_padding=None, positions=None):
    module._sync()
    if cache is None:
        cache = HookedTransformerKeyValueCache.init_cache(module.inner.cfg, "cpu", ids.shape[0])
    n = ids.shape[1]
    attention_mask = None if key_padding is None else torch.as_tensor(key_padding)[:, -n:].long()  # the cache keeps the earlier ones
    out = module(ids, attention_mask=attention_mask, past_kv_cache=cache, position_ids=None if positions is None else torch.as_tensor(positions))
    return out, cache


def _forward_lm(module, ids, key_padding=None, positions=None):
    attention_mask = None if key_padding is None else torch.as_tensor(key_padding).long()
    return module(ids, attention_mask=attention_mask, position_ids=None if positions is None else torch.as_tensor(positions))


CONVENTIONS = Conventions(
    norm_kind="rms_norm", eps=1e-5, norm_placement="pre", positions="rope", rope_layout="half_split",
    ffn_kind="gated", gate_activation="silu", embedding_scale="none",
)
BIASES = {"attention": True, "ffn": False}
SPACE = ConfigSpace(split_heads=True, max_len=512, biases=BIASES)


def _make(kind):
    def make(config):
        cfg = _cfg(config)
        if kind == "rms_norm":
            return _Built(_init(RMSNorm(cfg)))
        if kind == "gated_ffn":
            return _Built(_init(GatedMLP(cfg)))
        if kind == "attn":
            return _Built(_init(GroupedQueryAttention(cfg, "global", 0)))
        if kind == "block":
            return _Built(_init(TransformerBlock(cfg, 0)))
        return _Built(_init(HookedTransformer(cfg)))
    return make


adapter = TorchModuleAdapter("hooked-transformer-llama", [
    TorchEntry("rms_norm", make=_make("rms_norm"), forward=lambda m, x: m(x), param_map={"weight": "inner.w"},
               conventions=Conventions(norm_kind="rms_norm", eps=1e-5)),
    TorchEntry("gated_ffn", make=_make("gated_ffn"), forward=lambda m, x: m(x),
               param_map={k: v for k, v in _mlp_params("inner.").items()}, conventions=CONVENTIONS,
               config={"ffn_bias": False}, supports=ConfigSpace(biases={"ffn": False})),
    TorchEntry("causal_self_attention", make=_make("attn"),
               forward=lambda m, x, key_padding=None, positions=None: _glue_attention(m, x, key_padding, positions),
               param_map=lambda config: _attention_params(config, "inner."), conventions=CONVENTIONS,
               step=_step_sub, config={"attention_bias": True, "ffn_bias": False}, supports=SPACE),
    TorchEntry("decoder_block", make=_make("block"),
               forward=lambda m, x, key_padding=None, positions=None: _glue_attention(m, x, key_padding, positions),
               param_map=lambda config: _block_params(config, "", "inner."), conventions=CONVENTIONS,
               step=_step_sub, config={"attention_bias": True, "ffn_bias": False}, supports=SPACE),
    TorchEntry("causal_lm", make=_make("lm"), forward=_forward_lm,
               param_map=_lm_params, conventions=CONVENTIONS, step=_step_lm, derives_positions="padding",
               config={"attention_bias": True, "ffn_bias": False, "tie_weights": False},
               supports=ConfigSpace(split_heads=True, max_len=512, biases=BIASES, tied=False)),
])
