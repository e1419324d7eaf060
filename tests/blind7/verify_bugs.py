"""Each bug of the seventh blind set changes some output of its components, and each control
changes none (tests/blind/setkit.py's probes; no tck check involved).

    python tests/blind7/verify_bugs.py                 # every bug and control
    python tests/blind7/verify_bugs.py m.keys_not_rotated control.b.scale_by_power
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "blind"))
import setkit  # noqa: E402

from tck.reference import Config  # noqa: E402

# the configurations the adapters are built with by the suite's defaults (the fields each
# subject fixes: mistral_ref has no biases and two key/value heads)
CONFIGS = {
    "hf_gpt2": Config(),
    "mistral_ref": Config(bias=False, n_kv_heads=2),
    "paper_bert": Config(),
}

if __name__ == "__main__":
    sys.exit(setkit.verify(HERE, CONFIGS, sys.argv[1:]))
