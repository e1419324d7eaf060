"""The built-in HuggingFace adapters ``hf.bert`` and ``hf.vit``: transformers' ``BertModel`` and
``ViTForImageClassification``, randomly initialised from small configs (nothing is downloaded),
in float64 and eval mode, cut into the pieces SPEC.md names.

Every subject is built from a whole model (``BertModel``, ``ViTForImageClassification``), so
its weights come from transformers' own initialisation and its config carries the attention
implementation, and comes in two variants: ``attn_implementation="eager"`` (transformers'
matmul-softmax-matmul) and ``"sdpa"`` (``F.scaled_dot_product_attention``).

Masks are built by transformers itself (``masking_utils``), the way its models build them:
a 2D ``attention_mask`` says 1 = attend, our keep polarity, so key padding passes as is; an
``attn_mask`` and ``causal`` become mask functions (True = attend) and'ed into the same mask.
For eager attention the mask becomes additive, 0 or ``torch.finfo(dtype).min``: a finite fill,
so in float64 and float32 a query whose keys are all masked spreads evenly over every key (the
mean of V), and in float16 the fill overflows and the row is NaN: eager subjects declare
``fully_masked_rows="undefined"``. For sdpa the mask stays boolean and PyTorch returns zeros.

Requires the layout of transformers 5.23 (``ViTAttention.q_proj``, ``ViTModel.layers``); see
``REQUIRES``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from tck.usage import INSTALL

try:  # one clear line from load_adapter when transformers is missing or broken
    import transformers
    from transformers import BertConfig, BertModel, ViTConfig, ViTForImageClassification
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import (
        ALL_MASK_ATTENTION_FUNCTIONS,
        and_masks,
        bidirectional_mask_function,
        causal_mask_function,
        create_bidirectional_mask,
    )
    from transformers.models.bert.modeling_bert import eager_attention_forward as bert_eager
    from transformers.models.vit.modeling_vit import ViTAttention
    from transformers.models.vit.modeling_vit import eager_attention_forward as vit_eager
except Exception as err:  # a broken install fails in many ways, not only ImportError
    raise ImportError(
        f"the hf adapters need transformers ({INSTALL['hf']}), and importing it failed: "
        f"{type(err).__name__}: {err}"
    ) from err

from tck.reference import Config, Conventions
from tck.reference.conventions import FullyMaskedRows

from .base import Subject, Unsupported
from .config_space import ConfigSpace, parts_without_bias
from .torch_module import (
    ParamMap,
    TorchEntry,
    TorchHandle,
    TorchModuleAdapter,
    linear_params,
    stack_params,
)

REQUIRES = "5.23"
if not hasattr(ViTAttention(ViTConfig(hidden_size=4, num_attention_heads=1)), "q_proj"):
    raise ImportError(
        f"the hf adapters know the module layout of transformers >= {REQUIRES} (ViTAttention."
        f"q_proj, ViTModel.layers); transformers {transformers.__version__} is installed: "
        f"{INSTALL['hf']}"
    )

IMPLEMENTATIONS = ("eager", "sdpa")
# What each attention implementation returns for a query whose keys are all masked (§4.4).
# eager depends on the dtype (EAGER_ROWS_NOTE), so it promises nothing.
ROWS: dict[str, FullyMaskedRows] = {"eager": "undefined", "sdpa": "zero"}
LOWER_PRECISION = ("float32", "float16", "bfloat16")

# ------------------------------------------------------------------------------ notes

MASK_NOTE = (
    "Masks are built by transformers.masking_utils as its models build them: the 2D "
    "attention_mask says 1 = attend (our keep polarity, passed as is); attn_mask and causal "
    "are and'ed in as mask functions (causal_mask_function: key <= query, top-left)."
)
EAGER_ROWS_NOTE = (
    "attn_implementation='eager' adds the mask to the scores as 0 or torch.finfo(dtype).min, "
    "a finite fill: in float64 and float32 a query whose keys are all masked gets equal scores "
    "on every key and so the mean of V (as -1e9-style masks do); in float16, finfo.min plus a "
    "negative score overflows to -inf and the row is NaN (both measured). Fully-masked rows "
    "are therefore declared undefined."
)
SDPA_ROWS_NOTE = (
    "attn_implementation='sdpa' passes a boolean mask to F.scaled_dot_product_attention, "
    "which returns zeros for a query whose keys are all masked (PyTorch 2.13, CPU, float64)."
)
SELF_ONLY_NOTE = (
    "Self-attention only: the module projects one hidden_states tensor into queries, keys and "
    "values, so calls with distinct query, key and value are Unsupported (oracle equality of "
    "the projections is checked through encoder_layer)."
)
ATTENTION_NOTE = (
    "transformers' attention function called as its modules call it, with scaling=None (the "
    "function's default scale) and the mask from masking_utils; transformers builds one mask "
    "for all heads, so a keep-mask that differs between heads is Unsupported."
)
BERT_EPS_NOTE = "BertConfig.layer_norm_eps defaults to 1e-12; hidden_act 'gelu' is the exact GELU."
BERT_MODEL_NOTE = (
    "BertModel as a whole is not offered: BertEmbeddings adds learned position and token-type "
    "embeddings and a LayerNorm, and BertModel has no decoder or output projection, which "
    "SPEC.md's seq2seq model (§8) needs; its token table is the embedding subject."
)
VIT_EPS_NOTE = "ViTConfig.layer_norm_eps defaults to 1e-12 (timm and the JAX ViT use 1e-6)."
VIT_EAGER_NOTE = (
    "transformers' ViT eager attention computes its softmax in float32 "
    "(softmax(..., dtype=torch.float32)) whatever the model's dtype: in float64 its outputs are "
    "off the oracle by up to 1.5e-7 (measured), a float32 rounding, not a convention. Its "
    "subjects are offered where the adapter runs in float32 or lower; sdpa stays in float64."
)
VIT_PATCH_NOTE = (
    "ViTPatchEmbeddings alone is not offered as patch_embed: its Conv2d drops the remainder of "
    "an image whose sides are not multiples of the patch size, and ViTEmbeddings (the caller) "
    "refuses such an image; the patch embedding is checked inside vit."
)
VIT_ENCODER_NOTE = (
    "transformers >= 5.23 has no ViT encoder module: ViTModel loops over its layers and applies "
    "its final layernorm, and the subject does exactly that with the model's own modules."
)

# ------------------------------------------------------------------------------ configs


def _check_heads(config: Config, model: str, *, qkv_switch: bool = False) -> None:
    """``qkv_switch``: the model's config can drop the q, k, v biases alone (ViTConfig's
    qkv_bias); every other bias is always there (SPEC.md §0.5)."""
    dk, dv, h, d = config.head_dim_k, config.head_dim_v, config.n_heads, config.d_model
    if dk != dv or dk * h != d:
        raise Unsupported(
            f"{model} cuts hidden_size={d} into num_attention_heads={h} heads of one width for "
            f"queries, keys and values: it cannot express d_k={dk}, d_v={dv}"
        )
    parts = ("attention_out", "ffn", "norm") if qkv_switch else ("attention", "attention_out")
    parts += () if qkv_switch else ("ffn", "norm")
    without = parts_without_bias(config, parts)
    if without:
        raise Unsupported(
            f"{model}'s linear layers and LayerNorms always carry a bias"
            + (" (only q, k and v can drop theirs, qkv_bias)" if qkv_switch else "")
            + f": {', '.join(without)}=False is not offered"
        )


# What the subjects can be (Subject.supports, SPEC.md §0.6), as _check_heads enforces it on
# a direct build: heads of d_model / n_heads, and the biases the architectures always have
# (BERT: every one; ViT: all but q, k, v, which ViTConfig.qkv_bias switches).
BERT_SPACE = ConfigSpace(
    split_heads=True,
    biases={"attention": True, "attention_out": True, "ffn": True, "norm": True},
)
VIT_SPACE = ConfigSpace(split_heads=True, biases={"attention_out": True, "ffn": True, "norm": True})


def _bert(config: Config, implementation: str) -> BertModel:
    _check_heads(config, "BertModel")
    bert_config = BertConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.d_model,
        num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads,
        intermediate_size=config.d_ff,
        max_position_embeddings=config.max_len,
        pad_token_id=config.padding_idx,
        attn_implementation=implementation,
    )
    return BertModel(bert_config, add_pooling_layer=False)


def _vit(config: Config, implementation: str) -> ViTForImageClassification:
    _check_heads(config, "ViTModel", qkv_switch=True)
    vit_config = ViTConfig(
        qkv_bias=config.has_attention_bias,  # SPEC.md §0.5: q, k, v; o always has a bias
        hidden_size=config.d_model,
        num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads,
        intermediate_size=config.d_ff,
        image_size=config.image_size,
        patch_size=config.patch_size,
        num_channels=config.channels,
        num_labels=config.n_classes,
        attn_implementation=implementation,
    )
    return ViTForImageClassification(vit_config)


# ------------------------------------------------------------------------------ masks


def _keep_lookup(keep: Tensor) -> Callable[..., Tensor]:
    """A transformers mask function (True = attend) reading an (Lq, Lk) keep-mask."""
    return lambda batch_idx, head_idx, q_idx, kv_idx: keep[q_idx, kv_idx]


def _mask(
    model_config: Any,
    x: Tensor,
    key_padding: Tensor | None,
    attn_mask: Tensor | None,
    causal: bool,
) -> Tensor | None:
    """The 4D mask transformers builds for ``x``'s self-attention (None: no mask)."""
    extra = [causal_mask_function] if causal else []
    if attn_mask is not None:
        extra.append(_keep_lookup(attn_mask))
    return create_bidirectional_mask(
        config=model_config,
        inputs_embeds=x,
        attention_mask=key_padding,  # 1 = attend: our polarity
        and_mask_function=and_masks(*extra) if extra else None,
    )


# ---------------------------------------------------------------------------- attention


class _AttentionModule(nn.Module):
    """What transformers' attention functions read off the module that calls them."""

    is_causal = False  # sdpa_attention_forward defaults to causal without it

    def __init__(self, implementation: str):
        super().__init__()
        self.implementation = implementation


def _attention(eager: Callable[..., Any]) -> Callable[..., Tensor]:
    def forward(
        m: _AttentionModule,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        keep_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        b, h, lq, _ = q.shape
        lk = k.shape[2]
        functions = [causal_mask_function] if causal else []
        if keep_mask is not None:
            keep = torch.broadcast_to(keep_mask, (b, h, lq, lk))
            if not bool((keep == keep[:, :1]).all()):
                raise Unsupported(
                    "transformers builds one attention mask for all heads: a keep-mask that "
                    "differs between heads cannot be expressed"
                )
            per_batch = keep[:, 0]  # [B, Lq, Lk]
            functions.append(lambda bi, hi, qi, ki: per_batch[bi, qi, ki])
        mask = None
        if functions:
            mask = ALL_MASK_ATTENTION_FUNCTIONS[m.implementation](
                batch_size=b,
                q_length=lq,
                kv_length=lk,
                mask_function=and_masks(bidirectional_mask_function, *functions),
                allow_is_causal_skip=False,
                dtype=q.dtype,
                use_vmap=True,
                device=q.device,
            )
        attend = eager if m.implementation == "eager" else sdpa_attention_forward
        out, _ = attend(m, q, k, v, mask, scaling=None, dropout=0.0)
        return out.transpose(1, 2)  # transformers returns [B, Lq, H, d_v]

    return forward


# ------------------------------------------------------------------------------- BERT


def _bert_attention_map(ours: str, theirs: str) -> ParamMap:
    return {
        **linear_params(f"{ours}q.", f"{theirs}attention.self.query."),
        **linear_params(f"{ours}k.", f"{theirs}attention.self.key."),
        **linear_params(f"{ours}v.", f"{theirs}attention.self.value."),
        **linear_params(f"{ours}o.", f"{theirs}attention.output.dense."),
    }


def _bert_layer_map(ours: str, theirs: str) -> ParamMap:
    return {
        **_bert_attention_map(f"{ours}self_attn.", theirs),
        **linear_params(f"{ours}norm1.", f"{theirs}attention.output.LayerNorm."),
        **linear_params(f"{ours}ffn.fc1.", f"{theirs}intermediate.dense."),
        **linear_params(f"{ours}ffn.fc2.", f"{theirs}output.dense."),
        **linear_params(f"{ours}norm2.", f"{theirs}output.LayerNorm."),
    }


def _bert_encoder_map(config: Config) -> ParamMap:
    return stack_params(_bert_layer_map, config.n_layers, "", "encoder.layer.{i}.")


def _require_self_attention(query: Tensor, key: Tensor, value: Tensor, module: str) -> None:
    if not (torch.equal(query, key) and torch.equal(key, value)):
        raise Unsupported(
            f"{module} is self-attention: one hidden_states tensor gives queries, keys and "
            "values, so distinct query, key and value cannot be passed"
        )


def _bert_mha(
    m: BertModel,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_padding: Tensor | None = None,
    attn_mask: Tensor | None = None,
    causal: bool = False,
) -> Tensor:
    _require_self_attention(query, key, value, "BertSelfAttention")
    attention = m.encoder.layer[0].attention
    mask = _mask(m.config, query, key_padding, attn_mask, causal)
    heads, _ = attention.self(query, attention_mask=mask)
    # BertSelfOutput is dense -> dropout -> LayerNorm(+ residual); the output projection of
    # §3.3 is its dense layer alone (the residual and norm belong to the layer, §7.1).
    return attention.output.dense(heads)


def _bert_layer(
    m: BertModel,
    x: Tensor,
    key_padding: Tensor | None = None,
    attn_mask: Tensor | None = None,
    causal: bool = False,
) -> Tensor:
    return m.encoder.layer[0](x, _mask(m.config, x, key_padding, attn_mask, causal))


def _bert_encoder(
    m: BertModel,
    x: Tensor,
    key_padding: Tensor | None = None,
    attn_mask: Tensor | None = None,
    causal: bool = False,
) -> Tensor:
    mask = _mask(m.config, x, key_padding, attn_mask, causal)
    return m.encoder(x, attention_mask=mask).last_hidden_state


def _one_layer(make: Callable[[Config, str], nn.Module]) -> Callable[[str], Any]:
    """A factory of models with one layer, for the subjects that are a piece of layer 0."""

    def factory(implementation: str) -> Callable[[Config], nn.Module]:
        return lambda config: make(dataclasses.replace(config, n_layers=1), implementation)

    return factory


def _bert_entries() -> list[TorchEntry]:
    bert = _one_layer(_bert)
    rows_note = {"eager": EAGER_ROWS_NOTE, "sdpa": SDPA_ROWS_NOTE}
    entries = []
    for impl in IMPLEMENTATIONS:
        layer = Conventions(activation="gelu", eps=1e-12, fully_masked_rows=ROWS[impl])
        notes = (rows_note[impl], MASK_NOTE)
        entries += [
            TorchEntry(
                "attention",
                name=f"attention[{impl}]",
                make=lambda c, impl=impl: _AttentionModule(impl),
                forward=_attention(bert_eager),
                conventions=Conventions(fully_masked_rows=ROWS[impl]),
                notes=(ATTENTION_NOTE, *notes),
            ),
            TorchEntry(
                "mha",
                name=f"mha[{impl}]",
                make=bert(impl),
                forward=_bert_mha,
                holds=lambda m: (
                    m.encoder.layer[0].attention.self,
                    m.encoder.layer[0].attention.output.dense,
                ),
                supports=BERT_SPACE,
                param_map=_bert_attention_map("", "encoder.layer.0."),
                conventions=Conventions(fully_masked_rows=ROWS[impl]),
                notes=(
                    "BertSelfAttention, then BertSelfOutput's dense layer (the output "
                    "projection; its residual and LayerNorm belong to the layer).",
                    SELF_ONLY_NOTE,
                    *notes,
                ),
            ),
            TorchEntry(
                "encoder_layer",
                name=f"encoder_layer[{impl}]",
                make=bert(impl),
                forward=_bert_layer,
                holds=lambda m: m.encoder.layer[0],
                supports=BERT_SPACE,
                param_map=_bert_layer_map("", "encoder.layer.0."),
                conventions=layer,
                notes=("BertLayer: post-LN.", BERT_EPS_NOTE, *notes),
            ),
            TorchEntry(
                "encoder",
                name=f"encoder[{impl}]",
                make=lambda c, impl=impl: _bert(c, impl),
                forward=_bert_encoder,
                holds=lambda m: m.encoder,
                supports=BERT_SPACE,
                param_map=_bert_encoder_map,
                conventions=layer,
                notes=("BertEncoder: post-LN, no final norm.", BERT_EPS_NOTE, *notes),
            ),
        ]
    entries.append(
        TorchEntry(
            "embedding",
            make=lambda c: _bert(c, "eager"),
            forward=lambda m, ids: m.embeddings.word_embeddings(ids),
            holds=lambda m: m.embeddings.word_embeddings,
            supports=BERT_SPACE,
            param_map={"weight": "embeddings.word_embeddings.weight"},
            notes=(
                "BertEmbeddings.word_embeddings, an nn.Embedding with padding_idx = "
                "pad_token_id, as BertModel initialises it.",
                BERT_MODEL_NOTE,
            ),
        )
    )
    return entries


# -------------------------------------------------------------------------------- ViT


def _vit_layer_map(ours: str, theirs: str, qkv_bias: bool = True) -> ParamMap:
    return {
        **_vit_qkv_map(f"{ours}self_attn.", f"{theirs}attention.", qkv_bias),
        **linear_params(f"{ours}self_attn.o.", f"{theirs}attention.o_proj."),
        **linear_params(f"{ours}norm1.", f"{theirs}layernorm_before."),
        **linear_params(f"{ours}ffn.fc1.", f"{theirs}mlp.fc1."),
        **linear_params(f"{ours}ffn.fc2.", f"{theirs}mlp.fc2."),
        **linear_params(f"{ours}norm2.", f"{theirs}layernorm_after."),
    }


def _vit_qkv_map(ours: str, theirs: str, qkv_bias: bool) -> ParamMap:
    """ViTAttention's q, k, v projections (biased when ViTConfig.qkv_bias, SPEC.md §0.5)."""
    mapping: ParamMap = {}
    for name in "qkv":
        mapping.update(linear_params(f"{ours}{name}.", f"{theirs}{name}_proj.", bias=qkv_bias))
    return mapping


def _vit_encoder_map(config: Config, ours: str = "") -> ParamMap:
    def layer(ours_i: str, theirs_i: str) -> ParamMap:
        return _vit_layer_map(ours_i, theirs_i, config.has_attention_bias)

    return stack_params(layer, config.n_layers, ours, "vit.layers.{i}.", "vit.layernorm.")


def _vit_model_map(config: Config) -> ParamMap:
    return {
        **linear_params("patch_embed.", "vit.embeddings.patch_embeddings.projection."),
        "cls_token": "vit.embeddings.cls_token",
        "pos_embed": "vit.embeddings.position_embeddings",
        **_vit_encoder_map(config, "encoder."),
        **linear_params("head.", "classifier."),
    }


def _vit_mha(
    m: ViTForImageClassification,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_padding: Tensor | None = None,
    attn_mask: Tensor | None = None,
    causal: bool = False,
) -> Tensor:
    _require_self_attention(query, key, value, "ViTAttention")
    mask = _mask(m.config, query, key_padding, attn_mask, causal)
    out, _ = m.vit.layers[0].attention(query, mask)
    return out


def _vit_layer(
    m: ViTForImageClassification,
    x: Tensor,
    key_padding: Tensor | None = None,
    attn_mask: Tensor | None = None,
    causal: bool = False,
) -> Tensor:
    return m.vit.layers[0](x, _mask(m.config, x, key_padding, attn_mask, causal))


def _vit_encoder(
    m: ViTForImageClassification,
    x: Tensor,
    key_padding: Tensor | None = None,
    attn_mask: Tensor | None = None,
    causal: bool = False,
) -> Tensor:
    mask = _mask(m.config, x, key_padding, attn_mask, causal)
    for layer in m.vit.layers:  # ViTModel.forward, from its embeddings to its final norm
        x = layer(x, mask)
    return m.vit.layernorm(x)


def _vit_model(m: ViTForImageClassification, images: Tensor) -> Tensor:
    return m(pixel_values=images).logits


class _ViTAdapter(TorchModuleAdapter):
    """TorchModuleAdapter whose float32-softmax subjects say why they skip float64."""

    def build(
        self,
        subject: Subject,
        config: Config,
        *,
        seed: int,
        dtype: str = "float64",
        device: str = "cpu",
    ) -> TorchHandle:
        if dtype not in self.dtypes(subject):
            raise Unsupported(
                f"{subject.name} runs in {', '.join(self.dtypes(subject))}: " + VIT_EAGER_NOTE
            )
        return super().build(subject, config, seed=seed, dtype=dtype, device=device)


def _vit_entries() -> list[TorchEntry]:
    vit = _one_layer(_vit)
    rows_note = {"eager": EAGER_ROWS_NOTE, "sdpa": SDPA_ROWS_NOTE}
    entries = []
    for impl in IMPLEMENTATIONS:
        notes = (rows_note[impl], MASK_NOTE)
        # eager's float32 softmax cannot meet float64 bounds: offer it in float32 and below
        dtypes = LOWER_PRECISION if impl == "eager" else None
        if impl == "eager":
            notes = (VIT_EAGER_NOTE, *notes)
        layer = Conventions(
            norm_placement="pre",
            activation="gelu",
            eps=1e-12,
            fully_masked_rows=ROWS[impl],
        )
        entries += [
            TorchEntry(
                "attention",
                name=f"attention[{impl}]",
                dtypes=dtypes,
                make=lambda c, impl=impl: _AttentionModule(impl),
                forward=_attention(vit_eager),
                conventions=Conventions(fully_masked_rows=ROWS[impl]),
                notes=(ATTENTION_NOTE, *notes),
            ),
            TorchEntry(
                "mha",
                name=f"mha[{impl}]",
                dtypes=dtypes,
                make=vit(impl),
                forward=_vit_mha,
                holds=lambda m: m.vit.layers[0].attention,
                supports=VIT_SPACE,
                param_map=lambda c: {
                    **_vit_qkv_map("", "vit.layers.0.attention.", c.has_attention_bias),
                    **linear_params("o.", "vit.layers.0.attention.o_proj."),
                },
                conventions=Conventions(fully_masked_rows=ROWS[impl]),
                notes=("ViTAttention (with its o_proj).", SELF_ONLY_NOTE, *notes),
            ),
            TorchEntry(
                "encoder_layer",
                name=f"encoder_layer[{impl}]",
                dtypes=dtypes,
                make=vit(impl),
                forward=_vit_layer,
                holds=lambda m: m.vit.layers[0],
                supports=VIT_SPACE,
                param_map=lambda c: _vit_layer_map("", "vit.layers.0.", c.has_attention_bias),
                conventions=layer,
                notes=("ViTLayer: pre-LN.", VIT_EPS_NOTE, *notes),
            ),
            TorchEntry(
                "encoder",
                name=f"encoder[{impl}]",
                dtypes=dtypes,
                make=lambda c, impl=impl: _vit(c, impl),
                forward=_vit_encoder,
                holds=lambda m: (m.vit.layers, m.vit.layernorm),
                supports=VIT_SPACE,
                param_map=_vit_encoder_map,
                conventions=layer,
                notes=(VIT_ENCODER_NOTE, VIT_EPS_NOTE, *notes),
            ),
            TorchEntry(
                "vit",
                name=f"vit[{impl}]",
                dtypes=dtypes,
                make=lambda c, impl=impl: _vit(c, impl),
                forward=_vit_model,
                supports=VIT_SPACE,
                param_map=_vit_model_map,
                conventions=Conventions(norm_placement="pre", activation="gelu", eps=1e-12),
                notes=(
                    "ViTForImageClassification: patch embedding, class token, learned position "
                    "embedding, pre-LN layers, final layernorm, classifier on the class token.",
                    VIT_EPS_NOTE,
                    VIT_PATCH_NOTE,
                    *notes[:1],
                ),
            ),
        ]
    return entries


bert = TorchModuleAdapter("hf.bert", _bert_entries())
vit = _ViTAdapter("hf.vit", _vit_entries())
