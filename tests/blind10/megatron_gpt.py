# fmt: off
# ruff: noqa
"""GPT-2 as NVIDIA/Megatron-LM's legacy ``megatron/model`` writes it, with tensor model
parallelism *simulated* over two ranks in one process: a column-parallel linear gives each
rank a slice of its output features (the fused ``query_key_value`` of each rank holds its own
heads, interleaved per head as ``[np, 3 * hn]``), a row-parallel linear gives each rank a slice
of its input features and sums the ranks' partial outputs (the all-reduce) before its bias;
the vocabulary-parallel embedding masks the ids outside each rank's vocabulary range and sums
the ranks; the tied output layer computes each rank's logits and gathers them. Activations
are laid out ``[s, b, h]``; the attention mask is Megatron's (True = masked, filled with
-10000.0); ``apply_query_key_layer_scaling`` divides the scores by the layer number and the
fp32 softmax multiplies it back; biases of the row-parallel layers are added by
``bias_dropout_add``; the KV cache is Megatron's ``InferenceParams`` (preallocated
``[max_seq, max_batch, np, hn]`` memories per layer and rank, ``sequence_len_offset``).

Written for the tenth blind benchmark (tests/blind10/PROTOCOL.md)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

TENSOR_MODEL_PARALLEL_SIZE = 2


def divide(numerator, denominator):
    assert numerator % denominator == 0, f"{numerator} is not divisible by {denominator}"
    return numerator // denominator


def split_tensor_along_last_dim(tensor, num_partitions):
    last_dim = tensor.dim() - 1
    last_dim_size = divide(tensor.size()[last_dim], num_partitions)
    return torch.split(tensor, last_dim_size, dim=last_dim)


def reduce_from_tensor_model_parallel_region(partials):
    """All-reduce (sum) of the ranks' partial results."""
    output = partials[0]
    for partial in partials[1:]:
        output = output + partial
    return output


def gather_from_tensor_model_parallel_region(partials):
    """All-gather of the ranks' slices along the last dimension, in rank order."""
    return torch.cat(partials, dim=-1)


def _acc(dtype):
    return torch.promote_types(dtype, torch.float32)


def bias_gelu(bias, y):
    x = bias + y
    return x * 0.5 * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * x * (1 + 0.044715 * x * x)))


def bias_dropout_add(x, bias, residual, prob, training):
    out = torch.nn.functional.dropout(x + bias, p=prob, training=training)
    out = residual + out
    return out


def get_bias_dropout_add(training):
    def _bias_dropout_add(x, bias, residual, prob):
        return bias_dropout_add(x, bias, residual, prob, training)
    return _bias_dropout_add


class MixedFusedLayerNorm(nn.Module):
    """apex's fused LayerNorm written out: mu and invvar in float32 (cuApplyLayerNorm)."""

    def __init__(self, normalized_shape, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, input):
        x = input.to(_acc(input.dtype))
        mu = x.mean(-1, keepdim=True)
        var = (x - mu).pow(2).mean(-1, keepdim=True)
        invvar = torch.rsqrt(var + self.eps)
        out = ((x - mu) * invvar).to(input.dtype)
        return out * self.weight + self.bias


class ColumnParallelLinear(nn.Module):
    """Y = X A^T + b with A split along its rows (output features): rank r computes
    Y_r = X A_r^T (+ b_r). The master weight is kept whole; each rank reads its partition."""

    def __init__(self, input_size, output_size, bias=True, skip_bias_add=False, world_size=TENSOR_MODEL_PARALLEL_SIZE):
        super().__init__()
        self.world_size = world_size
        self.output_size_per_partition = divide(output_size, world_size)
        self.skip_bias_add = skip_bias_add
        self.weight = nn.Parameter(torch.empty(output_size, input_size))
        self.bias = nn.Parameter(torch.zeros(output_size)) if bias else None
        nn.init.normal_(self.weight, std=0.02)

    def weight_partition(self, rank):
        n = self.output_size_per_partition
        return self.weight[rank * n:(rank + 1) * n]

    def bias_partition(self, rank):
        n = self.output_size_per_partition
        return None if self.bias is None else self.bias[rank * n:(rank + 1) * n]

    def forward(self, input_):
        outputs, biases = [], []
        for rank in range(self.world_size):
            bias = self.bias_partition(rank)
            outputs.append(F.linear(input_, self.weight_partition(rank), None if self.skip_bias_add else bias))
            biases.append(bias)
        return outputs, (biases if self.skip_bias_add else None)


class QueryKeyValueParallelLinear(ColumnParallelLinear):
    """The fused QKV projection, kept in Megatron's checkpoint layout [np, 3 * hn, h]: head i
    holds its query, key and value rows together, and rank r holds heads r*np .. (r+1)*np - 1."""

    def __init__(self, hidden_size, num_heads, bias=True, world_size=TENSOR_MODEL_PARALLEL_SIZE):
        super().__init__(hidden_size, 3 * hidden_size, bias=bias, world_size=world_size)
        head_dim = divide(hidden_size, num_heads)
        self.heads_per_partition = divide(num_heads, world_size)
        self.weight = nn.Parameter(torch.empty(num_heads, 3 * head_dim, hidden_size))
        self.bias = nn.Parameter(torch.zeros(num_heads, 3 * head_dim)) if bias else None
        nn.init.normal_(self.weight, std=0.02)

    def weight_partition(self, rank):
        n = self.heads_per_partition
        return self.weight[rank * n:(rank + 1) * n].reshape(-1, self.weight.shape[-1])

    def bias_partition(self, rank):
        n = self.heads_per_partition
        return None if self.bias is None else self.bias[rank * n:(rank + 1) * n].reshape(-1)


class RowParallelLinear(nn.Module):
    """Y = X A^T + b with A split along its columns (input features): rank r holds X_r and
    A_r, computes X_r A_r^T, and the partial results are all-reduced before the bias."""

    def __init__(self, input_size, output_size, bias=True, skip_bias_add=False, world_size=TENSOR_MODEL_PARALLEL_SIZE):
        super().__init__()
        self.world_size = world_size
        self.input_size_per_partition = divide(input_size, world_size)
        self.skip_bias_add = skip_bias_add
        self.weight = nn.Parameter(torch.empty(output_size, input_size))
        self.bias = nn.Parameter(torch.zeros(output_size)) if bias else None
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, inputs_parallel):
        n = self.input_size_per_partition
        partials = [F.linear(x, self.weight[:, rank * n:(rank + 1) * n]) for rank, x in enumerate(inputs_parallel)]
        output_ = reduce_from_tensor_model_parallel_region(partials)
        if self.skip_bias_add:
            return output_, self.bias
        return (output_ + self.bias if self.bias is not None else output_), None


class VocabParallelEmbedding(nn.Module):
    """The embedding table split along the vocabulary: rank r looks up the ids in
    [r * V/tp, (r+1) * V/tp), zeroes the others, and the ranks' results are summed."""

    def __init__(self, num_embeddings, embedding_dim, world_size=TENSOR_MODEL_PARALLEL_SIZE):
        super().__init__()
        self.num_embeddings = num_embeddings
        self.world_size = world_size
        self.num_embeddings_per_partition = divide(num_embeddings, world_size)
        self.weight = nn.Parameter(torch.empty(num_embeddings, embedding_dim))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, input_):
        if (input_ < 0).any() or (input_ >= self.num_embeddings).any():
            raise ValueError(f"token ids must lie in [0, {self.num_embeddings})")
        outputs = []
        for rank in range(self.world_size):
            vocab_start_index = rank * self.num_embeddings_per_partition
            vocab_end_index = vocab_start_index + self.num_embeddings_per_partition
            input_mask = (input_ < vocab_start_index) | (input_ >= vocab_end_index)
            masked_input = input_.clone() - vocab_start_index
            masked_input[input_mask] = 0
            output_parallel = F.embedding(masked_input, self.weight[vocab_start_index:vocab_end_index])
            output_parallel[input_mask, :] = 0.0
            outputs.append(output_parallel)
        return reduce_from_tensor_model_parallel_region(outputs)


class FusedScaleMaskSoftmax(nn.Module):
    def __init__(self, softmax_in_fp32=True, scale=None):
        super().__init__()
        self.softmax_in_fp32 = softmax_in_fp32
        self.scale = scale

    def forward(self, input, mask):
        orig_dtype = input.dtype
        if self.softmax_in_fp32:
            input = input.to(_acc(input.dtype))
        if self.scale is not None:
            input = input * self.scale
        input = input.masked_fill(mask, -10000.0)
        probs = torch.nn.Softmax(dim=-1)(input)
        return probs.to(orig_dtype)


class CoreAttention(nn.Module):
    def __init__(self, layer_number, hidden_size, num_heads, attention_dropout, world_size=TENSOR_MODEL_PARALLEL_SIZE):
        super().__init__()
        self.layer_number = max(1, layer_number)
        self.hidden_size_per_partition = divide(hidden_size, world_size)
        self.hidden_size_per_attention_head = divide(hidden_size, num_heads)
        coeff = self.layer_number  # apply_query_key_layer_scaling
        self.norm_factor = math.sqrt(self.hidden_size_per_attention_head)
        self.norm_factor *= coeff
        self.scale_mask_softmax = FusedScaleMaskSoftmax(softmax_in_fp32=True, scale=coeff)
        self.attention_dropout = nn.Dropout(attention_dropout)

    def forward(self, query_layer, key_layer, value_layer, attention_mask):
        # [sq, b, np, hn] -> [b, np, sq, sk]
        output_size = (query_layer.size(1), query_layer.size(2), query_layer.size(0), key_layer.size(0))
        query_layer = query_layer.reshape(output_size[2], output_size[0] * output_size[1], -1)
        key_layer = key_layer.reshape(output_size[3], output_size[0] * output_size[1], -1)
        matmul_result = torch.bmm(query_layer.transpose(0, 1), key_layer.transpose(0, 1).transpose(1, 2)) * (1.0 / self.norm_factor)
        attention_scores = matmul_result.view(*output_size)
        attention_probs = self.scale_mask_softmax(attention_scores, attention_mask)
        attention_probs = self.attention_dropout(attention_probs)
        # [sk, b, np, hn] -> [b, np, sq, hn]
        output_size = (value_layer.size(1), value_layer.size(2), query_layer.size(0), value_layer.size(3))
        value_layer = value_layer.reshape(value_layer.size(0), output_size[0] * output_size[1], -1)
        attention_probs = attention_probs.view(output_size[0] * output_size[1], output_size[2], -1)
        context_layer = torch.bmm(attention_probs, value_layer.transpose(0, 1))
        context_layer = context_layer.view(*output_size)
        context_layer = context_layer.permute(2, 0, 1, 3).contiguous()
        new_context_layer_shape = context_layer.size()[:-2] + (self.hidden_size_per_partition,)
        return context_layer.view(*new_context_layer_shape)


class InferenceParams:
    def __init__(self, max_batch_size, max_sequence_length):
        self.max_sequence_length = max_sequence_length
        self.max_batch_size = max_batch_size
        self.sequence_len_offset = 0
        self.batch_size_offset = 0
        self.key_value_memory_dict = {}


class ParallelAttention(nn.Module):
    def __init__(self, layer_number, hidden_size, num_heads, attention_dropout=0.1, bias=True, world_size=TENSOR_MODEL_PARALLEL_SIZE):
        super().__init__()
        self.layer_number = max(1, layer_number)
        self.world_size = world_size
        self.num_attention_heads_per_partition = divide(num_heads, world_size)
        self.hidden_size_per_attention_head = divide(hidden_size, num_heads)
        self.query_key_value = QueryKeyValueParallelLinear(hidden_size, num_heads, bias=bias, world_size=world_size)
        self.core_attention = CoreAttention(self.layer_number, hidden_size, num_heads, attention_dropout, world_size)
        self.dense = RowParallelLinear(hidden_size, hidden_size, bias=bias, skip_bias_add=True, world_size=world_size)

    def _allocate_memory(self, inference_max_sequence_len, batch_size, dtype):
        return torch.zeros(inference_max_sequence_len, batch_size, self.num_attention_heads_per_partition,
                           self.hidden_size_per_attention_head, dtype=dtype)

    def forward(self, hidden_states, attention_mask, inference_params=None):
        # hidden_states [sq, b, h]; attention_mask [b, 1, sq, sk] (True = masked)
        mixed_x_layers, _ = self.query_key_value(hidden_states)
        context_layers = []
        for rank, mixed_x_layer in enumerate(mixed_x_layers):
            # [sq, b, (np * 3 * hn)] -> [sq, b, np, 3 * hn]
            new_tensor_shape = mixed_x_layer.size()[:-1] + (self.num_attention_heads_per_partition, 3 * self.hidden_size_per_attention_head)
            mixed_x_layer = mixed_x_layer.view(*new_tensor_shape)
            (query_layer, key_layer, value_layer) = split_tensor_along_last_dim(mixed_x_layer, 3)
            layer_attention_mask = attention_mask
            if inference_params is not None:
                key = (self.layer_number, rank)
                if key not in inference_params.key_value_memory_dict:
                    inference_key_memory = self._allocate_memory(inference_params.max_sequence_length, inference_params.max_batch_size, key_layer.dtype)
                    inference_value_memory = self._allocate_memory(inference_params.max_sequence_length, inference_params.max_batch_size, value_layer.dtype)
                    inference_params.key_value_memory_dict[key] = (inference_key_memory, inference_value_memory)
                inference_key_memory, inference_value_memory = inference_params.key_value_memory_dict[key]
                batch_start = inference_params.batch_size_offset
                batch_end = batch_start + key_layer.size(1)
                sequence_start = inference_params.sequence_len_offset
                sequence_end = sequence_start + key_layer.size(0)
                inference_key_memory[sequence_start:sequence_end, batch_start:batch_end, ...] = key_layer
                inference_value_memory[sequence_start:sequence_end, batch_start:batch_end, ...] = value_layer
                key_layer = inference_key_memory[:sequence_end, batch_start:batch_end, ...]
                value_layer = inference_value_memory[:sequence_end, batch_start:batch_end, ...]
                layer_attention_mask = attention_mask[..., sequence_start:sequence_end, :sequence_end]
            context_layers.append(self.core_attention(query_layer, key_layer, value_layer, layer_attention_mask))
        output, bias = self.dense(context_layers)
        return output, bias


class ParallelMLP(nn.Module):
    def __init__(self, hidden_size, ffn_hidden_size, bias=True, world_size=TENSOR_MODEL_PARALLEL_SIZE):
        super().__init__()
        self.dense_h_to_4h = ColumnParallelLinear(hidden_size, ffn_hidden_size, bias=bias, skip_bias_add=True, world_size=world_size)
        self.dense_4h_to_h = RowParallelLinear(ffn_hidden_size, hidden_size, bias=bias, skip_bias_add=True, world_size=world_size)

    def forward(self, hidden_states):
        intermediate_parallel, bias_parallel = self.dense_h_to_4h(hidden_states)
        intermediate_parallel = [bias_gelu(b, x) for x, b in zip(intermediate_parallel, bias_parallel)]
        output, output_bias = self.dense_4h_to_h(intermediate_parallel)
        return output, output_bias


class ParallelTransformerLayer(nn.Module):
    def __init__(self, layer_number, hidden_size, num_heads, ffn_hidden_size, hidden_dropout=0.1, attention_dropout=0.1, eps=1e-5):
        super().__init__()
        self.layer_number = layer_number
        self.apply_residual_connection_post_layernorm = False
        self.hidden_dropout = hidden_dropout
        self.input_layernorm = MixedFusedLayerNorm(hidden_size, eps=eps)
        self.self_attention = ParallelAttention(layer_number, hidden_size, num_heads, attention_dropout)
        self.post_attention_layernorm = MixedFusedLayerNorm(hidden_size, eps=eps)
        self.mlp = ParallelMLP(hidden_size, ffn_hidden_size)

    def forward(self, hidden_states, attention_mask, inference_params=None):
        # hidden_states [s, b, h]
        layernorm_output = self.input_layernorm(hidden_states)
        attention_output, attention_bias = self.self_attention(layernorm_output, attention_mask, inference_params=inference_params)
        if self.apply_residual_connection_post_layernorm:
            residual = layernorm_output
        else:
            residual = hidden_states
        bias_dropout_add_func = get_bias_dropout_add(self.training)
        layernorm_input = bias_dropout_add_func(attention_output, attention_bias.expand_as(residual), residual, self.hidden_dropout)
        layernorm_output = self.post_attention_layernorm(layernorm_input)
        mlp_output, mlp_bias = self.mlp(layernorm_output)
        if self.apply_residual_connection_post_layernorm:
            residual = layernorm_output
        else:
            residual = layernorm_input
        output = bias_dropout_add_func(mlp_output, mlp_bias.expand_as(residual), residual, self.hidden_dropout)
        return output


def get_ltor_attention_mask(batch, query_length, key_length, keep=None):
    """Megatron's left-to-right mask, True = masked: causal (bottom-right when the queries are
    the last ``query_length`` of ``key_length`` tokens), or-ed with the key padding."""
    attention_mask = torch.tril(torch.ones((key_length, key_length)))[key_length - query_length:]
    attention_mask = (attention_mask < 0.5).view(1, 1, query_length, key_length).expand(batch, 1, query_length, key_length)
    if keep is not None:
        attention_mask = attention_mask | ~keep[:, None, None, :]
    return attention_mask


class Embedding(nn.Module):
    def __init__(self, hidden_size, vocab_size, max_sequence_length, embedding_dropout_prob=0.1):
        super().__init__()
        self.word_embeddings = VocabParallelEmbedding(vocab_size, hidden_size)
        self.position_embeddings = nn.Embedding(max_sequence_length, hidden_size)
        nn.init.normal_(self.position_embeddings.weight, std=0.02)
        self.embedding_dropout = nn.Dropout(embedding_dropout_prob)

    def forward(self, input_ids, position_ids):
        words_embeddings = self.word_embeddings(input_ids)
        position_embeddings = self.position_embeddings(position_ids)
        embeddings = words_embeddings + position_embeddings
        # [b, s, h] -> [s, b, h]
        embeddings = embeddings.transpose(0, 1).contiguous()
        return self.embedding_dropout(embeddings)


def parallel_lm_logits(input_, word_embeddings_weight, world_size=TENSOR_MODEL_PARALLEL_SIZE):
    n = divide(word_embeddings_weight.shape[0], world_size)
    logits_parallel = [F.linear(input_, word_embeddings_weight[rank * n:(rank + 1) * n]) for rank in range(world_size)]
    return gather_from_tensor_model_parallel_region(logits_parallel)


class GPTModel(nn.Module):
    def __init__(self, num_layers, hidden_size, num_heads, ffn_hidden_size, vocab_size, max_sequence_length, eps=1e-5):
        super().__init__()
        self.max_sequence_length = max_sequence_length
        self.embedding = Embedding(hidden_size, vocab_size, max_sequence_length)
        self.layers = nn.ModuleList([
            ParallelTransformerLayer(i + 1, hidden_size, num_heads, ffn_hidden_size, eps=eps) for i in range(num_layers)
        ])
        self.final_layernorm = MixedFusedLayerNorm(hidden_size, eps=eps)

    def word_embeddings_weight(self):
        return self.embedding.word_embeddings.weight

    def forward(self, input_ids, position_ids, attention_mask, inference_params=None):
        hidden_states = self.embedding(input_ids, position_ids)
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask, inference_params=inference_params)
        hidden_states = self.final_layernorm(hidden_states)
        logits = parallel_lm_logits(hidden_states, self.word_embeddings_weight())
        # [s, b, v] -> [b, s, v]
        return logits.transpose(0, 1).contiguous()


# ---- the adapter -----------------------------------------------------------------------

from tck.adapters import ConfigSpace, Param, TorchEntry, TorchModuleAdapter
from tck.reference import Conventions


def _keep(x, key_padding, total):
    return None if key_padding is None else torch.as_tensor(key_padding).bool()


def _positions(ids, positions, start=0):
    if positions is not None:
        return positions
    return torch.arange(start, start + ids.shape[1])[None].expand(ids.shape[0], -1)


def attention_forward(m, x, key_padding=None):
    mask = get_ltor_attention_mask(x.shape[0], x.shape[1], x.shape[1], _keep(x, key_padding, x.shape[1]))
    output, bias = m(x.transpose(0, 1), mask)
    return (output + bias).transpose(0, 1)


def block_forward(m, x, key_padding=None):
    mask = get_ltor_attention_mask(x.shape[0], x.shape[1], x.shape[1], _keep(x, key_padding, x.shape[1]))
    return m(x.transpose(0, 1), mask).transpose(0, 1)


def lm_forward(m, ids, key_padding=None, positions=None):
    mask = get_ltor_attention_mask(ids.shape[0], ids.shape[1], ids.shape[1], _keep(ids, key_padding, ids.shape[1]))
    return m(ids, _positions(ids, positions), mask)


def _step(m, cache, x, key_padding, max_len):
    if cache is None:
        cache = InferenceParams(x.shape[0], max_len)
    start = cache.sequence_len_offset
    total = start + x.shape[1]
    mask = get_ltor_attention_mask(x.shape[0], total, total, _keep(x, key_padding, total))
    return cache, start, total, mask


def attention_step(m, cache, x, key_padding=None, positions=None):
    cache, start, total, mask = _step(m, cache, x, key_padding, 512)
    output, bias = m(x.transpose(0, 1), mask, inference_params=cache)
    cache.sequence_len_offset = total
    return (output + bias).transpose(0, 1), cache


def block_step(m, cache, x, key_padding=None, positions=None):
    cache, start, total, mask = _step(m, cache, x, key_padding, 512)
    out = m(x.transpose(0, 1), mask, inference_params=cache)
    cache.sequence_len_offset = total
    return out.transpose(0, 1), cache


def lm_step(m, cache, ids, key_padding=None, positions=None):
    cache, start, total, mask = _step(m, cache, ids, key_padding, m.max_sequence_length)
    logits = m(ids, _positions(ids, positions, start), mask, inference_params=cache)
    cache.sequence_len_offset = total
    return logits, cache


def _mlp_forward(m, x):
    output, bias = m(x)
    return output + bias


def _attn_map(config, prefix="", mine=""):
    hn = config.d_model // config.n_heads
    out = {}
    for i, c in enumerate("qkv"):
        out[f"{prefix}{c}.weight"] = Param(f"{mine}query_key_value.weight", slice=(1, i * hn, (i + 1) * hn))
        out[f"{prefix}{c}.bias"] = Param(f"{mine}query_key_value.bias", slice=(1, i * hn, (i + 1) * hn))
    out[f"{prefix}o.weight"] = f"{mine}dense.weight"
    out[f"{prefix}o.bias"] = f"{mine}dense.bias"
    return out


def _mlp_map(prefix="", mine=""):
    return {f"{prefix}fc1.{p}": f"{mine}dense_h_to_4h.{p}" for p in ("weight", "bias")} | {
        f"{prefix}fc2.{p}": f"{mine}dense_4h_to_h.{p}" for p in ("weight", "bias")}


def _block_map(config, prefix="", mine=""):
    out = _attn_map(config, prefix + "self_attn.", mine + "self_attention.")
    out |= _mlp_map(prefix + "ffn.", mine + "mlp.")
    for p in ("weight", "bias"):
        out[f"{prefix}norm1.{p}"] = f"{mine}input_layernorm.{p}"
        out[f"{prefix}norm2.{p}"] = f"{mine}post_attention_layernorm.{p}"
    return out


def _lm_map(config):
    out = {"embedding.weight": "embedding.word_embeddings.weight",
           "pos_embedding.weight": "embedding.position_embeddings.weight",
           "norm.weight": "final_layernorm.weight", "norm.bias": "final_layernorm.bias"}
    for i in range(config.n_layers):
        out |= _block_map(config, f"layers.{i}.", f"layers.{i}.")
    return out


GPT = Conventions(norm_placement="pre", activation="gelu_tanh", embedding_scale="none", positions="learned",
                  fully_masked_rows="uniform")
SPACE = ConfigSpace(choices={"n_heads": (4, 2, 8)}, split_heads=True)
LM_SPACE = ConfigSpace(choices={"n_heads": (4, 2, 8), "vocab_size": (40, 64)}, split_heads=True, tied=True)

adapter = TorchModuleAdapter("megatron-gpt", [
    TorchEntry("layer_norm", make=lambda c: MixedFusedLayerNorm(c.d_model, eps=1e-5), forward=lambda m, x: m(x)),
    TorchEntry("ffn", make=lambda c: ParallelMLP(c.d_model, c.d_ff), forward=_mlp_forward,
               param_map=_mlp_map(), conventions=Conventions(activation="gelu_tanh"),
               supports=ConfigSpace(choices={"d_ff": (64, 128)})),
    TorchEntry("causal_self_attention", make=lambda c: ParallelAttention(1, c.d_model, c.n_heads, 0.1),
               forward=attention_forward, param_map=_attn_map, conventions=GPT, step=attention_step, supports=SPACE),
    TorchEntry("decoder_block", make=lambda c: ParallelTransformerLayer(1, c.d_model, c.n_heads, c.d_ff),
               forward=block_forward, param_map=_block_map, conventions=GPT, step=block_step, supports=SPACE),
    TorchEntry("causal_lm", make=lambda c: GPTModel(c.n_layers, c.d_model, c.n_heads, c.d_ff, c.vocab_size, c.max_len),
               forward=lm_forward, param_map=_lm_map, conventions=GPT, step=lm_step, derives_positions=True,
               supports=LM_SPACE),
])
