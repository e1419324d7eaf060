# fmt: off
# ruff: noqa
"""Llama as SGLang's python/sglang/srt/models/llama.py writes it (with the torch_native
attention backend, the token-to-KV pool indexed by slots, the fused gate_up_proj and
qkv_proj, and the native RotaryEmbedding), tensor parallelism of size 1, written out
without the server around it."""
import math
from dataclasses import dataclass, field
from typing import Optional, Tuple, List

import torch
import torch.nn.functional as F
from torch import nn


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
    tie_word_embeddings: bool = False


# ---------------------------------------------------------------- layers/layernorm.py
class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None):
        return self.forward_native(x, residual)

    def forward_native(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None):
        orig_dtype = x.dtype
        x = x.to(torch.promote_types(orig_dtype, torch.float32))
        if residual is not None:
            x = x + residual.to(x.dtype)
            residual = x.to(orig_dtype)

        variance = x.pow(2).mean(dim=-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.variance_epsilon)
        x = x.to(orig_dtype) * self.weight
        if residual is None:
            return x
        else:
            return x, residual


# ---------------------------------------------------------------- layers/activation.py
class SiluAndMul(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        return F.silu(x[..., :d]) * x[..., d:]


# ---------------------------------------------------------------- layers/rotary_embedding.py
def _rotate_neox(x: torch.Tensor) -> torch.Tensor:
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def _apply_rotary_emb(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox_style: bool) -> torch.Tensor:
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


class RotaryEmbedding(nn.Module):
    def __init__(self, head_size: int, rotary_dim: int, max_position_embeddings: int, base: float, is_neox_style: bool, dtype: torch.dtype) -> None:
        super().__init__()
        self.head_size = head_size
        self.rotary_dim = rotary_dim
        self.max_position_embeddings = max_position_embeddings
        self.base = base
        self.is_neox_style = is_neox_style
        self.dtype = dtype
        cache = self._compute_cos_sin_cache()
        self.register_buffer("cos_sin_cache", cache, persistent=False)

    def _compute_inv_freq(self, base: float) -> torch.Tensor:
        inv_freq = 1.0 / (base ** (torch.arange(0, self.rotary_dim, 2, dtype=torch.float64) / self.rotary_dim))
        return inv_freq

    def _compute_cos_sin_cache(self) -> torch.Tensor:
        inv_freq = self._compute_inv_freq(self.base)
        t = torch.arange(self.max_position_embeddings, dtype=torch.float64)
        freqs = torch.einsum("i,j -> ij", t, inv_freq)
        cos = freqs.cos()
        sin = freqs.sin()
        cache = torch.cat((cos, sin), dim=-1)
        return cache

    def forward(self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return self.forward_native(positions, query, key)

    def forward_native(self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        positions = positions.flatten()
        num_tokens = positions.shape[0]
        cos_sin = self.cos_sin_cache.index_select(0, positions)
        cos, sin = cos_sin.chunk(2, dim=-1)

        query_shape = query.shape
        query = query.view(num_tokens, -1, self.head_size)
        query_rot = query[..., : self.rotary_dim]
        query_pass = query[..., self.rotary_dim :]
        query_rot = _apply_rotary_emb(query_rot, cos, sin, self.is_neox_style)
        query = torch.cat((query_rot, query_pass), dim=-1).reshape(query_shape)

        key_shape = key.shape
        key = key.view(num_tokens, -1, self.head_size)
        key_rot = key[..., : self.rotary_dim]
        key_pass = key[..., self.rotary_dim :]
        key_rot = _apply_rotary_emb(key_rot, cos, sin, self.is_neox_style)
        key = torch.cat((key_rot, key_pass), dim=-1).reshape(key_shape)
        return query, key


def get_rope(head_size, rotary_dim, max_position, base, is_neox_style=True, dtype=None):
    return RotaryEmbedding(head_size, rotary_dim, max_position, base, is_neox_style, dtype)


# ---------------------------------------------------------------- mem_cache/memory_pool.py
class ReqToTokenPool:
    """A memory pool that maps a request to its token locations."""

    def __init__(self, size: int, max_context_len: int, device: str = "cpu"):
        self.size = size
        self.max_context_len = max_context_len
        self.req_to_token = torch.zeros((size, max_context_len), dtype=torch.int64, device=device)
        self.free_slots = list(range(size))

    def alloc(self, need_size: int) -> List[int]:
        if need_size > len(self.free_slots):
            return None
        select_index = self.free_slots[:need_size]
        self.free_slots = self.free_slots[need_size:]
        return select_index

    def write(self, indices, values):
        self.req_to_token[indices] = values


class TokenToKVPoolAllocator:
    """An allocator managing the indices to kv cache data."""

    def __init__(self, size: int, device: str = "cpu"):
        self.size = size
        self.device = device
        self.clear()

    def clear(self):
        # The padded slot 0 is used for writing dummy outputs from padded tokens.
        self.free_slots = torch.arange(1, self.size + 1, dtype=torch.int64, device=self.device)

    def available_size(self):
        return len(self.free_slots)

    def alloc(self, need_size: int):
        if need_size > len(self.free_slots):
            return None
        select_index = self.free_slots[:need_size]
        self.free_slots = self.free_slots[need_size:]
        return select_index


class MHATokenToKVPool:
    def __init__(self, size: int, dtype: torch.dtype, head_num: int, head_dim: int, layer_num: int, device: str = "cpu"):
        self.size = size
        self.dtype = dtype
        self.head_num = head_num
        self.head_dim = head_dim
        self.layer_num = layer_num
        # [size, head_num, head_dim] for each layer; the padded slot 0 is used for writing dummy outputs from padded tokens.
        self.k_buffer = [torch.zeros((size + 1, head_num, head_dim), dtype=dtype, device=device) for _ in range(layer_num)]
        self.v_buffer = [torch.zeros((size + 1, head_num, head_dim), dtype=dtype, device=device) for _ in range(layer_num)]

    def get_key_buffer(self, layer_id: int):
        return self.k_buffer[layer_id]

    def get_value_buffer(self, layer_id: int):
        return self.v_buffer[layer_id]

    def set_kv_buffer(self, layer, loc: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor):
        layer_id = layer.layer_id
        self.k_buffer[layer_id][loc] = cache_k.to(self.dtype)
        self.v_buffer[layer_id][loc] = cache_v.to(self.dtype)


# ---------------------------------------------------------------- model_executor/forward_batch_info.py
@dataclass
class ForwardBatch:
    batch_size: int
    input_ids: Optional[torch.Tensor]
    req_pool_indices: torch.Tensor
    seq_lens: torch.Tensor
    out_cache_loc: torch.Tensor
    extend_prefix_lens: torch.Tensor
    extend_seq_lens: torch.Tensor
    positions: torch.Tensor
    req_to_token_pool: ReqToTokenPool = None
    token_to_kv_pool: MHATokenToKVPool = None
    attn_backend: "TorchNativeAttnBackend" = None
    # not in SGLang (it has no padding): a keep-mask [B, max seq_len] over every token so far
    key_keep_mask: Optional[torch.Tensor] = None


# ---------------------------------------------------------------- layers/attention/torch_native_backend.py
class TorchNativeAttnBackend:
    def __init__(self):
        self.forward_metadata = None

    def _run_sdpa_forward_extend(self, query, output, k_cache, v_cache, req_to_token, req_pool_indices, seq_lens, extend_prefix_lens, extend_seq_lens, key_keep_mask=None, scaling=None, enable_gqa=False, causal=False):
        assert seq_lens.shape[0] == extend_prefix_lens.shape[0]
        assert seq_lens.shape[0] == extend_seq_lens.shape[0]

        # [num_tokens, num_heads, head_size] -> [num_heads, num_tokens, head_size]
        query = query.movedim(0, query.dim() - 2)

        start_q, start_kv = 0, 0
        for seq_idx in range(seq_lens.shape[0]):
            # TODO: this loop process a sequence per iter, this is inefficient.
            # Need optimize the performance later.

            extend_seq_len_q = extend_seq_lens[seq_idx]
            prefill_seq_len_q = extend_prefix_lens[seq_idx]

            seq_len_kv = seq_lens[seq_idx]
            end_q = start_q + extend_seq_len_q
            end_kv = start_kv + seq_len_kv

            per_req_query = query[:, start_q:end_q, :]
            per_req_query_redudant = torch.empty((per_req_query.shape[0], seq_len_kv, per_req_query.shape[2]), dtype=per_req_query.dtype, device=per_req_query.device)

            per_req_query_redudant[:, prefill_seq_len_q:, :] = per_req_query

            # get key and value from cache. per_req_tokens contains the kv cache
            # index for each token in the sequence.
            req_pool_idx = req_pool_indices[seq_idx]
            per_req_tokens = req_to_token[req_pool_idx, :seq_len_kv]
            per_req_key = k_cache[per_req_tokens].movedim(0, query.dim() - 2)
            per_req_value = v_cache[per_req_tokens].movedim(0, query.dim() - 2)

            attn_mask = None
            if key_keep_mask is not None:
                # not in SGLang: the padding of a left-padded prompt, as an additive mask with the causal part
                keep = torch.ones(seq_len_kv, seq_len_kv, dtype=torch.bool, device=query.device).tril(diagonal=0)
                keep = keep & key_keep_mask[seq_idx, :seq_len_kv][None, :]
                attn_mask = torch.zeros(keep.shape, dtype=query.dtype, device=query.device)
                attn_mask = attn_mask.masked_fill(~keep, torch.finfo(query.dtype).min)

            per_req_out_redudant = (
                self.scaled_dot_product_attention(
                    per_req_query_redudant.unsqueeze(0),
                    per_req_key.unsqueeze(0),
                    per_req_value.unsqueeze(0),
                    attn_mask=attn_mask,
                    enable_gqa=enable_gqa,
                    scale=scaling,
                    is_causal=causal and attn_mask is None,
                )
                .squeeze(0)
                .movedim(query.dim() - 2, 0)
            )
            output[start_q:end_q, :, :] = per_req_out_redudant[prefill_seq_len_q:, :, :]
            start_q, start_kv = end_q, end_kv
        return output

    @staticmethod
    def scaled_dot_product_attention(query, key, value, attn_mask=None, enable_gqa=False, scale=None, is_causal=False):
        # the math path of F.scaled_dot_product_attention, as torch documents it
        L, S = query.size(-2), key.size(-2)
        scale_factor = 1 / math.sqrt(query.size(-1)) if scale is None else scale
        attn_bias = torch.zeros(L, S, dtype=query.dtype, device=query.device)
        if is_causal:
            temp_mask = torch.ones(L, S, dtype=torch.bool, device=query.device).tril(diagonal=0)
            attn_bias.masked_fill_(temp_mask.logical_not(), float("-inf"))
        if attn_mask is not None:
            attn_bias = attn_mask + attn_bias
        if enable_gqa:
            key = key.repeat_interleave(query.size(-3) // key.size(-3), -3)
            value = value.repeat_interleave(query.size(-3) // value.size(-3), -3)
        attn_weight = query @ key.transpose(-2, -1) * scale_factor
        attn_weight += attn_bias
        attn_weight = torch.softmax(attn_weight, dim=-1, dtype=torch.promote_types(query.dtype, torch.float32)).to(query.dtype)
        return attn_weight @ value

    def forward_extend(self, q, k, v, layer, forward_batch: ForwardBatch, save_kv_cache=True):
        if layer.qk_head_dim != layer.v_head_dim:
            o = q.new_empty((q.shape[0], layer.tp_q_head_num * layer.v_head_dim))
        else:
            o = torch.empty_like(q)

        if save_kv_cache:
            forward_batch.token_to_kv_pool.set_kv_buffer(layer, forward_batch.out_cache_loc, k, v)

        use_gqa = layer.tp_q_head_num != layer.tp_k_head_num

        q_ = q.view(-1, layer.tp_q_head_num, layer.qk_head_dim)
        o_ = o.view(-1, layer.tp_q_head_num, layer.v_head_dim)

        self._run_sdpa_forward_extend(
            q_,
            o_,
            forward_batch.token_to_kv_pool.get_key_buffer(layer.layer_id),
            forward_batch.token_to_kv_pool.get_value_buffer(layer.layer_id),
            forward_batch.req_to_token_pool.req_to_token,
            forward_batch.req_pool_indices,
            forward_batch.seq_lens,
            forward_batch.extend_prefix_lens,
            forward_batch.extend_seq_lens,
            key_keep_mask=forward_batch.key_keep_mask,
            scaling=layer.scaling,
            enable_gqa=use_gqa,
            causal=True,
        )
        return o


# ---------------------------------------------------------------- layers/radix_attention.py
class RadixAttention(nn.Module):
    """The attention layer implementation."""

    def __init__(self, num_heads: int, head_dim: int, scaling: float, num_kv_heads: int, layer_id: int, v_head_dim: int = -1):
        super().__init__()
        self.tp_q_head_num = num_heads
        self.tp_k_head_num = num_kv_heads
        self.tp_v_head_num = num_kv_heads
        self.head_dim = head_dim
        self.qk_head_dim = head_dim
        self.v_head_dim = v_head_dim if v_head_dim != -1 else head_dim
        self.scaling = scaling
        self.layer_id = layer_id

    def forward(self, q, k, v, forward_batch: ForwardBatch, save_kv_cache: bool = True):
        if k is not None:
            # For cross-layer sharing, kv can be None
            assert v is not None
            k = k.view(-1, self.tp_k_head_num, self.qk_head_dim)
            v = v.view(-1, self.tp_v_head_num, self.v_head_dim)
        return forward_batch.attn_backend.forward_extend(q, k, v, self, forward_batch, save_kv_cache)


# ---------------------------------------------------------------- models/llama.py
class LlamaMLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int, hidden_act: str, prefix: str = "") -> None:
        super().__init__()
        # MergedColumnParallelLinear(hidden_size, [intermediate_size] * 2, bias=False)
        self.gate_up_proj = nn.Linear(hidden_size, intermediate_size * 2, bias=False)
        # RowParallelLinear(intermediate_size, hidden_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        if hidden_act != "silu":
            raise ValueError(f"Unsupported activation: {hidden_act}. Only silu is supported for now.")
        self.act_fn = SiluAndMul()

    def forward(self, x):
        gate_up = self.gate_up_proj(x)
        x = self.act_fn(gate_up)
        x = self.down_proj(x)
        return x


class LlamaAttention(nn.Module):
    def __init__(self, config: LlamaConfig, hidden_size: int, num_heads: int, num_kv_heads: int, layer_id: int = 0, rope_theta: float = 10000, max_position_embeddings: int = 8192, prefix: str = "", bias: bool = False) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        tp_size = 1
        self.total_num_heads = num_heads
        assert self.total_num_heads % tp_size == 0
        self.num_heads = self.total_num_heads // tp_size
        self.total_num_kv_heads = num_kv_heads
        if self.total_num_kv_heads >= tp_size:
            # Number of KV heads is greater than TP size, so we partition
            # the KV heads across multiple tensor parallel GPUs.
            assert self.total_num_kv_heads % tp_size == 0
        else:
            # Number of KV heads is less than TP size, so we replicate
            # the KV heads across multiple tensor parallel GPUs.
            assert tp_size % self.total_num_kv_heads == 0
        self.num_kv_heads = max(1, self.total_num_kv_heads // tp_size)
        # MistralConfig has an optional head_dim introduced by Mistral-Nemo
        self.head_dim = getattr(config, "head_dim", None) or self.hidden_size // self.total_num_heads
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.scaling = self.head_dim**-0.5
        self.rope_theta = rope_theta
        self.max_position_embeddings = max_position_embeddings

        # QKVParallelLinear(hidden_size, head_dim, total_num_heads, total_num_kv_heads, bias=bias)
        self.qkv_proj = nn.Linear(hidden_size, (self.total_num_heads + 2 * self.total_num_kv_heads) * self.head_dim, bias=bias)
        # RowParallelLinear(total_num_heads * head_dim, hidden_size, bias=bias)
        self.o_proj = nn.Linear(self.total_num_heads * self.head_dim, hidden_size, bias=bias)

        self.rotary_emb = get_rope(self.head_dim, rotary_dim=self.head_dim, max_position=max_position_embeddings, base=rope_theta, is_neox_style=True)
        self.attn = RadixAttention(self.num_heads, self.head_dim, self.scaling, num_kv_heads=self.num_kv_heads, layer_id=layer_id)

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor, forward_batch: ForwardBatch) -> torch.Tensor:
        qkv = self.qkv_proj(hidden_states)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q, k = self.rotary_emb(positions, q, k)
        attn_output = self.attn(q, k, v, forward_batch)
        output = self.o_proj(attn_output)
        return output


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: LlamaConfig, layer_id: int = 0, prefix: str = "") -> None:
        super().__init__()
        self.hidden_size = config.hidden_size
        rope_theta = getattr(config, "rope_theta", 10000)
        max_position_embeddings = getattr(config, "max_position_embeddings", 8192)
        attention_bias = getattr(config, "attention_bias", False) or getattr(config, "bias", False)
        self.self_attn = LlamaAttention(
            config=config,
            hidden_size=self.hidden_size,
            num_heads=config.num_attention_heads,
            num_kv_heads=config.num_key_value_heads,
            layer_id=layer_id,
            rope_theta=rope_theta,
            max_position_embeddings=max_position_embeddings,
            prefix=f"{prefix}.self_attn",
            bias=attention_bias,
        )
        self.mlp = LlamaMLP(hidden_size=self.hidden_size, intermediate_size=config.intermediate_size, hidden_act=config.hidden_act, prefix=f"{prefix}.mlp")
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor, forward_batch: ForwardBatch, residual: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
        # Self Attention
        if residual is None:
            residual = hidden_states
            hidden_states = self.input_layernorm(hidden_states)
        else:
            hidden_states, residual = self.input_layernorm(hidden_states, residual)
        hidden_states = self.self_attn(positions=positions, hidden_states=hidden_states, forward_batch=forward_batch)

        # Fully Connected
        hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
        hidden_states = self.mlp(hidden_states)
        return hidden_states, residual


class VocabParallelEmbedding(nn.Embedding):
    pass


class ParallelLMHead(nn.Module):
    def __init__(self, num_embeddings: int, embedding_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_embeddings, embedding_dim))
        nn.init.normal_(self.weight, std=0.02)


class LogitsProcessor(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config

    def forward(self, input_ids, hidden_states, lm_head, forward_batch):
        # return the logits of every token (SGLang keeps only the last one of each request
        # unless return_logprob asks for them)
        logits = torch.matmul(hidden_states, lm_head.weight.T)
        return logits


class LlamaModel(nn.Module):
    def __init__(self, config: LlamaConfig, prefix: str = "") -> None:
        super().__init__()
        self.config = config
        self.padding_idx = None
        self.vocab_size = config.vocab_size
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([LlamaDecoderLayer(config=config, layer_id=i, prefix=f"model.layers.{i}") for i in range(config.num_hidden_layers)])
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, forward_batch: ForwardBatch, input_embeds: torch.Tensor = None) -> torch.Tensor:
        if input_embeds is None:
            hidden_states = self.embed_tokens(input_ids)
        else:
            hidden_states = input_embeds
        residual = None
        for i in range(len(self.layers)):
            layer = self.layers[i]
            hidden_states, residual = layer(positions, hidden_states, forward_batch, residual)
        hidden_states, _ = self.norm(hidden_states, residual)
        return hidden_states


class LlamaForCausalLM(nn.Module):
    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        self.model = LlamaModel(config, prefix="model")
        if self.config.tie_word_embeddings:
            self.lm_head = self.model.embed_tokens
        else:
            self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size)
        self.logits_processor = LogitsProcessor(config)

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, forward_batch: ForwardBatch, input_embeds: torch.Tensor = None) -> torch.Tensor:
        hidden_states = self.model(input_ids, positions, forward_batch, input_embeds)
        return self.logits_processor(input_ids, hidden_states, self.lm_head, forward_batch)


# ---------------------------------------------------------------- model_executor/model_runner.py (a minimal one)
class ModelRunner:
    """Holds the pools of one batch of B requests and makes each call's ForwardBatch
    (SGLang's ScheduleBatch -> ModelWorkerBatch -> ForwardBatch, in one place)."""

    def __init__(self, config: LlamaConfig, batch_size: int, dtype: torch.dtype, device):
        head_dim = config.hidden_size // config.num_attention_heads
        self.max_context_len = config.max_position_embeddings
        self.req_to_token_pool = ReqToTokenPool(batch_size, self.max_context_len, device=device)
        self.token_to_kv_pool_allocator = TokenToKVPoolAllocator(batch_size * self.max_context_len, device=device)
        self.token_to_kv_pool = MHATokenToKVPool(batch_size * self.max_context_len, dtype=dtype, head_num=config.num_key_value_heads, head_dim=head_dim, layer_num=config.num_hidden_layers, device=device)
        self.req_pool_indices = torch.tensor(self.req_to_token_pool.alloc(batch_size), dtype=torch.int64, device=device)
        self.seq_lens = torch.zeros(batch_size, dtype=torch.int64, device=device)
        self.attn_backend = TorchNativeAttnBackend()

    def prepare_extend(self, num_new: int, positions: torch.Tensor, key_keep_mask=None) -> ForwardBatch:
        bs = self.seq_lens.shape[0]
        prefix_lens = self.seq_lens.clone()
        seq_lens = prefix_lens + num_new
        if int(seq_lens.max()) > self.max_context_len:
            raise ValueError(f"the requests' length {int(seq_lens.max())} exceeds the context length {self.max_context_len}")
        out_cache_loc = self.token_to_kv_pool_allocator.alloc(bs * num_new)
        for i in range(bs):
            req_idx = self.req_pool_indices[i]
            self.req_to_token_pool.write((req_idx, slice(prefix_lens[i], seq_lens[i])), out_cache_loc[i * num_new : (i + 1) * num_new])
        self.seq_lens = seq_lens
        return ForwardBatch(
            batch_size=bs,
            input_ids=None,
            req_pool_indices=self.req_pool_indices,
            seq_lens=seq_lens,
            out_cache_loc=out_cache_loc,
            extend_prefix_lens=prefix_lens,
            extend_seq_lens=seq_lens - prefix_lens,
            positions=positions,
            req_to_token_pool=self.req_to_token_pool,
            token_to_kv_pool=self.token_to_kv_pool,
            attn_backend=self.attn_backend,
            key_keep_mask=key_keep_mask,
        )


# ---------------------------------------------------------------- the kit's adapter (not SGLang's)
from tck.adapters import Param, TorchEntry, TorchModuleAdapter, ConfigSpace
from tck.reference import Conventions

MAX_LEN = 512


def _hf_config(config) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.d_model,
        intermediate_size=config.d_ff,
        num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads,
        num_key_value_heads=config.n_kv_heads or config.n_heads,
        max_position_embeddings=MAX_LEN,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
    )


def _make_attention(config):
    return LlamaAttention(_hf_config(config), config.d_model, config.n_heads, config.n_kv_heads or config.n_heads, layer_id=0, max_position_embeddings=MAX_LEN)


def _make_layer(config):
    return LlamaDecoderLayer(_hf_config(config), layer_id=0)


def _make_mlp(config):
    return LlamaMLP(config.d_model, config.d_ff, "silu")


def _make_lm(config):
    return LlamaForCausalLM(_hf_config(config))


def _runner(module, x, cache):
    if cache is not None:
        return cache
    hf = module.config if hasattr(module, "config") else None
    if hf is None:  # an attention or a layer alone: one layer's pool
        attn = module if isinstance(module, LlamaAttention) else module.self_attn
        hf = LlamaConfig(hidden_size=attn.hidden_size, num_attention_heads=attn.total_num_heads, num_key_value_heads=attn.total_num_kv_heads, num_hidden_layers=1, max_position_embeddings=attn.max_position_embeddings)
    dtype = next(module.parameters()).dtype
    return ModelRunner(hf, x.shape[0], dtype, x.device)


def _call(module, x, key_padding, positions, cache):
    runner = _runner(module, x, cache)
    B, n = x.shape[0], x.shape[1]
    start = int(runner.seq_lens[0])
    if positions is None:
        positions = torch.arange(start, start + n, device=x.device).expand(B, n)
    keep = None if key_padding is None else key_padding.to(torch.bool)
    fb = runner.prepare_extend(n, positions, keep)
    flat_pos = positions.reshape(-1).to(torch.int64)
    if isinstance(module, LlamaForCausalLM):
        out = module(x.reshape(-1), flat_pos, fb)
    elif isinstance(module, LlamaDecoderLayer):
        h, residual = module(flat_pos, x.reshape(B * n, -1), fb, None)
        out = h + residual
    else:
        out = module(flat_pos, x.reshape(B * n, -1), fb)
    return out.reshape(B, n, -1), runner


def _forward(module, x, key_padding=None, positions=None):
    return _call(module, x, key_padding, positions, None)[0]


def _step(module, cache, x, key_padding=None, positions=None):
    return _call(module, x, key_padding, positions, cache)


def _lm_forward(module, ids, key_padding=None, positions=None):
    return _call(module, ids, key_padding, positions, None)[0]


def _lm_step(module, cache, ids, key_padding=None, positions=None):
    return _call(module, ids, key_padding, positions, cache)


def _attn_map(prefix, config):
    D = config.d_model
    hd = D // config.n_heads
    q = config.n_heads * hd
    kv = (config.n_kv_heads or config.n_heads) * hd
    return {
        f"{prefix}self_attn.q.weight": Param(f"{prefix}self_attn.qkv_proj.weight", slice=(0, 0, q)),
        f"{prefix}self_attn.k.weight": Param(f"{prefix}self_attn.qkv_proj.weight", slice=(0, q, q + kv)),
        f"{prefix}self_attn.v.weight": Param(f"{prefix}self_attn.qkv_proj.weight", slice=(0, q + kv, q + 2 * kv)),
        f"{prefix}self_attn.o.weight": f"{prefix}self_attn.o_proj.weight",
    }


def _mlp_map(canon, mine, config):
    F_ = config.d_ff
    return {
        f"{canon}gate.weight": Param(f"{mine}gate_up_proj.weight", slice=(0, 0, F_)),
        f"{canon}up.weight": Param(f"{mine}gate_up_proj.weight", slice=(0, F_, 2 * F_)),
        f"{canon}down.weight": f"{mine}down_proj.weight",
    }


def _layer_map(canon, mine, config):
    m = {}
    for k, v in _attn_map(mine, config).items():
        m[canon + k[len(mine):]] = v
    m |= _mlp_map(f"{canon}ffn.", f"{mine}mlp.", config)
    m[f"{canon}norm1.weight"] = f"{mine}input_layernorm.weight"
    m[f"{canon}norm2.weight"] = f"{mine}post_attention_layernorm.weight"
    return m


def _attn_only_map(config):
    return {k.replace("self_attn.", "", 1): v.__class__(v.name.replace("self_attn.", "", 1), slice=v.slice) if isinstance(v, Param) else v.replace("self_attn.", "", 1) for k, v in _attn_map("", config).items()}


def _lm_map(config):
    m = {"embedding.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight", "lm_head.weight": "lm_head.weight"}
    for i in range(config.n_layers):
        m |= _layer_map(f"layers.{i}.", f"model.layers.{i}.", config)
    return m


CONVENTIONS = Conventions(norm_placement="pre", norm_kind="rms_norm", eps=1e-6, positions="rope", rope_layout="half_split", ffn_kind="gated", gate_activation="silu", embedding_scale="none", fully_masked_rows="uniform")
NO_BIAS = {"attention_bias": False, "ffn_bias": False}
SPACE = ConfigSpace(split_heads=True, max_len=MAX_LEN, biases={"attention": False, "ffn": False})

adapter = TorchModuleAdapter("sglang-llama", [
    TorchEntry("gated_ffn", make=_make_mlp, forward=lambda m, x: m(x), param_map=lambda c: _mlp_map("", "", c), conventions=CONVENTIONS, config={"ffn_bias": False}, supports=ConfigSpace(biases={"ffn": False})),
    TorchEntry("causal_self_attention", make=_make_attention, forward=_forward, step=_step, param_map=_attn_only_map, conventions=CONVENTIONS, config=NO_BIAS, supports=SPACE),
    TorchEntry("decoder_block", make=_make_layer, forward=_forward, step=_step, param_map=lambda c: _layer_map("", "", c), conventions=CONVENTIONS, config=NO_BIAS, supports=SPACE),
    TorchEntry("causal_lm", make=_make_lm, forward=_lm_forward, step=_lm_step, param_map=_lm_map, conventions=CONVENTIONS, grad_dtypes=(), config={**NO_BIAS, "tie_weights": False}, supports=ConfigSpace(split_heads=True, max_len=MAX_LEN, biases={"attention": False, "ffn": False}, tied=False)),
])
