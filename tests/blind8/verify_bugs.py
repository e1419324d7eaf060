"""Each bug of the eighth blind set changes some output, and each control changes none.

No tck check is involved: tests/blind/setkit.py builds every implementation and every patched
copy through its own adapter with the same seed and the same moved parameters, and compares
float64 forwards, cached decoding (gemma_hf) and 16-bit forwards.

    PYTHONPATH=tests/blind8 python tests/blind8/verify_bugs.py              # every bug and control
    PYTHONPATH=tests/blind8 python tests/blind8/verify_bugs.py g.kv_heads_tiled
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "blind"))
import setkit  # noqa: E402  (the probes the sets share)

from tck.reference import Config  # noqa: E402

# The configuration each implementation's adapter fixes (TorchEntry.config), as the suite
# would build it.
CONFIGS = {
    "gemma_hf": Config(n_kv_heads=2, bias=False),
    "torchvision_vit": Config(),
    "func_wmt": Config(padding_idx=0, tie_weights=True),
}

if __name__ == "__main__":
    sys.exit(setkit.verify(HERE, CONFIGS, sys.argv[1:]))
