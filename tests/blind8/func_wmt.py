# fmt: off
# ruff: noqa
"""An encoder-decoder Transformer written functionally, the way flax's WMT example is written,
ported to torch.func: pure functions over a parameter tree.

The parameters live in a tree named as flax names them (``encoderblock_0`` /
``MultiHeadDotProductAttention_0`` / ``query`` / ``kernel``), with flax's layouts: a
``DenseGeneral`` query/key/value kernel is ``[D, H, d]`` with a bias ``[H, d]``, the output
kernel ``[H, d, D]``, a ``Dense`` kernel ``[in, out]``, a LayerNorm ``scale`` and ``bias``.
Every layer is a pure function of (params, inputs); attention is written for one head and
``torch.vmap``-ed over the head axis; masks are built as flax builds them
(``make_attention_mask`` with a pairwise function, ``make_causal_mask``,
``combine_masks``) and applied by ``where(mask, logits, finfo.min)``; dropout is flax's,
switched by a ``deterministic`` flag. Pre-LN blocks with final norms, ReLU MLPs, LayerNorm
eps 1e-6, fixed sinusoidal positions with all sines first then all cosines, one shared
embedding (``logits_via_embedding``), the logits divided by ``sqrt(D)``.

16-bit inputs: LayerNorm statistics and the softmax are formed in float32.
"""

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

_HALF = (torch.float16, torch.bfloat16)


def _upcast(dtype):
    return torch.float32 if dtype in _HALF else dtype


# ---- the parameter tree ---------------------------------------------------------------------
class Node(nn.Module):
    """One level of the parameter tree: children and leaves by name, as flax's FrozenDict."""

    def __getitem__(self, name):
        return getattr(self, name)


def make_tree(shapes, init):
    node = Node()
    for name, value in shapes.items():
        if isinstance(value, dict):
            node.add_module(name, make_tree(value, init))
        else:
            node.register_parameter(name, nn.Parameter(init(name, value)))
    return node


def _init(name, shape):
    if name == "scale":
        return torch.ones(shape)
    if name == "bias":
        return torch.zeros(shape)
    return torch.randn(shape) / math.sqrt(shape[0])  # fan_in: a kernel's first axis


def attention_shapes(d, h, k):
    return {
        "query": {"kernel": (d, h, k), "bias": (h, k)},
        "key": {"kernel": (d, h, k), "bias": (h, k)},
        "value": {"kernel": (d, h, k), "bias": (h, k)},
        "out": {"kernel": (h, k, d), "bias": (d,)},
    }


def norm_shapes(d):
    return {"scale": (d,), "bias": (d,)}


def mlp_shapes(d, f):
    return {"Dense_0": {"kernel": (d, f), "bias": (f,)}, "Dense_1": {"kernel": (f, d), "bias": (d,)}}


def encoder_block_shapes(d, h, k, f):
    return {
        "LayerNorm_0": norm_shapes(d), "MultiHeadDotProductAttention_0": attention_shapes(d, h, k),
        "LayerNorm_1": norm_shapes(d), "MlpBlock_0": mlp_shapes(d, f),
    }


def decoder_block_shapes(d, h, k, f):
    return {
        "LayerNorm_0": norm_shapes(d), "SelfAttention_0": attention_shapes(d, h, k),
        "LayerNorm_1": norm_shapes(d), "MultiHeadDotProductAttention_0": attention_shapes(d, h, k),
        "LayerNorm_2": norm_shapes(d), "MlpBlock_0": mlp_shapes(d, f),
    }


# ---- pure functions -------------------------------------------------------------------------
def dense(p, x):
    return x @ p["kernel"] + p["bias"]


def dense_general_in(p, x):
    """DenseGeneral(features=(H, d)): [..., D] -> [..., H, d]."""
    return torch.einsum("...d,dhk->...hk", x, p["kernel"]) + p["bias"]


def dense_general_out(p, x):
    """DenseGeneral(axis=(-2, -1)): [..., H, d] -> [..., D]."""
    return torch.einsum("...hk,hkd->...d", x, p["kernel"]) + p["bias"]


def layer_norm(p, x, epsilon=1e-6):
    dtype = x.dtype
    x = x.to(_upcast(dtype))
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    y = (x - mean) * torch.rsqrt(var + epsilon)
    return (y * p["scale"] + p["bias"]).to(dtype)


def dropout(x, rate, deterministic):
    if deterministic or rate == 0.0:
        return x
    keep = torch.bernoulli(torch.full_like(x, 1.0 - rate)).to(torch.bool)
    return torch.where(keep, x / (1.0 - rate), torch.zeros_like(x))


def attend_one_head(query, key, value, mask):
    """One head: query [B, Lq, d] (already scaled), key and value [B, Lk, d], mask [B, Lq, Lk]."""
    attn_weights = torch.einsum("bqd,bkd->bqk", query, key)
    big_neg = torch.finfo(attn_weights.dtype).min
    attn_weights = torch.where(mask, attn_weights, big_neg)
    attn_weights = torch.softmax(attn_weights.to(_upcast(attn_weights.dtype)), dim=-1).to(value.dtype)
    return torch.einsum("bqk,bkd->bqd", attn_weights, value)


def multi_head_dot_product_attention(p, inputs_q, inputs_k, inputs_v, mask, num_heads):
    """mask: bool [B | 1, 1 | H, Lq, Lk], True = attend (flax's polarity)."""
    query = dense_general_in(p["query"], inputs_q)     # [B, Lq, H, d]
    key = dense_general_in(p["key"], inputs_k)         # [B, Lk, H, d]
    value = dense_general_in(p["value"], inputs_v)
    depth = query.shape[-1]
    query = query / math.sqrt(depth)
    batch, q_len, k_len = query.shape[0], query.shape[1], key.shape[1]
    mask = mask.expand(batch, num_heads, q_len, k_len)
    x = torch.vmap(attend_one_head, in_dims=(2, 2, 2, 1), out_dims=2)(query, key, value, mask)
    return dense_general_out(p["out"], x)


def mlp_block(p, inputs, dropout_rate, deterministic):
    x = dense(p["Dense_0"], inputs)
    x = torch.relu(x)
    x = dropout(x, dropout_rate, deterministic)
    output = dense(p["Dense_1"], x)
    return dropout(output, dropout_rate, deterministic)


def encoder_1d_block(p, inputs, encoder_mask, cfg, deterministic):
    x = layer_norm(p["LayerNorm_0"], inputs)
    x = multi_head_dot_product_attention(p["MultiHeadDotProductAttention_0"], x, x, x, encoder_mask, cfg.num_heads)
    x = dropout(x, cfg.dropout_rate, deterministic)
    x = x + inputs
    y = layer_norm(p["LayerNorm_1"], x)
    y = mlp_block(p["MlpBlock_0"], y, cfg.dropout_rate, deterministic)
    return x + y


def encoder_decoder_1d_block(p, targets, encoded, decoder_mask, encoder_decoder_mask, cfg, deterministic):
    x = layer_norm(p["LayerNorm_0"], targets)
    x = multi_head_dot_product_attention(p["SelfAttention_0"], x, x, x, decoder_mask, cfg.num_heads)
    x = dropout(x, cfg.dropout_rate, deterministic)
    x = x + targets
    y = layer_norm(p["LayerNorm_1"], x)
    y = multi_head_dot_product_attention(p["MultiHeadDotProductAttention_0"], y, encoded, encoded, encoder_decoder_mask, cfg.num_heads)
    y = dropout(y, cfg.dropout_rate, deterministic)
    y = y + x
    z = layer_norm(p["LayerNorm_2"], y)
    z = mlp_block(p["MlpBlock_0"], z, cfg.dropout_rate, deterministic)
    return y + z


# ---- masks, as flax.linen.attention builds them (True = attend) -----------------------------
def make_attention_mask(query_input, key_input, pairwise_fn=torch.logical_and):
    mask = pairwise_fn(query_input[..., :, None], key_input[..., None, :])
    return mask[..., None, :, :]


def make_causal_mask(x):
    idxs = torch.arange(x.shape[-1]).expand(x.shape)
    return make_attention_mask(idxs, idxs, torch.greater_equal)


def combine_masks(*masks):
    masks = [m for m in masks if m is not None]
    if not masks:
        return None
    mask = masks[0]
    for other in masks[1:]:
        mask = torch.logical_and(mask, other)
    return mask


# ---- positions and embeddings ---------------------------------------------------------------
def sinusoidal_init(max_len, d_feature, max_scale=10000.0):
    """[1, max_len, d_feature]: sin of every frequency, then cos of every frequency."""
    pe = np.zeros((max_len, d_feature), dtype=np.float64)
    position = np.arange(0, max_len)[:, np.newaxis]
    scale_factor = -np.log(max_scale) / (d_feature // 2)
    div_term = np.exp(np.arange(0, d_feature // 2) * scale_factor)
    pe[:, : d_feature // 2] = np.sin(position * div_term)
    pe[:, d_feature // 2 : 2 * (d_feature // 2)] = np.cos(position * div_term)
    return torch.from_numpy(pe[np.newaxis, :, :])


def add_position_embs(inputs, pos_table):
    length = inputs.shape[1]
    torch._assert(length <= pos_table.shape[1], f"sequence of {length} longer than max_len {pos_table.shape[1]}")
    return inputs + pos_table[:, :length, :].to(inputs.dtype)


def embed(p, ids):
    return F.embedding(ids, p["embedding"], padding_idx=0)


# ---- the modules: parameters held, pure functions called ------------------------------------
class TransformerConfig:
    def __init__(self, vocab_size, emb_dim, num_heads, num_layers, qkv_dim, mlp_dim, max_len,
                 dropout_rate=0.1, attention_dropout_rate=0.1):
        self.vocab_size = vocab_size
        self.emb_dim = emb_dim
        self.num_heads = num_heads
        self.num_layers = num_layers
        self.qkv_dim = qkv_dim
        self.mlp_dim = mlp_dim
        self.max_len = max_len
        self.dropout_rate = dropout_rate
        self.attention_dropout_rate = attention_dropout_rate


class Transformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        d, h, f = cfg.emb_dim, cfg.num_heads, cfg.mlp_dim
        k = cfg.qkv_dim // h
        shapes = {
            "shared_embedding": {"embedding": (cfg.vocab_size, d)},
            "encoder": {**{f"encoderblock_{i}": encoder_block_shapes(d, h, k, f) for i in range(cfg.num_layers)},
                        "encoder_norm": norm_shapes(d)},
            "decoder": {**{f"encoderdecoderblock_{i}": decoder_block_shapes(d, h, k, f) for i in range(cfg.num_layers)},
                        "encoderdecoder_norm": norm_shapes(d)},
        }
        self.params = make_tree(shapes, _init)
        with torch.no_grad():
            self.params["shared_embedding"]["embedding"][0].zero_()
        self.pos_table = sinusoidal_init(cfg.max_len, d)  # a constant, not a parameter

    @property
    def deterministic(self):
        """flax's flag: True in evaluation (no dropout)."""
        return not self.training

    def encode(self, inputs):
        cfg, p = self.cfg, self.params
        deterministic = self.deterministic
        encoder_mask = make_attention_mask(torch.ones_like(inputs, dtype=torch.bool), inputs > 0)
        x = embed(p["shared_embedding"], inputs)
        x = add_position_embs(x, self.pos_table)
        x = dropout(x, cfg.dropout_rate, deterministic)
        for lyr in range(cfg.num_layers):
            x = encoder_1d_block(p["encoder"][f"encoderblock_{lyr}"], x, encoder_mask, cfg, deterministic)
        return layer_norm(p["encoder"]["encoder_norm"], x)

    def decode(self, encoded, inputs, targets):
        cfg, p = self.cfg, self.params
        deterministic = self.deterministic
        decoder_mask = combine_masks(
            make_attention_mask(torch.ones_like(targets, dtype=torch.bool), targets > 0),
            make_causal_mask(targets),
        )
        encoder_decoder_mask = make_attention_mask(torch.ones_like(targets, dtype=torch.bool), inputs > 0)
        y = embed(p["shared_embedding"], targets)
        y = add_position_embs(y, self.pos_table)
        y = dropout(y, cfg.dropout_rate, deterministic)
        for lyr in range(cfg.num_layers):
            y = encoder_decoder_1d_block(
                p["decoder"][f"encoderdecoderblock_{lyr}"], y, encoded, decoder_mask, encoder_decoder_mask, cfg, deterministic
            )
        y = layer_norm(p["decoder"]["encoderdecoder_norm"], y)
        # Use the transpose of embedding matrix for logit transform.
        logits = y @ p["shared_embedding"]["embedding"].T
        # Correctly normalize pre-softmax logits for this shared case.
        logits = logits / math.sqrt(y.shape[-1])
        return logits

    def forward(self, inputs, targets):
        encoded = self.encode(inputs)
        return self.decode(encoded, inputs, targets)


class MHAOnly(nn.Module):
    def __init__(self, d, h, k):
        super().__init__()
        self.num_heads = h
        self.params = make_tree(attention_shapes(d, h, k), _init)

    def forward(self, query, key, value, mask):
        return multi_head_dot_product_attention(self.params, query, key, value, mask, self.num_heads)


class EncoderBlockOnly(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.params = make_tree(encoder_block_shapes(cfg.emb_dim, cfg.num_heads, cfg.qkv_dim // cfg.num_heads, cfg.mlp_dim), _init)

    def forward(self, x, mask):
        return encoder_1d_block(self.params, x, mask, self.cfg, not self.training)


class DecoderBlockOnly(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.params = make_tree(decoder_block_shapes(cfg.emb_dim, cfg.num_heads, cfg.qkv_dim // cfg.num_heads, cfg.mlp_dim), _init)

    def forward(self, x, memory, decoder_mask, encoder_decoder_mask):
        return encoder_decoder_1d_block(self.params, x, memory, decoder_mask, encoder_decoder_mask, self.cfg, not self.training)


# ---- the adapter ----------------------------------------------------------------------------
from tck.adapters import Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def wmt_config(config):
    return TransformerConfig(
        vocab_size=config.vocab_size, emb_dim=config.d_model, num_heads=config.n_heads,
        num_layers=config.n_layers, qkv_dim=config.d_model, mlp_dim=config.d_ff, max_len=config.max_len,
    )


def attention_map(canon, ours):
    """flax DenseGeneral layouts -> nn.Linear's [out, in]."""
    m = {}
    for c, name in (("q", "query"), ("k", "key"), ("v", "value")):
        m[f"{canon}{c}.weight"] = Param(f"{ours}{name}.kernel", permute=(1, 2, 0))
        m[f"{canon}{c}.bias"] = Param(f"{ours}{name}.bias")
    m[f"{canon}o.weight"] = Param(f"{ours}out.kernel", permute=(2, 0, 1))
    m[f"{canon}o.bias"] = f"{ours}out.bias"
    return m


def norm_map(canon, ours):
    return {f"{canon}weight": f"{ours}scale", f"{canon}bias": f"{ours}bias"}


def mlp_map(canon, ours):
    m = {}
    for c, name in (("fc1", "Dense_0"), ("fc2", "Dense_1")):
        m[f"{canon}{c}.weight"] = Param(f"{ours}{name}.kernel", permute=(1, 0))
        m[f"{canon}{c}.bias"] = f"{ours}{name}.bias"
    return m


def encoder_block_map(canon, ours):
    return {
        **attention_map(f"{canon}self_attn.", f"{ours}MultiHeadDotProductAttention_0."),
        **norm_map(f"{canon}norm1.", f"{ours}LayerNorm_0."),
        **norm_map(f"{canon}norm2.", f"{ours}LayerNorm_1."),
        **mlp_map(f"{canon}ffn.", f"{ours}MlpBlock_0."),
    }


def decoder_block_map(canon, ours):
    return {
        **attention_map(f"{canon}self_attn.", f"{ours}SelfAttention_0."),
        **norm_map(f"{canon}norm1.", f"{ours}LayerNorm_0."),
        **attention_map(f"{canon}cross_attn.", f"{ours}MultiHeadDotProductAttention_0."),
        **norm_map(f"{canon}norm2.", f"{ours}LayerNorm_1."),
        **norm_map(f"{canon}norm3.", f"{ours}LayerNorm_2."),
        **mlp_map(f"{canon}ffn.", f"{ours}MlpBlock_0."),
    }


def seq2seq_map(config):
    m = {"embedding.weight": "params.shared_embedding.embedding"}
    for i in range(config.n_layers):
        m |= encoder_block_map(f"encoder.layers.{i}.", f"params.encoder.encoderblock_{i}.")
        m |= decoder_block_map(f"decoder.layers.{i}.", f"params.decoder.encoderdecoderblock_{i}.")
    m |= norm_map("encoder.norm.", "params.encoder.encoder_norm.")
    m |= norm_map("decoder.norm.", "params.decoder.encoderdecoder_norm.")
    return m


def _keep(key_padding, attn_mask, causal, q_len, k_len):
    """The adapter's keep-masks -> one flax mask [B | 1, 1 | H, Lq, Lk] (True = attend)."""
    mask = torch.ones(1, 1, q_len, k_len, dtype=torch.bool)
    if key_padding is not None:
        mask = combine_masks(mask, make_attention_mask(torch.ones(key_padding.shape[0], q_len, dtype=torch.bool), key_padding))
    if attn_mask is not None:
        mask = combine_masks(mask, attn_mask if attn_mask.dim() == 4 else attn_mask[None, None])
    if causal is not None and bool(causal):
        # top-left aligned when Lq != Lk: query i sees keys 0 .. i
        mask = combine_masks(mask, make_attention_mask(torch.arange(q_len), torch.arange(k_len), torch.greater_equal))
    return mask


def _mha_forward(module, query, key, value, key_padding=None, attn_mask=None, causal=None):
    return module(query, key, value, _keep(key_padding, attn_mask, causal, query.shape[1], key.shape[1]))


def _encoder_layer_forward(module, x, key_padding=None, attn_mask=None, causal=None):
    return module(x, _keep(key_padding, attn_mask, causal, x.shape[1], x.shape[1]))


def _decoder_layer_forward(module, x, memory, key_padding=None, memory_key_padding=None, causal=None):
    self_mask = _keep(key_padding, None, True if causal is None else causal, x.shape[1], x.shape[1])
    cross_mask = _keep(memory_key_padding, None, None, x.shape[1], memory.shape[1])
    return module(x, memory, self_mask, cross_mask)


_PRE = dict(norm_placement="pre", eps=1e-6, fully_masked_rows="uniform")

adapter = TorchModuleAdapter("func-wmt", [
    TorchEntry(
        "mha",
        make=lambda config: MHAOnly(config.d_model, config.n_heads, config.d_model // config.n_heads),
        forward=_mha_forward,
        param_map=attention_map("", "params."),
        # where(mask, logits, finfo.min): a query with no key left spreads its weights evenly
        conventions=Conventions(fully_masked_rows="uniform"),
    ),
    TorchEntry(
        "encoder_layer",
        make=lambda config: EncoderBlockOnly(wmt_config(config)),
        forward=_encoder_layer_forward,
        param_map=encoder_block_map("", "params."),
        conventions=Conventions(**_PRE),
    ),
    TorchEntry(
        "decoder_layer",
        make=lambda config: DecoderBlockOnly(wmt_config(config)),
        forward=_decoder_layer_forward,
        param_map=decoder_block_map("", "params."),
        conventions=Conventions(**_PRE),
    ),
    TorchEntry(
        "seq2seq",
        make=lambda config: Transformer(wmt_config(config)),
        forward=lambda module, src_ids, tgt_ids: module(src_ids, tgt_ids),
        param_map=seq2seq_map,
        conventions=Conventions(**_PRE, pe_layout="concatenated", embedding_scale="prj"),
        config={"padding_idx": 0, "tie_weights": True},
    ),
])
