# fmt: off
# ruff: noqa
"""InternLM (the first InternLM-7B/20B) as its ``modeling_internlm.py`` (trust_remote_code,
transformers 4.3x era) writes it: ``InternLMRMSNorm``, a rotary table cached up to the longest
position seen, legacy tuple ``past_key_value``, ``_make_causal_mask`` + ``_expand_mask`` and
biases on all four attention projections; then the kit's adapter (the glue at the end of the
file). Blind set 31, written for this benchmark."""

import math
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

ACT2FN = {"silu": nn.SiLU(), "swish": nn.SiLU()}


class InternLMConfig:
    model_type = "internlm"

    def __init__(self, vocab_size=103168, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                 num_attention_heads=32, hidden_act="silu", max_position_embeddings=2048, initializer_range=0.02,
                 rms_norm_eps=1e-6, use_cache=True, pad_token_id=0, tie_word_embeddings=False, bias=True,
                 rotary={"base": 10000, "type": "dynamic"}):
        self.vocab_size = vocab_size
        self.max_position_embeddings = max_position_embeddings
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.rms_norm_eps = rms_norm_eps
        self.use_cache = use_cache
        self.pad_token_id = pad_token_id
        self.tie_word_embeddings = tie_word_embeddings
        self.bias = bias
        self.rotary = rotary


# Copied from transformers.models.bart.modeling_bart._make_causal_mask
def _make_causal_mask(input_ids_shape: torch.Size, dtype: torch.dtype, device: torch.device, past_key_values_length: int = 0):
    """
    Make causal mask used for bi-directional self-attention.
    """
    bsz, tgt_len = input_ids_shape
    mask = torch.full((tgt_len, tgt_len), torch.tensor(torch.finfo(dtype).min, device=device), device=device)
    mask_cond = torch.arange(mask.size(-1), device=device)
    mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
    mask = mask.to(dtype)

    if past_key_values_length > 0:
        mask = torch.cat([torch.zeros(tgt_len, past_key_values_length, dtype=dtype, device=device), mask], dim=-1)
    return mask[None, None, :, :].expand(bsz, 1, tgt_len, tgt_len + past_key_values_length)


# Copied from transformers.models.bart.modeling_bart._expand_mask
def _expand_mask(mask: torch.Tensor, dtype: torch.dtype, tgt_len: Optional[int] = None):
    """
    Expands attention_mask from `[bsz, seq_len]` to `[bsz, 1, tgt_seq_len, src_seq_len]`.
    """
    bsz, src_len = mask.size()
    tgt_len = tgt_len if tgt_len is not None else src_len

    expanded_mask = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)

    inverted_mask = 1.0 - expanded_mask

    return inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)


class InternLMRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        """
        InternLMRMSNorm is equivalent to T5LayerNorm
        """
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.to(torch.promote_types(hidden_states.dtype, torch.float32)).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)

        # convert into half-precision if necessary
        if self.weight.dtype in [torch.float16, torch.bfloat16]:
            hidden_states = hidden_states.to(self.weight.dtype)

        return self.weight * hidden_states


class InternLMRotaryEmbedding(torch.nn.Module):
    def __init__(self, dim, max_position_embeddings=2048, base=10000, device=None):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).double().to(device) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

        # Build here to make `torch.jit.trace` work.
        self.max_seq_len_cached = max_position_embeddings
        t = torch.arange(self.max_seq_len_cached, device=self.inv_freq.device, dtype=self.inv_freq.dtype)
        freqs = torch.einsum("i,j->ij", t, self.inv_freq)
        # Different from paper, but it uses a different permutation in order to obtain the same calculation
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos()[None, None, :, :], persistent=False)
        self.register_buffer("sin_cached", emb.sin()[None, None, :, :], persistent=False)

    def forward(self, x, seq_len=None):
        # x: [bs, num_attention_heads, seq_len, head_size]
        # This `if` block is unlikely to be run after we build sin/cos in `__init__`. Keep the logic here just in case.
        if seq_len > self.max_seq_len_cached:
            self.max_seq_len_cached = seq_len
            t = torch.arange(self.max_seq_len_cached, device=x.device, dtype=self.inv_freq.dtype)
            freqs = torch.einsum("i,j->ij", t, self.inv_freq)
            emb = torch.cat((freqs, freqs), dim=-1).to(x.device)
            self.register_buffer("cos_cached", emb.cos()[None, None, :, :], persistent=False)
            self.register_buffer("sin_cached", emb.sin()[None, None, :, :], persistent=False)
        return (
            self.cos_cached[:, :, :seq_len, ...].to(dtype=x.dtype),
            self.sin_cached[:, :, :seq_len, ...].to(dtype=x.dtype),
        )


def rotate_half(x):
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids):
    # The first two dimensions of cos and sin are always 1, so we can `squeeze` them.
    cos = cos.squeeze(1).squeeze(0)  # [seq_len, dim]
    sin = sin.squeeze(1).squeeze(0)  # [seq_len, dim]
    cos = cos[position_ids].unsqueeze(1)  # [bs, 1, seq_len, dim]
    sin = sin[position_ids].unsqueeze(1)  # [bs, 1, seq_len, dim]
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


class InternLMMLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int, hidden_act: str):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.act_fn = ACT2FN[hidden_act]

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class InternLMAttention(nn.Module):
    """Multi-headed attention from 'Attention Is All You Need' paper"""

    def __init__(self, config: InternLMConfig):
        super().__init__()
        self.config = config
        self.hidden_size = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.hidden_size // self.num_heads
        self.max_position_embeddings = config.max_position_embeddings

        if (self.head_dim * self.num_heads) != self.hidden_size:
            raise ValueError(
                f"hidden_size must be divisible by num_heads (got `hidden_size`: {self.hidden_size}"
                f" and `num_heads`: {self.num_heads})."
            )
        self.q_proj = nn.Linear(self.hidden_size, self.num_heads * self.head_dim, bias=config.bias)
        self.k_proj = nn.Linear(self.hidden_size, self.num_heads * self.head_dim, bias=config.bias)
        self.v_proj = nn.Linear(self.hidden_size, self.num_heads * self.head_dim, bias=config.bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, self.hidden_size, bias=config.bias)
        self.rotary_emb = InternLMRotaryEmbedding(self.head_dim, max_position_embeddings=self.max_position_embeddings, base=config.rotary["base"])

    def _shape(self, tensor: torch.Tensor, seq_len: int, bsz: int):
        return tensor.view(bsz, seq_len, self.num_heads, self.head_dim).transpose(1, 2).contiguous()

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        position_ids: Optional[torch.LongTensor] = None,
        past_key_value: Optional[Tuple[torch.Tensor]] = None,
        output_attentions: bool = False,
        use_cache: bool = False,
    ) -> Tuple[torch.Tensor, Optional[torch.Tensor], Optional[Tuple[torch.Tensor]]]:
        bsz, q_len, _ = hidden_states.size()

        query_states = self.q_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)

        kv_seq_len = key_states.shape[-2]
        if past_key_value is not None:
            kv_seq_len += past_key_value[0].shape[-2]
        cos, sin = self.rotary_emb(value_states, seq_len=max(kv_seq_len, int(position_ids.max()) + 1))
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin, position_ids)
        # [bsz, nh, t, hd]

        if past_key_value is not None:
            # reuse k, v, self_attention
            key_states = torch.cat([past_key_value[0], key_states], dim=2)
            value_states = torch.cat([past_key_value[1], value_states], dim=2)

        past_key_value = (key_states, value_states) if use_cache else None

        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)

        if attn_weights.size() != (bsz, self.num_heads, q_len, kv_seq_len):
            raise ValueError(
                f"Attention weights should be of size {(bsz, self.num_heads, q_len, kv_seq_len)}, but is"
                f" {attn_weights.size()}"
            )

        if attention_mask is not None:
            if attention_mask.size() != (bsz, 1, q_len, kv_seq_len):
                raise ValueError(
                    f"Attention mask should be of size {(bsz, 1, q_len, kv_seq_len)}, but is {attention_mask.size()}"
                )
            attn_weights = attn_weights + attention_mask
            attn_weights = torch.max(attn_weights, torch.tensor(torch.finfo(attn_weights.dtype).min))

        # upcast attention to fp32
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.promote_types(query_states.dtype, torch.float32)).to(query_states.dtype)
        attn_output = torch.matmul(attn_weights, value_states)

        if attn_output.size() != (bsz, self.num_heads, q_len, self.head_dim):
            raise ValueError(
                f"`attn_output` should be of size {(bsz, self.num_heads, q_len, self.head_dim)}, but is"
                f" {attn_output.size()}"
            )

        attn_output = attn_output.transpose(1, 2)
        attn_output = attn_output.reshape(bsz, q_len, self.hidden_size)

        attn_output = self.o_proj(attn_output)

        if not output_attentions:
            attn_weights = None

        return attn_output, attn_weights, past_key_value


class InternLMDecoderLayer(nn.Module):
    def __init__(self, config: InternLMConfig):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.self_attn = InternLMAttention(config=config)
        self.mlp = InternLMMLP(
            hidden_size=self.hidden_size,
            intermediate_size=config.intermediate_size,
            hidden_act=config.hidden_act,
        )
        self.input_layernorm = InternLMRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = InternLMRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        position_ids: Optional[torch.LongTensor] = None,
        past_key_value: Optional[Tuple[torch.Tensor]] = None,
        output_attentions: Optional[bool] = False,
        use_cache: Optional[bool] = False,
    ) -> Tuple[torch.FloatTensor, Optional[Tuple[torch.FloatTensor, torch.FloatTensor]]]:
        residual = hidden_states

        hidden_states = self.input_layernorm(hidden_states)

        # Self Attention
        hidden_states, self_attn_weights, present_key_value = self.self_attn(
            hidden_states=hidden_states,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_value=past_key_value,
            output_attentions=output_attentions,
            use_cache=use_cache,
        )
        hidden_states = residual + hidden_states

        # Fully Connected
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states

        outputs = (hidden_states,)

        if output_attentions:
            outputs += (self_attn_weights,)

        if use_cache:
            outputs += (present_key_value,)

        return outputs


class InternLMModel(nn.Module):
    """
    Transformer decoder consisting of *config.num_hidden_layers* layers. Each layer is a [`InternLMDecoderLayer`]
    """

    def __init__(self, config: InternLMConfig):
        super().__init__()
        self.padding_idx = config.pad_token_id
        self.vocab_size = config.vocab_size
        self.config = config

        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, self.padding_idx)

        self.layers = nn.ModuleList([InternLMDecoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = InternLMRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

        self.gradient_checkpointing = False

    # Copied from transformers.models.bart.modeling_bart.BartDecoder._prepare_decoder_attention_mask
    def _prepare_decoder_attention_mask(self, attention_mask, input_shape, inputs_embeds, past_key_values_length):
        # create causal mask
        # [bsz, seq_len] -> [bsz, 1, tgt_seq_len, src_seq_len]
        combined_attention_mask = None
        if input_shape[-1] > 1:
            combined_attention_mask = _make_causal_mask(
                input_shape,
                inputs_embeds.dtype,
                device=inputs_embeds.device,
                past_key_values_length=past_key_values_length,
            )

        if attention_mask is not None:
            # [bsz, seq_len] -> [bsz, 1, tgt_seq_len, src_seq_len]
            expanded_attn_mask = _expand_mask(attention_mask, inputs_embeds.dtype, tgt_len=input_shape[-1]).to(
                inputs_embeds.device
            )
            combined_attention_mask = (
                expanded_attn_mask if combined_attention_mask is None else expanded_attn_mask + combined_attention_mask
            )

        return combined_attention_mask

    def forward(
        self,
        input_ids: torch.LongTensor = None,
        attention_mask: Optional[torch.Tensor] = None,
        position_ids: Optional[torch.LongTensor] = None,
        past_key_values: Optional[List[torch.FloatTensor]] = None,
        use_cache: Optional[bool] = None,
    ):
        batch_size, seq_length = input_ids.shape

        seq_length_with_past = seq_length
        past_key_values_length = 0

        if past_key_values is not None:
            past_key_values_length = past_key_values[0][0].shape[2]
            seq_length_with_past = seq_length_with_past + past_key_values_length

        if position_ids is None:
            device = input_ids.device
            position_ids = torch.arange(
                past_key_values_length, seq_length + past_key_values_length, dtype=torch.long, device=device
            )
            position_ids = position_ids.unsqueeze(0).view(-1, seq_length)
        else:
            position_ids = position_ids.view(-1, seq_length).long()

        inputs_embeds = self.embed_tokens(input_ids)
        # embed positions
        if attention_mask is None:
            attention_mask = torch.ones(
                (batch_size, seq_length_with_past), dtype=torch.bool, device=inputs_embeds.device
            )
        attention_mask = self._prepare_decoder_attention_mask(
            attention_mask, (batch_size, seq_length), inputs_embeds, past_key_values_length
        )

        hidden_states = inputs_embeds

        next_decoder_cache = () if use_cache else None

        for idx, decoder_layer in enumerate(self.layers):
            past_key_value = past_key_values[idx] if past_key_values is not None else None

            layer_outputs = decoder_layer(
                hidden_states,
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_value=past_key_value,
                use_cache=use_cache,
            )

            hidden_states = layer_outputs[0]

            if use_cache:
                next_decoder_cache += (layer_outputs[1],)

        hidden_states = self.norm(hidden_states)

        next_cache = next_decoder_cache if use_cache else None
        return hidden_states, next_cache


class InternLMForCausalLM(nn.Module):
    _auto_class = "AutoModelForCausalLM"

    def __init__(self, config):
        super().__init__()
        self.model = InternLMModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None, use_cache=None):
        hidden_states, next_cache = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            use_cache=use_cache,
        )
        logits = self.lm_head(hidden_states)
        logits = logits.float() if logits.dtype == torch.float16 else logits
        return logits, next_cache


# ---- the kit's adapter (glue, not part of the port) -------------------------------------------

from tck.adapters import ConfigSpace, TorchEntry, TorchModuleAdapter  # noqa: E402
from tck.reference import Conventions  # noqa: E402


def _internlm_config(config) -> InternLMConfig:
    return InternLMConfig(
        vocab_size=config.vocab_size, hidden_size=config.d_model, intermediate_size=config.d_ff,
        num_hidden_layers=config.n_layers, num_attention_heads=config.n_heads,
        max_position_embeddings=config.max_len, pad_token_id=None, bias=True,
    )


class _LayerCache:
    """The adapter's cache for one attention or one decoder layer alone: the legacy tuple."""

    def __init__(self):
        self.past = None


def _prepare(x, key_padding, positions, past):
    """What InternLMModel.forward does before its layers, for a layer or attention alone."""
    bsz, q_len = x.shape[:2]
    past_len = 0 if past is None else past[0].shape[2]
    if positions is None:
        positions = torch.arange(past_len, past_len + q_len, device=x.device).unsqueeze(0)
    if key_padding is None:
        key_padding = torch.ones(bsz, past_len + q_len, dtype=torch.bool, device=x.device)
    holder = InternLMModel.__new__(InternLMModel)
    mask = InternLMModel._prepare_decoder_attention_mask(holder, key_padding, (bsz, q_len), x, past_len)
    return mask, positions.long()


def _attn_forward(attn, x, key_padding=None, positions=None):
    mask, position_ids = _prepare(x, key_padding, positions, None)
    return attn(x, attention_mask=mask, position_ids=position_ids)[0]


def _attn_step(attn, cache, x, key_padding=None, positions=None):
    cache = cache if cache is not None else _LayerCache()
    mask, position_ids = _prepare(x, key_padding, positions, cache.past)
    out, _, cache.past = attn(x, attention_mask=mask, position_ids=position_ids, past_key_value=cache.past, use_cache=True)
    return out, cache


def _block_forward(block, x, key_padding=None, positions=None):
    mask, position_ids = _prepare(x, key_padding, positions, None)
    return block(x, attention_mask=mask, position_ids=position_ids)[0]


def _block_step(block, cache, x, key_padding=None, positions=None):
    cache = cache if cache is not None else _LayerCache()
    mask, position_ids = _prepare(x, key_padding, positions, cache.past)
    out, cache.past = block(x, attention_mask=mask, position_ids=position_ids, past_key_value=cache.past, use_cache=True)
    return out, cache


def _lm_forward(model, ids, key_padding=None, positions=None):
    return model(ids, attention_mask=key_padding, position_ids=positions)[0]


def _lm_step(model, cache, ids, key_padding=None, positions=None):
    logits, cache = model(ids, attention_mask=key_padding, position_ids=positions, past_key_values=cache, use_cache=True)
    return logits, cache


def _attn_map(prefix=""):
    out = {f"{prefix}{n}.weight": f"{n}_proj.weight" for n in "qkvo"}
    out |= {f"{prefix}{n}.bias": f"{n}_proj.bias" for n in "qkvo"}
    return out


def _block_map(prefix="", mine=""):
    out = {k: f"{mine}self_attn.{v}" for k, v in _attn_map(f"{prefix}self_attn.").items()}
    out[f"{prefix}ffn.gate.weight"] = f"{mine}mlp.gate_proj.weight"
    out[f"{prefix}ffn.up.weight"] = f"{mine}mlp.up_proj.weight"
    out[f"{prefix}ffn.down.weight"] = f"{mine}mlp.down_proj.weight"
    out[f"{prefix}norm1.weight"] = f"{mine}input_layernorm.weight"
    out[f"{prefix}norm2.weight"] = f"{mine}post_attention_layernorm.weight"
    return out


def _lm_map(config):
    out = {"embedding.weight": "model.embed_tokens.weight", "lm_head.weight": "lm_head.weight"}
    for i in range(config.n_layers):
        out |= _block_map(f"layers.{i}.", f"model.layers.{i}.")
    out["norm.weight"] = "model.norm.weight"
    return out


_CONVENTIONS = Conventions(
    norm_kind="rms_norm", norm_placement="pre", positions="rope", rope_layout="half_split", ffn_kind="gated",
    gate_activation="silu", embedding_scale="none", eps=1e-6, fully_masked_rows="uniform",
)
_BIASES = {"attention": True, "attention_out": True, "ffn": False}
_CONFIG = {"attention_bias": True, "attention_out_bias": True, "ffn_bias": False, "norm_bias": False}

adapter = TorchModuleAdapter("internlm-decoder", [
    TorchEntry(
        "rms_norm",
        make=lambda config: InternLMRMSNorm(config.d_model, eps=1e-6),
        forward=lambda norm, x: norm(x),
        conventions=Conventions(norm_kind="rms_norm", eps=1e-6),
    ),
    TorchEntry(
        "gated_ffn",
        make=lambda config: InternLMMLP(config.d_model, config.d_ff, "silu"),
        forward=lambda mlp, x: mlp(x),
        param_map={f"{n}.weight": f"{n}_proj.weight" for n in ("gate", "up", "down")},
        conventions=Conventions(gate_activation="silu"),
        config={"ffn_bias": False},
        supports=ConfigSpace(biases={"ffn": False}),
    ),
    TorchEntry(
        "causal_self_attention",
        make=lambda config: InternLMAttention(_internlm_config(config)),
        forward=_attn_forward,
        step=_attn_step,
        param_map=_attn_map(),
        conventions=_CONVENTIONS,
        config=_CONFIG,
        supports=ConfigSpace(split_heads=True, max_len=512, biases=_BIASES),
    ),
    TorchEntry(
        "decoder_block",
        make=lambda config: InternLMDecoderLayer(_internlm_config(config)),
        forward=_block_forward,
        step=_block_step,
        param_map=_block_map(),
        conventions=_CONVENTIONS,
        config=_CONFIG,
        supports=ConfigSpace(split_heads=True, max_len=512, biases=_BIASES),
    ),
    TorchEntry(
        "causal_lm",
        make=lambda config: InternLMForCausalLM(_internlm_config(config)),
        forward=_lm_forward,
        step=_lm_step,
        param_map=_lm_map,
        conventions=_CONVENTIONS,
        config={**_CONFIG, "tie_weights": False},
        supports=ConfigSpace(split_heads=True, max_len=512, biases=_BIASES, tied=False),
        derives_positions=True,
    ),
])
