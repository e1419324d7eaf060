"""Each bug of the nineteenth blind set changes some output of its implementation and each
control changes none (tests/blind/setkit.py's probes: float64 forwards, cached decoding, 16-bit
forwards; no tck check is run).

setkit has no probe for `scale_norm`; this file adds one (the `rms_norm` inputs: unit, x 300,
x 1e-4, and a row of zeros) around setkit's own probes, without changing setkit. The decoder is
verified with two key/value heads for its four query heads, so that `repeat_kv` matters.

    PYTHONPATH=tests/blind19 python tests/blind19/verify_bugs.py [bug or control id ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "blind"))
import setkit  # noqa: E402  (the shared verifier)

from tck.reference import Config  # noqa: E402

CONFIGS = {
    "meta_llama": Config(tie_weights=False, n_kv_heads=2, bias=False),
    "xtransformers_encoder": Config(attention_bias=False),
    "mae_vit": Config(),
}  # fmt: skip

_setkit_probes = setkit.probe_inputs


def probe_inputs(component, config, rng):  # type: ignore[no-untyped-def]
    if component == "scale_norm":
        x = rng.standard_normal((setkit.B, setkit.L, config.d_model))
        zero = x.copy()
        zero[0, 0] = 0.0
        return [{"x": x}, {"x": x * 300.0}, {"x": x * 1e-4}, {"x": zero}]
    return _setkit_probes(component, config, rng)


setkit.probe_inputs = probe_inputs


def main(argv: list[str]) -> int:
    return setkit.verify(HERE, CONFIGS, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
