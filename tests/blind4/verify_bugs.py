"""Check that every bug of the fourth blind set changes some output of its components and that
every control does not (no tck check involved: tests/blind/setkit.py builds each
implementation and each patched copy through its own adapter and compares them).

    python tests/blind4/verify_bugs.py              # every bug and control
    python tests/blind4/verify_bugs.py qwen.gqa_tiled
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "blind"))
import setkit  # noqa: E402

from tck.reference import Config  # noqa: E402

CONFIGS = {
    "mingpt_gpt2": Config(),
    "qwen_swa": Config(
        n_kv_heads=2,
        attention_bias=True,
        attention_out_bias=False,
        ffn_bias=False,
        tie_weights=False,
    ),
    "einsum_deit": Config(),
    "annotated_seq2seq": Config(),
}

if __name__ == "__main__":
    sys.exit(setkit.verify(HERE, CONFIGS, sys.argv[1:]))
