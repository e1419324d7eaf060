"""Each bug of the twenty-fourth blind set changes some output of its implementation and each
control changes none (tests/blind/setkit.py's probes: float64 forwards, cached decoding, 16-bit
forwards; no tck check is run).

setkit has no probe for `sinusoidal_pe`; this file adds one (the table's rows at positions
0 .. 12 and 499 .. 511) around setkit's own probes, without changing setkit.

    PYTHONPATH=tests/blind24 python tests/blind24/verify_bugs.py [bug or control id ...]
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
    "falcon_decoder": Config(n_kv_heads=1, attention_bias=False, ffn_bias=False, tie_weights=True),
    "t2t_encoder": Config(attention_bias=False, ffn_bias=True),
    "mocov3_vit": Config(),
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
