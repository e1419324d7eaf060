"""The convention catalogue: per convention field and value, the canonical choice, the SPEC
clause, the plain words a report says and the diagnosis code a check gives.

One place answers "what does ``eps_placement = outside_sqrt`` mean, where does SPEC.md say
so, and which code names an implementation that does it": the probes
(``tck.conformance.checks.test_fingerprint``), the explanations of a failed comparison
(``tck.conformance.diagnosis.explain``), the root causes of the reports and ``tck fingerprint``
read it. The canonical value is the Transformer family's default (``Conventions()``); a
component family may have its own (``tck.reference.params.canonical_conventions``).

Nothing here imports anything above ``tck.reference``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .conventions import CANONICAL


@dataclass(frozen=True)
class Choice:
    """One value of one convention field."""

    field: str
    value: Any
    code: str  # the diagnosis code of "the implementation follows field = value"
    words: str  # what an implementation with this value does, in plain words
    clauses: tuple[str, ...]  # the SPEC.md clauses the field belongs to

    @property
    def canonical(self) -> bool:
        return getattr(CANONICAL, self.field) == self.value


# field -> the SPEC clauses it belongs to (§0.3 lists them all)
FIELD_CLAUSES: dict[str, tuple[str, ...]] = {
    "eps": ("5.1",),
    "eps_placement": ("5.2",),
    "variance": ("5.2",),
    "activation": ("6.1",),
    "norm_placement": ("7.1",),
    "final_norm": ("7.3",),
    "causal_alignment": ("4.3",),
    "fully_masked_rows": ("4.4",),
    "pe_layout": ("2.1",),
    "pe_base": ("2.1",),
    "rope_layout": ("2.3",),
    "embedding_scale": ("1.2",),
    "pooling": ("9.5",),
    "padded_query_rows": ("4.2",),
    "gate_activation": ("11.3",),
    "positions": ("11.1", "11.5"),
    "sliding_window": ("4.5",),
    "rope_scaling": ("2.6",),
}

# (field, value) -> (code, plain words). Fields with a continuum of values (eps, pe_base)
# have one code for every value but the declared one: NUMERIC below.
_TABLE: dict[tuple[str, Any], tuple[str, str]] = {
    ("fully_masked_rows", "zero"): (
        "mask.fully_masked_rows_zero",
        "returns zeros for a query whose keys are all masked",
    ),
    ("fully_masked_rows", "nan"): (
        "mask.fully_masked_rows_nan",
        "returns NaN for a query whose keys are all masked",
    ),
    ("fully_masked_rows", "uniform"): (
        "mask.fully_masked_rows_uniform",
        "spreads a query whose keys are all masked evenly over every key (the mean of V), as "
        "a finite fill value such as -1e9 does",
    ),
    ("fully_masked_rows", "undefined"): (
        "mask.fully_masked_rows_undefined",
        "makes no promise for a query whose keys are all masked",
    ),
    ("norm_placement", "pre"): (
        "blocks.norm_placement_pre",
        "normalises before each sublayer (pre-LN: x + f(norm(x)))",
    ),
    ("norm_placement", "post"): (
        "blocks.norm_placement_post",
        "normalises after each residual add (post-LN: norm(x + f(x)))",
    ),
    ("final_norm", "always"): (
        "blocks.final_norm_extra",
        "ends every stack with a LayerNorm, post-LN stacks included",
    ),
    ("final_norm", "pre_only"): (
        "blocks.final_norm_pre_only",
        "ends a stack with a LayerNorm only when it is pre-LN",
    ),
    ("final_norm", "never"): (
        "blocks.final_norm_missing",
        "ends no stack with a LayerNorm, pre-LN stacks included",
    ),
    ("activation", "relu"): ("ffn.activation_relu", "uses ReLU in the feed-forward network"),
    ("activation", "gelu"): (
        "ffn.activation_gelu",
        "uses the exact GELU, x * Phi(x), in the feed-forward network",
    ),
    ("activation", "gelu_tanh"): (
        "ffn.activation_gelu_tanh",
        "uses the tanh approximation of GELU in the feed-forward network",
    ),
    ("eps_placement", "outside_sqrt"): (
        "layer_norm.eps_outside_sqrt",
        "divides by std + eps instead of sqrt(var + eps)",
    ),
    ("eps_placement", "inside_sqrt"): ("layer_norm.eps_inside_sqrt", "divides by sqrt(var + eps)"),
    ("variance", "unbiased"): (
        "layer_norm.unbiased_variance",
        "normalises with the unbiased variance (divides by D - 1)",
    ),
    ("variance", "biased"): (
        "layer_norm.biased_variance",
        "normalises with the biased variance (divides by D)",
    ),
    ("pe_layout", "concatenated"): (
        "positional.layout_concatenated",
        "puts all sines first and all cosines after them",
    ),
    ("pe_layout", "interleaved"): (
        "positional.layout_interleaved",
        "interleaves sines (even dims) and cosines (odd dims)",
    ),
    ("rope_layout", "half_split"): (
        "rope.layout_half_split",
        "rotates pairs (x_i, x_(i+d/2)) (rotate_half)",
    ),
    ("rope_layout", "interleaved"): ("rope.layout_interleaved", "rotates pairs (x_2i, x_2i+1)"),
    ("causal_alignment", "bottom_right"): (
        "mask.causal_alignment_bottom_right",
        "aligns the causal mask bottom-right when Lq != Lk",
    ),
    ("causal_alignment", "top_left"): (
        "mask.causal_alignment_top_left",
        "aligns the causal mask top-left when Lq != Lk",
    ),
    ("embedding_scale", "emb"): (
        "embedding.scale_on_embeddings",
        "multiplies embeddings by sqrt(d_model)",
    ),
    ("embedding_scale", "prj"): (
        "embedding.scale_on_logits",
        "divides the output logits by sqrt(d_model) instead of scaling the embeddings",
    ),
    ("embedding_scale", "none"): (
        "embedding.scale_missing",
        "does not scale embeddings or logits by sqrt(d_model)",
    ),
    ("pooling", "mean"): (
        "vit.pooling_mean",
        "pools the mean of the patch tokens instead of the class token",
    ),
    ("pooling", "cls"): ("vit.pooling_cls", "pools the class token"),
    ("padded_query_rows", "zero"): (
        "mask.padded_queries_zeroed",
        "returns exactly 0 at padded query positions instead of the value the formula gives",
    ),
    ("padded_query_rows", "computed"): (
        "mask.padded_queries_computed",
        "computes padded query positions by the formula",
    ),
    ("gate_activation", "silu"): ("ffn.gate_activation_silu", "gates the FFN with SiLU (SwiGLU)"),
    ("gate_activation", "gelu"): (
        "ffn.gate_activation_gelu",
        "gates the FFN with the exact GELU (GeGLU) instead of SiLU",
    ),
    ("gate_activation", "gelu_tanh"): (
        "ffn.gate_activation_gelu_tanh",
        "gates the FFN with the tanh GELU instead of SiLU",
    ),
    ("positions", "rope"): (
        "positional.rope_applied",
        "rotates queries and keys by their positions (RoPE) in attention",
    ),
    ("rope_scaling", "none"): (
        "rope.scaling_none",
        "rotates at the unscaled RoPE frequencies base^(-2i/d) (no frequency scaling)",
    ),
    ("rope_scaling", "linear"): (
        "rope.scaling_linear",
        "divides every RoPE frequency by the scaling factor (positions / factor)",
    ),
    ("rope_scaling", "llama3"): (
        "rope.scaling_llama3",
        "scales the RoPE frequencies by Llama 3.1's rule (long wavelengths divided by the "
        "factor, short ones kept, a smooth blend between)",
    ),
    ("positions", "learned"): (
        "positional.rope_missing",
        "adds a learned position table to the embeddings (no RoPE)",
    ),
}

# Fields whose values are numbers: one code, words formatted from the value.
NUMERIC: dict[str, tuple[str, str]] = {
    "eps": ("layer_norm.eps_wrong", "uses LayerNorm eps = {value:g}"),
    "pe_base": ("positional.base_wrong", "uses the positional base {value:g}"),
    "sliding_window": (
        "mask.sliding_window_wrong",
        "lets each query see its own key and the {value} - 1 keys before it (a sliding window "
        "of {value})",
    ),
}

# What a NUMERIC field's words are at None (no value: the feature is off).
NUMERIC_UNSET: dict[str, str] = {
    "sliding_window": "lets each query see every earlier key (no sliding window)",
}

# The mask-polarity property of tck fingerprint (masks.polarity): SPEC.md §4.1's keep-mask,
# and what a failed polarity check shows, by its diagnosis code.
KEEP = "True = may attend"
POLARITY_SHOWN: dict[str, str] = {
    "mask.polarity_inverted": "inverted (True = ignore)",
    "mask.ignored": "ignored (no effect)",
}


def choice(field: str, value: Any) -> Choice:
    """The catalogue entry of ``field = value``; KeyError for a field or value it lacks."""
    if field in NUMERIC:
        code, words = NUMERIC[field]
        if value is None and field in NUMERIC_UNSET:
            return Choice(field, value, code, NUMERIC_UNSET[field], FIELD_CLAUSES[field])
        return Choice(field, value, code, words.format(value=value), FIELD_CLAUSES[field])
    try:
        return Choice(field, value, *_TABLE[(field, value)], FIELD_CLAUSES[field])
    except KeyError:
        raise KeyError(
            f"the convention catalogue has no {field}={value!r} (tck.reference.catalogue)"
        ) from None


def convention_code(field: str, value: Any) -> str:
    """The stable diagnosis code for "the implementation follows ``field`` = ``value``"."""
    return choice(field, value).code


def plain_words(field: str, value: Any) -> str:
    """What an implementation with ``field`` = ``value`` does, in words, for reports."""
    return choice(field, value).words


def declared_code(field: str) -> str:
    """The code of a ``convention`` result: ``field`` deviates from canonical, as declared."""
    if field not in FIELD_CLAUSES:
        raise KeyError(f"the convention catalogue has no field {field!r}")
    return f"convention.{field}"


def all_codes() -> dict[str, tuple[tuple[str, ...], str]]:
    """Every code the catalogue gives: code -> (clauses, meaning in words)."""
    out: dict[str, tuple[tuple[str, ...], str]] = {}
    for (field, value), (code, words) in _TABLE.items():
        out[code] = (FIELD_CLAUSES[field], f"the implementation {words} ({field}={value!r})")
    for field, (code, _) in NUMERIC.items():
        out[code] = (FIELD_CLAUSES[field], f"the implementation uses another {field} than declared")
    for field in FIELD_CLAUSES:
        out[declared_code(field)] = (
            ("0.3", *FIELD_CLAUSES[field]),
            f"a declared, shown deviation of {field} from the canonical choice (a convention "
            "result, not a failure)",
        )
    return out
