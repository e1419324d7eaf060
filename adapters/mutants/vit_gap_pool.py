"""A ViT that pools the mean of the patch tokens (timm's ``global_pool='avg'``, BEiT's and
MAE's fine-tuning head) while it claims the paper's class-token pooling. Cited:
vidarlab/xformer-paired-viz#1 (``timm.create_model('vit_tiny_patch16_224',
global_pool='avg')`` to switch a token-pooled ViT to mean pooling),
google-research/vision_transformer#60 ("gap vs token"), microsoft/unilm#820.
"""

from __future__ import annotations

from tck.reference import VIT_CANONICAL, Config, Conventions
from tck.reference import model as ref

from .tutorial import mutant, vit_entry

BUG_CLASS = "vit_gap_pool"
EXPECTED_CODES = frozenset({"vit.pooling_mean"})


class ViT(ref.ViT):
    def __init__(self, config: Config, conventions: Conventions):
        super().__init__(config, conventions)
        self.pooling = "mean"  # BUG: global_pool='avg' in a model declared token-pooled


adapter = mutant(BUG_CLASS, vit_entry(lambda c: ViT(c, VIT_CANONICAL)))
