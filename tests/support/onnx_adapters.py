"""Torch adapters whose *export* breaks, for tests/onnx_checks/test_onnx.py: the module is
right (every check passes on torch), the exported graph is not what the module computes."""

import torch
import torch.nn.functional as F
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def _layer_norm(config):
    return nn.LayerNorm(config.d_model, eps=1e-5)


NORM = {"weight": "weight", "bias": "bias"}

# Branches on a value of the data: torch.export cannot trace it (onnx.export_failed).
data_dependent = TorchModuleAdapter(
    "data-dependent",
    [
        TorchEntry(
            "layer_norm",
            make=_layer_norm,
            forward=lambda m, x: m(x) if float(x.abs().max()) < 1e6 else m(x / 1e6),
            param_map=NORM,
            conventions=Conventions(),
        )
    ],
)

# Reads sizes as Python ints: export bakes in the first call's batch and length, and a call
# of other sizes fails in ONNX Runtime (onnx.axis_not_dynamic), as int(seq_len) does in
# many models.
fixed_batch = TorchModuleAdapter(
    "fixed-batch",
    [
        TorchEntry(
            "layer_norm",
            make=_layer_norm,
            forward=lambda m, x: m(x.reshape(int(x.shape[0]) * int(x.shape[1]), -1)).reshape(
                x.shape
            ),
            param_map=NORM,
            conventions=Conventions(),
        )
    ],
)


def _float_mask_attention(m, q, k, v, keep_mask=None):
    """F.scaled_dot_product_attention with an additive float mask: 0 kept, -inf masked."""
    mask = None
    if keep_mask is not None:
        mask = torch.zeros(keep_mask.shape, dtype=q.dtype).masked_fill(~keep_mask, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


# Right in torch (2.13 returns zeros for a row masked everywhere by -inf); its export is not.
float_mask = TorchModuleAdapter(
    "float-mask",
    [
        TorchEntry(
            "attention",
            make=lambda config: nn.Identity(),
            forward=_float_mask_attention,
            conventions=Conventions(fully_masked_rows="zero"),
        )
    ],
)


class _NormWithSpare(nn.Module):
    """nn.LayerNorm beside a parameter the forward never reads: export drops it, so no
    initialiser holds it and each parameter set is exported afresh."""

    def __init__(self, d_model: int):
        super().__init__()
        self.norm = nn.LayerNorm(d_model, eps=1e-5)
        self.spare = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


unused_parameter = TorchModuleAdapter(
    "unused-parameter",
    [
        TorchEntry(
            "layer_norm",
            make=lambda config: _NormWithSpare(config.d_model),
            forward=lambda m, x: m(x),
            param_map={"weight": "norm.weight", "bias": "norm.bias"},
            conventions=Conventions(),
        )
    ],
)
