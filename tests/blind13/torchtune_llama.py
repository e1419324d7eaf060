# fmt: off
# ruff: noqa
"""A Llama 3.1 decoder as torchtune writes it (torchtune/modules/: position_embeddings.py's
Llama3ScaledRoPE, kv_cache.py's KVCache, attention.py's MultiHeadAttention, feed_forward.py's
FeedForward, rms_norm.py's RMSNorm, transformer.py's TransformerSelfAttentionLayer and
TransformerDecoder), written for the thirteenth blind benchmark of transformer-tck."""

import contextlib
import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn

from tck.adapters import ConfigSpace, TorchEntry, TorchModuleAdapter
from tck.reference import DECODER_CANONICAL


class RMSNorm(nn.Module):
    """torchtune.modules.RMSNorm: statistics in float32, the gain on the cast-back tensor."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.normalized_shape = (dim,)
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x_fp32 = x.float()
        x_normed = (x_fp32 * torch.rsqrt(x_fp32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x)
        return x_normed * self.scale


class Llama3ScaledRoPE(nn.Module):
    """torchtune.models.llama3_1._position_embeddings.Llama3ScaledRoPE: interleaved pairs, a
    cos/sin cache of max_seq_len rows, Llama 3.1's frequency scaling."""

    def __init__(self, dim, max_seq_len=8192, base=500_000, scale_factor=8, low_freq_factor=1, high_freq_factor=4, old_context_len=8192):
        super().__init__()
        self.dim = dim
        self.base = base
        self.max_seq_len = max_seq_len
        self.scale_factor = scale_factor
        self.low_freq_factor = low_freq_factor
        self.high_freq_factor = high_freq_factor
        self.old_context_len = old_context_len
        self.is_cache_built = False
        self.rope_init()

    def rope_init(self):
        freqs = 1.0 / (self.base ** (torch.arange(0, self.dim, 2, dtype=torch.float64)[: (self.dim // 2)] / self.dim))
        theta = self.apply_scaling(freqs, self.scale_factor, self.low_freq_factor, self.high_freq_factor, self.old_context_len)
        self.register_buffer("theta", theta, persistent=False)
        self.build_rope_cache(self.max_seq_len)
        self.is_cache_built = True

    def build_rope_cache(self, max_seq_len=4096):
        seq_idx = torch.arange(max_seq_len, dtype=self.theta.dtype, device=self.theta.device)
        idx_theta = torch.einsum("i, j -> ij", seq_idx, self.theta)
        cache = torch.stack([torch.cos(idx_theta), torch.sin(idx_theta)], dim=-1)
        self.register_buffer("cache", cache, persistent=False)

    def apply_scaling(self, freqs, scale_factor, low_freq_factor, high_freq_factor, old_context_len):
        low_freq_wavelen = old_context_len / low_freq_factor
        high_freq_wavelen = old_context_len / high_freq_factor
        new_freqs = []
        for freq in freqs:
            wavelen = 2 * math.pi / freq
            if wavelen < high_freq_wavelen:
                new_freqs.append(freq)
            elif wavelen > low_freq_wavelen:
                new_freqs.append(freq / scale_factor)
            else:
                smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
                new_freqs.append((1 - smooth) * freq / scale_factor + smooth * freq)
        return torch.tensor(new_freqs, dtype=freqs.dtype, device=freqs.device)

    def forward(self, x, *, input_pos=None):
        # x [b, s, n_h, h_d]; input_pos [b, s] or [s]
        seq_len = x.size(1)
        rope_cache = self.cache[:seq_len] if input_pos is None else self.cache[input_pos]
        compute_dtype = torch.promote_types(x.dtype, torch.float32)
        xshaped = x.to(compute_dtype).reshape(*x.shape[:-1], -1, 2)
        rope_cache = rope_cache.view(-1, xshaped.size(1), 1, xshaped.size(3), 2).to(compute_dtype)
        x_out = torch.stack(
            [
                xshaped[..., 0] * rope_cache[..., 0] - xshaped[..., 1] * rope_cache[..., 1],
                xshaped[..., 1] * rope_cache[..., 0] + xshaped[..., 0] * rope_cache[..., 1],
            ],
            -1,
        )
        x_out = x_out.flatten(3)
        return x_out.type_as(x)


class KVCache(nn.Module):
    """torchtune.modules.KVCache: buffers of max_seq_len slots written at cache_pos."""

    def __init__(self, batch_size, max_seq_len, num_kv_heads, head_dim, dtype):
        super().__init__()
        cache_shape = (batch_size, num_kv_heads, max_seq_len, head_dim)
        self.register_buffer("k_cache", torch.zeros(cache_shape, dtype=dtype), persistent=False)
        self.register_buffer("v_cache", torch.zeros(cache_shape, dtype=dtype), persistent=False)
        self.register_buffer("cache_pos", torch.arange(0, cache_shape[2]), persistent=False)
        self.batch_size = batch_size

    def reset(self):
        self.k_cache.zero_()
        self.v_cache.zero_()
        self.cache_pos -= self.size

    @property
    def size(self):
        return self.cache_pos[0].item()

    def update(self, k_val, v_val):
        bsz, _, seq_len, _ = k_val.shape
        if bsz > self.k_cache.shape[0]:
            raise ValueError(f"The current cache has been setup with a batch size of {self.k_cache.shape[0]}, but found new key tensors with batch size {k_val.shape[0]}!")
        assert (self.cache_pos[0] + seq_len) <= self.k_cache.shape[2]
        k_out = self.k_cache
        v_out = self.v_cache
        k_out[:, :, self.cache_pos[:seq_len]] = k_val
        v_out[:, :, self.cache_pos[:seq_len]] = v_val
        self.cache_pos.add_(seq_len)
        return k_out, v_out


class MultiHeadAttention(nn.Module):
    """torchtune.modules.MultiHeadAttention (self-attention, grouped-query heads)."""

    def __init__(self, *, embed_dim, num_heads, num_kv_heads, head_dim, q_proj, k_proj, v_proj, output_proj, pos_embeddings=None, kv_cache=None, max_seq_len=4096, is_causal=True, attn_dropout=0.0):
        super().__init__()
        if num_heads % num_kv_heads != 0:
            raise ValueError(f"num_heads ({num_heads}) must be divisible by num_kv_heads ({num_kv_heads})")
        if embed_dim % num_heads != 0:
            raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.embed_dim = embed_dim
        self.attn_dropout = attn_dropout
        self.head_dim = head_dim
        self.max_seq_len = max_seq_len
        self.is_causal = is_causal
        self.kv_cache = kv_cache
        self.q_proj = q_proj
        self.k_proj = k_proj
        self.v_proj = v_proj
        self.output_proj = output_proj
        self.pos_embeddings = pos_embeddings
        self.cache_enabled = False

    def setup_cache(self, batch_size, dtype, max_seq_len):
        self.kv_cache = KVCache(batch_size=batch_size, max_seq_len=max_seq_len, num_kv_heads=self.num_kv_heads, head_dim=self.head_dim, dtype=dtype)
        self.cache_enabled = True

    def reset_cache(self):
        if self.kv_cache is None:
            raise RuntimeError("Key value caches are not setup. Call ``setup_caches()`` first.")
        self.kv_cache.reset()

    def forward(self, x, y=None, *, mask=None, input_pos=None):
        b, s_x, _ = x.shape
        y = x if y is None else y
        s_y = y.shape[1]
        q = self.q_proj(x)
        q_per_kv = self.num_heads // self.num_kv_heads
        q = q.view(b, s_x, self.num_kv_heads * q_per_kv, self.head_dim)
        if self.pos_embeddings is not None:
            q = self.pos_embeddings(q, input_pos=input_pos)
        q = q.transpose(1, 2)
        k = self.k_proj(y)
        v = self.v_proj(y)
        k = k.view(b, s_y, -1, self.head_dim)
        v = v.view(b, s_y, -1, self.head_dim)
        if self.pos_embeddings is not None:
            k = self.pos_embeddings(k, input_pos=input_pos)
        k = k.transpose(1, 2)
        v = v.transpose(1, 2)
        if self.kv_cache is not None and self.cache_enabled:
            k, v = self.kv_cache.update(k, v)
        if self.num_heads != self.num_kv_heads:
            expand_shape = (b, self.num_kv_heads, q_per_kv, -1, self.head_dim)
            k = k.unsqueeze(2).expand(expand_shape).reshape(b, self.num_heads, -1, self.head_dim)
            v = v.unsqueeze(2).expand(expand_shape).reshape(b, self.num_heads, -1, self.head_dim)
        if mask is not None and mask.dim() == 3:
            mask = mask[:, None, :, :]
        output = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.attn_dropout if self.training else 0.0, is_causal=self.kv_cache is None and mask is None and self.is_causal)
        output = output.transpose(1, 2).contiguous().view(b, s_x, -1)
        return self.output_proj(output)


class FeedForward(nn.Module):
    """torchtune.modules.FeedForward: w2(silu(w1(x)) * w3(x)) with Llama's names."""

    def __init__(self, *, gate_proj, down_proj, up_proj=None, activation=nn.SiLU()):
        super().__init__()
        self.w1 = gate_proj
        self.w2 = down_proj
        self.w3 = up_proj
        self.activation = activation

    def forward(self, x):
        h = self.activation(self.w1(x))
        if self.w3 is not None:
            h = h * self.w3(x)
        h = self.w2(h)
        return h


class TransformerSelfAttentionLayer(nn.Module):
    """torchtune.modules.TransformerSelfAttentionLayer: pre-norm residual sublayers."""

    def __init__(self, attn, mlp, *, sa_norm=None, mlp_norm=None, sa_scale=None, mlp_scale=None):
        super().__init__()
        self.attn = attn
        self.mlp = mlp
        self.sa_norm = sa_norm or nn.Identity()
        self.mlp_norm = mlp_norm or nn.Identity()
        self.sa_scale = sa_scale or nn.Identity()
        self.mlp_scale = mlp_scale or nn.Identity()

    def setup_caches(self, batch_size, dtype, *, encoder_max_seq_len=None, decoder_max_seq_len):
        self.attn.setup_cache(batch_size, dtype, max_seq_len=decoder_max_seq_len)

    def caches_are_setup(self):
        return self.attn.kv_cache is not None

    def caches_are_enabled(self):
        return self.attn.cache_enabled

    def reset_cache(self):
        self.attn.reset_cache()

    def forward(self, x, *, mask=None, input_pos=None, **kwargs):
        h = self.sa_norm(x)
        attn_out = self.attn(h, h, mask=mask, input_pos=input_pos)
        h = self.sa_scale(attn_out) + x
        mlp_out = self.mlp(self.mlp_norm(h))
        out = h + self.mlp_scale(mlp_out)
        return out


class TransformerDecoder(nn.Module):
    """torchtune.modules.TransformerDecoder: embeddings, layers, final norm, untied output."""

    def __init__(self, *, tok_embeddings, layers, max_seq_len, num_heads, head_dim, norm, output, num_layers=None, output_hidden_states=None):
        super().__init__()
        self.tok_embeddings = tok_embeddings
        self.layers = nn.ModuleList(layers)
        self.norm = norm
        self.output = output
        self.max_seq_len = max_seq_len
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.causal_mask = None
        self.num_output_chunks = 0
        self.decoder_max_cache_seq_len = None

    def setup_caches(self, batch_size, dtype, *, encoder_max_seq_len=None, decoder_max_seq_len=None):
        self.decoder_max_cache_seq_len = decoder_max_seq_len if decoder_max_seq_len is not None else self.max_seq_len
        for layer in self.layers:
            layer.setup_caches(batch_size, dtype, encoder_max_seq_len=encoder_max_seq_len, decoder_max_seq_len=self.decoder_max_cache_seq_len)
        self.causal_mask = torch.tril(torch.ones(self.max_seq_len, self.max_seq_len, dtype=torch.bool))

    def caches_are_setup(self):
        return self.layers[0].caches_are_setup()

    def caches_are_enabled(self):
        return self.layers[0].caches_are_enabled()

    def reset_caches(self):
        if not self.caches_are_enabled():
            raise RuntimeError("Key value caches are not setup. Call model.setup_caches() before doing inference.")
        for layer in self.layers:
            layer.reset_cache()

    def _validate_inputs(self, seq_len, mask=None, input_pos=None):
        if seq_len > self.max_seq_len:
            raise ValueError(f"seq_len ({seq_len}) of input tensor should be smaller than max_seq_len ({self.max_seq_len})")
        if self.caches_are_enabled() and mask is None and input_pos is None:
            raise ValueError("KV-caches are setup for inference mode, causal masks must be provided! Use the `mask` arg to provide a causal mask.")

    def forward(self, tokens, *, mask=None, input_pos=None):
        seq_len = tokens.shape[1]
        self._validate_inputs(seq_len, mask=mask, input_pos=input_pos)
        h = self.tok_embeddings(tokens)
        if self.caches_are_enabled() and mask is None:
            mask = self.causal_mask[None, input_pos] if input_pos.dim() == 1 else self.causal_mask[input_pos]
        for layer in self.layers:
            h = layer(h, mask=mask, input_pos=input_pos)
        h = self.norm(h)
        output = self.output(h)
        return output


class CachedSublayer(nn.Module):
    """A torchtune attention module or layer as TransformerDecoder drives it: the causal_mask
    buffer indexed by input_pos during cached decoding, setup_caches / reset_caches."""

    def __init__(self, inner, max_seq_len):
        super().__init__()
        self.inner = inner
        self.max_seq_len = max_seq_len
        self.causal_mask = None

    def setup_caches(self, batch_size, dtype, *, encoder_max_seq_len=None, decoder_max_seq_len=None):
        if isinstance(self.inner, MultiHeadAttention):
            self.inner.setup_cache(batch_size, dtype, max_seq_len=decoder_max_seq_len)
        else:
            self.inner.setup_caches(batch_size, dtype, decoder_max_seq_len=decoder_max_seq_len)
        self.causal_mask = torch.ones(self.max_seq_len, self.max_seq_len, dtype=torch.bool).tril()

    def caches_are_enabled(self):
        attn = self.inner if isinstance(self.inner, MultiHeadAttention) else self.inner.attn
        return attn.kv_cache is not None and attn.cache_enabled

    def forward(self, x, *, mask=None, input_pos=None):
        if self.caches_are_enabled() and mask is None:
            mask = self.causal_mask[input_pos] if input_pos.dim() == 2 else self.causal_mask[None, input_pos]
        if isinstance(self.inner, MultiHeadAttention):
            return self.inner(x, x, mask=mask, input_pos=input_pos)
        return self.inner(x, mask=mask, input_pos=input_pos)


def get_causal_mask_from_padding_mask(padding_mask, target_seq_len=None):
    """torchtune.generation.get_causal_mask_from_padding_mask (without its diagonal fill-in:
    a query with no real key is left to SDPA, which returns zeros)."""
    bsz, seq_len = padding_mask.shape
    target_seq_len = seq_len if target_seq_len is None else target_seq_len
    if target_seq_len < seq_len:
        raise AssertionError("target_seq_len cannot be shorter than the sequence length of the padding mask.")
    mask = torch.tril(torch.ones(seq_len, target_seq_len, device=padding_mask.device, dtype=torch.bool)).repeat(bsz, 1, 1)
    mask.narrow(2, 0, seq_len).mul_(padding_mask[:, None, :].expand(-1, seq_len, -1))
    return mask


@contextlib.contextmanager
def disable_kv_cache(model):
    """torchtune.modules.common_utils.disable_kv_cache: a plain forward neither reads nor
    writes the caches."""
    attns = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    states = [a.cache_enabled for a in attns]
    for a in attns:
        a.cache_enabled = False
    try:
        yield model
    finally:
        for a, s in zip(attns, states):
            a.cache_enabled = s


# ---- builders (torchtune.models.llama3_1._component_builders, at the kit's sizes) ----

def llama3_1_mlp(dim, hidden_dim):
    gate_proj = nn.Linear(dim, hidden_dim, bias=False)
    down_proj = nn.Linear(hidden_dim, dim, bias=False)
    up_proj = nn.Linear(dim, hidden_dim, bias=False)
    return FeedForward(gate_proj=gate_proj, down_proj=down_proj, up_proj=up_proj)


def llama3_1_attention(embed_dim, num_heads, num_kv_heads, max_seq_len, rope_base=500_000):
    head_dim = embed_dim // num_heads
    rope = Llama3ScaledRoPE(dim=head_dim, max_seq_len=max_seq_len, base=rope_base)
    return MultiHeadAttention(
        embed_dim=embed_dim,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        q_proj=nn.Linear(embed_dim, num_heads * head_dim, bias=False),
        k_proj=nn.Linear(embed_dim, num_kv_heads * head_dim, bias=False),
        v_proj=nn.Linear(embed_dim, num_kv_heads * head_dim, bias=False),
        output_proj=nn.Linear(embed_dim, embed_dim, bias=False),
        pos_embeddings=rope,
        max_seq_len=max_seq_len,
        attn_dropout=0.0,
    )


def llama3_1_layer(embed_dim, num_heads, num_kv_heads, intermediate_dim, max_seq_len, norm_eps=1e-5):
    self_attn = llama3_1_attention(embed_dim, num_heads, num_kv_heads, max_seq_len)
    mlp = llama3_1_mlp(dim=embed_dim, hidden_dim=intermediate_dim)
    return TransformerSelfAttentionLayer(
        attn=self_attn,
        mlp=mlp,
        sa_norm=RMSNorm(dim=embed_dim, eps=norm_eps),
        mlp_norm=RMSNorm(dim=embed_dim, eps=norm_eps),
    )


def llama3_1(vocab_size, num_layers, num_heads, num_kv_heads, embed_dim, max_seq_len, intermediate_dim, norm_eps=1e-5):
    head_dim = embed_dim // num_heads
    layers = [llama3_1_layer(embed_dim, num_heads, num_kv_heads, intermediate_dim, max_seq_len, norm_eps) for _ in range(num_layers)]
    tok_embeddings = nn.Embedding(vocab_size, embed_dim)
    output_proj = nn.Linear(embed_dim, vocab_size, bias=False)
    return TransformerDecoder(
        tok_embeddings=tok_embeddings,
        layers=layers,
        max_seq_len=max_seq_len,
        num_heads=num_heads,
        head_dim=head_dim,
        norm=RMSNorm(embed_dim, eps=norm_eps),
        output=output_proj,
    )


# ---- the adapter ----

def _rope_forward(rope, x, positions=None):
    """The rope subject: x [..., L, d] rotated at positions [L] or [B, L]."""
    if positions is None or positions.dim() == 1:
        L, d = x.shape[-2:]
        xs = x.reshape(-1, L, d).transpose(0, 1).unsqueeze(0)  # [1, L, N, d]
        out = rope(xs, input_pos=positions)
        return out[0].transpose(0, 1).reshape(x.shape)
    if x.dim() == 4:  # [B, H, L, d]
        return rope(x.transpose(1, 2), input_pos=positions).transpose(1, 2)
    return rope(x.unsqueeze(2), input_pos=positions).squeeze(2)  # [B, L, d]


def _forward(module, x, key_padding=None, positions=None):
    """A plain forward: caches off, the padding mask made causal as torchtune's generation
    utilities make it; without padding SDPA's is_causal (once caches exist, torchtune asks for
    a mask: the causal one of an unpadded row)."""
    if key_padding is None and any(isinstance(m, KVCache) for m in module.modules()):
        key_padding = torch.ones(x.shape[:2], dtype=torch.bool)
    mask = None if key_padding is None else get_causal_mask_from_padding_mask(key_padding.bool())
    with disable_kv_cache(module):
        return module(x, mask=mask, input_pos=positions)


def _step(module, cache, x, key_padding=None, positions=None):
    """Incremental decoding: the caches live in the module (set up on the first call), the
    step's cache is the number of tokens so far."""
    b, n = x.shape[:2]
    if cache is None:
        module.setup_caches(batch_size=b, dtype=next(module.parameters()).dtype, decoder_max_seq_len=module.max_seq_len)
        cache = 0
    start, total = cache, cache + n
    if positions is None:
        positions = torch.arange(start, total).unsqueeze(0).expand(b, n)
    mask = None
    if key_padding is not None:
        mask = get_causal_mask_from_padding_mask(key_padding.bool(), target_seq_len=module.max_seq_len)[:, start:total]
    out = module(x, mask=mask, input_pos=positions)
    return out, total


def _head_dim(config):
    return config.d_model // config.n_heads


def _attn_map(mine):
    return {f"{n}.weight": f"{mine}{m}.weight" for n, m in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", "output_proj"))}


def _layer_map(canon, mine):
    out = {f"{canon}self_attn.{n}.weight": f"{mine}attn.{m}.weight" for n, m in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", "output_proj"))}
    out |= {f"{canon}ffn.{n}.weight": f"{mine}mlp.{m}.weight" for n, m in (("gate", "w1"), ("down", "w2"), ("up", "w3"))}
    out |= {f"{canon}norm1.weight": f"{mine}sa_norm.scale", f"{canon}norm2.weight": f"{mine}mlp_norm.scale"}
    return out


def _lm_map(config):
    out = {"embedding.weight": "tok_embeddings.weight", "norm.weight": "norm.scale", "lm_head.weight": "output.weight"}
    for i in range(config.n_layers):
        out |= _layer_map(f"layers.{i}.", f"layers.{i}.")
    return out


CONVENTIONS = dataclasses.replace(
    DECODER_CANONICAL,
    norm_kind="rms_norm",
    eps=1e-5,
    positions="rope",
    rope_layout="interleaved",
    pe_base=500_000.0,
    rope_scaling="llama3",
    rope_scaling_factor=8.0,
    rope_low_freq_factor=1.0,
    rope_high_freq_factor=4.0,
    rope_original_max_positions=8192,
    ffn_kind="gated",
    gate_activation="silu",
    float32_steps=("norm_statistics",),
)
FIXED = {"n_kv_heads": 2, "bias": False, "tie_weights": False}
DECODER_SPACE = ConfigSpace(split_heads=True, tied=False, max_len=1024)

adapter = TorchModuleAdapter("torchtune-llama3.1", [
    TorchEntry(
        "rms_norm",
        make=lambda config: RMSNorm(config.d_model, eps=1e-5),
        forward=lambda norm, x: norm(x),
        param_map={"weight": "scale"},
        conventions=CONVENTIONS,
    ),
    TorchEntry(
        "rope",
        make=lambda config: Llama3ScaledRoPE(dim=_head_dim(config), max_seq_len=config.max_len, base=500_000),
        forward=_rope_forward,
        conventions=CONVENTIONS,
        supports=ConfigSpace(split_heads=True, max_len=131072),
    ),
    TorchEntry(
        "gated_ffn",
        make=lambda config: llama3_1_mlp(config.d_model, config.d_ff),
        forward=lambda mlp, x: mlp(x),
        param_map={"gate.weight": "w1.weight", "down.weight": "w2.weight", "up.weight": "w3.weight"},
        conventions=CONVENTIONS,
        config={"bias": False},
    ),
    TorchEntry(
        "causal_self_attention",
        make=lambda config: CachedSublayer(llama3_1_attention(config.d_model, config.n_heads, config.n_kv_heads, config.max_len), config.max_len),
        forward=_forward,
        step=_step,
        param_map=_attn_map("inner."),
        conventions=CONVENTIONS,
        config=FIXED,
        supports=DECODER_SPACE,
    ),
    TorchEntry(
        "decoder_block",
        make=lambda config: CachedSublayer(llama3_1_layer(config.d_model, config.n_heads, config.n_kv_heads, config.d_ff, config.max_len), config.max_len),
        forward=_forward,
        step=_step,
        param_map=_layer_map("", "inner."),
        conventions=CONVENTIONS,
        config=FIXED,
        supports=DECODER_SPACE,
    ),
    TorchEntry(
        "causal_lm",
        make=lambda config: llama3_1(config.vocab_size, config.n_layers, config.n_heads, config.n_kv_heads, config.d_model, config.max_len, config.d_ff),
        forward=lambda model, ids, key_padding=None, positions=None: _forward(model, ids, key_padding, positions),
        step=lambda model, cache, ids, key_padding=None, positions=None: _step(model, cache, ids, key_padding, positions),
        param_map=_lm_map,
        conventions=CONVENTIONS,
        config=FIXED,
        supports=DECODER_SPACE,
    ),
])
