"""Mutants: one small, realistic buggy implementation per bug class, to measure what the
suite catches.

Each mutant module holds a third-party-style ``nn.Module`` (copied from ``tutorial`` or from
``tck.reference.model`` and broken in one place, marked ``# BUG``), adapted like any other
model, and declares:

- ``BUG_CLASS``: its name, the ``X`` of the adapter name ``mutants.X``;
- ``EXPECTED_CODES``: the diagnosis code(s) the suite must report for it;
- ``adapter``: a ``TorchModuleAdapter`` declaring the *canonical* conventions (a mutant
  claims to be correct; that is the point), offering only the subjects where the bug lives.

``tutorial`` is the unbroken control: the same modules, no bug, zero failures.
Run one with ``tck run --adapter tck.adapters.mutants.scale_d_model:adapter`` (or
``--adapter mutants.scale_d_model`` once ``load_adapter`` resolves the ``mutants.`` prefix
through ``CATALOG``).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from tck.adapters.base import Adapter

PACKAGE = __name__

NAMES: tuple[str, ...] = (
    "mask_polarity_inverted",
    "float_mask_ignored",
    "fully_masked_nan",
    "causal_diagonal_hidden",
    "causal_bottom_right",
    "scale_d_model",
    "scale_missing",
    "scale_multiplied",
    "scale_on_query_input",
    "scale_after_softmax",
    "layer_norm_std_plus_eps",
    "layer_norm_unbiased",
    "layer_norm_eps_ignored",
    "pe_concatenated",
    "pe_precedence",
    "rope_layout_mixup",
    "gelu_tanh",
    "dropout_in_eval",
    "drop_path_in_eval",
    "value_uses_key_proj",
    "softmax_query_axis",
    "padding_mask_on_queries",
    "residual_missing",
    "pre_post_swapped",
    "final_norm_missing",
    "batch_leak",
    "vit_cls_no_pos_embed",
    "vit_pooled_wrong_token",
    "embedding_not_scaled",
    "fp16_mask_overflow",
    "heads_merged_wrong_order",
    "mask_wrong_batch_row",
    "causal_mask_dropped",
    "rope_low_precision",
    "layer_norm_low_precision",
    "rms_norm_low_precision",
    "softmax_low_precision",
    "activation_row_centered",
    # decoder-only (SPEC.md §11), on the modules of gpt_tutorial
    "kv_heads_tiled",
    "cache_rope_offset",
    "cache_causal_off_by_one",
    "cache_causal_top_left",
    "cache_wrong_axis",
    "gate_up_swapped",
    "gate_from_up_projection",
    "swiglu_gelu",
    "left_pad_positions",
    # the diagnosis benchmark: realistic bugs from public reports and tutorials,
    # each with the root-cause code it must get
    "layer_norm_annotated",
    "pe_float32_table",
    "fill_value_fp16",
    "embedding_no_padding_idx",
    "mask_cache_stale",
    "vit_patch_embed_norm",
    "vit_norm_pre",
    "dropout_functional",
    "scale_applied_twice",
    "scale_num_heads",
    "pe_position_offset",
    "patch_flatten_channels_last",
    "post_ln_final_norm",
    "softmax_no_max",
    "rope_positions_ignored",
    "rope_position_offset",
    "rope_cache_key",
    "vit_gap_pool",
    "mha_key_padding_keep",
    "mha_batch_first_dropped",
    "layer_norm_one_pass_variance",
    "mask_combined_with_or",
    "lm_logits_rescaled",
    "vit_mean_with_cls",
    "extra_norm",
    # the diagnosis benchmark, continued: head split layouts, biases never added, norm gains,
    # residual paths, conventions of ported decoder-only models
    "heads_split_no_transpose",
    "gqa_split_no_transpose",
    "qkv_bias_dropped",
    "rope_theta_ignored",
    "rms_norm_gain_plus_one",
    "rms_norm_eps_llama",
    "gpt2_exact_gelu",
    "lm_final_norm_missing",
    "mask_fill_finite",
    "residual_from_normed",
    "bert_eps_ported",
    "lm_embedding_scaled",
    "cache_dropped",
    "vit_merge_no_permute",
    # the diagnosis benchmark, continued: the softmax over another axis, a bool mask added to
    # the scores, a causal mask without its diagonal in a decoder, the patch grid read in
    # another order, the position table added before the class token
    "softmax_batch_axis",
    "mask_added_padding",
    "decoder_causal_diagonal",
    "decoder_out_proj_heads_read_feature_major",
    "cache_unrotated_keys_prepended",
    "vit_patch_grid_column_major",
    "vit_pos_before_cls",
    # decoder options (SPEC.md §4.5, §2.6): a sliding window one key too wide, Llama 3.1's
    # RoPE scaling declared and not applied
    "sliding_window_off_by_one",
    "rope_scaling_ignored",
    # hypotheses by class: where RoPE is applied, the attention scale of causal attention,
    # a rotary base off any list, the residual bug in one sublayer only
    "rope_q_only",
    "rope_on_values",
    "causal_scale_d_model",
    "rope_theta_hardcoded",
    "residual_from_normed_ffn",
    "pe_float16_table",
    "layer_norm_seq_axes",
    # decoding regimes (SPEC.md §11.9) and causal subjects without a padding mask: chunked
    # calls on a non-empty cache, positions the model derives, a forward after steps, state
    # kept between plain calls, the attention scale of causal attention
    "cache_chunk_top_left",
    "cache_chunk_mask_square",
    "cache_chunk_mask_blocks_swapped",
    "padding_inverted_finite_fill",
    "lm_own_positions_count_pads",
    "mask_inverted_off_prefix",
    "cache_positions_restart",
    "cache_positions_packed",
    "cache_not_reset",
    "causal_cache_held",
    "decoder_norm_over_batch",
    "lm_rms_norm_low_precision",
    "lm_rope_low_precision",
    # cached decoding by class: the step's keys put before the cache, the padding mask
    # dropped in cached steps (SPEC.md §11.6, §11.7)
    "cache_keys_prepended",
    "cache_padding_dropped",
    "cache_rope_keys_offset",
    # parameters read in the wrong place, by class (the canonical layout's pieces): the key
    # and value slices of a fused projection exchanged, a norm's gain never multiplied, every
    # layer of a stack running the first layer's weights
    "qkv_split_k_v_swapped",
    "rms_norm_gain_unused",
    "lm_layers_share_weights",
    # a LayerNorm adding its shift before its gain, weight * (x_hat + bias)
    "layer_norm_shift_before_gain",
    # a LayerNorm whose numerator is not centred, its variance still about the mean
    "layer_norm_numerator_not_centred",
    # RoPE turned the other way (the sign of sin flipped)
    "rope_rotation_inverted",
    # SwiGLU's activation applied after the gating product
    "swiglu_silu_after_product",
    # a causal LM returning log-probabilities (the §8.2 check runs on seq2seq models only)
    "lm_log_softmax_logits",
    # ScaleNorm (§5.4): the RMS in place of the L2 norm; eps added to the norm, not a clamp;
    # its one gain never multiplied; its sum of squares in float16 (§10.10)
    "scale_norm_rms",
    "scale_norm_eps_added",
    "scale_norm_gain_unused",
    "scale_norm_low_precision",
    # heads folded into the batch, time-first (fairseq's layout): the queries viewed as
    # [B * H, L, d] without the transpose, so the batch's rows interact
    "heads_folded_time_first",
    # cache-only bugs by slot and mask: a static cache written one slot too far, the causal
    # mask skipped once the cache is non-empty (SPEC.md §11.6, §11.9)
    "cache_slot_late",
    "cache_steps_unmasked",
    # the padding mask of a causal subject read inverted, or laid over the queries (seen
    # under left padding only: SPEC.md §4.2, §11.7)
    "causal_padding_polarity",
    "causal_padding_on_queries",
    # the same over the queries as additive finfo.min biases summed with the causal one,
    # in a whole causal LM: the pad rows average their causal keys
    "lm_additive_padding_on_queries",
    # wiring: a later sublayer's residual from the block input, a norm computing with its
    # sibling's weights, an untied head computing with the token embedding
    "ffn_residual_from_block_input",
    "norm_reads_sibling",
    "lm_head_tied_untied",
    # learned positions: the table never added, the table read one row late in a model that
    # numbers its tokens itself
    "lm_position_table_not_added",
    "lm_positions_off_by_one",
    # RMSNorm's eps added outside the square root
    "rms_norm_eps_outside",
    # the values alone put before the cached ones
    "cache_values_prepended",
    # attention weights that do not sum to one: an online softmax whose accumulator is not
    # rescaled when the running maximum grows (SPEC.md §3.1)
    "online_softmax_not_rescaled",
    # a query with no visible key left NaN under a causal mask with left padding, while an
    # all-padding sequence is zeroed (SPEC.md §4.4)
    "causal_left_pad_nan",
    # cache addressing (SPEC.md §11.6): slot addresses that overlap, every layer on one pool
    "cache_slots_overlap",
    "cache_layers_share_pool",
    # a causal mask over batch-flat key indices: right for the first row of a batch only
    "causal_batch_flat",
    # RoPE as a measured family: a scaling band multiplied instead of divided, a cos/sin
    # table laid out for the other pairing; heads merged feature-major in a layer offered
    # without its attention
    "rope_scaling_multiplied",
    # Llama 3.1's blend weights swapped at its shipped numbers: only a head dimension with a
    # pair in the blended band shows it, which the suite's default (d_k = 6) lacks
    "rope_scaling_blend_swapped",
    "rope_table_interleaved",
    "rope_sin_table_half_split",
    "heads_merged_feature_major",
    # the online softmax's running sum and accumulator kept in 16 bits (long rows show it)
    "softmax_online_half",
    # a tiled kernel that visits whole key tiles only: the ragged last tile never attended
    "attention_ragged_tile_dropped",
    # tiled (online) softmaxes that combine their key tiles wrongly (SPEC.md §3.1): summaries
    # rescaled by the inverted factor, a block normalised on its own, a clamped last chunk
    # counted twice, a chunk with every key masked at -inf turning its query NaN
    "online_softmax_rescale_inverted",
    "online_softmax_tile_normalised",
    "online_softmax_last_tile_clamped",
    "online_softmax_masked_tile_nan",
    # found on code we did not write (tests/blind11): a gate of sigmoid for SiLU, hidden
    # scores filled with 0, a value cache holding the keys, RoPE's frequencies indexed over
    # the whole projection, a float64 fill that a float32 softmax turns into -inf
    "gate_sigmoid_for_silu",
    "scores_masked_with_zero",
    "value_cache_holds_keys",
    "cache_present_keys_twice",
    "rope_frequency_flat_index",
    "softmax_float32_fill_overflow",
    # a model-wide float32_steps declaration (its norms' statistics) beside an undeclared
    # float32 step: RoPE angles in the attention, which holds no norm; the logits themselves
    # cast to float32 (SPEC.md §10.12)
    "rope_float32_beside_declared_norms",
    "lm_logits_float32",
    # a residual branch scaled by a layer scale the checkpoint does not hold (SPEC.md §7.1)
    "layer_scale_left_at_init",
    # RoPE's pairs read as neighbours and written back as halves (SPEC.md §2.3)
    "rope_pairs_written_interleaved",
    # caches of another design, measured from outside (which keys each cached query attends):
    # a fixed-size ring cache under a sliding window, one slot too small, its step mask
    # numbered top-left, its padding mask read by place or dropped in steps (SPEC.md §11.6,
    # §11.7, §4.5), its keys numbered by place or read in slot order; with Mistral's finite
    # fill (a query that keeps no key weighs all it read equally, §4.4) numbered top-left,
    # or the new tokens' padding read from the mask's first columns; a GPT whose past length
    # is read as the number of layers
    "ring_cache_too_small",
    "ring_cache_top_left",
    "ring_cache_padding_by_place",
    "ring_cache_padding_dropped",
    "ring_cache_keys_by_place",
    "ring_cache_read_in_slot_order",
    "ring_cache_min_fill_top_left",
    "ring_cache_min_fill_padding_from_start",
    "lm_past_length_from_layers",
    # the cached steps' causal mask offset by the cache's head count, not its length
    "cache_causal_offset_from_heads",
    # a -inf fill without a guard for a left pad that sees no key: its NaN reaches the real
    # tokens through the next layer (SPEC.md §4.4, §11.7)
    "lm_pad_rows_nan",
    # masks and weights on the wrong axis: the attention weights contracted over the queries,
    # the causal mask inverted (SPEC.md §3.1, §4.3)
    "weights_transposed_matmul",
    "causal_future_kept",
    # cross-attention's memory and mask (SPEC.md §3.5, §7.2): the decoder's own stream
    # attended instead of the memory, the memory normalised again, the source padding dropped
    "cross_attn_memory_unread",
    "cross_attn_memory_normed",
    "cross_attn_padding_dropped",
    # every layer extending one cache buffer, in a model built from n_decoder_layers
    "lm_layers_one_buffer",
    # pieces of whole models, by class: the positional table's base, exponent and functions
    # inside an encoder-decoder or a rotary attention, an FFN activation none of the declared
    # ones (a plain FFN, a gated one's gate) or after the output projection, the patch kernel
    # transposed, the class token appended, one bias read from a sibling projection
    "seq2seq_pe_linspace_exponent",
    "seq2seq_pe_cos_sin_swapped",
    "rope_exponent_doubled",
    "ffn_squared_relu",
    "swiglu_gate_quick_gelu",
    "lm_mlp_gelu_after_proj",
    "vit_patch_kernel_transposed",
    "vit_cls_appended",
    "mha_value_bias_from_query",
    # norm statistics in float16 inside a pre-LN layer: the residual stream hides the
    # collapse from the maximum-error rule, the mean error shows it (SPEC.md §10.10)
    "encoder_layer_norm_half_statistics",
    # heads cut by a view that raises on the suite's batched calls (a time-first projection
    # is not contiguous) and splits the heads in the wrong order where it runs
    "mha_time_first_view_heads",
    # an encoder stack whose layers are one module (``[layer] * n``): shared parameters
    "encoder_layers_one_module",
    # heads left [B, L, H, d] for a kernel that reads [B, H, L, d]: raises on masked calls,
    # attends over the heads on unmasked ones
    "mha_heads_left_time_major",
    "mha_heads_merged_axes_swapped",
    # a projection's weight reshaped where it should be transposed (a kernel layout port)
    "ffn_weight_reshaped",
    # classes read off the oracle's pieces, in components other than the op: a norm with
    # the other norm's statistics, RoPE's angles in 16 bits, a sinusoidal table's exponent
    # per feature or its rows offset, keys alone tiled over the query heads, patches cut
    # without the transpose
    "vit_layer_norm_not_centred",
    "rms_norm_centred",
    "rope_angles_half",
    "seq2seq_pe_exponent_per_feature",
    "seq2seq_pe_offset_two",
    # a decoder's key-padding keep-mask read as a pad mask (True = hidden)
    "lm_key_padding_inverted",
    # rows with some key hidden zeroed by a guard meant for rows with none
    "lm_partial_rows_zeroed",
    # a sinusoidal table with the same function on both members of each pair
    "pe_cos_on_both",
    "gqa_keys_tiled",
    "gqa_fused_split_kv_first",
    "gqa_fused_keys_from_value_slot",
    "gqa_queries_across_groups",
    "final_norm_every_layer",
    "vit_patch_strips",
    "vit_image_channels_last_reshaped",
    # a head of its own where the config ties it; a sublayer's norm moved onto its branch
    "lm_head_not_tied",
    "encoder_norm_on_branch",
    # a static cache whose keys alone are written one slot too far
    "cache_keys_slot_late",
    # a static cache whose keys alone are written at its start by every call; one whose
    # write position advances by one per call, not by the tokens written
    "cache_keys_slot_zero",
    "cache_written_at_start",
    "cache_write_position_per_call",
    # a cache replaced by each call's own keys and values instead of extended
    "cache_replaced_by_call",
    # a value cache written with the keys; a static cache that returns its whole buffer
    "cache_values_hold_keys",
    "cache_whole_buffer_read",
    # RoPE on the first half of each head's channels only (a partial rotary)
    "rope_partial_rotary",
    # heads split with the head count and head width exchanged in the view
    "mha_head_count_swapped",
    # a ViT position table resampled at its own grid, or replaced by the tokens
    "vit_pos_embed_resampled",
    "vit_pos_embed_replaced_by_tokens",
    # a ViT position table read with its grid transposed (its patch embedding offered alone)
    "vit_pos_grid_transposed",
    # a ViT class token replaced by zeros (a loaded parameter never used)
    "vit_cls_token_zeroed",
    # cached steps whose causal edge is numbered within the call while a sliding window's
    # edge stays offset by the cache (the two bands stop meeting)
    "sliding_window_cache_top_left",
    # a cache's (key, value) pair unpacked in the other order when read back
    "cache_keys_values_swapped",
    # a pre-LN norm that reaches the queries alone; a later sublayer's branch read from the
    # layer's input
    "encoder_norm_keys_values_bypassed",
    "block_attention_norm_skipped",
    # a learned position table indexed by the token ids
    "gpt_positions_from_ids",
    # a stack whose layers all compute from the stack's input
    "encoder_layers_not_chained",
    "encoder_ffn_reads_layer_input",
    # the FFN's residual, or its branch, from the attention's branch output
    "encoder_ffn_residual_from_attention_branch",
    "encoder_ffn_reads_attention_branch",
    # one stack of an encoder-decoder without its final norm
    "seq2seq_encoder_final_norm_missing",
    # a pre-LN stack built without its final norm, the map naming it
    "encoder_final_norm_not_built",
    # a stack's final norm computed with its last layer's norm (NaN rows spread as declared)
    "encoder_final_norm_from_last_layer",
    # a float32 softmax in a float64 build, its finfo(float64).min fill overflowing to -inf
    "encoder_softmax_in_float32",
    # a softmax pinned to 16 bits in a float64 build: float16 (a causal LM), bfloat16 (a layer)
    "lm_softmax_in_float16",
    "encoder_softmax_in_bfloat16",
    # a decoder layer that drops the cache while the model's mask counts it: the step raises
    "lm_block_drops_cache",
    # the queries from the key projection, the projections separate modules
    "encoder_queries_from_key_projection",
    # queries and values split from a channel-first (NCW) layout by a reshape, not a permute
    "encoder_heads_from_channel_first_reshape",
    # the FFN handed the attention's merged context before the output projection
    "encoder_ffn_reads_attention_context",
    # keys rotated per head, then cut into heads feature-major (MPT's hand-written rearrange)
    "lm_keys_split_feature_major_after_rope",
    # the attention's output projection left out: the merged heads added as they are
    "encoder_output_projection_skipped",
    # keys split into heads after a permute that exchanged the head and feature axes
    "encoder_keys_split_grid_transposed",
    # the final norm skipped on the decoding path alone (the calls that carry a cache)
    "lm_steps_skip_final_norm",
    # heads merged by a view whose shape is read off the unpermuted context: raises but at L = H
    "encoder_heads_merged_shape_from_context",
    # the queries' rotated halves written back interleaved, the keys' as declared
    "lm_query_rope_written_interleaved",
    # the keys' rotate_half without its minus sign, the queries' right
    "lm_key_rotation_sign_lost",
    # heads merged without the transpose on the decoding path alone (its prefill shows it)
    "lm_step_path_merges_heads_untransposed",
    # a (B, C, H, W) image reshaped, not permuted, to a channels-last port's (B, H, W, C)
    "vit_image_reshaped_to_channels_last",
    # the image's channels reversed (RGB read as BGR) before the patch kernel
    "vit_image_channels_reversed",
    # a tensor-parallel rank's heads merged feature-major on the rank
    "heads_merged_per_rank",
    # a decoder's removal masks (future, padding) combined with AND where OR belongs
    "causal_masks_combined_with_and",
    # a tensor-parallel rank's fused q, k, v rows (per head) split as three blocks
    "qkv_per_head_read_as_blocks",
    # a fused [q | k | v] output read interleaved channel by channel ([D, 3])
    "decoder_wpack_read_channel_interleaved",
    # the tanh GELU's sqrt(2/pi) written as an eight-digit literal (1e-10 off)
    "gelu_constant_truncated",
    # exact GELU's erf argument x / 2 for x / sqrt(2)
    "gelu_erf_half",
    # a hand-written softmax whose maximum and sum run over different axes
    "softmax_written_sum_over_queries",
    # the value projection given the key input
    "mha_value_from_key_input",
    # the sinusoidal table added to the source tokens only
    "seq2seq_target_without_positions",
    # an eps in the softmax's denominator; RoPE's position ids made in bfloat16
    "softmax_denominator_eps",
    "rope_positions_bfloat16",
    # a mean pool taken before a final norm that sits in the head
    "vit_mean_before_head_norm",
    # rotate_half writing its halves interleaved beside a half-split table
    "rope_rotate_half_stacked",
    "llama_block_rotate_half_unsigned",
    # RoPE's cos gathered by the index in the call, its sin at the position ids
    "rope_cos_by_call_index",
    # the keys' rotate_half term computed from the queries
    "rope_key_sin_term_from_queries",
    # a tiled kernel whose every key tile reads the mask's first columns
    "attention_tile_mask_from_start",
    # a sequence-first ViT handed its tokens batch-first
    "vit_tokens_not_seq_first",
    # query-key layer scaling's division by the layer number never undone
    "layer_scaling_not_undone",
    # a pre-LN block whose feed-forward sublayer skips its norm
    "block_ffn_norm_skipped",
    "post_ln_ffn_norm_skipped",
    # an encoder-decoder's target embedding a copy of the shared table
    "seq2seq_target_embedding_copied",
    # a ViT's conv tokens reshaped where a transpose belongs (its patch embedding offered
    # alone, and right); a learned position table rounded to float16
    "vit_tokens_reshaped_not_transposed",
    "vit_pos_embed_half",
    # the queries rotated by -theta, the keys by +theta
    "rope_queries_turned_back",
    # the key projection applied to the query input; no sublayer norm applied at all
    "mha_key_from_query_input",
    "encoder_sublayer_norms_skipped",
    # a mean-pooled ViT with its class token appended
    "vit_cls_appended_mean_pool",
    # a decoder's future mask transposed, its keyless padded queries NaN
    "seq2seq_future_mask_transposed",
    # the source embeddings of an encoder-decoder left unscaled
    "seq2seq_source_not_scaled",
    # a learned position table stored behind two rows, indexed without the offset
    "lm_positions_read_early",
    # a module-held static cache (the forward writes it too), its keys written at its start
    "cache_module_buffer_keys_at_start",
    "mha_out_bias_missing",
    "encoder_last_layer_skipped",
    "encoder_layers_post_ln_final_norm_kept",
    "encoder_ffn_adds_its_input",
    # a sublayer adding the residual stream to its branch, the layer adding it again; a
    # stack loop adding each layer's input to its output
    "encoder_layer_ffn_adds_residual",
    "lm_loop_adds_layer_input",
    # a stack run in reverse order; an attention whose four projections drop their biases
    "encoder_layers_reversed",
    "attention_projections_without_bias",
    "heads_time_major_merged",
    "decoder_ffn_residual_stale",
    "decoder_memory_is_layer_input",
    "value_cache_keys_after_prefill",
    "encoder_attention_output_discarded",
    "vit_features_before_last_layer",
    # a keep-mask cast to float16 before its float64 minimum: every masked call NaN
    "encoder_keep_mask_half_scaled",
    # [in, out] kernels multiplied through F.linear: every non-square product raises
    "ffn_kernel_in_out_linear",
    # a drop path of rate 0.1 per image left on in a ViT's last block
    "vit_last_block_drop_path",
)

# mutant name -> module path; ``<path>:adapter`` is its adapter
CATALOG: dict[str, str] = {name: f"{PACKAGE}.{name}" for name in NAMES}
CONTROL = f"{PACKAGE}.tutorial"


def _name(name: str) -> str:
    bare = name.removeprefix("mutants.")
    if bare not in CATALOG:
        raise KeyError(f"unknown mutant {name!r}; the mutants are: {', '.join(CATALOG)}")
    return bare


def module(name: str) -> ModuleType:
    """The module of mutant ``name`` (``"scale_d_model"`` or ``"mutants.scale_d_model"``)."""
    return importlib.import_module(CATALOG[_name(name)])


def adapter_for(name: str) -> Adapter:
    return module(name).adapter


def spec_for(name: str) -> str:
    """``module:attr`` for ``tck run --adapter`` (works without the ``mutants.`` rule)."""
    return f"{CATALOG[_name(name)]}:adapter"


def expected_codes(name: str) -> frozenset[str]:
    return frozenset(module(name).EXPECTED_CODES)


def diagnosis_codes(name: str) -> frozenset[str]:
    """The codes the run's top-ranked root cause may be (the diagnosis benchmark): a
    module's ``TOP_CAUSES`` where one bug shows as two named causes, else ``EXPECTED_CODES``."""
    mod = module(name)
    return frozenset(getattr(mod, "TOP_CAUSES", mod.EXPECTED_CODES))


__all__ = [
    "CATALOG",
    "CONTROL",
    "NAMES",
    "adapter_for",
    "diagnosis_codes",
    "expected_codes",
    "module",
    "spec_for",
]
