"""What an implementation may legitimately choose (Conventions) and how big it is (Config).

Conventions are the places where the sources disagree (SPEC.md §0.3). The default
value of every field is the canonical choice; an implementation that makes another
declares it, the oracle computes under the declared choice, and reports list each
deviation as a *convention*, not a failure.

Config holds sizes only. Nothing here imports anything else of ours.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

NormPlacement = Literal["post", "pre"]
Activation = Literal["relu", "gelu", "gelu_tanh"]
NormKind = Literal["layer_norm", "rms_norm"]
EpsPlacement = Literal["inside_sqrt", "outside_sqrt"]
Variance = Literal["biased", "unbiased"]
PELayout = Literal["interleaved", "concatenated"]
RopeLayout = Literal["interleaved", "half_split"]
EmbeddingScale = Literal["emb", "prj", "none"]
CausalAlignment = Literal["top_left", "bottom_right"]
FullyMaskedRows = Literal["zero", "nan", "uniform", "undefined"]
Pooling = Literal["cls", "mean"]
FinalNorm = Literal["pre_only", "always", "never"]
PaddedQueryRows = Literal["computed", "zero"]
HalfPrecision = Literal["float32", "input_dtype"]
Positions = Literal["learned", "rope"]
FFNKind = Literal["plain", "gated"]
GateActivation = Literal["silu", "gelu", "gelu_tanh"]
RopeScaling = Literal["none", "linear", "llama3"]

CHOICES: dict[str, tuple[Any, ...]] = {
    "norm_placement": ("post", "pre"),
    "activation": ("relu", "gelu", "gelu_tanh"),
    "norm_kind": ("layer_norm", "rms_norm"),
    "eps_placement": ("inside_sqrt", "outside_sqrt"),
    "variance": ("biased", "unbiased"),
    "pe_layout": ("interleaved", "concatenated"),
    "rope_layout": ("interleaved", "half_split"),
    "embedding_scale": ("emb", "prj", "none"),
    "causal_alignment": ("top_left", "bottom_right"),
    "fully_masked_rows": ("zero", "nan", "uniform", "undefined"),
    "pooling": ("cls", "mean"),
    "final_norm": ("pre_only", "always", "never"),
    "padded_query_rows": ("computed", "zero"),
    "half_precision": ("float32", "input_dtype"),
    "positions": ("learned", "rope"),
    "ffn_kind": ("plain", "gated"),
    "gate_activation": ("silu", "gelu", "gelu_tanh"),
    "rope_scaling": ("none", "linear", "llama3"),
}


@dataclass(frozen=True)
class Conventions:
    """The declared choices of an implementation. Defaults are canonical (SPEC.md §0.3)."""

    norm_placement: NormPlacement = "post"  # §7.1: post-LN (paper) | pre-LN (ViT, GPT-2)
    activation: Activation = "relu"  # §6.1: ReLU (paper) | exact GELU | tanh GELU
    norm_kind: NormKind = "layer_norm"  # §5.1 | §5.3 RMSNorm
    eps: float = 1e-5  # §5.1: added to the variance, inside the sqrt
    eps_placement: EpsPlacement = "inside_sqrt"  # §5.2: sqrt(var + eps) | std + eps
    variance: Variance = "biased"  # §5.2: divide by d | by d - 1
    pe_base: float = 10000.0  # §2.1, §2.3
    pe_layout: PELayout = "interleaved"  # §2.1: sin/cos interleaved | concatenated halves
    rope_layout: RopeLayout = "interleaved"  # §2.3: pairs (2i, 2i+1) | (i, i + d/2)
    embedding_scale: EmbeddingScale = "emb"  # §1.2: x sqrt(d_model) on embeddings | on logits
    causal_alignment: CausalAlignment = "top_left"  # §4.3
    fully_masked_rows: FullyMaskedRows = "zero"  # §4.4
    pooling: Pooling = "cls"  # §9.5: class token | mean of patch tokens
    final_norm: FinalNorm = "pre_only"  # §7.3: a final norm when pre-LN | always | never
    # §4.2: an encoder's output at padded query positions is computed by the formula | zero
    # (torch's nested-tensor encoder path)
    padded_query_rows: PaddedQueryRows = "computed"
    # §10.10: in float16/bfloat16, norm statistics, softmax and RoPE angles are formed in
    # float32 | in the input dtype (declared: the numerics checks then give a convention row)
    half_precision: HalfPrecision = "float32"
    # §11 decoder-only models (no other component reads these three):
    # §11.5: a learned position table added to the embeddings (GPT-2) | RoPE on the queries
    # and keys of every causal self-attention (§11.1, Llama)
    positions: Positions = "learned"
    ffn_kind: FFNKind = "plain"  # §11.4: the §6.1 FFN | the gated FFN of §11.3 (SwiGLU)
    gate_activation: GateActivation = "silu"  # §11.3: SwiGLU | GeGLU (exact or tanh GELU)
    # §4.5: None, every earlier key (canonical) | w >= 1, query i sees keys j with
    # i - w < j <= i (Mistral's sliding_window, transformers' sliding_window_overlay): the
    # last w keys, its own included. Read by the causal self-attention of §11.1 only.
    sliding_window: int | None = None
    # §2.6: RoPE frequency scaling: none (canonical) | linear (every frequency / factor, i.e.
    # positions / factor) | llama3 (Llama 3.1's rule: wavelengths above
    # original_max_positions / low_freq_factor divided by factor, below
    # original_max_positions / high_freq_factor kept, a smooth blend between). The four
    # numbers are read only when rope_scaling is not none; defaults: Llama 3.1's.
    rope_scaling: RopeScaling = "none"
    rope_scaling_factor: float = 8.0
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_original_max_positions: int = 8192

    def __post_init__(self) -> None:
        for name, allowed in CHOICES.items():
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(
                    f"Conventions.{name}={value!r} is not one of {allowed}; "
                    "SPEC.md §0.3 lists what each choice means."
                )
        if not (self.eps >= 0.0):
            raise ValueError(f"Conventions.eps must be >= 0, got {self.eps!r}")
        if not (self.pe_base > 1.0):
            raise ValueError(f"Conventions.pe_base must be > 1, got {self.pe_base!r}")
        if not (self.rope_scaling_factor > 0.0):
            raise ValueError(
                f"Conventions.rope_scaling_factor must be > 0, got {self.rope_scaling_factor!r} "
                "(SPEC.md §2.6)"
            )
        if not (0.0 < self.rope_low_freq_factor < self.rope_high_freq_factor):
            raise ValueError(
                "Conventions.rope_low_freq_factor and rope_high_freq_factor must satisfy "
                f"0 < low < high (the llama3 blend divides by high - low), got "
                f"{self.rope_low_freq_factor!r} and {self.rope_high_freq_factor!r} (SPEC.md §2.6)"
            )
        if not (self.rope_original_max_positions >= 1):
            raise ValueError(
                "Conventions.rope_original_max_positions must be >= 1, got "
                f"{self.rope_original_max_positions!r} (SPEC.md §2.6)"
            )
        window = self.sliding_window
        if window is not None and (isinstance(window, bool) or not isinstance(window, int)):
            raise ValueError(
                f"Conventions.sliding_window must be None or an int >= 1, got {window!r} "
                "(SPEC.md §4.5)"
            )
        if window is not None and window < 1:
            raise ValueError(
                f"Conventions.sliding_window must be >= 1 (a query sees at least its own key), "
                f"got {window} (SPEC.md §4.5)"
            )

    def deviations(self, canonical: Conventions | None = None) -> dict[str, tuple[Any, Any]]:
        """Each field that differs from ``canonical`` (default: the Transformer family's;
        pass ``params.canonical_conventions(component)`` for a component's family):
        name -> (canonical, declared)."""
        canonical = canonical or Conventions()
        return {
            f.name: (getattr(canonical, f.name), getattr(self, f.name))
            for f in fields(self)
            if getattr(self, f.name) != getattr(canonical, f.name)
        }

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


CANONICAL = Conventions()


@dataclass(frozen=True)
class Config:
    """Sizes of a component or model (SPEC.md §0.4). Nothing here changes semantics."""

    d_model: int = 32
    n_heads: int = 4
    d_k: int | None = None  # per-head query/key width; default d_model // n_heads
    d_v: int | None = None  # per-head value width; default d_model // n_heads
    d_ff: int = 64  # hidden width of the position-wise FFN (ViT: mlp_ratio * d_model)
    n_layers: int = 2  # encoder layers (ViT blocks)
    n_decoder_layers: int = 2
    vocab_size: int = 40
    padding_idx: int | None = 0
    max_len: int = 512  # longest sequence a positional encoding is defined for
    tie_weights: bool = True  # §8.3: one matrix for source, target embedding and output projection
    bias: bool = True  # linear layers carry a bias
    image_size: int = 16
    patch_size: int = 4
    channels: int = 3
    n_classes: int = 10
    # §11.2: key/value heads of a causal self-attention (grouped-query attention); default
    # n_heads (multi-head attention), 1 is multi-query attention. No other component reads it.
    n_kv_heads: int | None = None
    # Bias per part (SPEC.md §0.5); None follows ``bias``. Defaults: today's layout.
    # the q, k, v projections of §3.3 and §11.1, and the output projection o unless
    # attention_out_bias says otherwise
    attention_bias: bool | None = None
    ffn_bias: bool | None = None  # fc1 and fc2 of §6.1, gate, up and down of §11.3
    norm_bias: bool = True  # the shift of each LayerNorm (§5.1; RMSNorm has none)
    head_bias: bool = True  # the ViT classifier head (§9.5)
    # the output projection o of §3.4 and §11.1 alone; None follows attention_bias (ViT's
    # qkv_bias=False: attention_bias=False, attention_out_bias=True; Qwen2: the reverse)
    attention_out_bias: bool | None = None

    def __post_init__(self) -> None:
        positive = (
            "d_model",
            "n_heads",
            "d_ff",
            "vocab_size",
            "max_len",
            "patch_size",
            "channels",
            "image_size",
            "n_classes",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"Config.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("n_layers", "n_decoder_layers"):
            if getattr(self, name) < 0:
                raise ValueError(f"Config.{name} must be >= 0, got {getattr(self, name)}")
        if (self.d_k is None or self.d_v is None) and self.d_model % self.n_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads} "
                "(SPEC.md §3.3): choose n_heads dividing d_model, or give d_k and d_v explicitly."
            )
        if self.n_kv_heads is not None and (self.n_kv_heads < 1 or self.n_heads % self.n_kv_heads):
            raise ValueError(
                f"n_kv_heads={self.n_kv_heads} does not divide n_heads={self.n_heads} (SPEC.md "
                "§11.2): each key/value head serves n_heads / n_kv_heads query heads"
            )
        for name in ("d_k", "d_v"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"Config.{name} must be >= 1, got {value}")
        if self.padding_idx is not None and not 0 <= self.padding_idx < self.vocab_size:
            raise ValueError(
                f"padding_idx={self.padding_idx} is outside the vocabulary [0, {self.vocab_size})"
            )
        if self.image_size % self.patch_size:
            raise ValueError(
                f"image_size={self.image_size} is not divisible by patch_size={self.patch_size} "
                "(SPEC.md §9.1): crop or pad the image, or choose a patch size that divides it."
            )

    @property
    def head_dim_k(self) -> int:
        return self.d_k if self.d_k is not None else self.d_model // self.n_heads

    @property
    def head_dim_v(self) -> int:
        return self.d_v if self.d_v is not None else self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        """§11.2: the number of key/value heads (n_kv_heads, default n_heads)."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def has_attention_bias(self) -> bool:
        """§0.5: whether the q, k and v projections carry a bias."""
        return self.bias if self.attention_bias is None else self.attention_bias

    @property
    def has_attention_out_bias(self) -> bool:
        """§0.5: whether the attention's output projection o carries a bias."""
        if self.attention_out_bias is None:
            return self.has_attention_bias
        return self.attention_out_bias

    @property
    def has_ffn_bias(self) -> bool:
        return self.bias if self.ffn_bias is None else self.ffn_bias

    @property
    def n_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    def to_dict(self) -> dict[str, Any]:
        """The sizes by name; fields added after configs were first written (n_kv_heads, §11.2;
        the bias per part, §0.5) only when not at their defaults, so that configs written
        before them (fixture manifests, results) read the same."""
        out = asdict(self)
        for name, default in _ADDED_DEFAULTS.items():
            if out[name] == default:
                del out[name]
        return out


# Config's fields added after configs were first written, with their defaults: left out of
# to_dict at these values, so that what was written before them (fixture manifests) reads
# the same. n_kv_heads None means n_heads (§11.2); the bias per part (§0.5) None follows bias.
_ADDED_DEFAULTS: dict[str, Any] = {
    "n_kv_heads": None,
    "attention_bias": None,
    "ffn_bias": None,
    "norm_bias": True,
    "head_bias": True,
    "attention_out_bias": None,
}
