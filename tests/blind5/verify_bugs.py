"""Each bug of the fifth blind set changes the output and each control does not (no tck check
involved: tests/blind/setkit.py builds each implementation and each patched copy through its own
adapter and compares float64, cached and 16-bit forwards).

    python tests/blind5/verify_bugs.py                 # every row
    python tests/blind5/verify_bugs.py p.causal_strict # some rows
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "blind"))
import setkit  # noqa: E402  (the checks the sets share)

from tck.reference.conventions import Config  # noqa: E402

# the decoder fixes these per subject (TorchEntry config=...); the suite builds it so too
DECODER = Config(n_kv_heads=2, attention_bias=False, ffn_bias=False, tie_weights=False)
CONFIGS = {
    "pytree_gqa": DECODER,
    "hf_roberta_sdpa": Config(),
    "bigvision_vit": Config(),
    "marian_seq2seq": Config(),
}

if __name__ == "__main__":
    sys.exit(setkit.verify(HERE, CONFIGS, sys.argv[1:]))
