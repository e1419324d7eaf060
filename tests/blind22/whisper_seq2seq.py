# fmt: off
# ruff: noqa
"""The Transformer blocks of OpenAI whisper's `whisper/model.py`: `MultiHeadAttention` with
`query` / `key` / `value` / `out` (the key without bias) and `qkv_attention`, which scales q and
k each by `(n_state // n_head) ** -0.25` and permutes k straight to (b, h, d, t);
`ResidualAttentionBlock` (pre-LN `attn_ln`, `cross_attn` / `cross_attn_ln` in the decoder's
blocks, a GELU `mlp` of width 4 * n_state, `mlp_ln`), the `AudioEncoder`'s blocks and `ln_post`,
the `TextDecoder` (token embedding, learned `positional_embedding`, blocks, `ln`, a causal mask
of -inf above the diagonal, logits against the token embedding).

The audio stem (`conv1`, `conv2` with GELU and the encoder's sinusoids) has no place in the
spec: the encoder here takes the sequence after it. Whisper's attention takes one additive mask
(`mask[:n_ctx, :n_ctx]`, the decoder's causal buffer); here the same argument may also carry a
padding bias of shape [B, 1, Lq, Lk] (sliced on its last two axes), and the blocks pass an
optional `xa_mask` to the cross-attention, so that padded inputs can be checked.
"""

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn


class LayerNorm(nn.LayerNorm):
    def forward(self, x: Tensor) -> Tensor:
        wide = torch.promote_types(x.dtype, torch.float32)
        return F.layer_norm(x.to(wide), self.normalized_shape, self.weight.to(wide), self.bias.to(wide), self.eps).type(x.dtype)


class Linear(nn.Linear):
    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight.to(x.dtype), None if self.bias is None else self.bias.to(x.dtype))


class MultiHeadAttention(nn.Module):
    def __init__(self, n_state: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.query = Linear(n_state, n_state)
        self.key = Linear(n_state, n_state, bias=False)
        self.value = Linear(n_state, n_state)
        self.out = Linear(n_state, n_state)

    def forward(self, x: Tensor, xa=None, mask=None, kv_cache=None):
        q = self.query(x)
        k = self.key(x if xa is None else xa)
        v = self.value(x if xa is None else xa)
        wv, qk = self.qkv_attention(q, k, v, mask)
        return self.out(wv), qk

    def qkv_attention(self, q: Tensor, k: Tensor, v: Tensor, mask=None):
        n_batch, n_ctx, n_state = q.shape
        scale = (n_state // self.n_head) ** -0.25
        q = q.view(*q.shape[:2], self.n_head, -1).permute(0, 2, 1, 3) * scale
        k = k.view(*k.shape[:2], self.n_head, -1).permute(0, 2, 3, 1) * scale
        v = v.view(*v.shape[:2], self.n_head, -1).permute(0, 2, 1, 3)

        qk = q @ k
        if mask is not None:
            qk = qk + mask[..., :n_ctx, : k.shape[-1]]
        qk = qk.to(torch.promote_types(qk.dtype, torch.float32))

        w = F.softmax(qk, dim=-1).to(q.dtype)
        return (w @ v).permute(0, 2, 1, 3).flatten(start_dim=2), qk.detach()


class ResidualAttentionBlock(nn.Module):
    def __init__(self, n_state: int, n_head: int, cross_attention: bool = False):
        super().__init__()
        self.attn = MultiHeadAttention(n_state, n_head)
        self.attn_ln = LayerNorm(n_state)

        self.cross_attn = MultiHeadAttention(n_state, n_head) if cross_attention else None
        self.cross_attn_ln = LayerNorm(n_state) if cross_attention else None

        n_mlp = n_state * 4
        self.mlp = nn.Sequential(Linear(n_state, n_mlp), nn.GELU(), Linear(n_mlp, n_state))
        self.mlp_ln = LayerNorm(n_state)

    def forward(self, x: Tensor, xa=None, mask=None, xa_mask=None, kv_cache=None):
        x = x + self.attn(self.attn_ln(x), mask=mask, kv_cache=kv_cache)[0]
        if self.cross_attn:
            x = x + self.cross_attn(self.cross_attn_ln(x), xa, mask=xa_mask, kv_cache=kv_cache)[0]
        x = x + self.mlp(self.mlp_ln(x))
        return x


class AudioEncoder(nn.Module):
    """The audio encoder after its stem: `x` is the [B, n_ctx, n_state] sequence that
    `conv1`, `conv2` and the sinusoidal `positional_embedding` make of the mel frames."""

    def __init__(self, n_ctx: int, n_state: int, n_head: int, n_layer: int):
        super().__init__()
        self.blocks = nn.ModuleList([ResidualAttentionBlock(n_state, n_head) for _ in range(n_layer)])
        self.ln_post = LayerNorm(n_state)

    def forward(self, x: Tensor, mask=None):
        for block in self.blocks:
            x = block(x, mask=mask)

        x = self.ln_post(x)
        return x


class TextDecoder(nn.Module):
    def __init__(self, n_vocab: int, n_ctx: int, n_state: int, n_head: int, n_layer: int):
        super().__init__()
        self.token_embedding = nn.Embedding(n_vocab, n_state)
        self.positional_embedding = nn.Parameter(torch.empty(n_ctx, n_state))

        self.blocks = nn.ModuleList([ResidualAttentionBlock(n_state, n_head, cross_attention=True) for _ in range(n_layer)])
        self.ln = LayerNorm(n_state)

        mask = torch.empty(n_ctx, n_ctx).fill_(-np.inf).triu_(1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x: Tensor, xa: Tensor, kv_cache=None):
        offset = 0
        x = self.token_embedding(x) + self.positional_embedding[offset : offset + x.shape[-1]]
        x = x.to(xa.dtype)
        return self.decode(x, xa, self.mask)

    def decode(self, x: Tensor, xa: Tensor, mask=None, xa_mask=None):
        """The blocks and `ln` (TextDecoder.forward after the embeddings; logits apart)."""
        for block in self.blocks:
            x = block(x, xa, mask=mask, xa_mask=xa_mask)

        x = self.ln(x)
        return x

    def logits(self, x: Tensor) -> Tensor:
        return (x @ torch.transpose(self.token_embedding.weight.to(x.dtype), 0, 1)).float()


# ---- the adapter ----------------------------------------------------------------------------

from tck.adapters import ConfigSpace, Times, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions

N_TEXT_CTX = 448


def padding_bias(keep, dtype, like=None):
    """A keep-mask [B, Lk] (True = a real token) as whisper's additive form: 0 or -inf."""
    if keep is None:
        return None
    if like is not None and tuple(keep.shape) != tuple(like.shape[:2]):
        raise ValueError(f"key padding mask of shape {tuple(keep.shape)}, expected {tuple(like.shape[:2])}")
    return torch.zeros(keep.shape, dtype=dtype).masked_fill(~keep, -np.inf)[:, None, None, :]


def self_mask(x, key_padding=None, causal=None, causal_buffer=None):
    """The additive mask of a self-attention: the causal buffer's corner and the padding bias."""
    n = x.shape[1]
    mask = None
    if causal is not None and bool(causal):
        buffer = causal_buffer if causal_buffer is not None else torch.empty(n, n).fill_(-np.inf).triu_(1)
        mask = buffer[:n, :n].to(x.dtype)
    pad = padding_bias(None if key_padding is None else torch.as_tensor(key_padding), x.dtype, x)
    if pad is not None:
        mask = pad if mask is None else mask + pad
    return mask


def with_key_bias(module):
    """Whisper's `key` has no bias, which softmax cancels (q . b_k is the same for every key of
    a row); the spec has one switch for the q, k and v biases (SPEC.md 0.5), so each `key` gets a
    bias parameter, zero at first, that the canonical `k.bias` is loaded into."""
    for m in module.modules():
        if isinstance(m, MultiHeadAttention) and m.key.bias is None:
            m.key.bias = nn.Parameter(torch.zeros(m.key.out_features))
    return module


def _mha(config):
    return with_key_bias(MultiHeadAttention(config.d_model, config.n_heads))


def _mha_forward(m, query, key, value, key_padding=None, causal=None):
    q, k, v = m.query(query), m.key(key), m.value(value)
    mask = padding_bias(None if key_padding is None else torch.as_tensor(key_padding), query.dtype, key)
    if causal is not None and bool(causal):
        lq, lk = query.shape[1], key.shape[1]
        corner = torch.empty(lq, lk).fill_(-np.inf).triu_(1).to(query.dtype)
        mask = corner if mask is None else mask + corner
    wv, _ = m.qkv_attention(q, k, v, mask)
    return m.out(wv)


def _attn_params(prefix):
    out = {}
    for ours, theirs in (("q", "query"), ("k", "key"), ("v", "value"), ("o", "out")):
        out[f"{ours}.weight"] = f"{prefix}{theirs}.weight"
        out[f"{ours}.bias"] = f"{prefix}{theirs}.bias"
    return out


def _block_params(prefix="", cross=False):
    out = {f"self_attn.{k}": v for k, v in _attn_params(f"{prefix}attn.").items()}
    out[f"norm1.weight"], out[f"norm1.bias"] = f"{prefix}attn_ln.weight", f"{prefix}attn_ln.bias"
    last = "norm2"
    if cross:
        out |= {f"cross_attn.{k}": v for k, v in _attn_params(f"{prefix}cross_attn.").items()}
        out[f"norm2.weight"], out[f"norm2.bias"] = f"{prefix}cross_attn_ln.weight", f"{prefix}cross_attn_ln.bias"
        last = "norm3"
    for p in ("weight", "bias"):
        out[f"ffn.fc1.{p}"] = f"{prefix}mlp.0.{p}"
        out[f"ffn.fc2.{p}"] = f"{prefix}mlp.2.{p}"
        out[f"{last}.{p}"] = f"{prefix}mlp_ln.{p}"
    return out


def _stack_params(config, cross):
    out = {}
    n = config.n_decoder_layers if cross else config.n_layers
    for i in range(n):
        out |= {f"layers.{i}.{k}": v for k, v in _block_params(f"blocks.{i}.", cross).items()}
    final = "ln" if cross else "ln_post"
    out["norm.weight"], out["norm.bias"] = f"{final}.weight", f"{final}.bias"
    return out


def _text_decoder(config):
    decoder = TextDecoder(config.vocab_size, N_TEXT_CTX, config.d_model, config.n_heads, config.n_decoder_layers)
    del decoder.token_embedding, decoder.positional_embedding  # the embeddings are no part of the spec's decoder
    return with_key_bias(decoder)


def _decoder_forward(m, x, memory, key_padding=None, memory_key_padding=None, causal=None):
    mask = self_mask(x, key_padding, causal, m.mask)
    xa_mask = padding_bias(None if memory_key_padding is None else torch.as_tensor(memory_key_padding), x.dtype, memory)
    return m.decode(x, memory, mask, xa_mask)


def _decoder_layer_forward(m, x, memory, key_padding=None, memory_key_padding=None, causal=None):
    mask = self_mask(x, key_padding, causal)
    xa_mask = padding_bias(None if memory_key_padding is None else torch.as_tensor(memory_key_padding), x.dtype, memory)
    return m(x, memory, mask=mask, xa_mask=xa_mask)


WHISPER = Conventions(norm_placement="pre", activation="gelu", fully_masked_rows="nan")
SPACE = ConfigSpace(split_heads=True, relations={"d_ff": Times("d_model", 4)})
DECODER_SPACE = ConfigSpace(split_heads=True, relations={"d_ff": Times("d_model", 4)}, max_len=N_TEXT_CTX)

adapter = TorchModuleAdapter("whisper-blocks", [
    TorchEntry(
        "mha",
        make=_mha,
        forward=_mha_forward,
        param_map=_attn_params(""),
        conventions=Conventions(fully_masked_rows="nan"),
        supports=ConfigSpace(split_heads=True),
    ),
    TorchEntry(
        "encoder_layer",
        make=lambda config: with_key_bias(ResidualAttentionBlock(config.d_model, config.n_heads)),
        forward=lambda m, x, key_padding=None, causal=None: m(x, mask=self_mask(x, key_padding, causal)),
        param_map=_block_params(),
        conventions=WHISPER,
        supports=SPACE,
    ),
    TorchEntry(
        "decoder_layer",
        make=lambda config: with_key_bias(ResidualAttentionBlock(config.d_model, config.n_heads, cross_attention=True)),
        forward=_decoder_layer_forward,
        param_map=_block_params(cross=True),
        conventions=WHISPER,
        supports=SPACE,
    ),
    TorchEntry(
        "encoder",
        make=lambda config: with_key_bias(AudioEncoder(1500, config.d_model, config.n_heads, config.n_layers)),
        forward=lambda m, x, key_padding=None, causal=None: m(x, mask=self_mask(x, key_padding, causal)),
        param_map=lambda config: _stack_params(config, cross=False),
        conventions=WHISPER,
        supports=SPACE,
    ),
    TorchEntry(
        "decoder",
        make=_text_decoder,
        forward=_decoder_forward,
        param_map=lambda config: _stack_params(config, cross=True),
        conventions=WHISPER,
        supports=DECODER_SPACE,
    ),
])
