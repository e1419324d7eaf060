"""Each bug of the thirty-sixth blind set changes some output of its implementation and each
control changes none (tests/blind/setkit.py's probes: float64 forwards, cached decoding, 16-bit
forwards; no tck check is run).

    PYTHONPATH=tests/blind36 python tests/blind36/verify_bugs.py [bug or control id ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "blind"))
import setkit  # noqa: E402  (the shared verifier)

from tck.reference import Config  # noqa: E402

CONFIGS = {
    "executorch_llama": Config(n_kv_heads=2, attention_bias=False, attention_out_bias=False, ffn_bias=False, tie_weights=False),
    "nemo_encoder": Config(),
    "scenic_vit": Config(),
}  # fmt: skip


def main(argv: list[str]) -> int:
    return setkit.verify(HERE, CONFIGS, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
