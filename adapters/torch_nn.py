"""The built-in ``torch.nn`` adapter: PyTorch's own attention and Transformer modules, in
float64 and eval mode, called the way users call them (``batch_first=True`` unless a subject
says otherwise).

Mask polarity is where users' bugs live. Our keep-masks say True = may attend.
``F.scaled_dot_product_attention``'s boolean ``attn_mask`` says the same, so it passes as is;
every mask of ``nn.MultiheadAttention`` and ``nn.Transformer*`` (``key_padding_mask``,
``attn_mask``, ``src_mask``, ``tgt_mask``, ...) says True = may NOT attend, hence ``~keep``.
A ``causal`` input becomes an explicit top-left mask (the alignment PyTorch documents for
``is_causal``), so that it can be combined with the other masks.

What PyTorch 2.13 (CPU, float64) does with a query whose keys are all masked (SPEC.md §4.4)
depends on the code path it takes, and each subject declares what it measured:

- ``F.scaled_dot_product_attention``: zeros.
- ``nn.MultiheadAttention`` with ``need_weights=False`` and distinct query/key/value tensors:
  zeros (it calls the above), so the output row is ``out_proj.bias``. With
  ``need_weights=True`` (its default): NaN. In self-attention (one tensor for query, key and
  value, ``batch_first``, even heads, boolean masks, eval, no grad) its native fast path: NaN.
- ``nn.TransformerEncoderLayer`` in eval without grad runs a fused kernel (the "fast path",
  ``torch._transformer_encoder_layer_fwd``): NaN; with the fast path off: zeros.
- ``nn.TransformerDecoderLayer``: its self-attention passes one tensor three times and so takes
  the MultiheadAttention fast path (NaN), its cross-attention does not (zeros).
- ``nn.TransformerEncoder(enable_nested_tensor=True)``, the default, also inside
  ``nn.Transformer``: padded query positions come out as exactly 0 (see ``NESTED_NOTE``).

On CUDA PyTorch picks one of several SDPA kernels (flash, memory-efficient, cuDNN, math)
silently. ``attention[B]``, ``mha[B]`` and ``encoder_layer[B]`` for each backend B of
``tck.adapters.sdpa.SDPA_BACKENDS`` pin it (``torch.nn.attention.sdpa_kernel``) around every
call: CUDA subjects (``tck run --device cuda``) in the dtypes the kernel takes, which skip on
any other device; see ``sdpa_backend_entries``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tck.reference import Config, Conventions
from tck.reference.model import sinusoidal_pe

from .base import Unsupported
from .config_space import ConfigSpace, parts_without_bias
from .sdpa import SDPA_BACKENDS, pinned
from .torch_module import (
    Chunk,
    ParamMap,
    TorchEntry,
    TorchModuleAdapter,
    linear_params,
    stack_params,
)

Forward = Callable[..., Tensor]

DROPOUT = 0.1  # PyTorch's default; dropout is the identity in eval mode, which the checks see

# ------------------------------------------------------------------------------ notes

SDPA_NOTE = (
    "F.scaled_dot_product_attention returns zeros for a query whose keys are all masked; "
    "its boolean attn_mask has our polarity (True = takes part in attention)."
)
MHA_ROWS_NOTE = (
    "nn.MultiheadAttention's output for a query whose keys are all masked depends on the path "
    "it takes: with need_weights=False and distinct query/key/value tensors it calls "
    "F.scaled_dot_product_attention and returns zeros before out_proj (so the row equals "
    "out_proj.bias); with need_weights=True, its default, it returns NaN; in self-attention "
    "(query, key and value one tensor, batch_first, even heads, boolean masks, eval, no grad) "
    "its native fast path returns NaN."
)
MHA_MASK_NOTE = (
    "nn.MultiheadAttention's key_padding_mask and boolean attn_mask say True = may NOT attend, "
    "the opposite of a keep-mask: the adapter passes ~keep."
)
FAST_PATH_NOTE = (
    "In eval mode without grad, nn.TransformerEncoderLayer runs a fused kernel "
    "(torch._transformer_encoder_layer_fwd, its 'fast path'; needs an even number of heads). "
    "Measured against the Python path (torch.backends.mha.set_fastpath_enabled(False)): equal "
    "to about 1e-15, padded query positions are left as the formula gives them, but a query "
    "whose keys are all masked gets NaN where the Python path gives the zero-attention row."
)
FAST_PATH_GELU_NOTE = (
    "On CUDA the fast path's FFN computes the tanh approximation of GELU for activation='gelu' "
    "(measured on an H200 with torch 2.11.0+cu130, 2026-11-30: ffn.activation_gelu_tanh, "
    "3.3e-4 off in float32; docs/benchmarks/h200-2026-11-30): the module promises the exact "
    "GELU, which it computes on the CPU, so tck run --device cuda reports it as a failure."
)
SLOW_PATH_NOTE = (
    "The fast path of nn.TransformerEncoderLayer and nn.MultiheadAttention is switched off "
    "around the call (torch.backends.mha.set_fastpath_enabled(False), then restored): the "
    "Python path calls F.scaled_dot_product_attention, which gives zeros for a query whose keys "
    "are all masked."
)
DECODER_ROWS_NOTE = (
    "Fully-masked rows are declared undefined because they differ within one layer: "
    "nn.TransformerDecoderLayer's self-attention passes one tensor as query, key and value with "
    "boolean masks, so nn.MultiheadAttention takes its fast path and returns NaN for a query "
    "with no key (a target whose first token is padding); its cross-attention has distinct "
    "tensors and need_weights=False and returns zeros (a source that is all padding). A float "
    "tgt_mask (nn.Transformer.generate_square_subsequent_mask) blocks the fast path: zeros."
)
NESTED_NOTE = (
    "nn.TransformerEncoder(enable_nested_tensor=True), its default and what nn.Transformer "
    "builds: for a post-LN stack with even heads, given only a right-padded src_key_padding_mask "
    "in eval without grad, it packs the real tokens into a nested tensor and unpacks with 0.0, "
    "so every padded query position of the output is exactly 0 (before a final norm; after "
    "nn.Transformer's encoder norm it equals norm.bias), not the value SPEC.md §4.2 defines. "
    "Real positions match the formula to about 1e-15, and a sequence that is all padding comes "
    "out as zeros, not NaN. With an attention mask or left padding it falls back to the "
    "per-layer fast path (NaN for a query with no key)."
)
FINAL_NORM_NOTE = (
    "nn.Transformer always ends its encoder and its decoder with a LayerNorm, post-LN included "
    "(final_norm='always'); they are the canonical encoder.norm and decoder.norm."
)
SEQ2SEQ_NESTED_NOTE = (
    "nn.Transformer's encoder runs the nested-tensor path (enable_nested_tensor=True): the "
    "memory at padded source positions is replaced by norm(0) = encoder.norm.bias, which "
    "memory_key_padding_mask hides from the cross-attention, so the logits are unaffected."
)
FLOAT16_GRAD_NOTE = (
    "Gradients in float16 are not offered: measured on CPU (torch 2.13), the float16 backward "
    "through nn.TransformerDecoderLayer (alone, stacked, and inside nn.Transformer) is up to "
    "~70x further from float64 autograd than a naive float16 implementation's, at the "
    "decoder's ffn.fc1 (the forward is within the tolerance rule, and SDPA's math backend "
    "changes nothing), beyond the multipliers of SPEC.md §10.8; float32 and bfloat16 "
    "gradients are within them."
)
NO_FLOAT16_GRAD = ("float64", "float32", "bfloat16")
SEQ2SEQ_NOTE = (
    "nn.Transformer is only the encoder-decoder core: the adapter wraps it the way users do, "
    "with one nn.Embedding(vocab, d_model, padding_idx) shared by source, target and the output "
    "projection, embeddings times sqrt(d_model) plus the interleaved sinusoidal encoding, "
    "padding masks from padding_idx and a boolean causal tgt_mask."
)

# ------------------------------------------------------------------------------ masks


def _causal_keep(lq: int, lk: int, device: torch.device) -> Tensor:
    """Query i may attend key j <= i: top-left, the alignment PyTorch documents for
    ``F.scaled_dot_product_attention(is_causal=True)`` (``torch.ones(L, S).tril()``)."""
    return torch.ones(lq, lk, dtype=torch.bool, device=device).tril()


def _and(a: Tensor | None, b: Tensor | None) -> Tensor | None:
    if a is None or b is None:
        return a if b is None else b
    return a & b


def _attn_keep(
    lq: int, lk: int, attn_mask: Tensor | None, causal: bool, device: torch.device
) -> Tensor | None:
    """attn_mask AND the causal mask, as one (Lq, Lk) keep-mask (None: no mask)."""
    return _and(attn_mask, _causal_keep(lq, lk, device) if causal else None)


def _ignore(keep: Tensor | None) -> Tensor | None:
    """A keep-mask (True = may attend) as torch.nn's masks want it (True = may NOT attend)."""
    return None if keep is None else ~keep


@contextmanager
def _fast_path(enabled: bool) -> Iterator[None]:
    """Switch PyTorch's fast path of nn.MultiheadAttention and nn.TransformerEncoder(Layer)
    on or off for one call, restoring the caller's setting afterwards: a subject must not
    depend on what the process happened to set."""
    switch = getattr(torch.backends, "mha", None)
    if switch is None:  # torch < 2.2 has no switch; its fast path is always on
        if not enabled:
            raise Unsupported("this torch has no torch.backends.mha switch for the fast path")
        yield
        return
    previous = switch.get_fastpath_enabled()
    switch.set_fastpath_enabled(enabled)
    try:
        yield
    finally:
        switch.set_fastpath_enabled(previous)


# ------------------------------------------------------------------------------ configs


def _check_heads(config: Config, module: str) -> None:
    """nn.MultiheadAttention cuts d_model into n_heads equal heads for queries, keys and values."""
    dk, dv, h, d = config.head_dim_k, config.head_dim_v, config.n_heads, config.d_model
    if dk != dv:
        raise Unsupported(
            f"{module} has one head width for queries, keys and values: it cannot express "
            f"d_k={dk} != d_v={dv}"
        )
    if dk * h != d:
        raise Unsupported(
            f"{module} splits d_model={d} into n_heads={h} heads of d_model / n_heads: it "
            f"cannot express d_k * n_heads = {dk} * {h} != d_model"
        )


def _check_layer(config: Config, module: str, *, fast_path: bool = False) -> None:
    _check_heads(config, module)
    if parts_without_bias(config):
        raise Unsupported(
            f"{module} has one bias switch for its attention, FFN and LayerNorms together "
            "(bias=False drops the LayerNorm biases too): it cannot leave out the biases of one "
            "part, as this config's canonical layout does (SPEC.md §0.2, §0.5)"
        )
    if fast_path and config.n_heads % 2:
        raise Unsupported(
            f"PyTorch's fast path needs an even number of heads (n_heads={config.n_heads}), so "
            "the NaN rows this subject declares would not hold (encoder_layer[slow_path] has none)"
        )


# What the subjects built on nn.MultiheadAttention can be (Subject.supports, SPEC.md §0.6),
# so that the suite draws only configs they take and a report shows the limits; the checks
# above still guard a direct build. One head width, d_model / n_heads, for queries, keys
# and values; the fast path needs the attention's bias; the seq2seq wrapper ties its tables.
MHA_SPACE = ConfigSpace(split_heads=True)
# The fused kernels take heads of 8 lanes or multiples of them (cuDNN: "head_dim should be a
# multiple of 8"; the memory-efficient kernel: "divisible by 4"), so the backend subjects are
# checked with 8-wide heads. At the suite's default width (6) they refused every input on an
# H200, and nothing about cuDNN's or the efficient kernel's maths was verified.
BACKEND_HEAD_DIM = 8
BACKEND_SPACE = ConfigSpace(head_dim=BACKEND_HEAD_DIM)
BACKEND_MHA_SPACE = ConfigSpace(split_heads=True, head_dim=BACKEND_HEAD_DIM)
FAST_PATH_SPACE = ConfigSpace(split_heads=True, biases={"attention": True})
SEQ2SEQ_SPACE = ConfigSpace(split_heads=True, tied=True)


def _check_stack(n_layers: int, module: str, what: str = "n_layers") -> None:
    if n_layers < 1:
        raise Unsupported(f"{module} indexes its first layer: it cannot have {what}={n_layers}")


# ------------------------------------------------------------------------- param maps


def _mha_map(config: Config, ours: str = "", theirs: str = "") -> ParamMap:
    """q, k and v are the three dim-0 thirds of in_proj_weight / in_proj_bias, in that order."""
    mapping: ParamMap = {}
    for index, name in enumerate("qkv"):
        mapping[f"{ours}{name}.weight"] = Chunk(f"{theirs}in_proj_weight", index, 3)
        if config.has_attention_bias:
            mapping[f"{ours}{name}.bias"] = Chunk(f"{theirs}in_proj_bias", index, 3)
    out = linear_params(f"{ours}o.", f"{theirs}out_proj.", bias=config.has_attention_out_bias)
    return {**mapping, **out}


def _encoder_layer_map(config: Config, ours: str = "", theirs: str = "") -> ParamMap:
    return {
        **_mha_map(config, f"{ours}self_attn.", f"{theirs}self_attn."),
        **linear_params(f"{ours}norm1.", f"{theirs}norm1."),
        **linear_params(f"{ours}ffn.fc1.", f"{theirs}linear1.", bias=config.has_ffn_bias),
        **linear_params(f"{ours}ffn.fc2.", f"{theirs}linear2.", bias=config.has_ffn_bias),
        **linear_params(f"{ours}norm2.", f"{theirs}norm2."),
    }


def _decoder_layer_map(config: Config, ours: str = "", theirs: str = "") -> ParamMap:
    return {
        **_mha_map(config, f"{ours}self_attn.", f"{theirs}self_attn."),
        **linear_params(f"{ours}norm1.", f"{theirs}norm1."),
        **_mha_map(config, f"{ours}cross_attn.", f"{theirs}multihead_attn."),
        **linear_params(f"{ours}norm2.", f"{theirs}norm2."),
        **linear_params(f"{ours}ffn.fc1.", f"{theirs}linear1.", bias=config.has_ffn_bias),
        **linear_params(f"{ours}ffn.fc2.", f"{theirs}linear2.", bias=config.has_ffn_bias),
        **linear_params(f"{ours}norm3.", f"{theirs}norm3."),
    }


LayerMap = Callable[[Config, str, str], ParamMap]


def _stack_map(
    config: Config, layer: LayerMap, n_layers: int, final_norm: bool, ours: str, theirs: str
) -> ParamMap:
    return stack_params(
        functools.partial(layer, config),
        n_layers,
        ours,
        theirs + "layers.{i}.",
        f"{theirs}norm." if final_norm else None,
    )


# ---------------------------------------------------------------------------- attention


def _no_module(config: Config) -> nn.Module:
    return nn.Module()  # F.scaled_dot_product_attention is a function: nothing to build


def _attention(
    _: nn.Module,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    keep_mask: Tensor | None = None,
    causal: bool = False,
) -> Tensor:
    if causal and keep_mask is not None:
        # SDPA refuses attn_mask together with is_causal=True: fold the causal mask into ours,
        # top-left as PyTorch documents is_causal, and pass the combination.
        keep_mask = keep_mask & _causal_keep(q.shape[-2], k.shape[-2], q.device)
        causal = False
    # SDPA's boolean attn_mask means True = takes part in attention: our polarity, no ~.
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep_mask, is_causal=causal)


# ---------------------------------------------------------------------------------- mha


def _make_mha(config: Config, *, batch_first: bool = True) -> nn.MultiheadAttention:
    _check_heads(config, "nn.MultiheadAttention")
    if config.has_attention_bias != config.has_attention_out_bias:
        raise Unsupported(
            "nn.MultiheadAttention has one bias switch for in_proj (q, k, v) and out_proj "
            f"together: it cannot have q/k/v bias {config.has_attention_bias} with output "
            f"bias {config.has_attention_out_bias} (SPEC.md §0.5)"
        )
    return nn.MultiheadAttention(
        config.d_model, config.n_heads, bias=config.has_attention_bias, batch_first=batch_first
    )


def _make_mha_fast_path(config: Config) -> nn.MultiheadAttention:
    if not config.has_attention_bias or config.n_heads % 2:
        raise Unsupported(
            "nn.MultiheadAttention's fast path needs a bias and an even number of heads "
            f"(attention bias {config.has_attention_bias}, n_heads={config.n_heads}), so the "
            "NaN rows this subject declares would not hold: use mha"
        )
    return _make_mha(config)


def _mha_forward(*, need_weights: bool = False, seq_first: bool = False) -> Forward:
    """The forward of an nn.MultiheadAttention subject, called with these settings."""

    def forward(
        m: nn.MultiheadAttention,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding: Tensor | None = None,
        attn_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        keep = _attn_keep(query.shape[1], key.shape[1], attn_mask, causal, query.device)
        if seq_first:  # the module wants (L, B, D); the boundary speaks (B, L, D)
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        out, _ = m(
            query,
            key,
            value,
            key_padding_mask=_ignore(key_padding),  # True = this key is padding, ignore it
            attn_mask=_ignore(keep),  # boolean: True = this query may NOT attend this key
            need_weights=need_weights,
        )
        return out.transpose(0, 1) if seq_first else out

    return forward


def _mha_self_fast_path(
    m: nn.MultiheadAttention,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_padding: Tensor | None = None,
    attn_mask: Tensor | None = None,
    causal: bool = False,
) -> Tensor:
    # PyTorch takes the fast path only when query, key and value are the *same* tensor
    # (`query is key`), which separate numpy inputs never are: pass one tensor three times.
    if not (torch.equal(query, key) and torch.equal(key, value)):
        raise Unsupported(
            "mha[self_fast_path] is nn.MultiheadAttention's self-attention fast path, taken only "
            "when query, key and value are one tensor; these inputs differ"
        )
    with _fast_path(True):
        return _mha_forward()(m, query, query, query, key_padding, attn_mask, causal)


# ----------------------------------------------------------------------------- LayerNorm


def _layer_norm(m: nn.LayerNorm, x: Tensor) -> Tensor:
    return m(x)


# ---------------------------------------------------------------------- encoder layers


def _encoder_layer_factory(
    norm_first: bool, activation: str, *, fast_path: bool
) -> Callable[[Config], nn.Module]:
    def make(config: Config) -> nn.TransformerEncoderLayer:
        _check_layer(config, "nn.TransformerEncoderLayer", fast_path=fast_path)
        return _encoder_layer_module(config, norm_first, activation)

    return make


def _encoder_layer_module(
    config: Config, norm_first: bool, activation: str = "relu"
) -> nn.TransformerEncoderLayer:
    return nn.TransformerEncoderLayer(
        config.d_model,
        config.n_heads,
        dim_feedforward=config.d_ff,
        dropout=DROPOUT,
        activation=activation,
        batch_first=True,
        norm_first=norm_first,
    )


def _encoder_layer_forward(*, fast_path: bool) -> Forward:
    """The forward of an nn.TransformerEncoderLayer subject, with PyTorch's fast path on/off."""

    def forward(
        m: nn.TransformerEncoderLayer,
        x: Tensor,
        key_padding: Tensor | None = None,
        attn_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        keep = _attn_keep(x.shape[1], x.shape[1], attn_mask, causal, x.device)
        with _fast_path(fast_path):
            # Both masks in torch.nn polarity: True = padding / may NOT attend.
            return m(x, src_mask=_ignore(keep), src_key_padding_mask=_ignore(key_padding))

    return forward


# ---------------------------------------------------------------------- decoder layers


def _decoder_layer_module(config: Config, norm_first: bool) -> nn.TransformerDecoderLayer:
    return nn.TransformerDecoderLayer(
        config.d_model,
        config.n_heads,
        dim_feedforward=config.d_ff,
        dropout=DROPOUT,
        batch_first=True,
        norm_first=norm_first,
    )


def _decoder_layer_factory(norm_first: bool) -> Callable[[Config], nn.Module]:
    def make(config: Config) -> nn.TransformerDecoderLayer:
        _check_layer(config, "nn.TransformerDecoderLayer")
        return _decoder_layer_module(config, norm_first)

    return make


def _decoder_masks(
    x: Tensor, key_padding: Tensor | None, memory_key_padding: Tensor | None, causal: bool
) -> dict[str, Tensor | None]:
    """The keyword masks of nn.TransformerDecoder(Layer), all True = may NOT attend."""
    self_keep = _causal_keep(x.shape[1], x.shape[1], x.device) if causal else None
    return {
        "tgt_mask": _ignore(self_keep),
        "tgt_key_padding_mask": _ignore(key_padding),
        "memory_key_padding_mask": _ignore(memory_key_padding),
    }


def _decoder(
    m: nn.Module,
    x: Tensor,
    memory: Tensor,
    key_padding: Tensor | None = None,
    memory_key_padding: Tensor | None = None,
    causal: bool = False,
) -> Tensor:
    """One forward for nn.TransformerDecoderLayer and nn.TransformerDecoder (same keywords)."""
    with _fast_path(True):  # as users get it: the self-attention takes the MHA fast path
        return m(x, memory, **_decoder_masks(x, key_padding, memory_key_padding, causal))


# ------------------------------------------------------------------------------ stacks


def _encoder_factory(norm_first: bool, *, nested: bool = False) -> Callable[[Config], nn.Module]:
    def make(config: Config) -> nn.TransformerEncoder:
        _check_layer(config, "nn.TransformerEncoderLayer", fast_path=True)
        _check_stack(config.n_layers, "nn.TransformerEncoder")
        return nn.TransformerEncoder(
            _encoder_layer_module(config, norm_first),
            num_layers=config.n_layers,
            # A pre-LN stack ends with a norm (SPEC.md §7.3); PyTorch leaves that to the user.
            norm=nn.LayerNorm(config.d_model) if norm_first else None,
            enable_nested_tensor=nested,
        )

    return make


def _encoder(
    m: nn.TransformerEncoder,
    x: Tensor,
    key_padding: Tensor | None = None,
    attn_mask: Tensor | None = None,
    causal: bool = False,
) -> Tensor:
    keep = _attn_keep(x.shape[1], x.shape[1], attn_mask, causal, x.device)
    with _fast_path(True):
        return m(x, mask=_ignore(keep), src_key_padding_mask=_ignore(key_padding))


def _nested_encoder(
    m: nn.TransformerEncoder, x: Tensor, key_padding: Tensor | None = None, **masks: Any
) -> Tensor:
    """PyTorch's default encoder on the input that sends it down the nested-tensor path: key
    padding alone. Other masks take the per-layer path, which the "encoder" subject covers."""
    if any(value is not None and value is not False for value in masks.values()):
        raise Unsupported(
            "encoder[nested_tensor] models the nested-tensor path, which runs with a key "
            "padding mask alone; with an attention or causal mask it is the 'encoder' subject"
        )
    return _encoder(m, x, key_padding)


def _decoder_factory(norm_first: bool) -> Callable[[Config], nn.Module]:
    def make(config: Config) -> nn.TransformerDecoder:
        _check_layer(config, "nn.TransformerDecoderLayer")
        _check_stack(config.n_decoder_layers, "nn.TransformerDecoder", "n_decoder_layers")
        return nn.TransformerDecoder(
            _decoder_layer_module(config, norm_first),
            num_layers=config.n_decoder_layers,
            norm=nn.LayerNorm(config.d_model) if norm_first else None,
        )

    return make


def _encoder_map(norm_first: bool) -> Callable[[Config], ParamMap]:
    return lambda c: _stack_map(c, _encoder_layer_map, c.n_layers, norm_first, "", "")


def _decoder_map(norm_first: bool) -> Callable[[Config], ParamMap]:
    return lambda c: _stack_map(c, _decoder_layer_map, c.n_decoder_layers, norm_first, "", "")


# ----------------------------------------------------------------------------- seq2seq


class Seq2Seq(nn.Module):
    """nn.Transformer wrapped into a full model the way users do it (tied embeddings)."""

    def __init__(self, config: Config):
        super().__init__()
        self.embedding = nn.Embedding(config.vocab_size, config.d_model, config.padding_idx)
        self.transformer = nn.Transformer(
            d_model=config.d_model,
            nhead=config.n_heads,
            num_encoder_layers=config.n_layers,
            num_decoder_layers=config.n_decoder_layers,
            dim_feedforward=config.d_ff,
            dropout=DROPOUT,
            batch_first=True,
        )
        self.register_buffer("pe", sinusoidal_pe(config.max_len, config.d_model), persistent=False)
        self.scale = math.sqrt(config.d_model)
        self.padding_idx = config.padding_idx

    def embed(self, ids: Tensor) -> Tensor:
        length = ids.shape[1]
        if length > self.pe.shape[0]:
            raise ValueError(
                f"sequence length {length} exceeds max_len={self.pe.shape[0]} (SPEC.md §2.2)"
            )
        return self.embedding(ids) * self.scale + self.pe[:length]

    def padding(self, ids: Tensor) -> Tensor | None:
        """torch.nn's key_padding_mask: True = this token is padding, ignore it."""
        return None if self.padding_idx is None else ids == self.padding_idx

    def forward(self, src_ids: Tensor, tgt_ids: Tensor) -> Tensor:
        lt = tgt_ids.shape[1]
        src_padding = self.padding(src_ids)
        out = self.transformer(
            self.embed(src_ids),
            self.embed(tgt_ids),
            tgt_mask=_ignore(_causal_keep(lt, lt, tgt_ids.device)),  # True above the diagonal
            src_key_padding_mask=src_padding,
            tgt_key_padding_mask=self.padding(tgt_ids),
            memory_key_padding_mask=src_padding,
        )
        return out @ self.embedding.weight.T  # logits; the output projection is the table


def _make_seq2seq(config: Config) -> Seq2Seq:
    _check_layer(config, "nn.Transformer")
    _check_stack(config.n_layers, "nn.TransformerEncoder")
    _check_stack(config.n_decoder_layers, "nn.TransformerDecoder", "n_decoder_layers")
    if not config.tie_weights:
        raise Unsupported(
            "the torch.nn seq2seq wrapper ties one embedding table to source, target and "
            "output projection (SPEC.md §8.3): untied weights are not offered"
        )
    return Seq2Seq(config)


def _seq2seq(m: Seq2Seq, src_ids: Tensor, tgt_ids: Tensor) -> Tensor:
    with _fast_path(True):
        return m(src_ids, tgt_ids)


def _seq2seq_map(config: Config) -> ParamMap:
    return {
        "embedding.weight": "embedding.weight",
        **_stack_map(
            config, _encoder_layer_map, config.n_layers, True, "encoder.", "transformer.encoder."
        ),
        **_stack_map(
            config,
            _decoder_layer_map,
            config.n_decoder_layers,
            True,
            "decoder.",
            "transformer.decoder.",
        ),
    }


# ---------------------------------------------------------------------------- subjects


def _placement(norm_first: bool) -> str:
    return "pre" if norm_first else "post"


def _encoder_layer_entries() -> list[TorchEntry]:
    entries = []
    for name, norm_first, activation in (
        ("encoder_layer", False, "relu"),
        ("encoder_layer[norm_first]", True, "relu"),
        ("encoder_layer[gelu]", False, "gelu"),
        ("encoder_layer[norm_first,gelu]", True, "gelu"),
    ):
        entries.append(
            TorchEntry(
                "encoder_layer",
                name=name,
                make=_encoder_layer_factory(norm_first, activation, fast_path=True),
                forward=_encoder_layer_forward(fast_path=True),
                supports=MHA_SPACE,
                param_map=_encoder_layer_map,
                conventions=Conventions(
                    norm_placement=_placement(norm_first),
                    activation=activation,
                    fully_masked_rows="nan",
                ),
                notes=(
                    FAST_PATH_NOTE,
                    *((FAST_PATH_GELU_NOTE,) if activation == "gelu" else ()),
                    MHA_MASK_NOTE,
                ),
            )
        )
    entries.append(
        TorchEntry(
            "encoder_layer",
            name="encoder_layer[slow_path]",
            make=_encoder_layer_factory(False, "relu", fast_path=False),
            forward=_encoder_layer_forward(fast_path=False),
            supports=MHA_SPACE,
            param_map=_encoder_layer_map,
            notes=(SLOW_PATH_NOTE, MHA_MASK_NOTE),
        )
    )
    return entries


def _mha_entries() -> list[TorchEntry]:
    return [
        TorchEntry(
            "mha",
            make=_make_mha,
            forward=_mha_forward(),
            supports=MHA_SPACE,
            param_map=_mha_map,
            notes=(MHA_ROWS_NOTE, MHA_MASK_NOTE, "Called with need_weights=False."),
        ),
        TorchEntry(
            "mha",
            name="mha[seq_first]",
            make=lambda config: _make_mha(config, batch_first=False),
            forward=_mha_forward(seq_first=True),
            supports=MHA_SPACE,
            param_map=_mha_map,
            notes=(MHA_ROWS_NOTE, MHA_MASK_NOTE, "batch_first=False: (L, B, D) tensors."),
        ),
        TorchEntry(
            "mha",
            name="mha[need_weights]",
            make=_make_mha,
            forward=_mha_forward(need_weights=True),
            supports=MHA_SPACE,
            param_map=_mha_map,
            conventions=Conventions(fully_masked_rows="nan"),
            notes=(
                MHA_ROWS_NOTE,
                MHA_MASK_NOTE,
                "Called with need_weights=True, PyTorch's default, the weights discarded.",
            ),
        ),
        TorchEntry(
            "mha",
            name="mha[self_fast_path]",
            make=_make_mha_fast_path,
            forward=_mha_self_fast_path,
            supports=FAST_PATH_SPACE,
            param_map=_mha_map,
            conventions=Conventions(fully_masked_rows="nan"),
            notes=(
                MHA_ROWS_NOTE,
                MHA_MASK_NOTE,
                "Self-attention only: one tensor is passed as query, key and value, so the "
                "native fast path runs (needs an even number of heads and a bias); other "
                "inputs are Unsupported.",
            ),
        ),
    ]


def _decoder_layer_entries() -> list[TorchEntry]:
    return [
        TorchEntry(
            "decoder_layer",
            name=f"decoder_layer{suffix}",
            make=_decoder_layer_factory(norm_first),
            forward=_decoder,
            supports=MHA_SPACE,
            param_map=_decoder_layer_map,
            conventions=Conventions(
                norm_placement=_placement(norm_first), fully_masked_rows="undefined"
            ),
            notes=(DECODER_ROWS_NOTE, MHA_MASK_NOTE, FLOAT16_GRAD_NOTE),
            grad_dtypes=NO_FLOAT16_GRAD,
        )
        for suffix, norm_first in (("", False), ("[norm_first]", True))
    ]


def _encoder_entries() -> list[TorchEntry]:
    entries = [
        TorchEntry(
            "encoder",
            name=f"encoder{suffix}",
            make=_encoder_factory(norm_first),
            forward=_encoder,
            supports=MHA_SPACE,
            param_map=_encoder_map(norm_first),
            conventions=Conventions(norm_placement=_placement(norm_first), fully_masked_rows="nan"),
            notes=(
                "nn.TransformerEncoder(enable_nested_tensor=False): each layer runs its fast "
                "path. " + FAST_PATH_NOTE,
                MHA_MASK_NOTE,
            ),
        )
        for suffix, norm_first in (("", False), ("[norm_first]", True))
    ]
    entries.append(
        TorchEntry(
            "encoder",
            name="encoder[nested_tensor]",
            make=_encoder_factory(False, nested=True),
            forward=_nested_encoder,
            supports=MHA_SPACE,
            param_map=_encoder_map(False),
            conventions=Conventions(fully_masked_rows="undefined", padded_query_rows="zero"),
            notes=(NESTED_NOTE, MHA_MASK_NOTE),
        )
    )
    return entries


def _decoder_entries() -> list[TorchEntry]:
    return [
        TorchEntry(
            "decoder",
            name=f"decoder{suffix}",
            make=_decoder_factory(norm_first),
            forward=_decoder,
            supports=MHA_SPACE,
            param_map=_decoder_map(norm_first),
            conventions=Conventions(
                norm_placement=_placement(norm_first), fully_masked_rows="undefined"
            ),
            notes=(DECODER_ROWS_NOTE, MHA_MASK_NOTE, FLOAT16_GRAD_NOTE),
            grad_dtypes=NO_FLOAT16_GRAD,
        )
        for suffix, norm_first in (("", False), ("[norm_first]", True))
    ]


# ------------------------------------------------------------------- SDPA backends

# The dtypes each backend's CUDA kernel takes (PyTorch's sdp_utils): flash and cuDNN half
# precision only, memory-efficient float32 too, math every dtype.
BACKEND_DTYPES: dict[str, tuple[str, ...]] = {
    "flash": ("float16", "bfloat16"),
    "efficient": ("float32", "float16", "bfloat16"),
    "cudnn": ("float16", "bfloat16"),
    "math": ("float64", "float32", "float16", "bfloat16"),
}
BACKEND_DEVICES_NOTE = (
    "it pins one of SDPA's CUDA kernels, so it runs with tck run --device cuda (on the CPU "
    "the unpinned subjects check the kernels PyTorch has there)"
)


def _backend_note(backend: str, what: str) -> str:
    return (
        f"{what} with F.scaled_dot_product_attention pinned to SDPBackend."
        f"{SDPA_BACKENDS[backend]} (torch.nn.attention.sdpa_kernel) around every call; an input "
        "the kernel refuses (an attention mask, a head size, a dtype) is a skip that gives "
        "torch's reason. Declared as the same module measures on the CPU: where the kernel "
        "computes something else, the checks fail with the code of what it does."
    )


def _pinned(backend: str, name: str, forward: Forward) -> Forward:
    """``forward`` run with SDPA pinned to ``backend`` (same signature: the adapter reads it)."""

    @functools.wraps(forward)
    def pinned_forward(module: nn.Module, *args: Any, **kwargs: Any) -> Tensor:
        with pinned(backend, f"torch.nn:{name}"):
            return forward(module, *args, **kwargs)

    return pinned_forward


def sdpa_backend_entries(devices: tuple[str, ...] = ("cuda",)) -> list[TorchEntry]:
    """``attention[B]``, ``mha[B]`` and ``encoder_layer[B]`` for each SDPA backend B, on
    ``devices`` (CUDA; the tests pass the CPU too, to run the pinning path without a GPU)."""
    entries = []
    for backend in SDPA_BACKENDS:
        dtypes = BACKEND_DTYPES[backend]
        common = {"dtypes": dtypes, "devices": devices, "devices_note": BACKEND_DEVICES_NOTE}
        name = f"attention[{backend}]"
        entries.append(
            TorchEntry(
                "attention",
                name=name,
                make=_no_module,
                forward=_pinned(backend, name, _attention),
                supports=BACKEND_SPACE,
                notes=(_backend_note(backend, "F.scaled_dot_product_attention"), SDPA_NOTE),
                **common,
            )
        )
        name = f"mha[{backend}]"
        entries.append(
            TorchEntry(
                "mha",
                name=name,
                make=_make_mha,
                forward=_pinned(backend, name, _mha_forward()),
                supports=BACKEND_MHA_SPACE,
                param_map=_mha_map,
                notes=(
                    _backend_note(backend, "nn.MultiheadAttention(need_weights=False)"),
                    MHA_ROWS_NOTE,
                    MHA_MASK_NOTE,
                ),
                **common,
            )
        )
        name = f"encoder_layer[{backend}]"
        entries.append(
            TorchEntry(
                "encoder_layer",
                name=name,
                make=_encoder_layer_factory(False, "relu", fast_path=True),
                forward=_pinned(backend, name, _encoder_layer_forward(fast_path=True)),
                supports=BACKEND_MHA_SPACE,
                param_map=_encoder_layer_map,
                conventions=Conventions(fully_masked_rows="nan"),
                notes=(
                    _backend_note(backend, "nn.TransformerEncoderLayer's fast path"),
                    FAST_PATH_NOTE,
                    MHA_MASK_NOTE,
                ),
                **common,
            )
        )
    return entries


adapter = TorchModuleAdapter(
    "torch.nn",
    [
        TorchEntry("attention", make=_no_module, forward=_attention, notes=(SDPA_NOTE,)),
        *_mha_entries(),
        TorchEntry(
            "layer_norm",
            make=lambda c: nn.LayerNorm(c.d_model),
            forward=_layer_norm,
            notes=("nn.LayerNorm: biased variance, eps=1e-5 inside the square root.",),
        ),
        TorchEntry(
            "layer_norm",
            name="layer_norm[eps1e-6]",
            make=lambda c: nn.LayerNorm(c.d_model, eps=1e-6),
            forward=_layer_norm,
            conventions=Conventions(eps=1e-6),
            notes=(
                "nn.LayerNorm(eps=1e-6), the value ViT code (timm, the original JAX ViT) passes.",
            ),
        ),
        *_encoder_layer_entries(),
        *_decoder_layer_entries(),
        *_encoder_entries(),
        *_decoder_entries(),
        TorchEntry(
            "seq2seq",
            make=_make_seq2seq,
            forward=_seq2seq,
            supports=SEQ2SEQ_SPACE,
            param_map=_seq2seq_map,
            conventions=Conventions(final_norm="always", fully_masked_rows="undefined"),
            notes=(
                SEQ2SEQ_NOTE,
                FINAL_NORM_NOTE,
                DECODER_ROWS_NOTE,
                SEQ2SEQ_NESTED_NOTE,
                FLOAT16_GRAD_NOTE,
            ),
            grad_dtypes=NO_FLOAT16_GRAD,
        ),
        *sdpa_backend_entries(),
    ],
)
