# fmt: off
# ruff: noqa
"""Llama 2 as ExecuTorch's examples/models/llama/llama_transformer.py writes it (the export
model: ModelArgs, a static KVCache written with index_put_ at input_pos, a static
max_seq_len causal mask sliced by input_pos, an SDPA module, freqs_cos/freqs_sin tables),
written for the thirty-sixth blind benchmark (tests/blind36)."""

import math
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ModelArgs:
    dim: int = 4096
    n_layers: int = 32
    n_heads: int = 32
    n_kv_heads: Optional[int] = None
    vocab_size: int = -1  # defined later by tokenizer
    hidden_dim: Optional[int] = None
    head_dim: Optional[int] = None  # Optional customized head_dim
    multiple_of: int = 256  # make SwiGLU hidden layer size multiple of large power of 2
    ffn_dim_multiplier: Optional[float] = None
    norm_eps: float = 1e-5
    max_batch_size: int = 32
    max_seq_len: int = 2048
    use_kv_cache: bool = False
    use_sdpa_with_kv_cache_op: bool = False
    rope_theta: Optional[float] = None  # The official name to override self.rope_freq_base.
    rope_freq_base: float = 10000.0  # The base frequency for RoPE. Keep it for BC.
    enable_dynamic_shape: bool = False

    def __post_init__(self):
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads

        # rope_theta overrides rope_freq_base since it's the official name.
        if self.rope_theta is not None:
            self.rope_freq_base = self.rope_theta

        if self.hidden_dim is None:
            # If hidden_dim is not explicitly set in the ModelArgs,
            # then calculate implicitly based on dim and also multiple of `args.multiple_of`
            multiple_of = self.multiple_of
            hidden_dim = 4 * self.dim
            hidden_dim = int(2 * hidden_dim / 3)
            if self.ffn_dim_multiplier is not None:
                hidden_dim = int(self.ffn_dim_multiplier * hidden_dim)
            self.hidden_dim = find_multiple(hidden_dim, multiple_of)

        if self.head_dim is None:
            self.head_dim = self.dim // self.n_heads


def find_multiple(n: int, k: int) -> int:
    if n % k == 0:
        return n
    return n + k - (n % k)


class RMSNorm(torch.nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        """
        Initialize the RMSNorm normalization layer.

        Args:
            dim (int): The dimension of the input tensor.
            eps (float, optional): A small value added to the denominator for numerical stability. Default is 1e-6.
        """
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        """
        Apply the RMSNorm normalization to the input tensor.
        """
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        """
        Forward pass through the RMSNorm layer.
        """
        output = self._norm(x.float()).type_as(x)
        return output * self.weight


# ---- rope.py


def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0):
    freqs = 1.0 / (
        theta ** (torch.arange(0, dim, 2, dtype=torch.float64)[: (dim // 2)] / dim)
    )
    t = torch.arange(end, device=freqs.device, dtype=torch.float64)  # pyre-ignore
    freqs = torch.outer(t, freqs)
    freqs_cos = torch.cos(freqs)
    freqs_sin = torch.sin(freqs)
    return freqs_cos, freqs_sin


def reshape_for_broadcast(freqs_cis: torch.Tensor, x: torch.Tensor):
    # freqs_cis: [bsz, seq_len, head_dim // 2] (gathered by position ids), x: [bsz, seq_len, n_heads, head_dim // 2]
    ndim = x.ndim
    assert 0 <= 1 < ndim
    assert freqs_cis.shape == (x.shape[0], x.shape[1], x.shape[-1])
    shape = [d if i in (0, 1, ndim - 1) else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(shape)


def apply_rotary_emb(
    xq: torch.Tensor, xk: torch.Tensor, freqs_cos: torch.Tensor, freqs_sin: torch.Tensor
) -> Tuple[torch.Tensor, torch.Tensor]:
    xq_r, xq_i = xq.reshape(xq.shape[:-1] + (-1, 2)).unbind(-1)
    xk_r, xk_i = xk.reshape(xk.shape[:-1] + (-1, 2)).unbind(-1)

    freqs_cos = reshape_for_broadcast(freqs_cos, xq_r)
    freqs_sin = reshape_for_broadcast(freqs_sin, xq_r)

    xq_out_r = xq_r * freqs_cos - xq_i * freqs_sin
    xq_out_i = xq_r * freqs_sin + xq_i * freqs_cos
    xk_out_r = xk_r * freqs_cos - xk_i * freqs_sin
    xk_out_i = xk_r * freqs_sin + xk_i * freqs_cos

    xq_out = torch.stack([xq_out_r, xq_out_i], dim=-1).flatten(3)
    xk_out = torch.stack([xk_out_r, xk_out_i], dim=-1).flatten(3)

    return xq_out.type_as(xq), xk_out.type_as(xk)


class Rope(torch.nn.Module):
    def __init__(self, params: ModelArgs):
        super().__init__()
        self.params = params
        freqs_cos, freqs_sin = precompute_freqs_cis(
            self.params.head_dim,
            self.params.max_seq_len,
            self.params.rope_freq_base,
        )
        self.register_buffer("freqs_cos", freqs_cos, persistent=False)
        self.register_buffer("freqs_sin", freqs_sin, persistent=False)

    def forward(self, q, k, freqs_cos, freqs_sin):
        return apply_rotary_emb(q, k, freqs_cos, freqs_sin)

    def get_freqs(self, position_ids: torch.Tensor):
        """Gather the tables at the position ids of the tokens ([bsz, seqlen])."""
        freqs_cos = self.freqs_cos[position_ids]
        freqs_sin = self.freqs_sin[position_ids]
        return freqs_cos, freqs_sin


# ---- attention.py


class KVCache(nn.Module):
    def __init__(
        self,
        max_batch_size: int,
        max_seq_length: int,
        n_heads: int,
        head_dim: int,
        enable_dynamic_shape: bool,
        dtype=torch.float32,
    ):
        super().__init__()
        self.max_seq_length = max_seq_length
        cache_shape = (max_batch_size, n_heads, max_seq_length, head_dim)

        self.max_batch_size = max_batch_size
        self.n_heads = n_heads
        self.head_dim = head_dim
        self.enable_dynamic_shape = enable_dynamic_shape
        self.register_buffer(
            "k_cache", torch.zeros(cache_shape, dtype=dtype, device="cpu"), persistent=False
        )
        self.register_buffer(
            "v_cache", torch.zeros(cache_shape, dtype=dtype, device="cpu"), persistent=False
        )

    def update(
        self, input_pos: torch.Tensor, k_val: torch.Tensor, v_val: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        # input_pos: [S], k_val: [B, H, S, D]
        bsz = k_val.shape[0]
        k_out = self.k_cache[:bsz]
        v_out = self.v_cache[:bsz]
        torch.ops.aten.index_put_(k_out, [None, None, input_pos], k_val)
        torch.ops.aten.index_put_(v_out, [None, None, input_pos], v_val)
        return k_out, v_out


class SDPA(nn.Module):
    def __init__(
        self,
        dim: int,
        head_dim: int,
        n_rep: int,
        max_seq_len: int,
        enable_dynamic_shape: bool,
    ):
        super().__init__()
        self.dim = dim
        self.head_dim = head_dim
        self.n_rep = n_rep
        self.max_seq_len = max_seq_len
        self.enable_dynamic_shape = enable_dynamic_shape

    def forward(
        self,
        input_pos: torch.Tensor,
        q: torch.Tensor,  # Already have rotary embeddings. (bs, n_local_heads, seqlen, head_dim)
        k: torch.Tensor,  # Already have rotary embeddings. (bs, n_local_kv_heads, seqlen, head_dim)
        v: torch.Tensor,  # (bs, n_local_kv_heads, seqlen, head_dim)
        bsz,
        seqlen,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        attn_mask = mask[None, None, input_pos]

        # TODO(kimishpatel): This should not be necessary because scaled_dot_product_attention
        # can natively support GQA now. But needs enable_gqa=True
        k = k.repeat_interleave(self.n_rep, dim=1)
        v = v.repeat_interleave(self.n_rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=0.0)

        return y.transpose(1, 2).contiguous().view(bsz, seqlen, self.dim)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs, layer_id: int, rope: Rope):
        super().__init__()
        self.use_kv_cache = args.use_kv_cache
        self.n_heads = args.n_heads
        self.n_kv_heads = self.n_heads if args.n_kv_heads is None else args.n_kv_heads
        assert self.n_heads % self.n_kv_heads == 0
        model_parallel_size = 1
        self.n_local_heads = self.n_heads // model_parallel_size
        self.n_local_kv_heads = self.n_kv_heads // model_parallel_size
        self.n_rep = self.n_local_heads // self.n_local_kv_heads
        self.head_dim = args.head_dim
        self.max_batch_size = args.max_batch_size
        self.max_seq_len = args.max_seq_len
        self.dim = args.dim
        self.wq = nn.Linear(self.dim, self.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(self.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(self.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(self.n_heads * self.head_dim, self.dim, bias=False)

        self.layer_id = layer_id

        self.rope = rope

        causal_mask = torch.tril(
            torch.ones(
                self.max_seq_len,
                self.max_seq_len,
                dtype=torch.bool,
                device="cpu",
            )
        )
        self.register_buffer("mask", causal_mask, persistent=False)

        if self.use_kv_cache:
            self.kv_cache = KVCache(
                args.max_batch_size,
                args.max_seq_len,
                self.n_kv_heads,
                self.head_dim,
                args.enable_dynamic_shape,
            )
            self.SDPA = SDPA(
                dim=self.n_local_heads * self.head_dim,
                head_dim=self.head_dim,
                n_rep=self.n_rep,
                max_seq_len=self.max_seq_len,
                enable_dynamic_shape=args.enable_dynamic_shape,
            )

    def forward(
        self,
        x: torch.Tensor,
        freqs_cos: torch.Tensor,
        freqs_sin: torch.Tensor,
        input_pos: Optional[torch.Tensor] = None,
    ):
        bsz, seqlen, _ = x.shape

        # QKV
        q, k, v = self.wq(x), self.wk(x), self.wv(x)
        # We need view_copy elimination
        q = q.view(bsz, seqlen, self.n_local_heads, self.head_dim)
        k = k.view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)
        v = v.view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)

        # RoPE relative positional embeddings
        q, k = self.rope.forward(q, k, freqs_cos, freqs_sin)

        q = q.transpose(1, 2)  # (bs, n_local_heads, seqlen, head_dim)
        k = k.transpose(1, 2)
        v = v.transpose(1, 2)

        if self.use_kv_cache and input_pos is not None:
            assert input_pos is not None
            k, v = self.kv_cache.update(input_pos, k, v)
            output = self.SDPA(input_pos, q, k, v, bsz, seqlen, self.mask)
            return self.wo(output)

        # grouped multiquery attention: expand out keys and values
        k = torch.repeat_interleave(k, dim=1, repeats=self.n_rep)
        v = torch.repeat_interleave(v, dim=1, repeats=self.n_rep)

        assert hasattr(self, "mask")

        mask = self.mask[:seqlen, :seqlen]

        output = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0)

        output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)

        output = self.wo(output)

        return output


class FeedForward(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        assert args.hidden_dim is not None
        hidden_dim: int = args.hidden_dim
        self.w1 = nn.Linear(args.dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, args.dim, bias=False)
        self.w3 = nn.Linear(args.dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, layer_id: int, args: ModelArgs, rope: Rope):
        super().__init__()
        self.use_kv_cache = args.use_kv_cache
        self.n_heads = args.n_heads
        self.dim = args.dim
        self.head_dim = args.head_dim
        self.attention = Attention(args, layer_id, rope)
        self.feed_forward = FeedForward(args)
        self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)

    def forward(self, x, freqs_cos, freqs_sin, input_pos=None):  # x: 1xN
        h = self.attention.forward(
            self.attention_norm(x), freqs_cos, freqs_sin, input_pos
        )

        h = x + h
        out = h + self.feed_forward(self.ffn_norm(h))
        return out


class Transformer(nn.Module):
    def __init__(self, params: ModelArgs):
        super().__init__()
        self.params = params
        self.vocab_size = params.vocab_size
        self.n_layers = params.n_layers

        self.tok_embeddings = nn.Embedding(params.vocab_size, params.dim)
        self.rope = Rope(params)
        self.layers = torch.nn.ModuleList()
        for layer_id in range(params.n_layers):
            self.layers.append(TransformerBlock(layer_id, params, self.rope))
        self.norm = RMSNorm(params.dim, eps=params.norm_eps)
        self.output = nn.Linear(params.dim, params.vocab_size, bias=False)
        self.use_kv_cache = params.use_kv_cache
        self.max_seq_len = params.max_seq_len

    def forward(
        self,
        tokens: Optional[torch.LongTensor] = None,  # tokens
        input_pos: Optional[torch.LongTensor] = None,  # the cache slots of the new tokens: [S]
        position_ids: Optional[torch.LongTensor] = None,  # [bsz, S]; default: input_pos, or 0 .. S-1
    ) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        seqlen = h.shape[1]

        if position_ids is None:
            if self.use_kv_cache and input_pos is not None:
                position_ids = input_pos[None, :].expand(h.shape[0], -1)
            else:
                position_ids = torch.arange(seqlen, device=h.device)[None, :].expand(h.shape[0], -1)
        freqs_cos, freqs_sin = self.rope.get_freqs(position_ids)

        for layer in self.layers:
            h = layer(
                h,
                freqs_cos,
                freqs_sin,
                input_pos,
            )

        h = self.norm(h)

        logits = self.output(h)

        return logits


# ---- the adapter (glue written for the kit; not part of ExecuTorch)
from tck.adapters import ConfigSpace, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions

MAX_SEQ_LEN = 512


def _args(config, n_layers=None):
    return ModelArgs(
        dim=config.d_model,
        n_layers=config.n_layers if n_layers is None else n_layers,
        n_heads=config.n_heads,
        n_kv_heads=config.n_kv_heads,
        vocab_size=config.vocab_size,
        hidden_dim=config.d_ff,
        norm_eps=1e-5,
        max_batch_size=4,
        max_seq_len=MAX_SEQ_LEN,
        use_kv_cache=True,
    )


class _AttentionOnly(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.rope = Rope(args)
        self.attention = Attention(args, 0, self.rope)

    def forward(self, x, position_ids=None, input_pos=None):
        if position_ids is None:
            position_ids = _default_positions(x, input_pos)
        freqs_cos, freqs_sin = self.rope.get_freqs(position_ids)
        return self.attention(x, freqs_cos, freqs_sin, input_pos)


class _BlockOnly(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.rope = Rope(args)
        self.block = TransformerBlock(0, args, self.rope)

    def forward(self, x, position_ids=None, input_pos=None):
        if position_ids is None:
            position_ids = _default_positions(x, input_pos)
        freqs_cos, freqs_sin = self.rope.get_freqs(position_ids)
        return self.block(x, freqs_cos, freqs_sin, input_pos)


def _default_positions(x, input_pos):
    if input_pos is not None:
        return input_pos[None, :].expand(x.shape[0], -1)
    return torch.arange(x.shape[1], device=x.device)[None, :].expand(x.shape[0], -1)


def _kv_caches(module):
    return [m for m in module.modules() if isinstance(m, KVCache)]


def _step(module, cache, x=None, ids=None, key_padding=None, positions=None):
    """One cached call: the caches are the modules' static buffers; the state handed back is
    the number of tokens so far and a copy of every buffer (so that each call starts from the
    cache it is given)."""
    x = ids if x is None else x
    bsz, n = x.shape[0], x.shape[1]
    kvs = _kv_caches(module)
    if cache is None:
        start = 0
        for kv in kvs:
            shape = (max(bsz, kv.max_batch_size), kv.n_heads, kv.max_seq_length, kv.head_dim)
            kv.k_cache = torch.zeros(shape, dtype=kv.k_cache.dtype, device=kv.k_cache.device)
            kv.v_cache = torch.zeros(shape, dtype=kv.v_cache.dtype, device=kv.v_cache.device)
    else:
        start, buffers = cache
        for kv, (k, v) in zip(kvs, buffers):
            kv.k_cache = k.clone()
            kv.v_cache = v.clone()
    input_pos = torch.arange(start, start + n, device=x.device)
    pos = None if positions is None else torch.as_tensor(positions, device=x.device)
    with torch.no_grad():
        if isinstance(module, Transformer):
            out = module(x, input_pos, pos)
        else:
            out = module(x, position_ids=pos, input_pos=input_pos)
    return out, (start + n, [(kv.k_cache.clone(), kv.v_cache.clone()) for kv in kvs])


def _block_map(src, dst):
    m = {f"{src}self_attn.{c}.weight": f"{dst}attention.w{c}.weight" for c in "qkvo"}
    m |= {f"{src}ffn.gate.weight": f"{dst}feed_forward.w1.weight",
          f"{src}ffn.up.weight": f"{dst}feed_forward.w3.weight",
          f"{src}ffn.down.weight": f"{dst}feed_forward.w2.weight",
          f"{src}norm1.weight": f"{dst}attention_norm.weight",
          f"{src}norm2.weight": f"{dst}ffn_norm.weight"}
    return m


def _lm_map(config):
    m = {"embedding.weight": "tok_embeddings.weight", "norm.weight": "norm.weight",
         "lm_head.weight": "output.weight"}
    for i in range(config.n_layers):
        m |= _block_map(f"layers.{i}.", f"layers.{i}.")
    return m


CONV = Conventions(norm_kind="rms_norm", eps=1e-5, positions="rope", rope_layout="interleaved",
                   ffn_kind="gated", gate_activation="silu", norm_placement="pre",
                   embedding_scale="none", float32_steps=("norm_statistics",))
FFN_CONV = Conventions(ffn_kind="gated", gate_activation="silu")
NO_BIAS = {"attention_bias": False, "attention_out_bias": False, "ffn_bias": False}
SPACE = ConfigSpace(split_heads=True, max_len=MAX_SEQ_LEN,
                    biases={"attention": False, "ffn": False})
LM_SPACE = ConfigSpace(split_heads=True, max_len=MAX_SEQ_LEN,
                       biases={"attention": False, "ffn": False}, tied=False)

adapter = TorchModuleAdapter("executorch-llama", [
    TorchEntry(
        "rms_norm",
        make=lambda config: RMSNorm(config.d_model, eps=1e-5),
        forward=lambda m, x: m(x),
        conventions=Conventions(norm_kind="rms_norm", eps=1e-5, float32_steps=("norm_statistics",)),
    ),
    TorchEntry(
        "gated_ffn",
        make=lambda config: FeedForward(_args(config)),
        forward=lambda m, x: m(x),
        param_map={"gate.weight": "w1.weight", "up.weight": "w3.weight", "down.weight": "w2.weight"},
        conventions=FFN_CONV,
        config={"ffn_bias": False},
        supports=ConfigSpace(biases={"ffn": False}),
    ),
    TorchEntry(
        "causal_self_attention",
        make=lambda config: _AttentionOnly(_args(config)),
        forward=lambda m, x, positions=None: m(x, position_ids=positions),
        param_map={f"{c}.weight": f"attention.w{c}.weight" for c in "qkvo"},
        conventions=CONV,
        step=_step,
        derives_positions=True,
        config=NO_BIAS,
        supports=SPACE,
    ),
    TorchEntry(
        "decoder_block",
        make=lambda config: _BlockOnly(_args(config)),
        forward=lambda m, x, positions=None: m(x, position_ids=positions),
        param_map=_block_map("", "block."),
        conventions=CONV,
        step=_step,
        derives_positions=True,
        config=NO_BIAS,
        supports=SPACE,
    ),
    TorchEntry(
        "causal_lm",
        make=lambda config: Transformer(_args(config)),
        forward=lambda m, ids, positions=None: m(ids, None, positions),
        param_map=_lm_map,
        conventions=CONV,
        step=_step,
        derives_positions=True,
        config={**NO_BIAS, "tie_weights": False},
        supports=LM_SPACE,
    ),
])
