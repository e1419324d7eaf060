"""Each bug of the thirty-fifth blind set changes some output of its implementation and each
control changes none (tests/blind/setkit.py's probes: float64 forwards, cached decoding, 16-bit
forwards; no tck check is run).

    PYTHONPATH=tests/blind35 python tests/blind35/verify_bugs.py [bug or control id ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "blind"))
import setkit  # noqa: E402  (the shared verifier)

from tck.reference import Config  # noqa: E402

CONFIGS = {
    "kerashub_llama": Config(n_kv_heads=2, attention_bias=False, ffn_bias=False, tie_weights=False),
    "albert_encoder": Config(),
    "beit_vit": Config(attention_bias=False, attention_out_bias=True),
}  # fmt: skip


def main(argv: list[str]) -> int:
    return setkit.verify(HERE, CONFIGS, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
