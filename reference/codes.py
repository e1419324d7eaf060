"""The registry of diagnosis codes: every code the suite can give, with its area, its
meaning in plain words, the SPEC.md clauses it names a violation of, and its rank class.

A diagnosis code (``mask.polarity_inverted``) names a bug class; results.json, the reports
and the mutants' expectations carry it. Emitting code uses the names registered here:
``code(name)`` returns ``name`` and raises ``UnknownCode`` for a name the registry lacks,
and ``tests/spec/test_codes.py`` finds every code-shaped string literal of the suite in it, so a
typo'd code fails a test. SPEC.md's Appendix C is generated from this registry
(``markdown_table``) and a test keeps the two equal.

Rank classes (how the reports choose a root cause, ``tck.reports.causes``):

- ``overriding``: makes every other observation of the run unreliable (the output depends
  on earlier calls, or on chance); ranked above everything;
- ``cause``: names why the output is wrong (a convention, a precision finding, a named
  exception, a structural bug);
- ``symptom``: describes what a wrong number does rather than why: ranked below a cause,
  above a generic code;
- ``generic``: says only *that* something is wrong (``*.oracle_mismatch``,
  ``*.assertion``, ``adapter.exception``): a root cause only when nothing else fits.

Nothing here imports anything above ``tck.reference``.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import catalogue

RANKS = ("generic", "symptom", "cause", "overriding")  # least to most specific
SPECIFICITY = {rank: i for i, rank in enumerate(RANKS)}


@dataclass(frozen=True)
class Code:
    name: str  # "<area>.<what>"; a family's name has "*" for its area ("*.assertion")
    rank: str  # one of RANKS
    clauses: tuple[str, ...]  # SPEC.md clauses ("" where no clause applies)
    meaning: str  # in plain words

    @property
    def area(self) -> str:
        return self.name.split(".", 1)[0]


class UnknownCode(KeyError):
    """A diagnosis code the registry does not have (a typo, or a code not yet registered)."""


_ROWS: list[tuple[str, str, str, str]] = [
    # (code, rank, clauses separated by spaces, meaning)
    # --- the adapter and the run
    (
        "adapter.exception",
        "generic",
        "",
        "the adapter, or the model it runs (its own assert included), raised an exception "
        "while a check ran",
    ),
    ("adapter.build_failed", "generic", "", "building the subject or the check's setup failed"),
    (
        "adapter.crashed",
        "cause",
        "",
        "the process running the check died (a segfault, an abort, os._exit)",
    ),
    ("adapter.timeout", "cause", "", "the check did not finish within tck run --timeout"),
    ("adapter.input_modified", "cause", "10.6", "run() changed its inputs in place"),
    ("adapter.output_reused", "cause", "10.6", "run() returned memory it had returned before"),
    (
        "adapter.output_not_array",
        "cause",
        "10.6",
        "run() returned something other than a numpy array",
    ),
    (
        "adapter.output_not_float",
        "cause",
        "10.6",
        "run() returned an array of a non-floating dtype",
    ),
    (
        "adapter.grad_not_a_dict",
        "cause",
        "10.8",
        "grad() returned something other than a dict of arrays",
    ),
    (
        "run.not_run",
        "cause",
        "10.11",
        "the check produced no result (its worker died, or the run stopped early)",
    ),
    ("run.interrupted", "cause", "10.11", "the run was interrupted before the check ran"),
    ("skip", "generic", "", "the check did not apply, or the adapter cannot offer what it needs"),
    (
        "verify.unmeasured",
        "cause",
        "10.11",
        "an oracle check passed without measuring what its clause needs",
    ),
    ("fixtures.file_corrupted", "cause", "", "a fixture file does not match its manifest's hash"),
    (
        "*.assertion",
        "generic",
        "",
        "a check's assertion failed without naming a bug class (the area is the check id)",
    ),
    (
        "*.fixture_mismatch",
        "generic",
        "",
        "the output disagrees with a stored fixture, no bug class named",
    ),
    # --- oracle comparisons that name no bug class
    ("attention.oracle_mismatch", "generic", "3.1 3.3", "attention disagrees with the oracle"),
    (
        "blocks.oracle_mismatch",
        "generic",
        "7.1 7.2 7.3",
        "a layer or stack disagrees with the oracle",
    ),
    ("embedding.oracle_mismatch", "generic", "1.1", "the embedding disagrees with the oracle"),
    ("ffn.oracle_mismatch", "generic", "6.1", "the feed-forward network disagrees with the oracle"),
    ("layer_norm.oracle_mismatch", "generic", "5.1", "the norm disagrees with the oracle"),
    ("model.oracle_mismatch", "generic", "8.1", "the model disagrees with the oracle"),
    (
        "positional.oracle_mismatch",
        "generic",
        "2.1",
        "the positional encoding disagrees with the oracle",
    ),
    ("rope.oracle_mismatch", "generic", "2.3", "the rotary encoding disagrees with the oracle"),
    (
        "vit.oracle_mismatch",
        "generic",
        "9.1 9.4",
        "the ViT or its patch embedding disagrees with the oracle",
    ),
    ("gradients.oracle_mismatch", "generic", "10.8", "gradients disagree with float64 autograd"),
    # --- attention
    ("attention.scale_missing", "cause", "3.1 3.2", "the scores are not scaled by 1/sqrt(d_k)"),
    (
        "attention.scale_wrong",
        "cause",
        "3.1 3.2",
        "the scores are scaled by something other than 1/sqrt(d_k) (1/sqrt(d_model), 1/d_k), "
        "or in part only (the scale on the query projection's input, its bias unscaled)",
    ),
    (
        "attention.scale_inverted",
        "cause",
        "3.1 3.2",
        "the scores are multiplied by sqrt(d_k) instead of divided",
    ),
    (
        "attention.softmax_axis_wrong",
        "cause",
        "3.1",
        "the softmax runs over another axis than the keys (the queries, the heads, the batch)",
    ),
    (
        "attention.weights_not_normalized",
        "cause",
        "3.1",
        "attention weight rows are negative or do not sum to 1",
    ),
    ("attention.heads_merged_wrong_order", "cause", "3.3", "heads are merged in the wrong order"),
    (
        "attention.heads_split_wrong_order",
        "cause",
        "3.3",
        "heads are split from d_model in another order than §3.3's contiguous blocks (a "
        "reshape without the transpose, or a strided split: head h takes features h, h + H, ...)",
    ),
    (
        "attention.head_count_wrong",
        "cause",
        "3.3",
        "the attention is split into another number of heads than the config's (the head count "
        "and head width exchanged in a view, one head of the whole width)",
    ),
    (
        "params.bias_unused",
        "cause",
        "0.5 3.3 6.1",
        "a bias the subject loads is never added (attention, FFN, norm shift or head)",
    ),
    (
        "layer_norm.gain_plus_one",
        "cause",
        "5.1 5.3",
        "the norm gain is read as 1 + weight, or a gain stored as an offset from one is read "
        "without the one (weight - 1 for the gain)",
    ),
    (
        "blocks.branch_scaled",
        "cause",
        "7.1",
        "a sublayer's output is multiplied by a constant before its residual add (a layer "
        "scale the checkpoint does not hold, left at its initial value; a scale the model "
        "does not have)",
    ),
    (
        "blocks.residual_after_norm",
        "cause",
        "7.1",
        "a pre-LN sublayer adds its output to the normalised input instead of the input",
    ),
    (
        "ffn.not_elementwise",
        "cause",
        "6.3",
        "the activation is not elementwise: one feature changes the others at its position",
    ),
    (
        "attention.value_uses_key_projection",
        "cause",
        "3.4",
        "the values go through the key projection",
    ),
    ("attention.kv_heads_tiled", "cause", "11.2", "key/value heads are tiled instead of grouped"),
    (
        "attention.ragged_key_tile_dropped",
        "cause",
        "3.1",
        "keys beyond the last whole key tile are never attended (a tiled kernel without its "
        "boundary tile)",
    ),
    (
        "attention.online_softmax_wrong",
        "cause",
        "3.1",
        "a tiled (online) softmax combines its key tiles wrongly: a tile's partial sum or "
        "values rescaled by the wrong factor or not at all, normalised on their own, against "
        "another maximum, counted twice, or NaN for a tile whose keys are all masked",
    ),
    # --- masks and batches
    (
        "mask.polarity_inverted",
        "cause",
        "4.1 4.2",
        "the keep-mask is read inverted (True = ignore)",
    ),
    ("mask.ignored", "symptom", "4.1", "the mask has no effect"),
    (
        "mask.fully_masked_rows_other",
        "cause",
        "4.4",
        "a fully-masked row is none of the policies (zero, NaN, the mean of V)",
    ),
    (
        "mask.partial_rows_zeroed",
        "cause",
        "4.4 4.1",
        "query rows with some key hidden (a key after them, a pad) output zero, not only the "
        "rows left with no key (a guard for fully-masked rows that tests any() for all())",
    ),
    ("mask.applied_to_queries", "cause", "4.2", "the padding mask masks queries instead of keys"),
    ("mask.causal_leak", "cause", "4.3", "a query sees keys after it"),
    (
        "mask.causal_diagonal_hidden",
        "cause",
        "4.3",
        "the causal mask hides the diagonal (a token cannot see itself)",
    ),
    ("mask.masked_key_gradient", "symptom", "4.1 10.8", "a masked key receives gradient"),
    (
        "batch.rows_interact",
        "cause",
        "10.2",
        "a row's output changes with its neighbours in the batch",
    ),
    (
        "batch.padded_rows_differ",
        "cause",
        "10.2 11.8",
        "a right-padded row in a batch differs from the same row alone",
    ),
    (
        "padding.left_positions_not_shifted",
        "cause",
        "11.7",
        "position ids are not shifted for left padding",
    ),
    (
        "padding.left_padding_changes_output",
        "cause",
        "11.7",
        "left padding changes the output of the real tokens",
    ),
    # --- norms
    ("layer_norm.not_centred", "symptom", "5.1", "the norm's output rows are not centred"),
    (
        "layer_norm.not_shift_invariant",
        "symptom",
        "5.1",
        "the norm's output changes when a constant is added to a row",
    ),
    (
        "layer_norm.wrong_statistics",
        "symptom",
        "5.1 5.2",
        "the norm's output rows have the wrong variance",
    ),
    (
        "layer_norm.positions_interact",
        "cause",
        "5.1",
        "the norm runs over the wrong axis (positions interact)",
    ),
    (
        "layer_norm.rms_not_scale_equivariant",
        "cause",
        "5.3",
        "RMSNorm is not equivariant to scaling a row",
    ),
    ("layer_norm.rms_wrong_statistics", "cause", "5.3", "RMSNorm rows have the wrong mean square"),
    (
        "layer_norm.scale_norm_not_scale_invariant",
        "cause",
        "5.4",
        "ScaleNorm changes when a row is scaled (above eps it must not)",
    ),
    (
        "layer_norm.scale_norm_wrong_norm",
        "cause",
        "5.4",
        "ScaleNorm output rows do not have the gain's magnitude as their norm",
    ),
    (
        "layer_norm.scale_norm_rms",
        "cause",
        "5.4",
        "ScaleNorm divides by the root mean square, not the L2 norm (output norm sqrt(D) g)",
    ),
    (
        "layer_norm.scale_norm_eps_not_clamped",
        "cause",
        "5.4",
        "ScaleNorm adds eps to the norm (or inside its square root) instead of clamping it",
    ),
    (
        "layer_norm.scale_norm_eps_wrong",
        "cause",
        "5.4",
        "ScaleNorm rows with a norm near or below eps are not g x / max(||x||, eps)",
    ),
    # --- positions
    (
        "positional.frequency_wrong",
        "symptom",
        "2.1 2.2 2.3",
        "the positional frequencies are wrong (a sinusoidal table's or RoPE's inverse "
        "frequencies with another exponent step)",
    ),
    (
        "positional.not_relative",
        "symptom",
        "2.2",
        "the encoding of p + k is not a fixed linear map of p's",
    ),
    ("positional.not_distinct", "cause", "2.2", "two positions get the same encoding"),
    ("positional.unbounded", "cause", "2.2", "an encoding entry is not finite or outside [-1, 1]"),
    ("positional.position_offset", "cause", "2.1", "the encoding at p is the spec's at p + k"),
    (
        "positional.positions_ignored",
        "cause",
        "2.1",
        "the encoding ignores the positions it is given, or a position table has no effect "
        "on a stream it should reach (a learned table never added or another tensor added in "
        "its place; a sinusoidal table added to the source tokens but not the target's)",
    ),
    (
        "rope.not_relative",
        "symptom",
        "2.4",
        "rotated dot products depend on more than the relative position",
    ),
    ("rope.not_norm_preserving", "cause", "2.3", "the rotation changes a vector's norm"),
    ("rope.not_identity_at_zero", "cause", "2.3", "position 0 is not the identity"),
    ("rope.position_offset", "cause", "2.3", "the rotation at p is the spec's at p + k"),
    ("rope.positions_ignored", "cause", "2.3", "the rotation ignores the positions it is given"),
    (
        "rope.applied_to_wrong_tensors",
        "cause",
        "2.3 11.1",
        "the rotation is applied to the queries only, the keys only, or the values too",
    ),
    # --- FFN, blocks, models
    ("ffn.not_position_wise", "cause", "6.2", "the FFN mixes positions"),
    (
        "ffn.gate_up_swapped",
        "cause",
        "11.3",
        "the gate and up projections are swapped, or one of them computed with the other's "
        "weights (the gate read from the up projection)",
    ),
    ("blocks.residual_missing", "cause", "7.1 7.2", "a sublayer's residual connection is missing"),
    (
        "blocks.residual_added_twice",
        "cause",
        "7.1",
        "a sublayer's branch adds its own input (or the residual stream) to its output while "
        "the layer adds the residual as well, or the code around a layer adds the layer's input "
        "to its output again: that input reaches the stream twice",
    ),
    (
        "blocks.norm_on_branch",
        "cause",
        "7.1",
        "a sublayer's norm is applied to its output before the residual add (x + Norm(f(x))), "
        "so the residual stream is never normalised",
    ),
    (
        "blocks.residual_from_layer_input",
        "cause",
        "7.1 7.2",
        "a sublayer adds its output to the layer's input (or to an earlier sublayer's input, "
        "or to the previous sublayer's branch output before its residual add), skipping the "
        "sublayer before it",
    ),
    (
        "blocks.branch_from_layer_input",
        "cause",
        "7.1 7.2",
        "a later sublayer computes its branch from the layer's input (or an earlier "
        "sublayer's input, or the previous sublayer's branch output before its residual add) "
        "instead of the residual stream after the sublayer before it (its residual add right)",
    ),
    (
        "blocks.final_norm_every_layer",
        "cause",
        "7.3",
        "a stack's final norm is applied after every layer (with the final norm's weights, "
        "in the loop over the layers) instead of once after the last layer",
    ),
    (
        "blocks.norm_bypassed",
        "cause",
        "7.1",
        "a pre-LN sublayer's norm reaches only some of the attention's inputs (the queries "
        "alone, or the keys and values alone, taken from the stream before the norm) or none "
        "(the norm skipped, the residual add kept), or a later sublayer's (the feed-forward's) "
        "norm is skipped; under post-LN, a sublayer's norm after its residual add skipped",
    ),
    (
        "blocks.memory_normed",
        "cause",
        "7.2",
        "a decoder layer normalises the encoder's memory (with its cross-attention sublayer's "
        "norm) before cross-attention takes keys and values from it, where the layer must "
        "take the memory as the encoder left it",
    ),
    (
        "blocks.not_permutation_equivariant",
        "cause",
        "10.5",
        "without positions, permuting the tokens does not permute the output",
    ),
    (
        "blocks.extra_norm_before_layers",
        "cause",
        "7.3",
        "an extra LayerNorm before the first layer",
    ),
    (
        "dropout.active_in_eval",
        "overriding",
        "10.1",
        "dropout is active in evaluation mode (repeated calls differ)",
    ),
    (
        "state.leaks_between_calls",
        "overriding",
        "10.1",
        "the subject carries state from one call to the next",
    ),
    ("model.returns_probabilities", "cause", "8.2", "the model returns probabilities, not logits"),
    (
        "model.logits_scaled",
        "cause",
        "8.2 8.3",
        "the logits are the spec's times a constant (a tied head divided by d_model where "
        "sqrt(d_model) is meant, a scale applied twice or left out)",
    ),
    (
        "model.returns_log_probabilities",
        "cause",
        "8.2",
        "the model returns log-probabilities, not logits",
    ),
    (
        "embedding.padding_row_not_zero",
        "cause",
        "1.3",
        "the padding row of the embedding is not zero",
    ),
    ("vit.cls_pos_embed_missing", "cause", "9.2 9.3", "the class token gets no position embedding"),
    (
        "vit.pos_embed_transformed",
        "cause",
        "9.2 9.3",
        "the tokens receive a transform of the position table, not its rows (the table "
        "resampled at its own grid, scaled, or read in another order)",
    ),
    (
        "vit.pooling_wrong_token",
        "cause",
        "9.5",
        "the head reads another token than the class token",
    ),
    ("vit.pooling_mean_with_cls", "cause", "9.5", "mean pooling counts the class token"),
    (
        "vit.channel_order_wrong",
        "cause",
        "9.1",
        "the image's channels are read in another order before the patch projection (RGB "
        "read as BGR, a channel flip), so each kernel channel meets another colour",
    ),
    (
        "vit.patch_order",
        "cause",
        "9.1",
        "the patch tokens are read from the patch grid in the wrong axis order (column-major, "
        "or the conv output reshaped without the transpose)",
    ),
    (
        "vit.patch_flatten_order",
        "cause",
        "9.1",
        "patches are flattened channels-last against a conv-ordered weight",
    ),
    (
        "vit.patch_extraction_wrong",
        "cause",
        "9.1",
        "the tokens are not the p x p squares of the patch grid (the image's axes cut in "
        "another order: strips of rows, a reshape without the transpose)",
    ),
    (
        "vit.image_layout_wrong",
        "cause",
        "9.1",
        "the image is read from a buffer in another axis order by a reshape (a channels-last "
        "image taken as channels-first: pixels and channels interleaved)",
    ),
    ("vit.extra_norm_in_patch_embed", "cause", "9.1", "an extra LayerNorm in the patch embedding"),
    # --- decoding with a cache
    ("cache.mismatch", "cause", "11.6", "cached decoding disagrees with the full forward"),
    (
        "cache.ignored",
        "cause",
        "11.6",
        "each decoded token attends only its own call's tokens, or those and the previous "
        "call's: the cache is not used, or is replaced by each call's keys and values instead "
        "of extended (its keys, values or both written from its first slot in every call)",
    ),
    (
        "cache.rope_offset_wrong",
        "cause",
        "11.6 2.3",
        "cached steps are rotated at the wrong position",
    ),
    ("cache.position_offset_wrong", "cause", "11.6", "cached steps get the wrong learned position"),
    ("cache.causal_off_by_one", "cause", "11.6 4.3", "a decoded token misses its own key"),
    (
        "cache.causal_top_left",
        "cause",
        "11.6 4.3",
        "a cached step's causal mask ignores the cached keys (aligned top-left)",
    ),
    (
        "cache.causal_offset_wrong",
        "cause",
        "11.6 4.3",
        "a cached step's causal mask is offset by a count other than the cache's length (a "
        "constant, or a length read off another axis of the cache)",
    ),
    ("cache.wrong_axis", "cause", "11.6", "the cache grows along the wrong axis"),
    (
        "cache.keys_prepended",
        "cause",
        "11.6",
        "a step's keys and values are put before the cached ones instead of after them",
    ),
    (
        "cache.keys_values_swapped",
        "cause",
        "11.6",
        "the cached keys and values are exchanged when read back (a cache's two tensors "
        "unpacked in the other order)",
    ),
    (
        "cache.padding_dropped_in_steps",
        "cause",
        "11.6 11.7",
        "the key-padding mask is applied in the full forward but not in cached steps",
    ),
    (
        "cache.leaks_into_forward",
        "cause",
        "11.9 10.1",
        "a plain forward after cached decoding still reads the decoded sequence's cache",
    ),
    # --- shapes and parameters
    ("shape.wrong_output_shape", "cause", "10.6", "the output shape is not the spec's"),
    ("shape.accepts_bad_mask", "cause", "10.6", "a mask of the wrong shape is accepted"),
    ("shape.accepts_too_long", "cause", "10.6", "a sequence longer than max_len is accepted"),
    (
        "shape.accepts_out_of_range_ids",
        "cause",
        "10.6",
        "token ids outside the vocabulary are accepted",
    ),
    ("shape.accepts_bad_image_size", "cause", "10.6", "an image of the wrong size is accepted"),
    (
        "params.names_differ",
        "cause",
        "0.5",
        "the parameter names read back differ from the canonical layout",
    ),
    ("params.shape_differs", "cause", "0.5", "a parameter read back has another shape than loaded"),
    (
        "params.round_trip_changed",
        "cause",
        "0.5",
        "a parameter read back differs from what was loaded",
    ),
    ("params.count_wrong", "cause", "10.3", "the parameter count is not the spec's"),
    (
        "params.unmapped_slices",
        "cause",
        "10.3",
        "scalars of tensors the parameter map reads in slices that no canonical parameter "
        "reads (a position table's offset rows), shown (a convention result)",
    ),
    # --- gradients
    ("gradients.missing", "cause", "10.8", "grad() returned no gradient for an input or parameter"),
    ("gradients.wrong_shape", "cause", "10.8", "a gradient has the wrong shape"),
    ("gradients.nan", "cause", "10.8", "a gradient is NaN where float64 autograd is finite"),
    (
        "gradients.padding_row",
        "cause",
        "1.3 10.8",
        "the padding row of the embedding receives gradient",
    ),
    # --- numerics
    (
        "numerics.overflow",
        "cause",
        "10.7 10.10",
        "inf or NaN where the oracle is finite: an intermediate overflows",
    ),
    (
        "numerics.float64_precision_lost",
        "cause",
        "10.7",
        "a float64 subject agrees to float32 precision only",
    ),
    (
        "numerics.fill_value_overflow",
        "cause",
        "4.1 10.7",
        "a fill value does not fit the dtype (masked_fill(-1e9) in float16)",
    ),
    (
        "numerics.precision_loss",
        "cause",
        "10.7 10.10",
        "the lower-precision output is off by more than the careful reference's error",
    ),
    (
        "numerics.norm_statistics_low_precision",
        "cause",
        "5.1 5.3 10.10",
        "norm statistics are formed in the input dtype, or in a 16-bit dtype pinned whatever "
        "the build's dtype (a float32 or float64 model's norm of x.half())",
    ),
    (
        "numerics.norm_variance_cancels",
        "cause",
        "5.1 10.10",
        "the norm's variance is formed so that a large row mean cancels its spread (one pass, "
        "E[x^2] - E[x]^2, in the working precision) instead of as the mean of (x - mean)^2",
    ),
    (
        "numerics.softmax_low_precision",
        "cause",
        "3.1 10.10",
        "the softmax is formed in the input dtype, or in a 16-bit dtype pinned whatever the "
        "build's dtype (softmax(..., dtype=torch.float16) in a float32 or float64 model)",
    ),
    (
        "numerics.rope_angles_low_precision",
        "cause",
        "2.3 10.10",
        "RoPE angles are formed in low precision (16-bit positions or frequencies, in a "
        "16-bit build or pinned in any)",
    ),
    (
        "numerics.table_low_precision",
        "cause",
        "2.1 2.3 10.10",
        "a position table (sinusoidal, RoPE cos/sin) is stored in float16 or bfloat16",
    ),
    (
        "numerics.half_precision_input_dtype",
        "cause",
        "10.10",
        "a declared half_precision = input_dtype, shown (a convention result)",
    ),
    (
        "numerics.nonfinite_output",
        "symptom",
        "10.7",
        "NaN or inf at a real position where an implementation is compared with itself",
    ),
    (
        "numerics.float32_island",
        "cause",
        "10.12",
        "a float64 subject computes some step in float32 (undeclared): one finding per subject",
    ),
    (
        "numerics.float32_islands_declared",
        "cause",
        "10.12",
        "declared float32_steps, measured and shown (a convention result)",
    ),
    # --- ONNX export
    ("onnx.export_failed", "cause", "10.9", "torch.onnx.export failed"),
    ("onnx.checker_failed", "cause", "10.9", "onnx.checker rejects the exported graph"),
    ("onnx.axis_not_dynamic", "cause", "10.9", "the exported graph fixed an axis a call changes"),
    ("onnx.runtime_error", "cause", "10.9", "ONNX Runtime failed to run the graph"),
    (
        "onnx.runtime_crashed",
        "cause",
        "10.9",
        "ONNX Runtime crashes creating a session for the graph (probed in a child process)",
    ),
    (
        "onnx.opt_level_changes_result",
        "cause",
        "10.9",
        "ONNX Runtime's graph optimisations change the result",
    ),
    # --- parameters read in the wrong place (hypotheses by class on the canonical layout)
    (
        "attention.qkv_order_wrong",
        "cause",
        "3.4 0.2",
        "the query, key and value projections are taken in the wrong order or layout "
        "(a fused qkv weight split as k, q, v, or read head-major instead of part-major)",
    ),
    ("layer_norm.gain_unused", "cause", "5.1 5.3", "the norm's gain (weight) is never applied"),
    (
        "layer_norm.shift_before_gain",
        "cause",
        "5.1",
        "the norm adds its shift before applying its gain: weight * (x_hat + bias) instead of "
        "weight * x_hat + bias",
    ),
    (
        "rope.tensors_mixed",
        "cause",
        "2.3 11.1",
        "one tensor's rotation takes a term from the other tensor (k cos + rotate_half(q) sin, "
        "a copy-pasted line with one q left in): query content leaks into the keys, or key "
        "content into the queries",
    ),
    (
        "params.unused",
        "cause",
        "0.2",
        "a parameter the subject loads never reaches the output (a class token replaced by "
        "zeros, a weight never applied): the output is the spec's with it set to zero",
    ),
    (
        "rope.rotation_inverted",
        "cause",
        "2.3",
        "the rotation turns the other way (by -theta: the sign of sin flipped)",
    ),
    (
        "ffn.activation_after_gating",
        "cause",
        "11.3",
        "a gated FFN activates the product gate(x) * up(x) instead of gate(x) alone",
    ),
    (
        "blocks.layers_not_chained",
        "cause",
        "7.3",
        "every layer of a stack computes from the stack's input instead of the previous "
        "layer's output (out = layer(x) in the loop for x = layer(x)): only the last layer "
        "reaches the output",
    ),
    (
        "blocks.layer_params_wrong",
        "cause",
        "7.3 0.2",
        "the layers of a stack read another layer's parameters (all the first's, or the last's)",
    ),
    (
        "params.weight_reshaped",
        "cause",
        "0.2",
        "a weight is read in the other orientation: an (out, in) kernel viewed as (in, out) "
        "by .reshape or .view instead of flattened and transposed, or an (in, out) kernel "
        "multiplied as (out, in) (x @ w.T, F.linear on it; a square one applies the transposed "
        "map, another raises on its shapes), as ports between (in, out) and (out, in) layouts do",
    ),
    (
        "params.read_from_other_module",
        "cause",
        "0.2",
        "a module computes with another module's parameters of the same shape (a wrong key "
        "into the parameter tree: the second norm with the first norm's weights)",
    ),
    (
        "model.head_tied_to_embedding",
        "cause",
        "8.3 0.2",
        "the output projection computes with the token embedding where the model's head is "
        "its own (weights tied where the model does not tie them)",
    ),
    (
        "model.head_not_tied",
        "cause",
        "8.3 10.3",
        "the output projection is a matrix of its own where the model ties it to the token "
        "embedding (tie_weights=True)",
    ),
    (
        "model.embedding_not_tied",
        "cause",
        "8.3 10.3",
        "an encoder-decoder's source or target embedding is a matrix of its own (a copy made "
        "at construction, an assignment lost; the output projection may read it too) where "
        "the model ties source, target and output to one table (tie_weights=True)",
    ),
    # --- masks, normalisation and caches measured by class
    (
        "mask.added_as_bias",
        "cause",
        "4.1",
        "a boolean keep-mask added to the scores as a float bias, or masked scores filled "
        "with a finite value (pads lowered by a finite amount or set to it, not removed: "
        "scores + mask.float(), scores + (1 - mask), masked_fill(~mask, 0))",
    ),
    (
        "mask.causal_batch_flat",
        "cause",
        "4.3 10.2",
        "the causal mask compares batch-flat key indices with per-row query indices: right "
        "for the first row of a batch, rows after it lose their keys",
    ),
    (
        "mask.combined_with_or",
        "cause",
        "4.1",
        "two keep-masks (padding and causal, or padding and an attention mask) combined with "
        "OR, a key kept when either keeps it, where §4.1 keeps it only when all do (AND)",
    ),
    (
        "cache.slots_overlap",
        "cause",
        "11.6",
        "cache slots overlap: later tokens overwrite earlier ones (a page number not "
        "multiplied by the page size)",
    ),
    (
        "cache.unwritten_slots_read",
        "cause",
        "11.6",
        "cached steps attend slots of a preallocated cache that were never written (the whole "
        "buffer returned where the slots written so far belong): zero keys and values that "
        "still take a share of the softmax",
    ),
    (
        "cache.layers_share_pool",
        "cause",
        "11.6",
        "the layers of a stack read and write one cache pool (layer 0's keys read by all)",
    ),
    (
        "rope.table_layout_mismatch",
        "cause",
        "2.3",
        "RoPE mixes its two pairings (interleaved, half split) in one rotation: a cos/sin "
        "table laid out for one and applied by a rotation that pairs the features the other "
        "way, or pairs read in one layout and written back in the other",
    ),
    (
        "cache.padding_misaligned",
        "cause",
        "11.6 11.7",
        "the key-padding mask is laid over the cache's keys at the wrong offset (sliced from "
        "slot 0 where the cache's first kept key is a later token): in cached steps padded "
        "rows see pads or lose real keys",
    ),
    (
        "cache.read_order_wrong",
        "cause",
        "11.6 4.5",
        "the cache's keys are read back in another order than the step's mask numbers them (a "
        "ring buffer read in slot order once it has wrapped): a decoded token sees keys outside "
        "its window and misses keys inside it",
    ),
    (
        "attention.tile_mask_misaligned",
        "cause",
        "3.1 4.1",
        "a tiled attention reads each key tile's mask at the wrong columns (the first tile's "
        "slice for every tile, the slice not offset by the tile's start): past the first tile "
        "padding and causality land on other keys",
    ),
    (
        "attention.input_read_wrong",
        "cause",
        "3.4 3.5",
        "a projection reads another attention input than its own (the values projected from "
        "the key input, the keys from the value input, or the two inputs exchanged): the "
        "right weights on the wrong tensor",
    ),
    (
        "attention.cross_keys_from_decoder",
        "cause",
        "3.5 7.2",
        "cross-attention takes its keys or values from the decoder's own stream instead of "
        "the encoder's memory",
    ),
    # --- pieces of whole models, by class: position tables, FFN activations, ViT tokens
    (
        "positional.sin_cos_swapped",
        "cause",
        "2.1",
        "the sinusoidal table holds cos on the first member of each pair and sin on the second",
    ),
    (
        "positional.pair_function_repeated",
        "cause",
        "2.1 2.2",
        "the sinusoidal table holds the same function on both members of each pair (sin on "
        "both, or cos on both), so a pair is no rotation of one angle",
    ),
    (
        "ffn.activation_wrong",
        "cause",
        "6.1 11.3",
        "the FFN's activation is none of the declared ones (a fitted function: x * sigmoid(a x), "
        "a tanh GELU with another coefficient, a power of ReLU)",
    ),
    (
        "ffn.activation_misplaced",
        "cause",
        "6.1",
        "the FFN's activation is applied after its output projection, not between the two",
    ),
    (
        "vit.patch_kernel_transposed",
        "cause",
        "9.1",
        "the patch kernel's rows and columns are swapped within each patch",
    ),
]


def _build() -> dict[str, Code]:
    out: dict[str, Code] = {}
    for name, rank, clauses, meaning in _ROWS:
        assert name not in out and rank in RANKS, name
        out[name] = Code(name, rank, tuple(clauses.split()), meaning)
    for name, (clauses, meaning) in catalogue.all_codes().items():
        assert name not in out, name
        out[name] = Code(name, "cause", clauses, meaning)
    return out


CODES: dict[str, Code] = _build()
FAMILIES: dict[str, Code] = {c.name[1:]: c for c in CODES.values() if c.name.startswith("*.")}
AREAS = frozenset(c.area for c in CODES.values() if c.area != "*")


def lookup(name: str) -> Code | None:
    """The registry's entry for ``name`` (a family's for ``<check>.assertion``), or None."""
    if name in CODES:
        return CODES[name]
    for suffix, family in FAMILIES.items():
        if name.endswith(suffix) and "." in name.removesuffix(suffix):
            return family
    return None


def code(name: str) -> str:
    """``name``, once the registry has it; UnknownCode otherwise (a typo'd code)."""
    if lookup(name) is None:
        raise UnknownCode(f"{name!r} is not a registered diagnosis code (tck.reference.codes)")
    return name


def rank(name: str) -> str:
    """The rank class of a code. A code the registry lacks (an older results.json, a
    comma-joined list of side effects) ranks by its suffix: generic for ``*.oracle_mismatch``,
    ``*.fixture_mismatch`` and ``*.assertion``, a cause otherwise."""
    if not name:
        return "generic"
    entry = lookup(name)
    if entry is not None:
        return entry.rank
    return (
        "generic"
        if name.endswith((".oracle_mismatch", ".fixture_mismatch", ".assertion"))
        else "cause"
    )


def markdown_table() -> str:
    """SPEC.md's Appendix C table, generated from the registry."""
    lines = ["| code | rank | clauses | meaning |", "|---|---|---|---|"]
    for entry in sorted(CODES.values(), key=lambda c: (c.area == "*", c.name)):
        clauses = ", ".join(f"§{c}" for c in entry.clauses) or "-"
        lines.append(f"| `{entry.name}` | {entry.rank} | {clauses} | {entry.meaning} |")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m tck.reference.codes: SPEC.md's Appendix C table
    print(markdown_table())
