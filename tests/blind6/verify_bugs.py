"""Each bug of the sixth blind set changes some output and each control does not (no tck check
involved): tests/blind/setkit.py's probes on float64 forwards, cached decoding and 16-bit
forwards, each implementation built through its own adapter.

    python tests/blind6/verify_bugs.py [ID ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "blind"))
import setkit  # noqa: E402

from tck.reference import Config  # noqa: E402

CONFIGS = {
    "flash_llama3": Config(n_kv_heads=2, bias=False, norm_bias=False, tie_weights=False),
    "fairseq_encoder": Config(),
    "keras_vit": Config(),
}

if __name__ == "__main__":
    sys.exit(setkit.verify(HERE, CONFIGS, sys.argv[1:]))
