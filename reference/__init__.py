"""The oracle: SPEC.md made executable, in float64.

``tck.reference.oracle`` is the numpy functional core (one path per clause, the spec's);
``tck.reference.model`` is a minimal PyTorch Transformer and ViT whose parameter names are
the canonical ones. This package imports nothing else of ours.
"""

from .conventions import CANONICAL, Config, Conventions
from .params import (
    COMPONENTS,
    DECODER_CANONICAL,
    DECODER_ONLY,
    VIT_CANONICAL,
    canonical_conventions,
    check_params,
    init_params,
    param_count,
    param_shapes,
    subparams,
)

__all__ = [
    "CANONICAL",
    "COMPONENTS",
    "DECODER_CANONICAL",
    "DECODER_ONLY",
    "VIT_CANONICAL",
    "Config",
    "Conventions",
    "canonical_conventions",
    "check_params",
    "init_params",
    "param_count",
    "param_shapes",
    "subparams",
]
