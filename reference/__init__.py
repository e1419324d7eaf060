"""The oracle: SPEC.md made executable, in float64.

``tck.reference.oracle`` is the numpy functional core (one path per clause, the spec's);
``tck.reference.model`` is a minimal PyTorch Transformer and ViT whose parameter names are
the canonical ones. This package imports nothing else of ours.
"""

from .components import COMPONENTS, RECORDS, Component, of_family, record, select, tagged
from .conventions import CANONICAL, Config, Conventions
from .params import (
    DECODER_CANONICAL,
    VIT_CANONICAL,
    canonical_conventions,
    check_params,
    init_params,
    param_count,
    param_shapes,
    subparams,
)

DECODER_ONLY: tuple[str, ...] = of_family("decoder-only")

__all__ = [
    "CANONICAL",
    "COMPONENTS",
    "DECODER_CANONICAL",
    "DECODER_ONLY",
    "RECORDS",
    "VIT_CANONICAL",
    "Component",
    "Config",
    "Conventions",
    "canonical_conventions",
    "check_params",
    "init_params",
    "param_count",
    "param_shapes",
    "record",
    "select",
    "subparams",
    "tagged",
]
