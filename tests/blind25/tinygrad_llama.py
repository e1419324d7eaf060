# fmt: off
# ruff: noqa
"""tinygrad's llama (``extra/models/llama.py``) ported line by line to torch, for the
twenty-fifth blind set.

tinygrad writes its llama as plain classes with ``__call__``: ``precompute_freqs_cis`` returns
the rotary table as ``[1, end, 1, dim // 2, 2]`` (cos, sin) pairs, ``apply_rotary_emb`` reshapes
the heads into adjacent pairs and multiplies them as complex numbers (``complex_mult``),
``repeat_kv`` tiles the key/value heads, and each ``Attention`` keeps a *preallocated*
``cache_kv`` buffer ``[2, bsz, max_context, n_kv_heads, head_dim]`` written at ``start_pos``
and read back with ``shrink``; the causal mask is ``full(-inf).triu(start_pos + 1)`` built by
the ``Transformer`` for calls of more than one token. This port keeps those names and idioms
(``shrink`` is a narrow; the cache buffer is returned instead of kept on the module, so that
the kit may hold several caches). tinygrad's llama takes no padding mask: the subjects take
none.
"""

from __future__ import annotations

import torch
from torch import nn

from tck.adapters import ConfigSpace, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def at_least_float32(x: torch.Tensor) -> torch.Tensor:
  return x.to(torch.promote_types(x.dtype, torch.float32))


# https://github.com/facebookresearch/llama/blob/1076b9c51c77ad06e9d7ba8a4c6df775741732bd/llama/model.py#L47
def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0, dtype=torch.float64) -> torch.Tensor:
  freqs = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64)[:(dim // 2)] / dim))
  freqs = torch.arange(end, dtype=torch.float64).unsqueeze(dim=1) * freqs.unsqueeze(dim=0)
  return torch.stack([torch.cos(freqs), torch.sin(freqs)], dim=-1).reshape(1, end, 1, dim // 2, 2).to(dtype)


# matches meta, non hugging face weights
# (a+i*b) * (c+i*d) = (ac-bd) + i*(ad+bc)
def complex_mult(A, c, d):
  a, b = A[..., 0:1], A[..., 1:2]
  ro = a * c - b * d
  co = a * d + b * c
  return torch.cat([ro, co], dim=-1)


def apply_rotary_emb(xq: torch.Tensor, xk: torch.Tensor, freqs_cis: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
  assert freqs_cis.shape[1] == xq.shape[1] == xk.shape[1], f"freqs_cis shape mismatch {freqs_cis.shape} xq:{xq.shape} xk:{xk.shape}"
  xq = xq.reshape(*xq.shape[0:-1], -1, 2)
  xk = xk.reshape(*xk.shape[0:-1], -1, 2)
  assert len(xq.shape) == len(xk.shape) == len(freqs_cis.shape) == 5
  c, d = freqs_cis[..., 0:1], freqs_cis[..., 1:2]
  xq_out = complex_mult(xq, c, d)
  xk_out = complex_mult(xk, c, d)
  return xq_out.flatten(3), xk_out.flatten(3)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
  bs, seqlen, n_kv_heads, head_dim = x.shape
  if n_rep == 1: return x
  # NOTE: this is different from x.repeat((1, 1, n_rep, 1))
  return x.repeat(1, 1, 1, n_rep).reshape(bs, seqlen, n_kv_heads * n_rep, head_dim)


class RMSNorm(nn.Module):
  def __init__(self, dim: int, eps=1e-6):
    super().__init__()
    self.eps = eps
    self.weight = nn.Parameter(torch.ones(dim))

  def _norm(self, x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + self.eps)

  def forward(self, x: torch.Tensor) -> torch.Tensor:
    x = self._norm(at_least_float32(x)).to(x.dtype)
    return x * self.weight


class Attention(nn.Module):
  def __init__(self, dim, n_heads, n_kv_heads, max_context):
    super().__init__()
    self.n_heads = n_heads
    self.n_kv_heads = n_kv_heads if n_kv_heads is not None else n_heads  # n_kv_heads != n_heads implies MQA [arxiv/2307.09288, A.2.1]
    self.head_dim = dim // n_heads
    self.n_rep = self.n_heads // self.n_kv_heads
    self.max_context = max_context

    self.wq = nn.Linear(dim, self.n_heads * self.head_dim, bias=False)
    self.wk = nn.Linear(dim, self.n_kv_heads * self.head_dim, bias=False)
    self.wv = nn.Linear(dim, self.n_kv_heads * self.head_dim, bias=False)
    self.wo = nn.Linear(self.n_heads * self.head_dim, dim, bias=False)

  def forward(self, x: torch.Tensor, start_pos: int, freqs_cis: torch.Tensor, mask: torch.Tensor | None, cache_kv: torch.Tensor | None = None):
    xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
    xq = xq.reshape(xq.shape[0], xq.shape[1], self.n_heads, self.head_dim)
    xk = xk.reshape(xk.shape[0], xk.shape[1], self.n_kv_heads, self.head_dim)
    xv = xv.reshape(xv.shape[0], xv.shape[1], self.n_kv_heads, self.head_dim)
    xq, xk = apply_rotary_emb(xq, xk, freqs_cis)
    bsz, seqlen, _, _ = xq.shape

    # create kv cache
    if cache_kv is None:
      cache_kv = torch.zeros(2, bsz, self.max_context, self.n_kv_heads, self.head_dim, dtype=x.dtype, device=x.device)
    assert xk.dtype == xv.dtype == cache_kv.dtype, f"{xk.dtype=}, {xv.dtype=}, {cache_kv.dtype=}"
    cache_kv = cache_kv.clone()
    cache_kv[:, :, start_pos:start_pos + seqlen, :, :] = torch.stack([xk, xv])

    keys = cache_kv[0].narrow(1, 0, start_pos + seqlen)
    values = cache_kv[1].narrow(1, 0, start_pos + seqlen)

    keys, values = repeat_kv(keys, self.n_rep), repeat_kv(values, self.n_rep)
    xq, keys, values = xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2)
    attn = self.scaled_dot_product_attention(xq, keys, values, mask)
    attn = attn.transpose(1, 2).reshape(bsz, seqlen, -1)
    return self.wo(attn), cache_kv

  @staticmethod
  def scaled_dot_product_attention(q, k, v, attn_mask):
    qk = q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5)
    if attn_mask is not None: qk = qk + attn_mask
    return torch.softmax(at_least_float32(qk), dim=-1).to(q.dtype) @ v


class FeedForward(nn.Module):
  def __init__(self, dim: int, hidden_dim: int):
    super().__init__()
    self.w1 = nn.Linear(dim, hidden_dim, bias=False)
    self.w2 = nn.Linear(hidden_dim, dim, bias=False)
    self.w3 = nn.Linear(dim, hidden_dim, bias=False)  # the gate in Gemma

  def forward(self, x: torch.Tensor) -> torch.Tensor:
    w1 = nn.functional.silu(self.w1(x))
    return self.w2(w1 * self.w3(x))  # SwiGLU [arxiv/2002.05202, eq (5)]


class TransformerBlock(nn.Module):
  def __init__(self, dim: int, hidden_dim: int, n_heads: int, n_kv_heads: int, norm_eps: float, max_context: int):
    super().__init__()
    self.attention = Attention(dim, n_heads, n_kv_heads, max_context)
    self.feed_forward = FeedForward(dim, hidden_dim)
    self.attention_norm = RMSNorm(dim, norm_eps)
    self.ffn_norm = RMSNorm(dim, norm_eps)

  def forward(self, x: torch.Tensor, start_pos: int, freqs_cis: torch.Tensor, mask: torch.Tensor | None, cache_kv=None):
    attn, cache_kv = self.attention(self.attention_norm(x), start_pos, freqs_cis, mask, cache_kv)
    h = x + attn
    return (h + self.feed_forward(self.ffn_norm(h))), cache_kv


def causal_mask(seqlen: int, start_pos: int, dtype) -> torch.Tensor | None:
  return torch.full((1, 1, seqlen, start_pos + seqlen), float("-inf"), dtype=dtype).triu(start_pos + 1) if seqlen > 1 else None


def rotary_slice(freqs_cis: torch.Tensor, start_pos: int, seqlen: int, positions: torch.Tensor | None) -> torch.Tensor:
  if positions is None:
    return freqs_cis.narrow(1, start_pos, seqlen)
  return freqs_cis[0][positions]  # [bsz, seqlen, 1, dim // 2, 2]


class Transformer(nn.Module):
  def __init__(self, dim: int, hidden_dim: int, n_heads: int, n_layers: int, norm_eps: float, vocab_size, n_kv_heads=None, rope_theta=10000, max_context=1024):
    super().__init__()
    self.layers = nn.ModuleList([TransformerBlock(dim, hidden_dim, n_heads, n_kv_heads, norm_eps, max_context) for _ in range(n_layers)])
    self.norm = RMSNorm(dim, norm_eps)
    self.tok_embeddings = nn.Embedding(vocab_size, dim)
    self.output = nn.Linear(dim, vocab_size, bias=False)
    self.max_context = max_context
    self.freqs_cis = precompute_freqs_cis(dim // n_heads, self.max_context, rope_theta)

  def forward(self, tokens: torch.Tensor, start_pos: int, positions: torch.Tensor | None = None, cache=None):
    _bsz, seqlen = tokens.shape
    if start_pos + seqlen > self.max_context: raise ValueError(f"{start_pos + seqlen} tokens exceed max_context {self.max_context}")
    h = self.tok_embeddings(tokens)
    freqs_cis = rotary_slice(self.freqs_cis, start_pos, seqlen, positions).to(h.dtype)
    mask = causal_mask(seqlen, start_pos, h.dtype)
    caches = []
    for i, layer in enumerate(self.layers):
      h, cache_kv = layer(h, start_pos, freqs_cis, mask, None if cache is None else cache[i])
      caches.append(cache_kv)
    logits = self.output(self.norm(h))
    return logits, caches


# ---- the adapter -----------------------------------------------------------------------------

NORM_EPS = 1e-5


def _positions(positions, module):
  return None if positions is None else torch.as_tensor(positions, dtype=torch.long)


def _check_len(start_pos: int, seqlen: int, positions, max_context: int) -> None:
  if start_pos + seqlen > max_context or (positions is not None and int(positions.max()) >= max_context):
    raise ValueError(f"positions beyond max_context {max_context}")


def make_attention(config):
  return Attention(config.d_model, config.n_heads, config.n_kv_heads, config.max_len)


def make_block(config):
  return TransformerBlock(config.d_model, config.d_ff, config.n_heads, config.n_kv_heads, NORM_EPS, config.max_len)


def make_transformer(config):
  return Transformer(config.d_model, config.d_ff, config.n_heads, config.n_layers, NORM_EPS, config.vocab_size, n_kv_heads=config.n_kv_heads, max_context=config.max_len)


def _freqs(module, x, start_pos, positions):
  seqlen = x.shape[1]
  pos = _positions(positions, module)
  _check_len(start_pos, seqlen, pos, module.max_context)
  head_dim = module.head_dim
  table = precompute_freqs_cis(head_dim, module.max_context)
  return rotary_slice(table, start_pos, seqlen, pos).to(x.dtype)


def attn_step(module, cache, x, key_padding=None, positions=None):
  start_pos = 0 if cache is None else cache[1]
  freqs_cis = _freqs(module, x, start_pos, positions)
  out, cache_kv = module(x, start_pos, freqs_cis, causal_mask(x.shape[1], start_pos, x.dtype), None if cache is None else cache[0])
  return out, (cache_kv, start_pos + x.shape[1])


def attn_forward(module, x, positions=None):
  return attn_step(module, None, x, positions=positions)[0]


def block_step(module, cache, x, key_padding=None, positions=None):
  start_pos = 0 if cache is None else cache[1]
  freqs_cis = _freqs(module.attention, x, start_pos, positions)
  out, cache_kv = module(x, start_pos, freqs_cis, causal_mask(x.shape[1], start_pos, x.dtype), None if cache is None else cache[0])
  return out, (cache_kv, start_pos + x.shape[1])


def block_forward(module, x, positions=None):
  return block_step(module, None, x, positions=positions)[0]


def lm_step(module, cache, ids, key_padding=None, positions=None):
  start_pos = 0 if cache is None else cache[1]
  pos = _positions(positions, module)
  _check_len(start_pos, ids.shape[1], pos, module.max_context)
  logits, caches = module(ids.long(), start_pos, pos, None if cache is None else cache[0])
  return logits, (caches, start_pos + ids.shape[1])


def lm_forward(module, ids, positions=None):
  return lm_step(module, None, ids, positions=positions)[0]


ATTN = {"q": "wq", "k": "wk", "v": "wv", "o": "wo"}
FFN = {"gate": "w1", "up": "w3", "down": "w2"}


def _block_map(prefix: str, canonical: str = "") -> dict[str, str]:
  out = {f"{canonical}self_attn.{k}.weight": f"{prefix}attention.{v}.weight" for k, v in ATTN.items()}
  out |= {f"{canonical}ffn.{k}.weight": f"{prefix}feed_forward.{v}.weight" for k, v in FFN.items()}
  out |= {f"{canonical}norm1.weight": f"{prefix}attention_norm.weight", f"{canonical}norm2.weight": f"{prefix}ffn_norm.weight"}
  return out


def lm_map(config):
  out = {"embedding.weight": "tok_embeddings.weight", "norm.weight": "norm.weight", "lm_head.weight": "output.weight"}
  for i in range(config.n_layers):
    out |= _block_map(f"layers.{i}.", f"layers.{i}.")
  return out


LLAMA = Conventions(norm_placement="pre", norm_kind="rms_norm", eps=NORM_EPS, positions="rope", ffn_kind="gated", embedding_scale="none", rope_layout="interleaved")
SPACE = dict(fixed={"n_kv_heads": 2}, split_heads=True, max_len=512, biases={"attention": False, "ffn": False})
NO_BIAS = {"attention_bias": False, "ffn_bias": False}
GQA = {**NO_BIAS, "n_kv_heads": 2}

adapter = TorchModuleAdapter("tinygrad-llama", [
  TorchEntry("rms_norm", make=lambda config: RMSNorm(config.d_model, NORM_EPS), forward=lambda m, x: m(x),
             conventions=Conventions(norm_kind="rms_norm", eps=NORM_EPS)),
  TorchEntry("gated_ffn", make=lambda config: FeedForward(config.d_model, config.d_ff), forward=lambda m, x: m(x),
             param_map={f"{k}.weight": f"{v}.weight" for k, v in FFN.items()}, conventions=LLAMA,
             config=NO_BIAS, supports=ConfigSpace(biases={"ffn": False})),
  TorchEntry("causal_self_attention", make=make_attention, forward=attn_forward, step=attn_step, derives_positions=True,
             param_map={f"{k}.weight": f"{v}.weight" for k, v in ATTN.items()}, conventions=LLAMA,
             config=GQA, supports=ConfigSpace(**SPACE)),
  TorchEntry("decoder_block", make=make_block, forward=block_forward, step=block_step, derives_positions=True,
             param_map=_block_map(""), conventions=LLAMA, config=GQA, supports=ConfigSpace(**SPACE)),
  TorchEntry("causal_lm", make=make_transformer, forward=lm_forward, step=lm_step, derives_positions=True,
             param_map=lm_map, conventions=LLAMA, config={**GQA, "tie_weights": False}, supports=ConfigSpace(**SPACE, tied=False)),
])
