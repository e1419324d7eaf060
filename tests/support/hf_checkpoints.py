"""Small transformers checkpoints saved with ``save_pretrained``, for the tests that read a
checkpoint folder (``tck run --model DIR``, ``tck.adapters.pretrained``): one builder per
model class, the sizes given by keyword, the weights from ``torch.manual_seed(seed)``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# BertModel sizes of one small encoder, none of them the suite's defaults
TINY_BERT: dict[str, Any] = {
    "vocab_size": 30,
    "hidden_size": 16,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "intermediate_size": 20,
    "max_position_embeddings": 20,
}


def save(model: Any, folder: Path) -> Path:
    """``model.save_pretrained(folder)``; the folder."""
    model.save_pretrained(folder)
    return folder


def save_bert(folder: Path, *, seed: int = 0, **sizes: Any) -> Path:
    """A ``BertModel`` without its pooler (what ``hf.bert`` reads) of ``TINY_BERT``'s sizes,
    each overridden by ``sizes`` (any ``BertConfig`` keyword), saved into ``folder``."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.BertConfig(**{**TINY_BERT, **sizes})
    return save(transformers.BertModel(config, add_pooling_layer=False), folder)


def save_vit(folder: Path, *, seed: int = 0, **sizes: Any) -> Path:
    """A ``ViTForImageClassification`` of ``sizes`` (``ViTConfig`` keywords; transformers'
    defaults for the rest), saved into ``folder``."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.ViTConfig(**sizes)
    return save(transformers.ViTForImageClassification(config), folder)
