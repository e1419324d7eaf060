"""What a subject can be: the configs an implementation supports (SPEC.md §0.6).

Users' models are not built at the suite's sizes. An MLP is hard-coded at 4 x d_model, a
positional table is fixed at max_len 5000, every head is 64 wide, the attention projections
have no bias while the FFN has one. A ``ConfigSpace`` says so, declaratively, on the subject
(``Subject.supports``, ``TorchEntry.supports``)::

    ConfigSpace(
        relations={"d_ff": Times("d_model", 4)},  # d_ff = 4 * d_model
        head_dim=64,                              # d_model = n_heads * 64
        max_len=5000,                             # never fed more than 5000 positions
        biases={"attention": False, "ffn": True}, # SPEC.md §0.5, bias per part
        tied=False,                               # untied embedding and output head
    )

and the suite draws every config and every input inside it: ``resolve`` turns the sizes a
check asks for into a config the subject can be, or into the reason it cannot (the check
then skips with that reason; the subject is never skipped whole for its size alone).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tck.reference import Config

# SPEC.md §0.5: the part of a model -> the Config field that says whether it has a bias.
BIAS_FIELDS: dict[str, str] = {
    # the q, k, v projections (§3.3, §11.1), and the output projection unless
    # "attention_out" is given too
    "attention": "attention_bias",
    "ffn": "ffn_bias",  # fc1 and fc2 (§6.1), gate, up and down (§11.3)
    "norm": "norm_bias",  # the shift of each LayerNorm (§5.1)
    "head": "head_bias",  # the ViT classifier head (§9.5)
    "attention_out": "attention_out_bias",  # the attention's output projection o alone
}

# How describe() names a part whose key is not plain words.
_PART_WORDS = {"attention_out": "attention output projection"}

_FIELDS = frozenset(f.name for f in dataclasses.fields(Config))


@dataclass(frozen=True)
class Times:
    """A size that follows another one: ``field = factor * of`` (``Times("d_model", 4)``)."""

    of: str
    factor: int

    def value(self, values: Mapping[str, Any]) -> int:
        return self.factor * int(values[self.of])

    def describe(self, name: str) -> str:
        return f"{name} = {self.factor} * {self.of}"


@dataclass(frozen=True)
class ConfigSpace:
    """The configs one subject supports; everything not named here is free.

    ``fixed``: Config fields with one possible value (``{"n_layers": 6}``).
    ``choices``: fields with a few possible values, the first preferred
    (``{"n_heads": (2, 4, 8)}``); the suite picks the one nearest its own default.
    ``relations``: fields that follow others (``{"d_ff": Times("d_model", 4)}``).
    ``head_dim``: every head is this wide for queries, keys and values, so
    ``d_model = n_heads * head_dim``.
    ``split_heads``: the subject cuts d_model into n_heads equal heads for queries, keys and
    values (``nn.MultiheadAttention``, BERT, GPT-2, timm): ``d_k = d_v = d_model / n_heads``,
    so n_heads divides d_model and no other head width can be asked for (SPEC.md §3.3).
    ``max_len``: the longest sequence (and the largest position + 1) the subject takes; the
    suite never feeds a longer one, except the shape check that probes that it is refused
    (SPEC.md §2.2, §10.6), which uses this length. It is also ``Config.max_len``.
    ``biases``: which parts carry a bias (``BIAS_FIELDS``: attention, ffn, norm, head,
    attention_out; "attention" alone covers q, k, v and the output projection).
    ``tied``: whether embedding and output head share one matrix (``Config.tie_weights``).
    """

    fixed: Mapping[str, Any] = field(default_factory=dict)
    choices: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    relations: Mapping[str, Times] = field(default_factory=dict)
    head_dim: int | None = None
    split_heads: bool = False
    max_len: int | None = None
    biases: Mapping[str, bool] = field(default_factory=dict)
    tied: bool | None = None

    def __post_init__(self) -> None:
        named = [*self.fixed, *self.choices, *self.relations]
        named += [r.of for r in self.relations.values()]
        unknown = sorted({n for n in named if n not in _FIELDS})
        if unknown:
            raise ValueError(
                f"ConfigSpace names unknown Config field(s) {', '.join(unknown)}; choose from "
                f"{', '.join(sorted(_FIELDS))}"
            )
        parts = sorted(set(self.biases) - set(BIAS_FIELDS))
        if parts:
            raise ValueError(
                f"ConfigSpace.biases names unknown part(s) {', '.join(parts)}; choose from "
                f"{', '.join(BIAS_FIELDS)}"
            )
        for name, values in self.choices.items():
            if not values:
                raise ValueError(f"ConfigSpace.choices[{name!r}] offers no value")
        if self.head_dim is not None and self.head_dim < 1:
            raise ValueError(f"ConfigSpace.head_dim must be >= 1, got {self.head_dim}")
        if self.max_len is not None and self.max_len < 1:
            raise ValueError(f"ConfigSpace.max_len must be >= 1, got {self.max_len}")

    # -------------------------------------------------------------------- the fixed part
    def fixed_values(self) -> dict[str, Any]:
        """Every field with one possible value: ``fixed``, biases, tying and max_len."""
        values = dict(self.fixed)
        values.update({BIAS_FIELDS[part]: bool(v) for part, v in self.biases.items()})
        if "attention" in self.biases and "attention_out" not in self.biases:
            # §0.5: "attention" alone covers the output projection as well
            values["attention_out_bias"] = bool(self.biases["attention"])
        if self.tied is not None:
            values["tie_weights"] = bool(self.tied)
        if self.max_len is not None:
            values["max_len"] = self.max_len
        return values

    def describe(self) -> str:
        """The constraints in words, for reports and skip reasons."""
        said = [f"{k}={v!r}" for k, v in self.fixed.items()]
        said += [f"{k} in {tuple(v)}" for k, v in self.choices.items()]
        said += [r.describe(k) for k, r in self.relations.items()]
        if self.head_dim is not None:
            said.append(f"heads {self.head_dim} wide (d_model = n_heads * {self.head_dim})")
        if self.split_heads:
            said.append("d_k = d_v = d_model / n_heads")
        if self.max_len is not None:
            said.append(f"at most {self.max_len} positions")
        said += [
            f"{_PART_WORDS.get(part, part)} {'with' if v else 'without'} bias"
            for part, v in self.biases.items()
        ]
        if self.tied is not None:
            said.append("tied embedding and head" if self.tied else "untied embedding and head")
        return "; ".join(said) or "any config"

    # -------------------------------------------------------------------- resolving
    def resolve(
        self, overrides: Mapping[str, Any] | None = None, base: Config | None = None
    ) -> Config | str:
        """The config a check gets: ``base`` (the suite's default sizes) with what the check
        needs (``overrides``), moved inside this space. Returns a ``Config``, or a ``str``
        that says which declared constraint the check's needs break.

        A field the check needs keeps its value (or the config is refused); the others
        follow the space: fixed values, the allowed choice nearest the suite's default, the
        head width, then the relations. ``max_len`` in ``overrides`` is a minimum (the check
        needs positions up to it): the subject's own maximum is used when it is larger.
        """
        overrides = dict(overrides or {})
        base = base if base is not None else Config()
        values = dataclasses.asdict(base)
        fixed = self.fixed_values()
        for name, wanted in overrides.items():
            if name == "max_len" and self.max_len is not None:
                if wanted > self.max_len:
                    return (
                        f"this check needs positions up to {wanted - 1} (max_len={wanted}); the "
                        f"subject takes at most {self.max_len} (ConfigSpace.max_len)"
                    )
                continue
            if name in fixed and fixed[name] != wanted:
                return (
                    f"this check needs {name}={wanted!r}; the subject supports only "
                    f"{name}={fixed[name]!r} (ConfigSpace)"
                )
            if name in self.choices and wanted not in self.choices[name]:
                return (
                    f"this check needs {name}={wanted!r}; the subject supports {name} in "
                    f"{tuple(self.choices[name])} (ConfigSpace.choices)"
                )
            values[name] = wanted
        needed = {k for k in overrides if k != "max_len" or self.max_len is None}
        values.update(fixed)
        for name, allowed in self.choices.items():
            if name not in needed and values[name] not in allowed:
                values[name] = _nearest(values[name], allowed)
        if self.head_dim is not None:
            refusal = self._fit_heads(values, needed)
            if refusal:
                return refusal
        if self.split_heads:
            refusal = self._split_heads(values, needed)
            if refusal:
                return refusal
        for name, relation in self.relations.items():
            value = relation.value(values)
            if name in needed and overrides[name] != value:
                return (
                    f"this check needs {name}={overrides[name]!r}; the subject supports only "
                    f"{relation.describe(name)} = {value} (ConfigSpace.relations)"
                )
            values[name] = value
        try:
            config = Config(**values)
        except (TypeError, ValueError) as err:
            return f"no config of the subject's space fits this check: {err}"
        refusal = self.admits(config)
        return refusal if refusal else config

    def _fit_heads(self, values: dict[str, Any], needed: set[str]) -> str | None:
        width = self.head_dim
        assert width is not None
        for name in ("d_k", "d_v"):
            if name in needed and values[name] not in (None, width):
                return (
                    f"this check needs {name}={values[name]}; every head of the subject is "
                    f"{width} wide (ConfigSpace.head_dim)"
                )
        if "d_model" in needed:
            heads, rest = divmod(int(values["d_model"]), width)
            if rest or heads < 1 or ("n_heads" in needed and values["n_heads"] != heads):
                return (
                    f"this check needs d_model={values['d_model']} with n_heads="
                    f"{values['n_heads']}; the subject's heads are {width} wide, so d_model = "
                    f"n_heads * {width} (ConfigSpace.head_dim)"
                )
            values["n_heads"] = heads
        else:
            values["d_model"] = int(values["n_heads"]) * width
        values["d_k"] = values["d_v"] = None  # d_model // n_heads == width
        kv = values.get("n_kv_heads")
        if kv is not None and values["n_heads"] % kv:
            return f"n_kv_heads={kv} does not divide n_heads={values['n_heads']}"
        return None

    def _split_heads(self, values: dict[str, Any], needed: set[str]) -> str | None:
        """d_k and d_v back to d_model / n_heads (None), unless the check needs another."""
        d_model, heads = int(values["d_model"]), int(values["n_heads"])
        for name in ("d_k", "d_v"):
            if name in needed and values[name] is not None and values[name] * heads != d_model:
                return (
                    f"this check needs {name}={values[name]}; the subject's heads are d_model / "
                    f"n_heads = {d_model}/{heads} wide (ConfigSpace.split_heads)"
                )
        if d_model % heads:
            return (
                f"this check needs d_model={d_model} with n_heads={heads}; the subject cuts "
                "d_model into n_heads equal heads (ConfigSpace.split_heads)"
            )
        values["d_k"] = values["d_v"] = None  # d_model // n_heads
        return None

    def admits(self, config: Config) -> str | None:
        """None when ``config`` lies in this space, else the constraint it breaks. Its
        ``max_len`` is not compared: what matters is that no call is longer than the
        subject's (the suite checks each call,
        ``tck.conformance.toolkit.spaces.require_length``)."""
        for name, value in self.fixed_values().items():
            if name == "max_len":  # checked on each call (a longer one is never made)
                continue
            if _bias_value(config, name) != value:
                return (
                    f"the config has {name}={_bias_value(config, name)!r}; the subject "
                    f"supports only {name}={value!r}"
                )
        for name, allowed in self.choices.items():
            if getattr(config, name) not in allowed:
                return (
                    f"the config has {name}={getattr(config, name)!r}; the subject supports "
                    f"{name} in {tuple(allowed)}"
                )
        if self.head_dim is not None:
            widths = {config.head_dim_k, config.head_dim_v}
            if widths != {self.head_dim} or config.n_heads * self.head_dim != config.d_model:
                return (
                    f"the config has d_model={config.d_model}, n_heads={config.n_heads}, heads "
                    f"{'/'.join(map(str, sorted(widths)))} wide; the subject's heads are "
                    f"{self.head_dim} wide (d_model = n_heads * {self.head_dim})"
                )
        if self.split_heads and (
            config.d_model % config.n_heads
            or {config.head_dim_k, config.head_dim_v} != {config.d_model // config.n_heads}
        ):
            return (
                f"the config has d_model={config.d_model}, n_heads={config.n_heads}, d_k="
                f"{config.head_dim_k}, d_v={config.head_dim_v}; the subject's heads are "
                "d_model / n_heads wide for queries, keys and values"
            )
        values = dataclasses.asdict(config)
        for name, relation in self.relations.items():
            if values[name] != relation.value(values):
                return (
                    f"the config has {name}={values[name]}; the subject supports only "
                    f"{relation.describe(name)} = {relation.value(values)}"
                )
        return None


def parts_without_bias(
    config: Config, parts: tuple[str, ...] = ("attention", "attention_out", "ffn", "norm")
) -> list[str]:
    """The bias fields (``BIAS_FIELDS``) of ``parts`` that ``config`` leaves without a bias,
    as they act (SPEC.md §0.5): for a module with one bias switch for all of them."""
    return [BIAS_FIELDS[p] for p in parts if not _bias_value(config, BIAS_FIELDS[p])]


def _bias_value(config: Config, name: str) -> Any:
    """A bias field as it acts (attention_bias/ffn_bias None follow ``bias``,
    attention_out_bias None follows attention_bias)."""
    if name == "attention_out_bias":
        return config.has_attention_out_bias
    value = getattr(config, name)
    if name in ("attention_bias", "ffn_bias") and value is None:
        return config.bias
    return value


def _nearest(value: Any, allowed: tuple[Any, ...]) -> Any:
    """The allowed value nearest ``value`` (numbers: the smaller on a tie), else the first."""
    if isinstance(value, (int, float)) and all(isinstance(a, (int, float)) for a in allowed):
        return min(allowed, key=lambda a: (abs(a - value), a))
    return allowed[0]
