"""A held-out set for the diagnosis benchmark: small PyTorch modules written
the way tutorials and public repositories write them, each adapted the way README.md shows.

Each module has ``adapter`` (a ``TorchModuleAdapter``), ``ONLY`` (the components its run is
narrowed to with ``--only``) and ``LABEL``: the diagnosis code a user would want as the run's
top cause, or ``None`` for a correct implementation (it must pass with zero failures). Every
buggy module has ONE bug, and its docstring cites the public report the bug is taken from.

The set was written without reading the mutant catalog (``tck.adapters.mutants``) or the
diagnosis internals, so that it measures how the diagnoses generalise;
``tests/detection/test_heldout.py`` runs and scores it (``tox -e detection``).
"""

from __future__ import annotations

NAMES: tuple[str, ...] = (
    "ln_unbiased_var",
    "ln_stats_over_sequence",
    "rms_divides_by_rsqrt",
    "pe_double_two_i",
    "pe_base_1000",
    "rope_ignores_positions",
    "attn_softmax_over_heads",
    "attn_scale_by_key_length",
    "mha_split_without_transpose",
    "mha_bool_mask_added",
    "mha_functional_dropout",
    "gpt_causal_triu_diagonal",
    "encoder_layer_gelu_undeclared",
    "decoder_layer_tgt_mask_unused",
    "encoder_final_norm_unused",
    "swiglu_fused_halves_swapped",
    "gpt_block_cache_unused",
    "vit_patch_reshape_no_transpose",
    "embedding_without_padding_idx",
    "vit_pos_embed_before_cls",
    # correct implementations in other styles
    "ok_sdpa_fused_mha",
    "ok_llama_rms_rope",
    "ok_handwritten_ln_ffn_pe",
)
