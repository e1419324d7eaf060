"""Each bug of the eighteenth blind set changes some output of its implementation and each
control changes none (tests/blind/setkit.py's probes: float64 forwards, cached decoding, 16-bit
forwards; no tck check is run).

setkit has no probe for `sinusoidal_pe`; this file adds one (the table's rows at positions
0 .. 12 and 499 .. 511) around setkit's own probes, without changing setkit. The granite
decoder is probed with grouped-query attention (2 key/value heads for 4 query heads) and no
biases, as its adapter declares.

    PYTHONPATH=tests/blind18 python tests/blind18/verify_bugs.py [bug or control id ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "blind"))
import setkit  # noqa: E402  (the shared verifier)

from tck.reference import Config  # noqa: E402

CONFIGS = {
    "granite_decoder": Config(tie_weights=True, bias=False, n_kv_heads=2),
    "functional_mha_encoder": Config(),
    "openclip_vit": Config(head_bias=False),
}  # fmt: skip

_setkit_probes = setkit.probe_inputs


def probe_inputs(component, config, rng):  # type: ignore[no-untyped-def]
    if component == "sinusoidal_pe":
        return [{"positions": np.arange(13)}, {"positions": np.arange(499, 512)}]
    return _setkit_probes(component, config, rng)


setkit.probe_inputs = probe_inputs


def main(argv: list[str]) -> int:
    return setkit.verify(HERE, CONFIGS, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
