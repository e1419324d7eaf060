# fmt: off
# ruff: noqa
"""A Llama decoder as vLLM's model_executor/models/llama.py writes it, in plain torch: fused
QKVParallelLinear / MergedColumnParallelLinear projections (tensor parallel size 1), SiluAndMul,
RMSNorm with the fused residual add, get_rope (neox style), and a slot-mapped KV cache
(reshape_and_cache writes keys/values at slot_mapping, the attention backend reads them back)."""
import math
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn


# ---- vllm/model_executor/layers/linear.py (tp_size = 1)
class ColumnParallelLinear(nn.Module):
    def __init__(self, input_size, output_size, bias=True, gather_output=False, params_dtype=None):
        super().__init__()
        self.input_size = input_size
        self.output_size_per_partition = output_size
        self.weight = nn.Parameter(torch.empty(output_size, input_size, dtype=params_dtype))
        if bias:
            self.bias = nn.Parameter(torch.empty(output_size, dtype=params_dtype))
        else:
            self.register_parameter("bias", None)

    def forward(self, input_):
        output_parallel = F.linear(input_, self.weight, self.bias)
        output_bias = None
        return output_parallel, output_bias


class MergedColumnParallelLinear(ColumnParallelLinear):
    def __init__(self, input_size, output_sizes: List[int], bias=True, params_dtype=None):
        self.output_sizes = output_sizes
        super().__init__(input_size, sum(output_sizes), bias=bias, params_dtype=params_dtype)


class QKVParallelLinear(ColumnParallelLinear):
    def __init__(self, hidden_size, head_size, total_num_heads, total_num_kv_heads=None, bias=True, params_dtype=None):
        self.hidden_size = hidden_size
        self.head_size = head_size
        self.total_num_heads = total_num_heads
        if total_num_kv_heads is None:
            total_num_kv_heads = total_num_heads
        self.total_num_kv_heads = total_num_kv_heads
        tp_size = 1
        self.num_heads = self.total_num_heads // tp_size
        self.num_kv_heads = self.total_num_kv_heads // tp_size
        output_size = (self.num_heads + 2 * self.num_kv_heads) * tp_size * self.head_size
        super().__init__(hidden_size, output_size, bias=bias, params_dtype=params_dtype)


class RowParallelLinear(nn.Module):
    def __init__(self, input_size, output_size, bias=True, reduce_results=True, params_dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(output_size, input_size, dtype=params_dtype))
        if bias:
            self.bias = nn.Parameter(torch.empty(output_size, dtype=params_dtype))
        else:
            self.register_parameter("bias", None)

    def forward(self, input_):
        output = F.linear(input_, self.weight, self.bias)
        output_bias = None
        return output, output_bias


class VocabParallelEmbedding(nn.Module):
    def __init__(self, num_embeddings, embedding_dim, params_dtype=None):
        super().__init__()
        self.num_embeddings = num_embeddings
        self.weight = nn.Parameter(torch.empty(num_embeddings, embedding_dim, dtype=params_dtype))

    def forward(self, input_):
        return F.embedding(input_, self.weight)


class ParallelLMHead(VocabParallelEmbedding):
    pass


class LogitsProcessor(nn.Module):
    def __init__(self, vocab_size, scale=1.0):
        super().__init__()
        self.vocab_size = vocab_size
        self.scale = scale

    def forward(self, lm_head, hidden_states):
        logits = torch.matmul(hidden_states, lm_head.weight.t())
        if self.scale != 1.0:
            logits *= self.scale
        return logits[..., :self.vocab_size]


# ---- vllm/model_executor/layers/activation.py
class SiluAndMul(nn.Module):
    """An activation function for SwiGLU: x -> silu(x[:d]) * x[d:] where d = x.shape[-1] // 2."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        return F.silu(x[..., :d]) * x[..., d:]


# ---- vllm/model_executor/layers/layernorm.py
class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward_native(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None):
        orig_dtype = x.dtype
        x = x.to(torch.float32) if orig_dtype in (torch.float16, torch.bfloat16) else x
        if residual is not None:
            x = x + residual.to(x.dtype)
            residual = x.to(orig_dtype)
        variance = x.pow(2).mean(dim=-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.variance_epsilon)
        x = x.to(orig_dtype) * self.weight
        if residual is None:
            return x
        return x, residual

    def forward(self, x, residual=None):
        return self.forward_native(x, residual)


# ---- vllm/model_executor/layers/rotary_embedding.py
class RotaryEmbedding(nn.Module):
    def __init__(self, head_size, rotary_dim, max_position_embeddings, base, is_neox_style, dtype):
        super().__init__()
        self.head_size = head_size
        self.rotary_dim = rotary_dim
        self.max_position_embeddings = max_position_embeddings
        self.base = base
        self.is_neox_style = is_neox_style
        cache = self._compute_cos_sin_cache()
        self.register_buffer("cos_sin_cache", cache.to(dtype), persistent=False)

    def _compute_inv_freq(self, base):
        inv_freq = 1.0 / (base ** (torch.arange(0, self.rotary_dim, 2, dtype=torch.float64) / self.rotary_dim))
        return inv_freq

    def _compute_cos_sin_cache(self):
        inv_freq = self._compute_inv_freq(self.base)
        t = torch.arange(self.max_position_embeddings, dtype=torch.float64)
        freqs = torch.einsum("i,j -> ij", t, inv_freq)
        cos = freqs.cos()
        sin = freqs.sin()
        cache = torch.cat((cos, sin), dim=-1)
        return cache

    def forward_native(self, positions, query, key):
        positions = positions.flatten()
        num_tokens = positions.shape[0]
        cos_sin = self.cos_sin_cache.index_select(0, positions)
        cos, sin = cos_sin.chunk(2, dim=-1)

        query_shape = query.shape
        query = query.view(num_tokens, -1, self.head_size)
        query_rot = query[..., :self.rotary_dim]
        query_pass = query[..., self.rotary_dim:]
        query_rot = _apply_rotary_emb(query_rot, cos, sin, self.is_neox_style)
        query = torch.cat((query_rot, query_pass), dim=-1).reshape(query_shape)

        key_shape = key.shape
        key = key.view(num_tokens, -1, self.head_size)
        key_rot = key[..., :self.rotary_dim]
        key_pass = key[..., self.rotary_dim:]
        key_rot = _apply_rotary_emb(key_rot, cos, sin, self.is_neox_style)
        key = torch.cat((key_rot, key_pass), dim=-1).reshape(key_shape)
        return query, key

    def forward(self, positions, query, key):
        return self.forward_native(positions, query, key)


def _apply_rotary_emb(x, cos, sin, is_neox_style):
    cos = cos.unsqueeze(-2).to(x.dtype)
    sin = sin.unsqueeze(-2).to(x.dtype)
    if is_neox_style:
        x1, x2 = torch.chunk(x, 2, dim=-1)
    else:
        x1 = x[..., ::2]
        x2 = x[..., 1::2]
    o1 = x1 * cos - x2 * sin
    o2 = x2 * cos + x1 * sin
    if is_neox_style:
        return torch.cat((o1, o2), dim=-1)
    else:
        return torch.stack((o1, o2), dim=-1).flatten(-2)


def get_rope(head_size, rotary_dim, max_position, base, is_neox_style=True, dtype=None):
    if dtype is None:
        dtype = torch.float64
    return RotaryEmbedding(head_size, rotary_dim, max_position, base, is_neox_style, dtype)


# ---- vllm/attention: the metadata, reshape_and_cache and a torch SDPA-like backend
@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor            # [num_tokens]: where each new token's k/v go
    seq_lens: List[int]                   # tokens so far (cached + new) per sequence
    query_lens: List[int]                 # new tokens per sequence
    block_tables: torch.Tensor            # [num_seqs, max_slots]: slots of each sequence
    key_padding: Optional[torch.Tensor] = None  # [num_seqs, max_seq_len] keep-mask


def reshape_and_cache(key, value, key_cache, value_cache, slot_mapping):
    key_cache[slot_mapping] = key
    value_cache[slot_mapping] = value


class Attention(nn.Module):
    def __init__(self, num_heads, head_size, scale, num_kv_heads=None):
        super().__init__()
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        self.num_queries_per_kv = self.num_heads // self.num_kv_heads

    def forward(self, query, key, value, kv_cache, attn_metadata: AttentionMetadata):
        num_tokens = query.shape[0]
        query = query.view(-1, self.num_heads, self.head_size)
        key = key.view(-1, self.num_kv_heads, self.head_size)
        value = value.view(-1, self.num_kv_heads, self.head_size)
        key_cache, value_cache = kv_cache
        reshape_and_cache(key, value, key_cache, value_cache, attn_metadata.slot_mapping)

        output = torch.empty_like(query)
        start = 0
        for i, (seq_len, query_len) in enumerate(zip(attn_metadata.seq_lens, attn_metadata.query_lens)):
            end = start + query_len
            slots = attn_metadata.block_tables[i, :seq_len]
            k = key_cache[slots]
            v = value_cache[slots]
            q = query[start:end]
            if self.num_kv_heads != self.num_heads:
                k = k.repeat_interleave(self.num_queries_per_kv, dim=1)
                v = v.repeat_interleave(self.num_queries_per_kv, dim=1)
            q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
            attn_bias = _make_causal_bias(query_len, seq_len, q.dtype, q.device)
            if attn_metadata.key_padding is not None:
                pad = attn_metadata.key_padding[i, :seq_len]
                attn_bias = attn_bias.masked_fill(~pad[None, :], torch.finfo(q.dtype).min)
            attn_weights = torch.matmul(q, k.transpose(-1, -2)) * self.scale
            attn_weights = attn_weights + attn_bias
            attn_weights = torch.softmax(attn_weights, dim=-1, dtype=torch.float32).to(q.dtype) if q.dtype in (torch.float16, torch.bfloat16) else torch.softmax(attn_weights, dim=-1)
            out = torch.matmul(attn_weights, v)
            output[start:end] = out.transpose(0, 1)
            start = end
        return output.view(num_tokens, self.num_heads * self.head_size)


def _make_causal_bias(query_len, seq_len, dtype, device):
    bias = torch.full((query_len, seq_len), torch.finfo(dtype).min, dtype=dtype, device=device)
    bias = torch.triu(bias, diagonal=seq_len - query_len + 1)
    return bias


# ---- vllm/model_executor/models/llama.py
@dataclass
class LlamaConfig:
    vocab_size: int = 32000
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: Optional[int] = None
    hidden_act: str = "silu"
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    attention_bias: bool = False
    mlp_bias: bool = False
    tie_word_embeddings: bool = False


class LlamaMLP(nn.Module):
    def __init__(self, hidden_size, intermediate_size, hidden_act, bias=False):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(input_size=hidden_size, output_sizes=[intermediate_size] * 2, bias=bias)
        self.down_proj = RowParallelLinear(input_size=intermediate_size, output_size=hidden_size, bias=bias)
        if hidden_act != "silu":
            raise ValueError(f"Unsupported activation: {hidden_act}. Only silu is supported for now.")
        self.act_fn = SiluAndMul()

    def forward(self, x):
        gate_up, _ = self.gate_up_proj(x)
        x = self.act_fn(gate_up)
        x, _ = self.down_proj(x)
        return x


class LlamaAttention(nn.Module):
    def __init__(self, config, hidden_size, num_heads, num_kv_heads, rope_theta=10000, max_position_embeddings=8192, bias=False):
        super().__init__()
        self.hidden_size = hidden_size
        tp_size = 1
        self.total_num_heads = num_heads
        self.num_heads = self.total_num_heads // tp_size
        self.total_num_kv_heads = num_kv_heads
        self.num_kv_heads = max(1, self.total_num_kv_heads // tp_size)
        self.head_dim = getattr(config, "head_dim", self.hidden_size // self.total_num_heads)
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.scaling = self.head_dim**-0.5
        self.rope_theta = rope_theta
        self.max_position_embeddings = max_position_embeddings

        self.qkv_proj = QKVParallelLinear(hidden_size=hidden_size, head_size=self.head_dim, total_num_heads=self.total_num_heads, total_num_kv_heads=self.total_num_kv_heads, bias=bias)
        self.o_proj = RowParallelLinear(input_size=self.total_num_heads * self.head_dim, output_size=hidden_size, bias=bias)
        self.rotary_emb = get_rope(self.head_dim, rotary_dim=self.head_dim, max_position=max_position_embeddings, base=rope_theta, is_neox_style=True)
        self.attn = Attention(self.num_heads, self.head_dim, self.scaling, num_kv_heads=self.num_kv_heads)

    def forward(self, positions, hidden_states, kv_cache, attn_metadata):
        qkv, _ = self.qkv_proj(hidden_states)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q, k = self.rotary_emb(positions, q, k)
        attn_output = self.attn(q, k, v, kv_cache, attn_metadata)
        output, _ = self.o_proj(attn_output)
        return output


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.hidden_size = config.hidden_size
        rope_theta = getattr(config, "rope_theta", 10000)
        max_position_embeddings = getattr(config, "max_position_embeddings", 8192)
        attention_bias = getattr(config, "attention_bias", False) or getattr(config, "bias", False)
        self.self_attn = LlamaAttention(config=config, hidden_size=self.hidden_size, num_heads=config.num_attention_heads, num_kv_heads=getattr(config, "num_key_value_heads", config.num_attention_heads), rope_theta=rope_theta, max_position_embeddings=max_position_embeddings, bias=attention_bias)
        self.mlp = LlamaMLP(hidden_size=self.hidden_size, intermediate_size=config.intermediate_size, hidden_act=config.hidden_act, bias=getattr(config, "mlp_bias", False))
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, positions, hidden_states, kv_cache, attn_metadata, residual):
        # Self Attention
        if residual is None:
            residual = hidden_states
            hidden_states = self.input_layernorm(hidden_states)
        else:
            hidden_states, residual = self.input_layernorm(hidden_states, residual)
        hidden_states = self.self_attn(positions=positions, hidden_states=hidden_states, kv_cache=kv_cache, attn_metadata=attn_metadata)

        # Fully Connected
        hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
        hidden_states = self.mlp(hidden_states)
        return hidden_states, residual


class LlamaModel(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.vocab_size = config.vocab_size
        self.embed_tokens = VocabParallelEmbedding(self.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([LlamaDecoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def get_input_embeddings(self, input_ids):
        return self.embed_tokens(input_ids)

    def forward(self, input_ids, positions, kv_caches, attn_metadata, inputs_embeds=None):
        if inputs_embeds is not None:
            hidden_states = inputs_embeds
        else:
            hidden_states = self.get_input_embeddings(input_ids)
        residual = None
        for i in range(len(self.layers)):
            layer = self.layers[i]
            hidden_states, residual = layer(positions, hidden_states, kv_caches[i], attn_metadata, residual)
        hidden_states, _ = self.norm(hidden_states, residual)
        return hidden_states


class LlamaForCausalLM(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.model = LlamaModel(config)
        self.unpadded_vocab_size = config.vocab_size
        self.lm_head = ParallelLMHead(self.unpadded_vocab_size, config.hidden_size)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        logit_scale = getattr(config, "logit_scale", 1.0)
        self.logits_processor = LogitsProcessor(self.unpadded_vocab_size, logit_scale)

    def forward(self, input_ids, positions, kv_caches, attn_metadata):
        hidden_states = self.model(input_ids, positions, kv_caches, attn_metadata)
        return hidden_states

    def compute_logits(self, hidden_states):
        return self.logits_processor(self.lm_head, hidden_states)


# ---- the engine side: a slot-mapped cache (block_size 1, one block table per sequence)
class CacheEngine:
    def __init__(self, num_layers, num_seqs, max_seq_len, num_kv_heads, head_size, dtype, device):
        self.num_seqs = num_seqs
        self.max_seq_len = max_seq_len
        num_slots = num_seqs * max_seq_len
        self.kv_caches = [(torch.zeros(num_slots, num_kv_heads, head_size, dtype=dtype, device=device), torch.zeros(num_slots, num_kv_heads, head_size, dtype=dtype, device=device)) for _ in range(num_layers)]
        self.block_tables = torch.arange(num_slots, device=device).view(num_seqs, max_seq_len)
        self.seq_lens = [0] * num_seqs


def prepare_inputs(engine: CacheEngine, batch, num_new, positions, key_padding):
    """Flatten a [B, n] batch of new tokens into vLLM's token-major layout."""
    query_lens = [num_new] * batch
    context_lens = list(engine.seq_lens)
    seq_lens = [c + num_new for c in context_lens]
    slot_mapping = torch.cat([engine.block_tables[i, context_lens[i]:seq_lens[i]] for i in range(batch)])
    if positions is None:
        positions = torch.stack([torch.arange(context_lens[i], seq_lens[i]) for i in range(batch)])
    metadata = AttentionMetadata(slot_mapping=slot_mapping, seq_lens=seq_lens, query_lens=query_lens, block_tables=engine.block_tables, key_padding=key_padding)
    engine.seq_lens = seq_lens
    return positions.reshape(-1), metadata


# ---- the adapter
from tck.adapters import Chunk, ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def _llama_config(config):
    return LlamaConfig(vocab_size=config.vocab_size, hidden_size=config.d_model, intermediate_size=config.d_ff, num_hidden_layers=config.n_layers, num_attention_heads=config.n_heads, num_key_value_heads=config.n_kv_heads or config.n_heads, max_position_embeddings=config.max_len, rms_norm_eps=1e-6, tie_word_embeddings=False)


def _attn_map(config, prefix, dst):
    d, hd = config.d_model, config.d_model // config.n_heads
    kv = (config.n_kv_heads or config.n_heads) * hd
    return {
        f"{prefix}q.weight": Param(f"{dst}qkv_proj.weight", slice=(0, 0, d)),
        f"{prefix}k.weight": Param(f"{dst}qkv_proj.weight", slice=(0, d, d + kv)),
        f"{prefix}v.weight": Param(f"{dst}qkv_proj.weight", slice=(0, d + kv, d + 2 * kv)),
        f"{prefix}o.weight": f"{dst}o_proj.weight",
    }


def _ffn_map(prefix, dst):
    return {
        f"{prefix}gate.weight": Chunk(f"{dst}gate_up_proj.weight", 0, 2),
        f"{prefix}up.weight": Chunk(f"{dst}gate_up_proj.weight", 1, 2),
        f"{prefix}down.weight": f"{dst}down_proj.weight",
    }


def _block_map(config, prefix="", dst=""):
    m = _attn_map(config, prefix + "self_attn.", dst + "self_attn.")
    m |= _ffn_map(prefix + "ffn.", dst + "mlp.")
    m |= {prefix + "norm1.weight": dst + "input_layernorm.weight", prefix + "norm2.weight": dst + "post_attention_layernorm.weight"}
    return m


def _lm_map(config):
    m = {"embedding.weight": "lm.model.embed_tokens.weight", "norm.weight": "lm.model.norm.weight", "lm_head.weight": "lm.lm_head.weight"}
    for i in range(config.n_layers):
        m |= _block_map(config, f"layers.{i}.", f"lm.model.layers.{i}.")
    return m


class _Attn(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = _llama_config(config)
        self.self_attn = LlamaDecoderLayer(self.config).self_attn

    def run(self, x, kv_caches, md, positions):
        return self.self_attn(positions, x, kv_caches[0], md)


class _Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = _llama_config(config)
        self.layer = LlamaDecoderLayer(self.config)

    def run(self, x, kv_caches, md, positions):
        hidden_states, residual = self.layer(positions, x, kv_caches[0], md, None)
        return hidden_states + residual


class _LM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = _llama_config(config)
        self.lm = LlamaForCausalLM(self.config)

    def run(self, ids, kv_caches, md, positions):
        return self.lm.compute_logits(self.lm(ids, positions, kv_caches, md))


def _load_random_weights(module, std=0.02):
    # stands in for load_weights(): vLLM's layers are created with torch.empty
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, std)
    return module


def _new_engine(module, batch, ref):
    c = module.config
    n_layers = c.num_hidden_layers if isinstance(module, _LM) else 1
    hd = c.hidden_size // c.num_attention_heads
    return CacheEngine(n_layers, batch, c.max_position_embeddings, c.num_key_value_heads, hd, ref.dtype, ref.device)


def _call(module, cache, x, key_padding=None, positions=None):
    batch, n = x.shape[0], x.shape[1]
    ref = next(module.parameters())
    engine = cache if cache is not None else _new_engine(module, batch, ref)
    pos, md = prepare_inputs(engine, batch, n, positions, key_padding)
    flat = x.reshape(batch * n, *x.shape[2:])
    out = module.run(flat, engine.kv_caches, md, pos.to(ref.device))
    return out.view(batch, n, -1), engine


def _forward(module, x, key_padding=None, positions=None):
    return _call(module, None, x, key_padding, positions)[0]


def _step(module, cache, x, key_padding=None, positions=None):
    return _call(module, cache, x, key_padding, positions)


def _lm_forward(module, ids, key_padding=None, positions=None):
    return _call(module, None, ids, key_padding, positions)[0]


def _lm_step(module, cache, ids, key_padding=None, positions=None):
    return _call(module, cache, ids, key_padding, positions)


CONV = dict(norm_kind="rms_norm", eps=1e-6, norm_placement="pre", positions="rope", rope_layout="half_split", ffn_kind="gated", gate_activation="silu", embedding_scale="none", fully_masked_rows="uniform")
CFG = {"attention_bias": False, "attention_out_bias": False, "ffn_bias": False, "norm_bias": False}
SPACE = dict(split_heads=True, max_len=512, biases={"attention": False, "attention_out": False, "ffn": False, "norm": False})

adapter = TorchModuleAdapter("vllm-llama", [
    TorchEntry("gated_ffn", make=lambda config: _load_random_weights(LlamaMLP(config.d_model, config.d_ff, "silu", bias=False)), forward=lambda m, x: m(x), param_map=_ffn_map("", ""), conventions=Conventions(ffn_kind="gated", gate_activation="silu"), config={"ffn_bias": False}, supports=ConfigSpace(biases={"ffn": False})),
    TorchEntry("causal_self_attention", make=lambda config: _load_random_weights(_Attn(config)), forward=_forward, step=_step, param_map=lambda config: _attn_map(config, "", "self_attn."), conventions=Conventions(**CONV), config=CFG, supports=ConfigSpace(**SPACE), derives_positions=True),
    TorchEntry("decoder_block", make=lambda config: _load_random_weights(_Block(config)), forward=_forward, step=_step, param_map=lambda config: _block_map(config, "", "layer."), conventions=Conventions(**CONV), config=CFG, supports=ConfigSpace(**SPACE), derives_positions=True),
    TorchEntry("causal_lm", make=lambda config: _load_random_weights(_LM(config)), forward=_lm_forward, step=_lm_step, param_map=_lm_map, conventions=Conventions(**CONV), config={**CFG, "tie_weights": False}, supports=ConfigSpace(**SPACE, tied=False), derives_positions=True),
])
