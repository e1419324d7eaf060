"""Reading a checkpoint's ``config.json`` strictly: every key that changes the maths is read
and shown, or the run is refused naming it (``tck run --model DIR``; docs/checkpoints.md).

transformers reads a ``config.json`` leniently: a key its model class no longer knows is kept
and ignored (BERT's ``position_embedding_type="relative_key"`` in transformers 5), and a key
the file lacks takes the library's default (``num_attention_heads=12``) as if the file had
said so. A conformance verdict on such a load describes a model nobody saved. So, before any
weight is read:

- the family (which adapter) comes from ``model_type``, else ``architectures``;
- each key of the file is one of: a key tck reads (``Key``: what it sets in the SPEC's terms,
  the values tck models), a key that does not change an eval-mode forward (``NEUTRAL``:
  dropout rates, token ids, bookkeeping), or neither, which is refused by name;
- a size the file lacks (``Key.required``) is refused: the library would guess it; any other
  key the file lacks is shown as transformers' default, never as the file's value.

``Reading.shown`` is what the report says about each key (the subjects' notes in
results.json and the HTML report).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few kB; a larger one is not one


class ModelError(Exception):
    """The checkpoint folder cannot be used; the message says why and what to do."""


@dataclass(frozen=True)
class Key:
    """A ``config.json`` key tck reads. ``meaning``: what it sets, in the SPEC's terms.
    ``required``: refused when absent (a size transformers would fill with its own default).
    ``models``: None when every value is modelled, else a function returning why tck does
    not model a value (None when it does)."""

    meaning: str
    required: bool = False
    models: Callable[[Any], str | None] | None = None
    aliases: tuple[str, ...] = ()  # other spellings transformers accepts for the same key
    legacy: bool = False  # an older spelling folded into another key: shown only when given


def _only(*values: Any, why: str) -> Callable[[Any], str | None]:
    return lambda value: None if value in values else why


def _falsy(why: str) -> Callable[[Any], str | None]:
    return lambda value: None if not value else why


# Keys of every transformers config that leave an eval-mode forward unchanged.
NEUTRAL_ALL = frozenset(
    {
        "_name_or_path",
        "architectures",
        "chunk_size_feed_forward",  # the FFN applied in chunks: the same values
        "dtype",
        "torch_dtype",  # the file's storage dtype; tck loads float64 (SPEC.md §0.2)
        "id2label",
        "label2id",
        "problem_type",
        "model_type",
        "output_attentions",
        "output_hidden_states",
        "return_dict",
        "transformers_version",
        "use_cache",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "sep_token_id",
        "decoder_start_token_id",
        "initializer_range",
        "tokenizer_class",
        "prefix",
        "task_specific_params",
        "finetuning_task",
        "torchscript",
        "use_bfloat16",
        "tf_legacy_loss",
        "is_encoder_decoder",
        "tie_encoder_decoder",
        # generation settings: how tokens are picked from the logits, not the logits
        "max_length",
        "min_length",
        "do_sample",
        "early_stopping",
        "num_beams",
        "num_beam_groups",
        "diversity_penalty",
        "temperature",
        "top_k",
        "top_p",
        "typical_p",
        "repetition_penalty",
        "length_penalty",
        "no_repeat_ngram_size",
        "encoder_no_repeat_ngram_size",
        "bad_words_ids",
        "num_return_sequences",
        "output_scores",
        "return_dict_in_generate",
        "forced_bos_token_id",
        "forced_eos_token_id",
        "remove_invalid_values",
        "exponential_decay_length_penalty",
        "suppress_tokens",
        "begin_suppress_tokens",
    }
)

# Per family: keys that only matter in training mode or outside the model's forward.
NEUTRAL: dict[str, frozenset[str]] = {
    "bert": frozenset(
        {"hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout"}
    ),
    "vit": frozenset(
        {"hidden_dropout_prob", "attention_probs_dropout_prob", "encoder_stride"}
        | {"pooler_act", "pooler_output_size"}  # the pooler, which hf.vit does not check
    ),
    "gpt2": frozenset(
        {"attn_pdrop", "embd_pdrop", "resid_pdrop", "summary_first_dropout"}
        # the sequence-summary head of GPT2DoubleHeadsModel, not in GPT2LMHeadModel
        | {"summary_activation", "summary_proj_to_labels", "summary_type", "summary_use_proj"}
        | {"summary_hidden_dropout", "n_ctx"}  # n_ctx: an old alias nothing reads
        # reorder_and_upcast_attn: q k^T in float32 with the scale applied first; the same
        # maths, a precision choice (§0.2), which float64 does not exercise
        | {"reorder_and_upcast_attn"}
    ),
    "llama": frozenset(
        {"attention_dropout", "pretraining_tp"}  # pretraining_tp: unused by the forward
    ),
    "mistral": frozenset({"attention_dropout"}),
    "qwen2": frozenset({"attention_dropout"}),
}

# SPEC.md §2.3 and §2.6: the RoPE scalings the oracle models, with the keys each reads
ROPE_TYPES = {
    "default": (),
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
}


def _rope_parameters(value: Any) -> str | None:
    """Why tck does not model a ``rope_parameters`` (or legacy ``rope_scaling``) mapping."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        return f"{value!r} is not a mapping"
    kind = value.get("rope_type", value.get("type", "default"))
    if kind not in ROPE_TYPES:
        return (
            f"rope_type={kind!r}: the oracle models RoPE scaling {', '.join(ROPE_TYPES)} "
            "(SPEC.md §2.6)"
        )
    extra = sorted(set(value) - {"rope_type", "type", "rope_theta", *ROPE_TYPES[kind]})
    if extra:
        return f"rope_type={kind!r} with {extra}: not modelled (SPEC.md §2.6)"
    return None


_LLAMA = {
    "hidden_size": Key("d_model", required=True),
    "num_attention_heads": Key("n_heads", required=True),
    "num_hidden_layers": Key("n_layers", required=True),
    "intermediate_size": Key("d_ff", required=True),
    "vocab_size": Key("vocab_size", required=True),
    "num_key_value_heads": Key("n_kv_heads (SPEC.md §11.2)"),
    "head_dim": Key("d_k = d_v, the width of each head"),
    "max_position_embeddings": Key("max_len, the longest sequence checked"),
    "rms_norm_eps": Key("eps of RMSNorm (SPEC.md §5.3)"),
    "hidden_act": Key(
        "gate_activation of the gated FFN (SPEC.md §11.3)",
        models=lambda v: None if v in GATE_ACTIVATIONS else f"hidden_act={v!r} is not modelled",
    ),
    "attention_bias": Key("attention_bias: q, k, v, o carry a bias (SPEC.md §0.5)"),
    "mlp_bias": Key("ffn_bias: gate, up, down carry a bias (SPEC.md §0.5)"),
    "tie_word_embeddings": Key("tie_weights: lm_head is the token table (SPEC.md §11.5)"),
    "rope_parameters": Key(
        "pe_base, the RoPE base (SPEC.md §2.3), and rope_scaling (SPEC.md §2.6)",
        models=_rope_parameters,
    ),
    "rope_theta": Key("pe_base, the RoPE base (SPEC.md §2.3)", legacy=True),
    "rope_scaling": Key(
        "RoPE frequency scaling (SPEC.md §2.6)", models=_rope_parameters, legacy=True
    ),
}


def _window(value: Any) -> str | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return None
    return f"sliding_window={value!r} is not a width >= 1 (SPEC.md §4.5)"


_SLIDING = "sliding_window: a query sees the last w keys, its own included (SPEC.md §4.5)"
_MISTRAL = {k: v for k, v in _LLAMA.items() if k not in ("attention_bias", "mlp_bias")}
_MISTRAL["sliding_window"] = Key(_SLIDING, models=_window)
# Qwen2: q, k, v with a bias, o and the MLP without (fixed by the architecture, SPEC.md §0.5)
_QWEN2 = {k: v for k, v in _LLAMA.items() if k not in ("attention_bias", "mlp_bias", "head_dim")}
_QWEN2.update(
    use_sliding_window=Key(
        "sliding windows on the upper layers",
        models=_falsy(
            "use_sliding_window=True windows only the layers from max_window_layers up: a "
            "window that differs between layers is not modelled (SPEC.md §4.5 is one width)"
        ),
    ),
    sliding_window=Key("the window width, unused while use_sliding_window is false"),
    max_window_layers=Key("the first windowed layer, unused while use_sliding_window is false"),
    layer_types=Key(
        "each layer's attention (full or sliding)",
        models=lambda v: (
            None
            if v is None or all(t == "full_attention" for t in v)
            else f"layer_types={v!r}: sliding layers among full ones are not modelled"
        ),
    ),
)

FAMILY_KEYS: dict[str, dict[str, Key]] = {
    "bert": {
        "hidden_size": Key("d_model", required=True),
        "num_attention_heads": Key("n_heads", required=True),
        "num_hidden_layers": Key("n_layers", required=True),
        "intermediate_size": Key("d_ff", required=True),
        "vocab_size": Key("vocab_size", required=True),
        "max_position_embeddings": Key("max_len, the learned position table (SPEC.md §2.2)"),
        "layer_norm_eps": Key("eps of LayerNorm (SPEC.md §5.1)"),
        "hidden_act": Key("activation of the FFN (SPEC.md §6.1)"),
        "type_vocab_size": Key("rows of the token-type table (added to the embeddings)"),
        "tie_word_embeddings": Key("ties of the masked-LM head, which hf.bert does not check"),
        "position_embedding_type": Key(
            "positions: absolute (learned table, SPEC.md §2.2)",
            models=_only(
                "absolute",
                why="relative position scores (Shaw et al.; distance_embedding) are not "
                "modelled: SPEC.md §2.2 has absolute positions only",
            ),
        ),
        "is_decoder": Key(
            "a causal BERT",
            models=_falsy("is_decoder=True makes BERT causal; hf.bert checks the encoder"),
        ),
        "add_cross_attention": Key(
            "cross-attention layers",
            models=_falsy("add_cross_attention=True adds cross-attention, not checked"),
        ),
    },
    "vit": {
        "hidden_size": Key("d_model", required=True),
        "num_attention_heads": Key("n_heads", required=True),
        "num_hidden_layers": Key("n_layers", required=True),
        "intermediate_size": Key("d_ff", required=True),
        "image_size": Key("image_size", required=True),
        "patch_size": Key("patch_size", required=True),
        "num_channels": Key("channels"),
        "layer_norm_eps": Key("eps of LayerNorm (SPEC.md §5.1)"),
        "hidden_act": Key("activation of the FFN (SPEC.md §6.1)"),
        "qkv_bias": Key("attention_bias: q, k, v carry a bias, o always (SPEC.md §0.5)"),
    },
    "gpt2": {
        "n_embd": Key("d_model", required=True, aliases=("hidden_size",)),
        "n_head": Key("n_heads", required=True, aliases=("num_attention_heads",)),
        "n_layer": Key("n_layers", required=True, aliases=("num_hidden_layers",)),
        "vocab_size": Key("vocab_size", required=True),
        "n_positions": Key(
            "max_len, the learned position table (SPEC.md §2.2)",
            aliases=("max_position_embeddings",),
        ),
        "n_inner": Key("d_ff (null: 4 * d_model)"),
        "activation_function": Key("activation of the FFN (SPEC.md §6.1)"),
        "layer_norm_epsilon": Key("eps of LayerNorm (SPEC.md §5.1)"),
        "tie_word_embeddings": Key(
            "tie_weights: the head is the token table (SPEC.md §11.5)",
            models=_only(True, why="GPT2LMHeadModel ties its head to the token table"),
        ),
        "scale_attn_weights": Key(
            "scores divided by sqrt(d_k) (SPEC.md §3.1)",
            models=_only(True, why="unscaled scores (no 1/sqrt(d_k)) are not modelled"),
        ),
        "scale_attn_by_inverse_layer_idx": Key(
            "layer i's scores divided by i + 1",
            models=_falsy(
                "a per-layer score scale 1/(layer_idx + 1) is not modelled by the oracle "
                "(SPEC.md §3.1 scales every layer by 1/sqrt(d_k) alone)"
            ),
        ),
        "add_cross_attention": Key(
            "cross-attention layers",
            models=_falsy("add_cross_attention=True adds cross-attention, not checked"),
        ),
    },
    "llama": _LLAMA,
    "mistral": _MISTRAL,
    "qwen2": _QWEN2,
}

# model_type -> the adapter that reads it
ADAPTERS = {"bert": "hf.bert", "vit": "hf.vit", "gpt2": "hf.gpt2", "llama": "hf.llama"}
ADAPTERS.update(mistral="hf.mistral", qwen2="hf.qwen2")
# architectures[0] prefixes, for a config.json without model_type
ARCHITECTURES = {"Bert": "bert", "ViT": "vit", "GPT2": "gpt2", "Llama": "llama"}
ARCHITECTURES.update(Mistral="mistral", Qwen2="qwen2")
# Families transformers has and tck does not read, with what the oracle lacks for them
NOT_MODELLED = {
    "gemma": "RMSNorm scaling by (1 + weight) and embeddings times sqrt(hidden_size)",
    "gemma2": "logit soft-capping and alternating sliding-window layers",
    "gemma3": "logit soft-capping, q/k norms and alternating sliding-window layers",
    "phi": "partial rotary embeddings (partial_rotary_factor) and a parallel attention/MLP block",
    "phi3": "fused qkv/gate_up projections with partial rotary scaling",
    "gpt_neox": "parallel attention and MLP (use_parallel_residual) and partial rotary embeddings",
    "gptj": "parallel attention and MLP and interleaved partial rotary embeddings",
    "falcon": "parallel attention and MLP and multi-query layouts",
    "mixtral": "a mixture of experts (num_local_experts)",
    "qwen2_moe": "a mixture of experts",
    "qwen3": "RMSNorm on queries and keys (q_norm, k_norm)",
    "opt": "learned positions offset by 2 and a post-LN option",
    "bloom": "ALiBi position biases",
    "mpt": "ALiBi position biases",
    "t5": "an encoder-decoder with relative position buckets",
    "roberta": "position ids offset by padding_idx + 1",
}

GATE_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu"}
GATE_ACTIVATIONS["gelu_pytorch_tanh"] = "gelu_tanh"


def read_config(path: Path) -> dict[str, Any]:
    """The raw ``config.json`` of the folder ``path`` (one line when it is not one)."""
    file = path / "config.json"
    try:
        with file.open("rb") as stream:
            text = stream.read(MAX_CONFIG_BYTES + 1)
    except OSError as err:
        raise ModelError(f"cannot read {str(file)!r}: {err.strerror or err}") from None
    if len(text) > MAX_CONFIG_BYTES:
        raise ModelError(f"{str(file)!r} is over {MAX_CONFIG_BYTES} bytes: not a config.json")
    try:
        raw = json.loads(text)
    except (ValueError, UnicodeDecodeError) as err:
        raise ModelError(f"{str(file)!r} is not valid JSON: {err}") from None
    if not isinstance(raw, dict):
        raise ModelError(f"{str(file)!r} holds a {type(raw).__name__}, not a JSON object")
    return raw


def supported() -> str:
    return ", ".join(f"{t} ({a})" for t, a in ADAPTERS.items())


def family(raw: Mapping[str, Any], path: Path) -> str:
    """The family (a key of ``ADAPTERS``) ``config.json`` names by ``model_type``, else by its
    first ``architectures`` entry; refused in one line listing the supported ones."""
    model_type = raw.get("model_type")
    architectures = raw.get("architectures") or []
    if model_type is None and isinstance(architectures, list) and architectures:
        first = str(architectures[0])
        model_type = next((t for p, t in ARCHITECTURES.items() if first.startswith(p)), first)
    if model_type in ADAPTERS:
        return str(model_type)
    where = f"{str(path)!r}: config.json"
    if model_type is None:
        raise ModelError(f"{where} names no model_type or architectures; tck reads {supported()}")
    lacks = NOT_MODELLED.get(str(model_type))
    if lacks:
        raise ModelError(
            f"{where} model_type={model_type!r}: tck does not model its {lacks}; tck reads "
            f"{supported()}"
        )
    raise ModelError(f"{where} model_type={model_type!r} is not one tck reads: {supported()}")


@dataclass
class Reading:
    """What a strict reading found: ``shown``, one line per key tck read (its value and
    where it came from), for the report."""

    family: str
    raw: Mapping[str, Any]
    shown: list[str] = field(default_factory=list)

    def given(self, key: str) -> bool:
        """Whether config.json sets ``key`` (or one of its aliases)."""
        aliases = FAMILY_KEYS[self.family][key].aliases
        return any(k in self.raw for k in (key, *aliases))


def check(raw: Mapping[str, Any], name: str, path: Path) -> Reading:
    """Refuse, in one line naming the key, a ``config.json`` of family ``name`` that holds a
    key tck neither reads nor knows to be neutral, a value tck does not model, or lacks a
    required size. Returns the reading (``show`` fills in the values once loaded)."""
    keys = FAMILY_KEYS[name]
    known = set(keys) | {a for k in keys.values() for a in k.aliases}
    neutral = NEUTRAL_ALL | NEUTRAL.get(name, frozenset())
    where = f"{str(path)!r}: config.json"
    for key in raw:
        if key not in known and key not in neutral:
            raise ModelError(
                f"{where} sets {key}={raw[key]!r}, which tck does not read for "
                f"model_type={name!r}: it may change what the model computes, so tck refuses "
                "rather than ignore it"
            )
    for key, spec in keys.items():
        spelled = next((k for k in (key, *spec.aliases) if k in raw), None)
        if spelled is None:
            if spec.required:
                raise ModelError(
                    f"{where} lacks {key} ({spec.meaning}); transformers would fill in its "
                    f"default, which need not be the model that was saved: write {key} into "
                    "config.json"
                )
            continue
        why = spec.models(raw[spelled]) if spec.models else None
        if why:
            raise ModelError(f"{where} {spelled}={raw[spelled]!r}: {why}; tck refuses it")
    return Reading(name, raw)


def show(reading: Reading, loaded: Any) -> list[str]:
    """One line per key tck reads: the value and its source (config.json, or transformers'
    default when the file lacks it), read from ``loaded`` (the config transformers built)."""
    lines = []
    for key, spec in FAMILY_KEYS[reading.family].items():
        spelled = next((k for k in (key, *spec.aliases) if k in reading.raw), None)
        if spelled is not None:
            lines.append(f"{key}={reading.raw[spelled]!r} ({spec.meaning}): read from config.json")
            continue
        if spec.legacy or not hasattr(loaded, key):
            continue  # a legacy spelling transformers folded into another key
        value = getattr(loaded, key)
        lines.append(
            f"{key}={value!r} ({spec.meaning}): transformers' default, config.json does not set it"
        )
    reading.shown = lines
    return lines
