# fmt: off
# ruff: noqa
"""A Llama-2 decoder written the way karpathy/llama2.c's run.c writes it, ported to torch:
flat per-layer weight arrays (TransformerWeights: wq [n_layers, dim, dim], ...), a RunState
holding a preallocated key/value cache [B, seq_len, kv_dim] per layer written at the current
position, RMSNorm as 1/sqrt(sum(x^2)/size + eps), RoPE over neighbouring pairs of the flat q
and k vectors with the frequency taken from the index within the head, a loop over the heads
with kv head h / kv_mul (grouped-query attention), a hand-written softmax, SwiGLU (w1 gate,
w3 up, w2 down), the classifier shared with the token embedding (shared_weights)."""

import math
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class Config:
    dim: int = 32
    hidden_dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    vocab_size: int = 40
    seq_len: int = 512
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0


def _acc(dtype):
    # float16/bfloat16 reductions in float32 (run.c is float32 throughout); float64 stays
    return torch.promote_types(dtype, torch.float32)


class TransformerWeights(nn.Module):
    def __init__(self, p, kind="lm"):
        super().__init__()
        head_size = p.dim // p.n_heads
        kv_dim = p.n_kv_heads * head_size
        L = p.n_layers
        self.wq = nn.Parameter(torch.randn(L, p.dim, p.dim) * 0.02)
        self.wk = nn.Parameter(torch.randn(L, kv_dim, p.dim) * 0.02)
        self.wv = nn.Parameter(torch.randn(L, kv_dim, p.dim) * 0.02)
        self.wo = nn.Parameter(torch.randn(L, p.dim, p.dim) * 0.02)
        if kind == "attn":
            return
        self.rms_att_weight = nn.Parameter(torch.ones(L, p.dim))
        self.rms_ffn_weight = nn.Parameter(torch.ones(L, p.dim))
        self.w1 = nn.Parameter(torch.randn(L, p.hidden_dim, p.dim) * 0.02)
        self.w2 = nn.Parameter(torch.randn(L, p.dim, p.hidden_dim) * 0.02)
        self.w3 = nn.Parameter(torch.randn(L, p.hidden_dim, p.dim) * 0.02)
        if kind == "lm":
            self.token_embedding_table = nn.Parameter(torch.randn(p.vocab_size, p.dim) * 0.02)
            self.rms_final_weight = nn.Parameter(torch.ones(p.dim))


class RunState:
    """The key/value cache of every layer, preallocated for seq_len tokens, and the position."""

    def __init__(self, p, batch, dtype):
        kv_dim = (p.dim * p.n_kv_heads) // p.n_heads
        self.key_cache = [torch.zeros(batch, p.seq_len, kv_dim, dtype=dtype) for _ in range(p.n_layers)]
        self.value_cache = [torch.zeros(batch, p.seq_len, kv_dim, dtype=dtype) for _ in range(p.n_layers)]
        self.pos = 0


def rmsnorm(x, weight, eps):
    dtype = x.dtype
    x = x.to(_acc(dtype))
    ss = (x * x).sum(-1, keepdim=True) / x.shape[-1]
    ss = ss + eps
    ss = 1.0 / torch.sqrt(ss)
    return weight * (ss * x).to(dtype)


def matmul(x, w):
    # W (d,n) @ x (n,) -> xout (d,)
    return x @ w.T


def softmax(x):
    dtype = x.dtype
    x = x.to(_acc(x.dtype))
    max_val = x.max(dim=-1, keepdim=True).values
    x = torch.exp(x - max_val)
    return (x / x.sum(dim=-1, keepdim=True)).to(dtype)


def rope_rotate(vec, pos, head_size, theta):
    """RoPE relative positional encoding: complex-valued rotate q and k in each head.
    vec [B, n, heads * head_size], pos [B, n]."""
    i = torch.arange(0, vec.shape[-1], 2)
    head_dim = i % head_size
    freq = 1.0 / torch.pow(theta, head_dim.to(torch.float64) / head_size)
    val = pos[..., None].to(torch.float64) * freq
    fcr = torch.cos(val).to(vec.dtype)
    fci = torch.sin(val).to(vec.dtype)
    v0 = vec[..., 0::2]
    v1 = vec[..., 1::2]
    out = torch.stack((v0 * fcr - v1 * fci, v0 * fci + v1 * fcr), dim=-1)
    return out.flatten(-2)


def attention(p, w, l, xb, s, pos, keep):
    """Multihead attention of layer l for the n new tokens at cache slots s.pos .. s.pos+n-1."""
    B, n, dim = xb.shape
    head_size = dim // p.n_heads
    kv_dim = (dim * p.n_kv_heads) // p.n_heads
    kv_mul = p.n_heads // p.n_kv_heads  # integer multiplier of the kv sharing in multiquery
    q = matmul(xb, w.wq[l])
    k = matmul(xb, w.wk[l])
    v = matmul(xb, w.wv[l])
    q = rope_rotate(q, pos, head_size, p.rope_theta)
    k = rope_rotate(k, pos, head_size, p.rope_theta)
    # save key,value at this time step (pos) to our kv cache
    s.key_cache[l][:, s.pos : s.pos + n] = k
    s.value_cache[l][:, s.pos : s.pos + n] = v
    T = s.pos + n
    keys = s.key_cache[l][:, :T]
    values = s.value_cache[l][:, :T]
    t = torch.arange(T)
    allowed = t[None, :] <= torch.arange(s.pos, T)[:, None]
    allowed = allowed[None, :, :] & keep[:, None, :T]
    heads = []
    for h in range(p.n_heads):
        qh = q[..., h * head_size : (h + 1) * head_size]
        kvh = h // kv_mul
        kh = keys[..., kvh * head_size : (kvh + 1) * head_size]
        vh = values[..., kvh * head_size : (kvh + 1) * head_size]
        att = qh @ kh.transpose(-1, -2) / math.sqrt(head_size)
        att = att.masked_fill(~allowed, torch.finfo(att.dtype).min)
        att = softmax(att)
        heads.append(att @ vh)
    xb = torch.cat(heads, dim=-1)
    return matmul(xb, w.wo[l])


def ffn(p, w, l, xb):
    hb = matmul(xb, w.w1[l])
    hb2 = matmul(xb, w.w3[l])
    # SwiGLU non-linearity: silu(x)=x*σ(x)
    hb = hb * (1.0 / (1.0 + torch.exp(-hb)))
    hb = hb * hb2
    return matmul(hb, w.w2[l])


def layer(p, w, l, x, s, pos, keep):
    # attention rmsnorm
    xb = rmsnorm(x, w.rms_att_weight[l], p.norm_eps)
    # residual connection back into x
    x = x + attention(p, w, l, xb, s, pos, keep)
    # ffn rmsnorm
    xb = rmsnorm(x, w.rms_ffn_weight[l], p.norm_eps)
    return x + ffn(p, w, l, xb)


def _call_state(p, x, s, pos, keep):
    B, n = x.shape[0], x.shape[1]
    if s is None:
        s = RunState(p, B, x.dtype)
    if s.pos + n > p.seq_len:
        raise ValueError(f"{s.pos + n} tokens exceed seq_len {p.seq_len}")
    if pos is None:
        pos = torch.arange(s.pos, s.pos + n)[None, :].expand(B, n)
    if pos.shape[-1] != n or int(pos.max()) >= p.seq_len:
        raise ValueError("positions must be one per token and below seq_len")
    if keep is None:
        keep = torch.ones(B, s.pos + n, dtype=torch.bool)
    return s, pos, keep


class Transformer(nn.Module):
    """kind: "lm" (tokens -> logits), "layer" (x -> x, layer 0) or "attn" (x -> attention)."""

    def __init__(self, p, kind="lm"):
        super().__init__()
        self.p = p
        self.kind = kind
        self.w = TransformerWeights(p, kind)

    def forward(self, inp, state=None, pos=None, keep=None):
        p, w = self.p, self.w
        if self.kind == "lm":
            x = w.token_embedding_table[inp]
        else:
            x = inp
        s, pos, keep = _call_state(p, x, state, pos, keep)
        if self.kind == "attn":
            out = attention(p, w, 0, x, s, pos, keep)
        elif self.kind == "layer":
            out = layer(p, w, 0, x, s, pos, keep)
        else:
            for l in range(p.n_layers):
                x = layer(p, w, l, x, s, pos, keep)
            # final rmsnorm
            x = rmsnorm(x, w.rms_final_weight, p.norm_eps)
            # classifier into logits
            out = matmul(x, w.token_embedding_table)
        s.pos += x.shape[1]
        return out, s


class RMSNormSubject(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return rmsnorm(x, self.weight, self.eps)


class RopeSubject(nn.Module):
    def forward(self, x, positions):
        B, H, L, hd = x.shape
        if positions.shape[-1] != L or hd % 2:
            raise ValueError("one position per token, an even head width")
        flat = x.transpose(1, 2).reshape(B, L, H * hd)
        out = rope_rotate(flat, positions.reshape(1, L).expand(B, L), hd, 10000.0)
        return out.reshape(B, L, H, hd).transpose(1, 2)


class FFNSubject(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p = p
        self.w1 = nn.Parameter(torch.randn(1, p.hidden_dim, p.dim) * 0.02)
        self.w2 = nn.Parameter(torch.randn(1, p.dim, p.hidden_dim) * 0.02)
        self.w3 = nn.Parameter(torch.randn(1, p.hidden_dim, p.dim) * 0.02)

    def forward(self, x):
        return ffn(self.p, self, 0, x)


# ---- the adapter --------------------------------------------------------------------------
from tck.adapters import Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def _p(config, n_layers=None):
    return Config(
        dim=config.d_model, hidden_dim=config.d_ff, n_layers=config.n_layers if n_layers is None else n_layers,
        n_heads=config.n_heads, n_kv_heads=config.n_kv_heads or config.n_heads,
        vocab_size=config.vocab_size, seq_len=config.max_len,
    )


def _layer_params(prefix, l, attn_only=False):
    def at(name):
        return Param(name, slice=(0, l, l + 1))
    out = {f"{prefix}self_attn.{c}.weight": at(f"w.w{c}") for c in "qkvo"}
    if attn_only:
        return {k[len(prefix + "self_attn."):]: v for k, v in out.items()}
    out[f"{prefix}norm1.weight"] = at("w.rms_att_weight")
    out[f"{prefix}norm2.weight"] = at("w.rms_ffn_weight")
    out[f"{prefix}ffn.gate.weight"] = at("w.w1")
    out[f"{prefix}ffn.down.weight"] = at("w.w2")
    out[f"{prefix}ffn.up.weight"] = at("w.w3")
    return out


def _lm_params(config):
    out = {"embedding.weight": "w.token_embedding_table", "norm.weight": "w.rms_final_weight"}
    for l in range(config.n_layers):
        out |= _layer_params(f"layers.{l}.", l)
    return out


def _forward(module, x, key_padding=None, positions=None):
    out, _ = module(_in(x), None, _pos(positions), _keep(key_padding))
    return out


def _step(module, cache, x, key_padding=None, positions=None):
    return module(_in(x), cache, _pos(positions), _keep(key_padding))


def _lm_forward(module, ids, key_padding=None, positions=None):
    return _forward(module, ids, key_padding, positions)


def _lm_step(module, cache, ids, key_padding=None, positions=None):
    return _step(module, cache, ids, key_padding, positions)


def _in(a):
    a = torch.as_tensor(a)
    return a.to(torch.int64) if not a.is_floating_point() else a


def _pos(positions):
    return None if positions is None else torch.as_tensor(positions, dtype=torch.int64)


def _keep(key_padding):
    return None if key_padding is None else torch.as_tensor(key_padding, dtype=torch.bool)


LLAMA2C = Conventions(
    norm_placement="pre", activation="gelu_tanh", norm_kind="rms_norm", eps=1e-5,
    rope_layout="interleaved", embedding_scale="none", positions="rope", ffn_kind="gated",
    fully_masked_rows="uniform",
)
FIXED = {"n_kv_heads": 2, "bias": False, "tie_weights": True}


def _entry(component, kind, params, n_layers=1):
    return TorchEntry(
        component,
        make=lambda config: Transformer(_p(config, None if kind == "lm" else n_layers), kind),
        forward=_lm_forward if kind == "lm" else _forward,
        step=_lm_step if kind == "lm" else _step,
        derives_positions=True,
        param_map=params,
        conventions=LLAMA2C,
        config=FIXED,
    )


adapter = TorchModuleAdapter("llama2c-flat", [
    TorchEntry(
        "rms_norm",
        make=lambda config: RMSNormSubject(config.d_model, 1e-5),
        forward=lambda m, x: m(x),
        conventions=Conventions(norm_kind="rms_norm", eps=1e-5),
    ),
    TorchEntry(
        "rope",
        make=lambda config: RopeSubject(),
        forward=lambda m, x, positions: m(x, torch.as_tensor(positions, dtype=torch.int64)),
        param_map={},
    ),
    TorchEntry(
        "gated_ffn",
        make=lambda config: FFNSubject(_p(config, 1)),
        forward=lambda m, x: m(x),
        param_map={"gate.weight": Param("w1", slice=(0, 0, 1)), "down.weight": Param("w2", slice=(0, 0, 1)), "up.weight": Param("w3", slice=(0, 0, 1))},
        config={"ffn_bias": False},
    ),
    _entry("causal_self_attention", "attn", _layer_params("", 0, attn_only=True)),
    _entry("decoder_block", "layer", _layer_params("", 0)),
    _entry("causal_lm", "lm", _lm_params),
])
