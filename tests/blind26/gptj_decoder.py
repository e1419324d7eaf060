# fmt: off
# ruff: noqa
"""GPT-J as transformers' ``modeling_gptj.py`` (the 4.3x releases, legacy tuple cache) writes
it, ported to plain torch for the twenty-sixth blind set, in sequential form (``ln_1`` before the
attention, ``ln_2`` before the MLP: the parallel residual of GPT-J is not expressible in SPEC).

``GPTJAttention`` (separate ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj`` without biases,
``_split_heads`` keeping ``[B, T, H, d]`` for the rotary part, ``rotate_every_two`` and
``apply_rotary_pos_emb`` with ``repeat_interleave``d sin/cos, the ``bias`` causal buffer sliced
``[key_length - query_length : key_length, :key_length]``, ``torch.where`` with the dtype's
minimum, division by ``scale_attn``, the additive ``attention_mask``, legacy ``layer_past``
tuples concatenated along the sequence axis); ``GPTJMLP`` (``fc_in``, ``NewGELUActivation``,
``fc_out``); ``GPTJBlock``; ``GPTJModel`` (``wte``, ``h``, ``ln_f``); ``GPTJForCausalLM``.
"""

import math
from typing import Optional, Tuple

import torch
from torch import nn


class GPTJConfig:
    model_type = "gptj"

    def __init__(self, vocab_size=50400, n_positions=2048, n_embd=4096, n_layer=28, n_head=16,
                 rotary_dim=64, n_inner=None, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                 layer_norm_epsilon=1e-5):
        self.vocab_size = vocab_size
        self.n_positions = n_positions
        self.max_position_embeddings = n_positions
        self.n_embd = n_embd
        self.hidden_size = n_embd
        self.n_layer = n_layer
        self.n_head = n_head
        self.num_attention_heads = n_head
        self.n_inner = n_inner
        self.rotary_dim = rotary_dim
        self.resid_pdrop = resid_pdrop
        self.embd_pdrop = embd_pdrop
        self.attn_pdrop = attn_pdrop
        self.layer_norm_epsilon = layer_norm_epsilon


def _at_least_float32(dtype):
    # transformers upcasts to float32; a float64 build keeps float64 (no float32 island)
    return torch.float64 if dtype == torch.float64 else torch.float32


class NewGELUActivation(nn.Module):
    """GELU as in Google BERT / OpenAI GPT (the tanh approximation)."""

    def forward(self, input):
        return 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))


def create_sinusoidal_positions(num_pos: int, dim: int) -> torch.Tensor:
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float64) / dim))
    sinusoid_inp = torch.einsum("i , j -> i j", torch.arange(num_pos, dtype=torch.int64).to(torch.float64), inv_freq)
    return torch.cat((torch.sin(sinusoid_inp), torch.cos(sinusoid_inp)), dim=1)


def rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    x1 = x[:, :, :, ::2]
    x2 = x[:, :, :, 1::2]
    x = torch.stack((-x2, x1), dim=-1)
    return x.flatten(-2)  # in einsum notation: rearrange(x, '... d j -> ... (d j)')


def apply_rotary_pos_emb(tensor: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
    cos = torch.repeat_interleave(cos[:, :, None, :], 2, 3)
    return (tensor * cos) + (rotate_every_two(tensor) * sin)


class GPTJAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        max_positions = config.max_position_embeddings
        self.register_buffer(
            "bias",
            torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool)).view(
                1, 1, max_positions, max_positions
            ),
            persistent=False,
        )
        self.attn_dropout = nn.Dropout(config.attn_pdrop)
        self.resid_dropout = nn.Dropout(config.resid_pdrop)

        self.embed_dim = config.hidden_size
        self.num_attention_heads = config.num_attention_heads
        self.head_dim = self.embed_dim // self.num_attention_heads
        if self.head_dim * self.num_attention_heads != self.embed_dim:
            raise ValueError(
                f"embed_dim must be divisible by num_attention_heads (got `embed_dim`: {self.embed_dim} and"
                f" `num_attention_heads`: {self.num_attention_heads})."
            )
        self.scale_attn = math.sqrt(self.head_dim)

        self.k_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=False)
        self.v_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=False)
        self.q_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=False)
        self.out_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=False)
        self.rotary_dim = config.rotary_dim
        pos_embd_dim = self.rotary_dim or self.embed_dim
        self.embed_positions = create_sinusoidal_positions(max_positions, pos_embd_dim)

    def _split_heads(self, tensor, num_attention_heads, attn_head_size, rotary):
        """Splits hidden dim into attn_head_size and num_attention_heads"""
        new_shape = tensor.size()[:-1] + (num_attention_heads, attn_head_size)
        tensor = tensor.view(new_shape)
        if rotary:
            return tensor
        if len(tensor.shape) == 5:
            return tensor.permute(0, 1, 3, 2, 4)  # (batch, blocks, head, block_length, head_features)
        elif len(tensor.shape) == 4:
            return tensor.permute(0, 2, 1, 3)  # (batch, head, seq_length, head_features)
        else:
            raise ValueError(f"Input tensor rank should be one of [4, 5], but is: {len(tensor.shape)}")

    def _merge_heads(self, tensor, num_attention_heads, attn_head_size):
        """Merges attn_head_size dim and num_attn_heads dim into hidden dim"""
        if len(tensor.shape) == 5:
            tensor = tensor.permute(0, 1, 3, 2, 4).contiguous()
        elif len(tensor.shape) == 4:
            tensor = tensor.permute(0, 2, 1, 3).contiguous()
        else:
            raise ValueError(f"Input tensor rank should be one of [4, 5], but is: {len(tensor.shape)}")
        new_shape = tensor.size()[:-2] + (num_attention_heads * attn_head_size,)
        return tensor.view(new_shape)

    def _attn(self, query, key, value, attention_mask=None, head_mask=None):
        # compute causal mask from causal mask buffer
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length : key_length, :key_length]

        # Keep the attention weights computation in fp32 to avoid overflow issues
        query = query.to(_at_least_float32(query.dtype))
        key = key.to(_at_least_float32(key.dtype))

        attn_weights = torch.matmul(query, key.transpose(-1, -2))

        mask_value = torch.finfo(attn_weights.dtype).min
        # Need to be a tensor, otherwise we get error: `RuntimeError: expected scalar type float but found double`.
        # Need to be on the same device, otherwise `RuntimeError: ..., x and y to be on the same device`
        mask_value = torch.tensor(mask_value, dtype=attn_weights.dtype).to(attn_weights.device)
        attn_weights = torch.where(causal_mask, attn_weights, mask_value)

        attn_weights = attn_weights / self.scale_attn

        if attention_mask is not None:
            # Apply the attention mask
            attn_weights = attn_weights + attention_mask

        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_weights = attn_weights.to(value.dtype)
        attn_weights = self.attn_dropout(attn_weights)

        # Mask heads if we want to
        if head_mask is not None:
            attn_weights = attn_weights * head_mask

        attn_output = torch.matmul(attn_weights, value)

        return attn_output, attn_weights

    def _get_embed_positions(self, position_ids, dtype):
        embed_positions = self.embed_positions
        if embed_positions.device != position_ids.device or embed_positions.dtype != dtype:
            embed_positions = embed_positions.to(position_ids.device, dtype)
            self.embed_positions = embed_positions
        return embed_positions.repeat(position_ids.shape[0], 1, 1)

    def forward(
        self,
        hidden_states: torch.FloatTensor,
        layer_past: Optional[Tuple[torch.Tensor]] = None,
        attention_mask: Optional[torch.FloatTensor] = None,
        position_ids: Optional[torch.LongTensor] = None,
        head_mask: Optional[torch.FloatTensor] = None,
        use_cache: Optional[bool] = False,
    ):
        query = self.q_proj(hidden_states)
        key = self.k_proj(hidden_states)
        value = self.v_proj(hidden_states)

        query = self._split_heads(query, self.num_attention_heads, self.head_dim, True)
        key = self._split_heads(key, self.num_attention_heads, self.head_dim, True)
        value = self._split_heads(value, self.num_attention_heads, self.head_dim, False)

        embed_positions = self._get_embed_positions(position_ids, _at_least_float32(hidden_states.dtype))

        repeated_position_ids = position_ids.unsqueeze(-1).repeat(1, 1, embed_positions.shape[-1])
        sincos = torch.gather(embed_positions, 1, repeated_position_ids)
        sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)

        if self.rotary_dim is not None:
            k_rot = key[:, :, :, : self.rotary_dim]
            k_pass = key[:, :, :, self.rotary_dim :]

            q_rot = query[:, :, :, : self.rotary_dim]
            q_pass = query[:, :, :, self.rotary_dim :]

            k_rot = apply_rotary_pos_emb(k_rot, sin, cos)
            q_rot = apply_rotary_pos_emb(q_rot, sin, cos)

            key = torch.cat([k_rot, k_pass.to(k_rot.dtype)], dim=-1)
            query = torch.cat([q_rot, q_pass.to(q_rot.dtype)], dim=-1)
        else:
            key = apply_rotary_pos_emb(key, sin, cos)
            query = apply_rotary_pos_emb(query, sin, cos)

        key = key.permute(0, 2, 1, 3)
        query = query.permute(0, 2, 1, 3)

        if layer_past is not None:
            past_key = layer_past[0]
            past_value = layer_past[1]
            key = torch.cat((past_key, key), dim=-2)
            value = torch.cat((past_value, value), dim=-2)

        if use_cache is True:
            # Note that this cast is quite ugly, but is not implemented before ROPE as the original codebase keeps the key in float32 all along the computation.
            # Reference: https://github.com/kingoflolz/mesh-transformer-jax/blob/f8315e3003033b23f21d78361b288953064e0e76/mesh_transformer/layers.py#L128
            present = (key.to(hidden_states.dtype), value)
        else:
            present = None

        # compute self-attention: V x Softmax(QK^T)
        attn_output, attn_weights = self._attn(query, key, value, attention_mask, head_mask)

        attn_output = self._merge_heads(attn_output, self.num_attention_heads, self.head_dim)
        attn_output = self.out_proj(attn_output)
        attn_output = self.resid_dropout(attn_output)

        return attn_output, present


class GPTJMLP(nn.Module):
    def __init__(self, intermediate_size, config):  # in MLP: intermediate_size= 4 * embed_dim
        super().__init__()
        embed_dim = config.n_embd

        self.fc_in = nn.Linear(embed_dim, intermediate_size)
        self.fc_out = nn.Linear(intermediate_size, embed_dim)

        self.act = NewGELUActivation()
        self.dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, hidden_states: Optional[torch.FloatTensor]) -> torch.FloatTensor:
        hidden_states = self.fc_in(hidden_states)
        hidden_states = self.act(hidden_states)
        hidden_states = self.fc_out(hidden_states)
        hidden_states = self.dropout(hidden_states)
        return hidden_states


class GPTJBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        inner_dim = config.n_inner if config.n_inner is not None else 4 * config.n_embd
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = GPTJAttention(config)
        # sequential form: GPT-J's parallel block feeds ln_1's output to the MLP as well
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = GPTJMLP(inner_dim, config)

    def forward(
        self,
        hidden_states: Optional[torch.FloatTensor],
        layer_past: Optional[Tuple[torch.Tensor]] = None,
        attention_mask: Optional[torch.FloatTensor] = None,
        position_ids: Optional[torch.LongTensor] = None,
        head_mask: Optional[torch.FloatTensor] = None,
        use_cache: Optional[bool] = False,
    ):
        residual = hidden_states
        hidden_states = self.ln_1(hidden_states)
        attn_outputs = self.attn(
            hidden_states=hidden_states,
            layer_past=layer_past,
            attention_mask=attention_mask,
            position_ids=position_ids,
            head_mask=head_mask,
            use_cache=use_cache,
        )
        attn_output = attn_outputs[0]  # output_attn: a, present, (attentions)
        outputs = attn_outputs[1:]

        hidden_states = attn_output + residual
        residual = hidden_states
        feed_forward_hidden_states = self.mlp(self.ln_2(hidden_states))
        hidden_states = feed_forward_hidden_states + residual

        if use_cache:
            outputs = (hidden_states,) + outputs
        else:
            outputs = (hidden_states,) + outputs[1:]

        return outputs  # hidden_states, present, (attentions)


class GPTJModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed_dim = config.n_embd
        self.vocab_size = config.vocab_size
        self.wte = nn.Embedding(config.vocab_size, self.embed_dim)
        self.drop = nn.Dropout(config.embd_pdrop)
        self.h = nn.ModuleList([GPTJBlock(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(self.embed_dim, eps=config.layer_norm_epsilon)

    def forward(
        self,
        input_ids: Optional[torch.LongTensor] = None,
        past_key_values: Optional[Tuple[Tuple[torch.Tensor]]] = None,
        attention_mask: Optional[torch.FloatTensor] = None,
        position_ids: Optional[torch.LongTensor] = None,
        use_cache: Optional[bool] = None,
    ):
        input_shape = input_ids.size()
        input_ids = input_ids.view(-1, input_shape[-1])
        batch_size = input_ids.shape[0]
        device = input_ids.device
        dtype = self.wte.weight.dtype

        if past_key_values is None:
            past_length = 0
            past_key_values = tuple([None] * len(self.h))
        else:
            past_length = past_key_values[0][0].size(-2)

        if position_ids is None:
            position_ids = torch.arange(past_length, input_shape[-1] + past_length, dtype=torch.long, device=device)
            position_ids = position_ids.unsqueeze(0)

        # Attention mask.
        if attention_mask is not None:
            attention_mask = attention_mask.view(batch_size, -1)
            # We create a 3D attention mask from a 2D tensor mask.
            # Sizes are [batch_size, 1, 1, to_seq_length]
            attention_mask = attention_mask[:, None, None, :]
            attention_mask = attention_mask.to(dtype=dtype)  # fp16 compatibility
            attention_mask = (1.0 - attention_mask) * torch.finfo(dtype).min

        inputs_embeds = self.wte(input_ids)
        hidden_states = inputs_embeds
        hidden_states = self.drop(hidden_states)
        output_shape = (-1,) + input_shape[1:] + (hidden_states.size(-1),)

        presents = () if use_cache else None
        for i, (block, layer_past) in enumerate(zip(self.h, past_key_values)):
            outputs = block(
                hidden_states=hidden_states,
                layer_past=layer_past,
                attention_mask=attention_mask,
                position_ids=position_ids,
                use_cache=use_cache,
            )
            hidden_states = outputs[0]
            if use_cache is True:
                presents = presents + (outputs[1],)

        hidden_states = self.ln_f(hidden_states)
        hidden_states = hidden_states.view(output_shape)
        return hidden_states, presents


class GPTJForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.transformer = GPTJModel(config)
        # GPT-J's lm_head carries a bias; SPEC's causal_lm head has none (see PROTOCOL.md)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

    def forward(self, input_ids, past_key_values=None, attention_mask=None, position_ids=None, use_cache=None):
        hidden_states, presents = self.transformer(
            input_ids, past_key_values=past_key_values, attention_mask=attention_mask,
            position_ids=position_ids, use_cache=use_cache,
        )
        # transformers casts the logits to float32 here ("make sure sampling in fp16 works"); kept in the model's dtype
        lm_logits = self.lm_head(hidden_states)
        return lm_logits, presents


# ---- the adapter (glue: not GPT-J's code) -------------------------------------------------

from tck.adapters import ConfigSpace, TorchEntry, TorchModuleAdapter  # noqa: E402
from tck.reference import Conventions  # noqa: E402


def _gptj_config(config):
    return GPTJConfig(
        vocab_size=config.vocab_size, n_positions=config.max_len, n_embd=config.d_model,
        n_layer=config.n_layers, n_head=config.n_heads, rotary_dim=config.d_model // config.n_heads,
        n_inner=config.d_ff,
    )


def _position_ids(x, positions, past_length):
    if positions is not None:
        return torch.as_tensor(positions, dtype=torch.long, device=x.device)
    return torch.arange(past_length, past_length + x.shape[1], dtype=torch.long, device=x.device).unsqueeze(0)


def _extended_mask(key_padding, dtype):
    if key_padding is None:
        return None
    mask = torch.as_tensor(key_padding)[:, None, None, :].to(dtype)
    return (1.0 - mask) * torch.finfo(dtype).min


def _attn_step(attn, cache, x, key_padding=None, positions=None):
    past_length = 0 if cache is None else cache[0].size(-2)
    out, present = attn(
        x, layer_past=cache, attention_mask=_extended_mask(key_padding, x.dtype),
        position_ids=_position_ids(x, positions, past_length), use_cache=True,
    )
    return out, present


def _attn_forward(attn, x, key_padding=None, positions=None):
    return _attn_step(attn, None, x, key_padding, positions)[0]


def _block_step(block, cache, x, key_padding=None, positions=None):
    past_length = 0 if cache is None else cache[0].size(-2)
    out = block(
        x, layer_past=cache, attention_mask=_extended_mask(key_padding, x.dtype),
        position_ids=_position_ids(x, positions, past_length), use_cache=True,
    )
    return out[0], out[1]


def _block_forward(block, x, key_padding=None, positions=None):
    return _block_step(block, None, x, key_padding, positions)[0]


def _lm_step(model, cache, ids, key_padding=None, positions=None):
    ids = torch.as_tensor(ids, dtype=torch.long)
    mask = None if key_padding is None else torch.as_tensor(key_padding).long()
    pos = None if positions is None else torch.as_tensor(positions, dtype=torch.long)
    logits, presents = model(ids, past_key_values=cache, attention_mask=mask, position_ids=pos, use_cache=True)
    return logits, presents


def _lm_forward(model, ids, key_padding=None, positions=None):
    return _lm_step(model, None, ids, key_padding, positions)[0]


def _attn_map(prefix=""):
    return {f"{prefix}{c}.weight": f"{prefix.replace('self_attn.', 'attn.')}{m}.weight"
            for c, m in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", "out_proj"))}


def _block_map(prefix="", ours=""):
    names = {"self_attn.q": "attn.q_proj", "self_attn.k": "attn.k_proj", "self_attn.v": "attn.v_proj",
             "self_attn.o": "attn.out_proj"}
    out = {f"{prefix}{c}.weight": f"{ours}{m}.weight" for c, m in names.items()}
    for c, m in (("norm1", "ln_1"), ("norm2", "ln_2"), ("ffn.fc1", "mlp.fc_in"), ("ffn.fc2", "mlp.fc_out")):
        out[f"{prefix}{c}.weight"] = f"{ours}{m}.weight"
        out[f"{prefix}{c}.bias"] = f"{ours}{m}.bias"
    return out


def _lm_map(config):
    out = {"embedding.weight": "transformer.wte.weight", "norm.weight": "transformer.ln_f.weight",
           "norm.bias": "transformer.ln_f.bias", "lm_head.weight": "lm_head.weight"}
    for i in range(config.n_layers):
        out |= _block_map(f"layers.{i}.", f"transformer.h.{i}.")
    return out


_ROPE = dict(positions="rope", rope_layout="interleaved", activation="gelu_tanh", ffn_kind="plain",
             norm_placement="pre", embedding_scale="none", eps=1e-5)
_CONFIG = {"attention_bias": False, "ffn_bias": True}
_SPACE = ConfigSpace(split_heads=True, max_len=512, biases={"attention": False, "ffn": True})

adapter = TorchModuleAdapter("gptj-decoder", [
    TorchEntry(
        "ffn",
        make=lambda config: GPTJMLP(config.d_ff, _gptj_config(config)),
        forward=lambda mlp, x: mlp(x),
        param_map={"fc1.weight": "fc_in.weight", "fc1.bias": "fc_in.bias",
                   "fc2.weight": "fc_out.weight", "fc2.bias": "fc_out.bias"},
        conventions=Conventions(activation="gelu_tanh"),
        config={"ffn_bias": True},
    ),
    TorchEntry(
        "causal_self_attention",
        make=lambda config: GPTJAttention(_gptj_config(config)),
        forward=_attn_forward,
        step=_attn_step,
        param_map={"q.weight": "q_proj.weight", "k.weight": "k_proj.weight",
                   "v.weight": "v_proj.weight", "o.weight": "out_proj.weight"},
        conventions=Conventions(**_ROPE),
        derives_positions=True,
        config=_CONFIG,
        supports=_SPACE,
    ),
    TorchEntry(
        "decoder_block",
        make=lambda config: GPTJBlock(_gptj_config(config)),
        forward=_block_forward,
        step=_block_step,
        param_map=_block_map(),
        conventions=Conventions(**_ROPE),
        derives_positions=True,
        config=_CONFIG,
        supports=_SPACE,
    ),
    TorchEntry(
        "causal_lm",
        make=lambda config: GPTJForCausalLM(_gptj_config(config)),
        forward=_lm_forward,
        step=_lm_step,
        param_map=_lm_map,
        conventions=Conventions(**_ROPE),
        derives_positions=True,
        config={**_CONFIG, "tie_weights": False},
        supports=ConfigSpace(split_heads=True, max_len=512, biases={"attention": False, "ffn": True}, tied=False),
    ),
])
