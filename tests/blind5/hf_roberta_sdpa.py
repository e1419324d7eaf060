# fmt: off
# ruff: noqa
"""A RoBERTa-style encoder written the way HuggingFace model files are: a config dataclass,
``RobertaSelfAttention`` / ``RobertaSelfOutput`` / ``RobertaIntermediate`` / ``RobertaOutput`` /
``RobertaLayer`` / ``RobertaEncoder`` modules, a ``PreTrainedModel``-like base that initialises
weights, and an **extended attention mask** built from a 0/1 ``attention_mask`` as
``(1 - mask) * finfo(dtype).min`` (the causal mask multiplied in first), added to the scores by
``F.scaled_dot_product_attention``. The query, key and value projections are one packed
``qkv`` Linear whose output is viewed as [B, L, 3, H, d] (the fused-kernel layout), post-LN
residual blocks (``LayerNorm(dense(h) + input)``), exact GELU, ``layer_norm_eps`` 1e-12, no final
norm. A query whose keys are all masked sees the same finite minimum on every key, so it averages
every value (``fully_masked_rows="uniform"``).
"""

import math
from dataclasses import dataclass

import torch
from torch import nn
import torch.nn.functional as F

from tck.adapters import Chunk, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


@dataclass
class RobertaConfig:
    hidden_size: int = 32
    num_attention_heads: int = 4
    intermediate_size: int = 64
    num_hidden_layers: int = 2
    layer_norm_eps: float = 1e-12
    hidden_act: str = "gelu"
    initializer_range: float = 0.02
    is_decoder: bool = False


ACT2FN = {"gelu": F.gelu, "relu": F.relu, "gelu_new": lambda x: F.gelu(x, approximate="tanh")}


class RobertaSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.scaling = self.attention_head_size ** -0.5
        self.qkv = nn.Linear(config.hidden_size, 3 * self.all_head_size)

    def forward(self, hidden_states, attention_mask=None):
        batch_size, seq_len, _ = hidden_states.shape
        qkv = self.qkv(hidden_states).view(batch_size, seq_len, 3, self.num_attention_heads, self.attention_head_size)
        query_layer, key_layer, value_layer = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        context_layer = F.scaled_dot_product_attention(query_layer, key_layer, value_layer, attn_mask=attention_mask, dropout_p=0.0, scale=self.scaling)
        context_layer = context_layer.transpose(1, 2).contiguous()
        return context_layer.reshape(batch_size, seq_len, self.all_head_size)


class RobertaSelfOutput(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dense(hidden_states)
        return self.LayerNorm(hidden_states + input_tensor)


class RobertaAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.self = RobertaSelfAttention(config)
        self.output = RobertaSelfOutput(config)

    def forward(self, hidden_states, attention_mask=None):
        self_outputs = self.self(hidden_states, attention_mask)
        return self.output(self_outputs, hidden_states)


class RobertaIntermediate(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = ACT2FN[config.hidden_act]

    def forward(self, hidden_states):
        return self.intermediate_act_fn(self.dense(hidden_states))


class RobertaOutput(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, intermediate_output, attention_output):
        ffn_output = self.dense(intermediate_output)
        ffn_output = self.LayerNorm(ffn_output + attention_output)
        return ffn_output


class RobertaLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = RobertaAttention(config)
        self.intermediate = RobertaIntermediate(config)
        self.output = RobertaOutput(config)

    def forward(self, hidden_states, attention_mask=None):
        attention_output = self.attention(hidden_states, attention_mask)
        intermediate_output = self.intermediate(attention_output)
        return self.output(intermediate_output, attention_output)


class RobertaEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layer = nn.ModuleList([RobertaLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, hidden_states, attention_mask=None):
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, attention_mask)
        return hidden_states


class RobertaPreTrainedModel(nn.Module):
    """What ``PreTrainedModel`` contributes here: the config and ``_init_weights``."""

    def __init__(self, config):
        super().__init__()
        self.config = config

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            module.weight.data.normal_(mean=0.0, std=self.config.initializer_range)
            if module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.LayerNorm):
            module.bias.data.zero_()
            module.weight.data.fill_(1.0)

    def post_init(self):
        self.apply(self._init_weights)

    def get_extended_attention_mask(self, attention_mask, input_shape, causal=False):
        # attention_mask [B, L]: 1 = attend, 0 = padding -> additive [B, 1, L, L] (0 or finfo.min)
        dtype = self.dtype
        batch_size, seq_length = input_shape
        if attention_mask is None:
            attention_mask = torch.ones(batch_size, seq_length, device=self.device)
        extended_attention_mask = attention_mask[:, None, None, :].to(dtype)
        if causal:
            seq_ids = torch.arange(seq_length, device=self.device)
            causal_mask = seq_ids[None, :] <= seq_ids[:, None]
            extended_attention_mask = extended_attention_mask * causal_mask[None, None, :, :].to(dtype)
        extended_attention_mask = (1.0 - extended_attention_mask) * torch.finfo(dtype).min
        return extended_attention_mask

    @property
    def dtype(self):
        return next(self.parameters()).dtype

    @property
    def device(self):
        return next(self.parameters()).device


class RobertaLayerModel(RobertaPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.layer = RobertaLayer(config)
        self.post_init()

    def forward(self, hidden_states, attention_mask=None, is_causal=False):
        extended = self.get_extended_attention_mask(attention_mask, hidden_states.shape[:2], is_causal)
        return self.layer(hidden_states, extended)


class RobertaEncoderModel(RobertaPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.encoder = RobertaEncoder(config)
        self.post_init()

    def forward(self, hidden_states, attention_mask=None, is_causal=False):
        extended = self.get_extended_attention_mask(attention_mask, hidden_states.shape[:2], is_causal)
        return self.encoder(hidden_states, extended)


# ---- the adapter ----

def to_config(cfg):
    return RobertaConfig(hidden_size=cfg.d_model, num_attention_heads=cfg.n_heads, intermediate_size=cfg.d_ff, num_hidden_layers=cfg.n_layers)


def call(model, x, key_padding=None, causal=False):
    attention_mask = None if key_padding is None else key_padding.long()
    return model(x, attention_mask=attention_mask, is_causal=bool(causal))


def layer_map(prefix, canonical):
    names = {"self_attn.o": "attention.output.dense", "norm1": "attention.output.LayerNorm", "ffn.fc1": "intermediate.dense", "ffn.fc2": "output.dense", "norm2": "output.LayerNorm"}
    out = {}
    for p in ("weight", "bias"):
        out |= {f"{canonical}{k}.{p}": f"{prefix}{v}.{p}" for k, v in names.items()}
        out |= {f"{canonical}self_attn.{n}.{p}": Chunk(f"{prefix}attention.self.qkv.{p}", i, 3) for i, n in enumerate("qkv")}
    return out


def encoder_map(cfg):
    out = {}
    for i in range(cfg.n_layers):
        out |= layer_map(f"encoder.layer.{i}.", f"layers.{i}.")
    return out


CONVENTIONS = Conventions(norm_placement="post", activation="gelu", eps=1e-12, fully_masked_rows="uniform")

adapter = TorchModuleAdapter("hf-roberta-sdpa", [
    TorchEntry("encoder_layer", make=lambda cfg: RobertaLayerModel(to_config(cfg)), forward=call,
               param_map=layer_map("layer.", ""), conventions=CONVENTIONS),
    TorchEntry("encoder", make=lambda cfg: RobertaEncoderModel(to_config(cfg)), forward=call,
               param_map=encoder_map, conventions=CONVENTIONS),
])
