"""Each bug of the twenty-second blind set changes some output of its implementation and each
control changes none (tests/blind/setkit.py's probes: float64 forwards, cached decoding, 16-bit
forwards; no tck check is run).

The internlm2 decoder is probed with grouped-query attention (4 query heads, 2 key/value
heads, no biases, untied) and the whisper blocks with d_ff = 4 * d_model, the configurations
their adapters declare.

    PYTHONPATH=tests/blind22 python tests/blind22/verify_bugs.py [bug or control id ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "blind"))
import setkit  # noqa: E402  (the shared verifier)

from tck.reference import Config  # noqa: E402

CONFIGS = {
    "internlm2_decoder": Config(n_kv_heads=2, bias=False, tie_weights=False),
    "whisper_seq2seq": Config(d_ff=128),
    "unshuffle_vit": Config(),
}  # fmt: skip


def main(argv: list[str]) -> int:
    return setkit.verify(HERE, CONFIGS, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
