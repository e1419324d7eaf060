# fmt: off
# ruff: noqa
"""MPT as MosaicML's llm-foundry writes it (llmfoundry/models/mpt/modeling_mpt.py,
llmfoundry/models/layers/{attention,blocks,ffn,norm,custom_embedding}.py), with RoPE enabled
(rope_impl='hf': transformers' LlamaRotaryEmbedding), attn_impl='torch', one fused Wqkv,
no_bias=True, grouped-query attention, and the torch path's own KV cache (keys stored
[b, h, d, s], values [b, h, s, d]). einops is not installed here: each rearrange is written
out with view/permute, the pattern kept in a comment."""
import math
import warnings
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

attn_config_defaults: Dict = {
    'attn_type': 'grouped_query_attention',
    'attn_pdrop': 0.0,
    'attn_impl': 'torch',
    'qk_ln': False,
    'qk_gn': False,
    'clip_qkv': None,
    'softmax_scale': None,
    'attn_uses_sequence_id': False,
    'sliding_window_size': -1,
    'alibi': False,
    'alibi_bias_max': 8,
    'rope': False,
    'rope_theta': 10000,
    'rope_impl': 'dail',
    'rope_hf_config': {'type': 'no_scaling', 'factor': 1.0},
    'kv_n_heads': 1,
}
ffn_config_defaults: Dict = {'ffn_type': 'mptmlp'}


class MPTConfig:
    model_type = 'mpt'

    def __init__(self, d_model: int = 2048, n_heads: int = 16, n_layers: int = 24, expansion_ratio: float = 4, max_seq_len: int = 2048, vocab_size: int = 50368, resid_pdrop: float = 0.0, emb_pdrop: float = 0.0, learned_pos_emb: bool = True, attn_config: Optional[Dict] = None, ffn_config: Optional[Dict] = None, init_device: str = 'cpu', logit_scale: Optional[float] = None, no_bias: bool = False, embedding_fraction: float = 1.0, norm_type: str = 'low_precision_layernorm', norm_eps: float = 1e-05, use_cache: bool = False, tie_word_embeddings: bool = True, **kwargs: Any):
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_layers = n_layers
        self.expansion_ratio = expansion_ratio
        self.max_seq_len = max_seq_len
        self.vocab_size = vocab_size
        self.resid_pdrop = resid_pdrop
        self.emb_pdrop = emb_pdrop
        self.learned_pos_emb = learned_pos_emb
        self.attn_config = {**attn_config_defaults, **(attn_config or {})}
        self.ffn_config = {**ffn_config_defaults, **(ffn_config or {})}
        self.init_device = init_device
        self.logit_scale = logit_scale
        self.no_bias = no_bias
        self.embedding_fraction = embedding_fraction
        self.norm_type = norm_type
        self.norm_eps = norm_eps
        self.use_cache = use_cache
        self.tie_word_embeddings = tie_word_embeddings
        self._validate_config()

    def _validate_config(self) -> None:
        if self.d_model % self.n_heads != 0:
            raise ValueError('d_model must be divisible by n_heads')
        if any(prob < 0 or prob > 1 for prob in [self.attn_config['attn_pdrop'], self.resid_pdrop, self.emb_pdrop]):
            raise ValueError("self.attn_config['attn_pdrop'], resid_pdrop, emb_pdrop are probabilities and must be between 0 and 1")
        if self.attn_config['attn_impl'] not in ['torch', 'flash']:
            raise ValueError(f"Unknown attn_impl={self.attn_config['attn_impl']}")
        if self.attn_config['alibi'] and self.attn_config['rope']:
            raise ValueError('Only one of alibi or rope can be set to True')
        if self.attn_config['rope'] and self.attn_config['rope_impl'] not in ['dail', 'hf']:
            raise ValueError('If rope is being used, rope_impl should be either "dail", or "hf".')
        if self.attn_config['attn_type'] == 'multihead_attention':
            self.attn_config['kv_n_heads'] = self.n_heads
        if self.embedding_fraction > 1 or self.embedding_fraction <= 0:
            raise ValueError('model.embedding_fraction must be between 0 (exclusive) and 1 (inclusive)!')

    def to_dict(self) -> Dict[str, Any]:
        return dict(self.__dict__)


# ---- llmfoundry/models/layers/norm.py

def _cast_if_autocast_enabled(tensor: torch.Tensor) -> torch.Tensor:
    if torch.is_autocast_enabled():
        if tensor.device.type == 'cuda':
            dtype = torch.get_autocast_gpu_dtype()
        elif tensor.device.type == 'cpu':
            dtype = torch.get_autocast_cpu_dtype()
        else:
            raise NotImplementedError()
        return tensor.to(dtype=dtype)
    return tensor


class LPLayerNorm(torch.nn.LayerNorm):

    def __init__(self, normalized_shape, eps: float = 1e-05, elementwise_affine: bool = True, device=None, dtype=None, bias: bool = True):
        super().__init__(normalized_shape=normalized_shape, eps=eps, elementwise_affine=elementwise_affine, device=device, dtype=dtype, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        module_device = x.device
        downcast_x = _cast_if_autocast_enabled(x)
        downcast_weight = _cast_if_autocast_enabled(self.weight) if self.weight is not None else self.weight
        downcast_bias = _cast_if_autocast_enabled(self.bias) if self.bias is not None else self.bias
        with torch.autocast(enabled=False, device_type=module_device.type):
            return torch.nn.functional.layer_norm(downcast_x, self.normalized_shape, downcast_weight, downcast_bias, self.eps)


NORM_CLASS_REGISTRY = {'layernorm': torch.nn.LayerNorm, 'low_precision_layernorm': LPLayerNorm}


# ---- llmfoundry/models/layers/custom_embedding.py

class SharedEmbedding(nn.Embedding):

    def forward(self, input: torch.Tensor, unembed: bool = False) -> torch.Tensor:
        if unembed:
            return F.linear(input, self.weight)
        return super().forward(input)


# ---- transformers' LlamaRotaryEmbedding / apply_rotary_pos_emb (4.38), as rope_impl='hf' uses them

class LlamaRotaryEmbedding(nn.Module):

    def __init__(self, dim, max_position_embeddings=2048, base=10000, device=None, scaling_factor=1.0):
        super().__init__()
        self.scaling_factor = scaling_factor
        self.dim = dim
        self.max_position_embeddings = max_position_embeddings
        self.base = base
        inv_freq = 1.0 / (self.base ** (torch.arange(0, self.dim, 2, dtype=torch.int64).double().to(device) / self.dim))
        self.register_buffer('inv_freq', inv_freq, persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids):
        # x: [bs, num_attention_heads, seq_len, head_size]
        inv_freq_expanded = self.inv_freq[None, :, None].double().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].double()
        device_type = x.device.type
        device_type = device_type if isinstance(device_type, str) and device_type != 'mps' else 'cpu'
        with torch.autocast(device_type=device_type, enabled=False):
            freqs = (inv_freq_expanded.double() @ position_ids_expanded.double()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos = emb.cos()
            sin = emb.sin()
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x):
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def gen_rotary_embedding(rope_head_dim: int, rope_impl: str, rope_theta: int, rope_dail_config: dict, rope_hf_config: dict, max_seq_len: int):
    if rope_impl == 'hf':
        if rope_hf_config['type'] == 'no_scaling':
            return LlamaRotaryEmbedding(rope_head_dim, max_position_embeddings=max_seq_len, base=rope_theta, device='cpu')
        raise ValueError('rope_hf_config.type must be no_scaling here')
    raise ValueError('rope_impl dail needs flash-attn')


# ---- llmfoundry/models/layers/attention.py

def repeat_kv_for_gqa(hidden: torch.Tensor, n_rep: int) -> torch.Tensor:
    """Perform repeat of kv heads along a particular dimension.

    hidden.shape expected to be: (batch size, seq len, kv_n_heads, head_dim)
    n_rep: amount of repetitions of kv_n_heads
    Unlike torch.repeat_interleave, this function avoids allocating new memory.
    """
    if n_rep == 1:
        return hidden
    (b, s, kv_n_heads, d) = hidden.shape
    hidden = hidden[:, :, :, None, :].expand(b, s, kv_n_heads, n_rep, d)
    return hidden.reshape(b, s, kv_n_heads * n_rep, d)


def scaled_multihead_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    n_heads: int,
    kv_n_heads: int,
    past_key_value: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
    softmax_scale: Optional[float] = None,
    attn_bias: Optional[torch.Tensor] = None,
    key_padding_mask: Optional[torch.Tensor] = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    training: bool = False,
    needs_weights: bool = False,
) -> Tuple[torch.Tensor, Optional[torch.Tensor], Optional[Tuple[torch.Tensor, torch.Tensor]]]:
    b, s_q_, _ = query.shape
    # q = rearrange(query, 'b s (h d) -> b h s d', h=n_heads)
    q = query.view(b, s_q_, n_heads, -1).permute(0, 2, 1, 3)
    # k = rearrange(key, 'b s (h d) -> b h d s', h=kv_n_heads)  # includes key.t()
    k = key.view(b, key.size(1), kv_n_heads, -1).permute(0, 2, 3, 1)
    # v = rearrange(value, 'b s (h d) -> b h s d', h=kv_n_heads)
    v = value.view(b, value.size(1), kv_n_heads, -1).permute(0, 2, 1, 3)

    if past_key_value is not None:
        # attn_impl: flash & triton use kernels which expect input shape [b, s, h, d_head].
        # kv_cache is therefore stored using that shape.
        # attn_impl: torch stores the kv_cache in the ordering which is most advantageous
        # for its attn computation ie
        # keys are stored as tensors with shape [b, h, d_head, s] and
        # values are stored as tensors with shape [b, h, s, d_head]
        if len(past_key_value) != 0:
            k = torch.cat([past_key_value[0], k], dim=3)
            v = torch.cat([past_key_value[1], v], dim=2)

        past_key_value = (k, v)

    b, _, s_q, d = q.shape
    s_k = k.size(-1)

    # grouped query case
    if kv_n_heads > 1 and kv_n_heads < n_heads:
        # necessary to do a transpose to swap (b h s d) -> (b s h d) for repeat_kv_for_gqa function
        k = repeat_kv_for_gqa(k.transpose(1, 2), n_heads // kv_n_heads).transpose(1, 2)
        v = repeat_kv_for_gqa(v.transpose(1, 2), n_heads // kv_n_heads).transpose(1, 2)

    if softmax_scale is None:
        softmax_scale = 1 / math.sqrt(d)

    attn_weight = q.matmul(k) * softmax_scale

    if attn_bias is not None:
        # clamp to 0 necessary for torch 2.0 compile()
        _s_q = max(0, attn_bias.size(2) - s_q)
        _s_k = max(0, attn_bias.size(3) - s_k)
        attn_bias = attn_bias[:, :, _s_q:, _s_k:]

        if (attn_bias.size(-1) != 1 and attn_bias.size(-1) != s_k) or (attn_bias.size(-2) != 1 and attn_bias.size(-2) != s_q):
            raise RuntimeError(f'attn_bias (shape: {attn_bias.shape}) is expected to broadcast to shape: {attn_weight.shape}.')
        attn_weight = attn_weight + attn_bias

    min_val = torch.finfo(q.dtype).min

    if key_padding_mask is not None:
        if attn_bias is not None:
            warnings.warn('Propagating key_padding_mask to the attention module ' + 'and applying it within the attention module can cause ' + 'unnecessary computation/memory usage. Consider integrating ' + 'into attn_bias once and passing that to each attention ' + 'module instead.')
        attn_weight = attn_weight.masked_fill(~key_padding_mask.view((b, 1, 1, s_k)), min_val)

    if is_causal and (not s_q == 1):
        s = max(s_q, s_k)
        causal_mask = attn_weight.new_ones(s, s, dtype=torch.float32)
        causal_mask = causal_mask.tril()
        causal_mask = causal_mask.to(torch.bool)
        causal_mask = ~causal_mask
        causal_mask = causal_mask[-s_q:, -s_k:]
        attn_weight = attn_weight.masked_fill(causal_mask.view(1, 1, s_q, s_k), min_val)

    attn_weight = torch.softmax(attn_weight, dim=-1)

    if dropout_p:
        attn_weight = torch.nn.functional.dropout(attn_weight, p=dropout_p, training=training, inplace=True)

    out = attn_weight.to(v.dtype).matmul(v)
    # out = rearrange(out, 'b h s d -> b s (h d)')
    out = out.permute(0, 2, 1, 3).reshape(b, s_q, -1)

    if needs_weights:
        return out, attn_weight, past_key_value
    return out, None, past_key_value


class GroupedQueryAttention(nn.Module):
    """Grouped Query Attention (GQA) is a generalization of Multi-head (MHA).

    and Multi-query attention (MQA).

    This allows the user to set a variable of number of kv_n_heads, rather than
    just n_heads or 1, as in MHA and MQA. Using torch attention
    implementation enables user to also use additive bias.
    """

    def __init__(self, d_model: int, n_heads: int, kv_n_heads: int, attn_impl: str = 'torch', clip_qkv: Optional[float] = None, qk_ln: bool = False, qk_gn: bool = False, fused_qkv: bool = True, softmax_scale: Optional[float] = None, attn_pdrop: float = 0.0, norm_type: str = 'low_precision_layernorm', norm_eps: float = 1e-05, device: Optional[str] = None, bias: bool = True, sliding_window_size: int = -1):
        super().__init__()

        self.attn_impl = attn_impl
        self.clip_qkv = clip_qkv
        self.qk_ln = qk_ln
        self.qk_gn = qk_gn
        self.fused_qkv = fused_qkv

        self.d_model = d_model
        self.n_heads = n_heads
        self.kv_n_heads = kv_n_heads
        self.sliding_window_size = sliding_window_size

        self.head_dim = d_model // n_heads

        if self.kv_n_heads <= 0:
            raise ValueError('kv_n_heads should be greater than zero.')

        if self.kv_n_heads > self.n_heads:
            raise ValueError('The number of KV heads should be less than or equal to Q heads.')

        if self.n_heads % self.kv_n_heads != 0:
            raise ValueError('Each Q head should get the same number of KV heads, so n_heads must be divisible by kv_n_heads.')
        if qk_ln and qk_gn:
            raise ValueError('Only one of qk_ln and qk_gn can be set to True.')

        self.softmax_scale = softmax_scale
        if self.softmax_scale is None:
            self.softmax_scale = 1 / math.sqrt(self.d_model / self.n_heads)
        self.attn_dropout_p = attn_pdrop

        if self.fused_qkv:
            self.Wqkv = nn.Linear(self.d_model, self.d_model + 2 * self.kv_n_heads * self.head_dim, device=device, bias=bias)
            # for param init fn; enables shape based init of fused layers
            fuse_splits = [i * self.head_dim for i in range(1, self.n_heads + 2 * self.kv_n_heads)]
            self.Wqkv._fused = (0, fuse_splits)
        else:
            raise NotImplementedError('only the fused Wqkv is written out here')

        self.attn_fn = scaled_multihead_dot_product_attention

        self.out_proj = nn.Linear(self.d_model, self.d_model, device=device, bias=bias)
        self.out_proj._is_residual = True

    def forward(self, x: torch.Tensor, past_key_value: Optional[Tuple[torch.Tensor, torch.Tensor]] = None, attn_bias: Optional[torch.Tensor] = None, attention_mask: Optional[torch.Tensor] = None, rotary_emb_w_meta_info: Optional[dict] = None, is_causal: bool = True, needs_weights: bool = False):
        query, key, value = self.get_qkv(x)

        if rotary_emb_w_meta_info is not None:
            query, key, value = self._apply_rotary_embeddings(rotary_emb_w_meta_info, query, key, value)

        extra_attn_kwargs = self.get_implementation_specific_args(attention_mask)

        context, attn_weights, past_key_value = self.attn_fn(
            query,
            key,
            value,
            n_heads=self.n_heads,
            kv_n_heads=self.kv_n_heads,
            past_key_value=past_key_value,
            softmax_scale=self.softmax_scale,
            attn_bias=attn_bias,
            is_causal=is_causal,
            dropout_p=self.attn_dropout_p,
            training=self.training,
            needs_weights=needs_weights,
            **extra_attn_kwargs,
        )

        return self.out_proj(context), attn_weights, past_key_value

    def get_qkv(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        qkv = self.Wqkv(x)

        if self.clip_qkv:
            qkv = qkv.clamp(min=-self.clip_qkv, max=self.clip_qkv)

        query, key, value = qkv.split(
            [
                self.d_model,
                self.kv_n_heads * self.head_dim,
                self.kv_n_heads * self.head_dim,
            ],
            dim=2,
        )
        return query, key, value

    def _apply_rotary_embeddings(self, rotary_emb_w_meta_info: Dict[str, Any], query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        rotary_emb = rotary_emb_w_meta_info['rotary_emb']
        seq_len = rotary_emb_w_meta_info['seq_len']
        offset_info = rotary_emb_w_meta_info['offset_info']
        bsz, seqlen = query.shape[:2]
        query = query.view(bsz, seqlen, -1, self.head_dim)
        key = key.view(bsz, seqlen, -1, self.head_dim)

        if rotary_emb_w_meta_info['impl'] == 'hf':
            (cos, sin) = rotary_emb(x=value, position_ids=offset_info)
            query, key = apply_rotary_pos_emb(q=query, k=key, cos=cos, sin=sin, position_ids=None, unsqueeze_dim=2)
        else:
            raise ValueError('rope_impl dail needs flash-attn')

        query = query.view(bsz, seqlen, -1)
        key = key.view(bsz, seqlen, -1)
        return query, key, value

    def get_implementation_specific_args(self, attention_mask: Optional[torch.Tensor] = None) -> dict:
        if self.attn_impl == 'flash':
            raise NotImplementedError('flash-attn is not installed')
        return {'key_padding_mask': attention_mask}


# ---- llmfoundry/models/layers/ffn.py

def resolve_ffn_hidden_size(d_model: int, expansion_ratio: float, ffn_hidden_size: Optional[int] = None) -> int:
    if ffn_hidden_size is not None:
        return ffn_hidden_size
    return int(d_model * expansion_ratio)


class MPTMLP(nn.Module):

    def __init__(self, d_model: int, expansion_ratio: float, fc_type: Optional[dict] = None, ffn_hidden_size: Optional[int] = None, act_fn=None, device: Optional[str] = None, bias: bool = True):
        super().__init__()
        ffn_hidden_size = resolve_ffn_hidden_size(d_model, expansion_ratio, ffn_hidden_size)
        self.fc_kwargs: dict[str, Any] = {'bias': bias}
        self.fc_kwargs['device'] = device
        self.up_proj = nn.Linear(d_model, ffn_hidden_size, **self.fc_kwargs)
        self.act = act_fn if act_fn is not None else nn.GELU(approximate='none')
        self.down_proj = nn.Linear(ffn_hidden_size, d_model, **self.fc_kwargs)
        self.down_proj._is_residual = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.up_proj(x)))


def build_ffn(d_model: int, expansion_ratio: float, device: Optional[str], bias: bool, ffn_kwargs: dict) -> nn.Module:
    ffn_type = ffn_kwargs.pop('ffn_type')
    if ffn_type == 'mptmlp':
        return MPTMLP(d_model=d_model, expansion_ratio=expansion_ratio, device=device, bias=bias, **ffn_kwargs)
    raise ValueError(f'{ffn_type=} not recognized.')


# ---- llmfoundry/models/layers/blocks.py

class MPTBlock(nn.Module):

    def __init__(self, d_model: int, n_heads: int, expansion_ratio: float, attn_config: Optional[Dict] = None, ffn_config: Optional[Dict] = None, resid_pdrop: float = 0.0, norm_type: str = 'low_precision_layernorm', norm_eps: float = 1e-05, device: Optional[str] = None, no_bias: bool = False, use_pad_tok_in_ffn: bool = True, **kwargs: Any):
        if attn_config is None:
            attn_config = attn_config_defaults
        if ffn_config is None:
            ffn_config = ffn_config_defaults
        super().__init__()

        norm_class = NORM_CLASS_REGISTRY[norm_type.lower()]
        args_to_exclude_in_attn_class = {'attn_type', 'alibi', 'attn_uses_sequence_id', 'alibi_bias_max', 'rope', 'rope_theta', 'rope_impl', 'rope_dail_config', 'rope_hf_config'}

        self.norm_1 = norm_class(d_model, eps=norm_eps, device=device, bias=not no_bias)
        self.attn = GroupedQueryAttention(
            d_model=d_model,
            n_heads=n_heads,
            norm_type=norm_type,
            norm_eps=norm_eps,
            device=device,
            bias=not no_bias,
            **{k: v for k, v in attn_config.items() if k not in args_to_exclude_in_attn_class},
        )
        self.norm_2 = None
        if not getattr(MPTMLP, '_has_norm', False):
            self.norm_2 = norm_class(d_model, eps=norm_eps, device=device, bias=not no_bias)
        self.ffn = build_ffn(d_model=d_model, expansion_ratio=expansion_ratio, device=device, bias=not no_bias, ffn_kwargs=dict(ffn_config))
        self.resid_attn_dropout = nn.Dropout(resid_pdrop)
        self.resid_ffn_dropout = nn.Dropout(resid_pdrop)
        self.use_pad_tok_in_ffn = use_pad_tok_in_ffn

    def forward(self, x: torch.Tensor, past_key_value: Optional[Tuple[torch.Tensor, torch.Tensor]] = None, attn_bias: Optional[torch.Tensor] = None, rotary_emb_w_meta_info: Optional[Dict] = None, attention_mask: Optional[torch.Tensor] = None, is_causal: bool = True, output_attentions: bool = False):
        a = self.norm_1(x)
        b, attn_weights, past_key_value = self.attn(
            a,
            past_key_value=past_key_value,
            attn_bias=attn_bias,
            rotary_emb_w_meta_info=rotary_emb_w_meta_info,
            attention_mask=attention_mask,
            is_causal=is_causal,
            needs_weights=output_attentions,
        )
        x = x + self.resid_attn_dropout(b)
        m = x
        if self.norm_2 is not None:
            m = self.norm_2(x)

        n = self.apply_ffn(attention_mask, m)
        x = x + self.resid_ffn_dropout(n)
        return x, attn_weights, past_key_value

    def apply_ffn(self, attention_mask: Optional[torch.Tensor], m: torch.Tensor) -> torch.Tensor:
        # use_pad_tok_in_ffn=True: the padding tokens go through the FFN too (no unpad_input)
        return self.ffn(m)


# ---- llmfoundry/models/mpt/modeling_mpt.py

def attn_bias_from_attention_mask(attn_bias: Optional[torch.Tensor], attention_mask: Optional[torch.Tensor], device, dtype) -> Tuple[Optional[torch.Tensor], None]:
    # If using torch, we incorporate attention_mask. This will output
    # None in place of attention_mask since it will not be further needed in the
    # attention modules.
    if attention_mask is not None:
        s_k = attention_mask.shape[-1]
        if attn_bias is None:
            attn_bias = torch.zeros((1, 1, 1, s_k), device=device, dtype=dtype)
        else:
            _s_k = max(0, attn_bias.size(-1) - s_k)
            attn_bias = attn_bias[:, :, :, _s_k:]
        min_val = torch.finfo(attn_bias.dtype).min
        attn_bias = attn_bias.masked_fill(~attention_mask.view(-1, 1, 1, s_k), min_val)
    return attn_bias, None


def rotary_meta_info(rotary_embedding: nn.Module, rope_impl: str, S: int, past_position: int, position_ids: Optional[torch.Tensor], attention_mask: Optional[torch.Tensor], device) -> Dict[str, Any]:
    if position_ids is None:
        pos = torch.arange(past_position, S + past_position, dtype=torch.long, device=device).unsqueeze(0)
        if attention_mask is not None:
            # adjust the position indices to account for padding tokens
            pos = torch.clamp(pos - torch.cumsum((~attention_mask).to(torch.int32), dim=1)[:, past_position:], min=0)
    else:
        pos = position_ids
    return {'impl': rope_impl, 'rotary_emb': rotary_embedding, 'offset_info': pos, 'seq_len': S + past_position}


class MPTModel(nn.Module):

    def __init__(self, config: MPTConfig):
        super().__init__()
        self.config = config
        self.attn_impl = config.attn_config['attn_impl']
        self.alibi = config.attn_config['alibi']
        self.learned_pos_emb = config.learned_pos_emb
        self.rope = config.attn_config['rope']
        self.rope_impl = None
        self.is_causal = True
        self.embedding_fraction = config.embedding_fraction

        self.wte = SharedEmbedding(config.vocab_size, config.d_model, device=config.init_device)
        if self.learned_pos_emb:
            self.wpe = torch.nn.Embedding(config.max_seq_len, config.d_model, device=config.init_device)
        self.emb_drop = nn.Dropout(config.emb_pdrop)
        self.blocks = nn.ModuleList([MPTBlock(device=config.init_device, **config.to_dict()) for _ in range(config.n_layers)])
        norm_class = NORM_CLASS_REGISTRY[config.norm_type.lower()]
        self.norm_f = norm_class(config.d_model, eps=config.norm_eps, device=config.init_device, bias=not config.no_bias)

        if self.rope:
            self.rope_impl = config.attn_config['rope_impl']
            self.rotary_embedding = gen_rotary_embedding(
                rope_head_dim=config.d_model // config.n_heads,
                rope_impl=self.rope_impl,
                rope_theta=config.attn_config['rope_theta'],
                rope_dail_config={},
                rope_hf_config=config.attn_config['rope_hf_config'],
                max_seq_len=self.config.max_seq_len,
            )

    def forward(self, input_ids: Optional[torch.LongTensor] = None, past_key_values: Optional[List[Tuple[torch.FloatTensor]]] = None, attention_mask: Optional[torch.ByteTensor] = None, use_cache: Optional[bool] = None, position_ids: Optional[torch.LongTensor] = None):
        use_cache = use_cache if use_cache is not None else self.config.use_cache

        if attention_mask is not None:
            attention_mask = attention_mask.bool()

        S = input_ids.size(1)
        if S > self.config.max_seq_len:
            raise ValueError(f'Cannot forward input with seq_len={S}, this model only supports seq_len<={self.config.max_seq_len}')

        tok_emb = self.wte(input_ids)
        x = tok_emb

        rotary_emb_w_meta_info = None

        past_position = 0
        if past_key_values is not None:
            if len(past_key_values) != self.config.n_layers:
                raise ValueError(f'past_key_values must provide a past_key_value for each attention ' + f'layer in the network ({len(past_key_values)=}; {self.config.n_layers=}).')
            # For attn_impl: flash, the past key tensor spec is (batch, seq, dim).
            # For attn_impl: torch, the past key tensor spec is (batch, heads, head_dim, seq).
            # Here we shift position embedding using the `seq` dim of the past key
            past_position = past_key_values[0][0].size(1) if len(past_key_values[0]) else 0
            if self.attn_impl == 'torch' and len(past_key_values[0]):
                past_position = past_key_values[0][0].size(3)

        if self.learned_pos_emb or self.rope:
            if S + past_position > self.config.max_seq_len:
                raise ValueError(f'Cannot forward input with past sequence length {past_position} and current sequence length ' + f'{S + 1}, this model only supports total sequence length <= {self.config.max_seq_len}.')
            if position_ids is not None and int(position_ids.max()) >= self.config.max_seq_len:
                raise ValueError(f'position_ids reach {int(position_ids.max())}, this model only supports positions < {self.config.max_seq_len}')

            if self.rope and self.rope_impl == 'hf':
                rotary_emb_w_meta_info = rotary_meta_info(self.rotary_embedding, self.rope_impl, S, past_position, position_ids, attention_mask, input_ids.device)

        if self.embedding_fraction == 1:
            x = self.emb_drop(x)
        else:
            # this implementation is proposed on page 7 of the GLM-130B paper https://arxiv.org/abs/2210.02414
            x_shrunk = (x * self.embedding_fraction) + (x.detach() * (1 - self.embedding_fraction))
            assert isinstance(self.emb_drop, nn.Module)  # pyright
            x = self.emb_drop(x_shrunk)

        attn_bias, attention_mask = attn_bias_from_attention_mask(None, attention_mask, x.device, torch.float32)

        presents = () if use_cache else None
        if use_cache and past_key_values is None:
            past_key_values = [() for _ in range(self.config.n_layers)]  # type: ignore

        for b_idx, block in enumerate(self.blocks):
            past_key_value = past_key_values[b_idx] if past_key_values is not None else None
            x, attn_weights, present = block(
                x,
                past_key_value=past_key_value,
                attn_bias=attn_bias,
                rotary_emb_w_meta_info=rotary_emb_w_meta_info,
                attention_mask=attention_mask,
                is_causal=self.is_causal,
            )
            if presents is not None:
                presents += (present,)

        x = self.norm_f(x)
        return x, presents


class MPTForCausalLM(nn.Module):

    def __init__(self, config: MPTConfig):
        super().__init__()
        self.transformer = MPTModel(config)
        self.lm_head = None
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False, device=config.init_device)
            self.lm_head._fsdp_wrap = True

        self.logit_scale = None
        if config.logit_scale is not None:
            logit_scale = config.logit_scale
            if isinstance(logit_scale, str):
                if logit_scale == 'inv_sqrt_d_model':
                    logit_scale = 1 / math.sqrt(config.d_model)
                else:
                    raise ValueError(f"{logit_scale=} is not recognized as an option; use numeric value or 'inv_sqrt_d_model'.")
            self.logit_scale = logit_scale

    def forward(self, input_ids: Optional[torch.LongTensor] = None, past_key_values: Optional[List[Tuple[torch.FloatTensor]]] = None, attention_mask: Optional[torch.ByteTensor] = None, use_cache: Optional[bool] = None, position_ids: Optional[torch.LongTensor] = None):
        hidden, presents = self.transformer(input_ids=input_ids, past_key_values=past_key_values, attention_mask=attention_mask, use_cache=use_cache, position_ids=position_ids)

        if self.lm_head is not None:
            logits = self.lm_head(hidden)
        else:
            # move outputs to same device as weights for token embedding
            # needed to support HF `device_map`
            out = hidden
            out = out.to(self.transformer.wte.weight.device)
            logits = self.transformer.wte(out, True)

        if self.logit_scale is not None:
            if self.logit_scale == 0:
                warnings.warn(f'Multiplying logits by {self.logit_scale=}. This will produce uniform (uninformative) outputs.')
            logits *= self.logit_scale

        return logits, presents


# ---- the adapter (glue, not MPT): canonical names, the subjects' calls

from tck.adapters import Param, TorchEntry, TorchModuleAdapter
from tck.adapters.config_space import ConfigSpace
from tck.reference import Conventions


def mpt_config(config) -> MPTConfig:
    return MPTConfig(
        d_model=config.d_model,
        n_heads=config.n_heads,
        n_layers=config.n_layers,
        expansion_ratio=config.d_ff / config.d_model,
        max_seq_len=config.max_len,
        vocab_size=config.vocab_size,
        resid_pdrop=0.1,
        emb_pdrop=0.1,
        learned_pos_emb=False,
        attn_config={
            'attn_type': 'grouped_query_attention',
            'attn_impl': 'torch',
            'attn_pdrop': 0.1,
            'rope': True,
            'rope_impl': 'hf',
            'rope_theta': 10000,
            'kv_n_heads': config.n_kv_heads or config.n_heads,
        },
        ffn_config={'ffn_type': 'mptmlp'},
        no_bias=True,
        norm_type='low_precision_layernorm',
        norm_eps=1e-05,
        use_cache=False,
        tie_word_embeddings=True,
    )


def _attn_map(config, prefix: str = '') -> dict:
    d = config.d_model
    kv = (config.n_kv_heads or config.n_heads) * (config.d_model // config.n_heads)
    return {
        'self_attn.q.weight': Param(f'{prefix}Wqkv.weight', slice=(0, 0, d)),
        'self_attn.k.weight': Param(f'{prefix}Wqkv.weight', slice=(0, d, d + kv)),
        'self_attn.v.weight': Param(f'{prefix}Wqkv.weight', slice=(0, d + kv, d + 2 * kv)),
        'self_attn.o.weight': f'{prefix}out_proj.weight',
    }


def _block_map(config, prefix: str = '') -> dict:
    return {
        **_attn_map(config, f'{prefix}attn.'),
        'norm1.weight': f'{prefix}norm_1.weight',
        'ffn.fc1.weight': f'{prefix}ffn.up_proj.weight',
        'ffn.fc2.weight': f'{prefix}ffn.down_proj.weight',
        'norm2.weight': f'{prefix}norm_2.weight',
    }


def _lm_map(config) -> dict:
    out = {'embedding.weight': 'transformer.wte.weight', 'norm.weight': 'transformer.norm_f.weight'}
    for i in range(config.n_layers):
        out |= {f'layers.{i}.{k}': v for k, v in _block_map(config, f'transformer.blocks.{i}.').items()}
    return out


class _Subject(nn.Module):
    """An attention or a block built alone, with the rotary table MPTModel would hand it."""

    def __init__(self, inner: nn.Module, config):
        super().__init__()
        self.inner = inner
        self.max_seq_len = config.max_len
        self.rotary_embedding = gen_rotary_embedding(config.d_model // config.n_heads, 'hf', 10000, {}, {'type': 'no_scaling', 'factor': 1.0}, config.max_len)


def _inner_call(sub: _Subject, x, cache, key_padding, positions):
    S = x.size(1)
    past_position = cache[0].size(3) if cache else 0
    mask = None if key_padding is None else torch.as_tensor(key_padding).bool()
    pos = None if positions is None else torch.as_tensor(positions).long()
    if S + past_position > sub.max_seq_len or (pos is not None and int(pos.max()) >= sub.max_seq_len):
        raise ValueError(f'Cannot forward input with seq_len={S + past_position}, this model only supports seq_len<={sub.max_seq_len}')
    meta = rotary_meta_info(sub.rotary_embedding, 'hf', S, past_position, pos, mask, x.device)
    attn_bias, attention_mask = attn_bias_from_attention_mask(None, mask, x.device, torch.float32)
    out = sub.inner(x, past_key_value=cache if cache is not None else (), attn_bias=attn_bias, rotary_emb_w_meta_info=meta, attention_mask=attention_mask, is_causal=True)
    if isinstance(sub.inner, GroupedQueryAttention):
        return out[0], out[2]
    return out[0], out[2]


def _sub_forward(sub, x, key_padding=None, positions=None):
    return _inner_call(sub, x, None, key_padding, positions)[0]


def _sub_step(sub, cache, x, key_padding=None, positions=None):
    return _inner_call(sub, x, cache, key_padding, positions)


def _lm_forward(model, ids, key_padding=None, positions=None):
    return model(ids, attention_mask=key_padding, position_ids=positions, use_cache=False)[0]


def _lm_step(model, cache, ids, key_padding=None, positions=None):
    logits, presents = model(ids, past_key_values=cache, attention_mask=key_padding, position_ids=positions, use_cache=True)
    return logits, list(presents)


MPT = Conventions(norm_placement='pre', activation='gelu', eps=1e-5, positions='rope', rope_layout='half_split', embedding_scale='none', fully_masked_rows='uniform')
NO_BIAS = {'attention': False, 'ffn': False, 'norm': False}

adapter = TorchModuleAdapter('mpt-decoder', [
    TorchEntry('layer_norm', make=lambda c: LPLayerNorm(c.d_model, eps=1e-05, bias=False), forward=lambda m, x: m(x),
               param_map={'weight': 'weight'}, conventions=MPT, config={'norm_bias': False}),
    TorchEntry('ffn', make=lambda c: MPTMLP(c.d_model, c.d_ff / c.d_model, bias=False), forward=lambda m, x: m(x),
               param_map={'fc1.weight': 'up_proj.weight', 'fc2.weight': 'down_proj.weight'}, conventions=MPT,
               config={'ffn_bias': False}, supports=ConfigSpace(biases={'ffn': False})),
    TorchEntry('causal_self_attention',
               make=lambda c: _Subject(GroupedQueryAttention(c.d_model, c.n_heads, c.n_kv_heads or c.n_heads, attn_impl='torch', attn_pdrop=0.1, bias=False), c),
               forward=_sub_forward, step=_sub_step,
               param_map=lambda c: {k.removeprefix('self_attn.'): v for k, v in _attn_map(c, 'inner.').items()},
               conventions=MPT, config={'attention_bias': False},
               supports=ConfigSpace(split_heads=True, max_len=512, biases={'attention': False})),
    TorchEntry('decoder_block',
               make=lambda c: _Subject(MPTBlock(**mpt_config(c).to_dict()), c),
               forward=_sub_forward, step=_sub_step,
               param_map=lambda c: _block_map(c, 'inner.'),
               conventions=MPT, config={'attention_bias': False, 'ffn_bias': False, 'norm_bias': False},
               supports=ConfigSpace(split_heads=True, max_len=512, biases=NO_BIAS)),
    TorchEntry('causal_lm', make=lambda c: MPTForCausalLM(mpt_config(c)), forward=_lm_forward, step=_lm_step,
               param_map=_lm_map, conventions=MPT, derives_positions='padding',
               config={'attention_bias': False, 'ffn_bias': False, 'norm_bias': False, 'tie_weights': True},
               supports=ConfigSpace(split_heads=True, max_len=512, biases=NO_BIAS, tied=True)),
])
