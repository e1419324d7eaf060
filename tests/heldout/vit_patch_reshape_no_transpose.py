"""A ViT patch embedding that turns the conv's [B, D, h, w] output into tokens with
``reshape(B, -1, D)``: without ``flatten(2).transpose(1, 2)`` each "token" mixes channels of
several patches.

Bug source: ohtlab/headpose-fsanet-pytorch issue #10 ("you use view method to reshape it
directly, but I wonder if a transpose operation should be taken at first?");
ultralytics/yolov5 issue #5318 ("I think the right operation is ``p = x.flatten(2).transpose(1,
2)``").
"""

from __future__ import annotations

from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter


class PatchEmbed(nn.Module):
    def __init__(self, patch_size: int, in_chans: int, embed_dim: int):
        super().__init__()
        self.patch_size = patch_size
        self.embed_dim = embed_dim
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        H, W = x.shape[-2:]
        # as timm's PatchEmbed (strict_img_size=False): a partial patch is an error
        assert H % self.patch_size == 0, f"Input height ({H}) should be divisible by patch size"
        assert W % self.patch_size == 0, f"Input width ({W}) should be divisible by patch size"
        x = self.proj(x)  # [B, D, h, w]
        return x.reshape(x.shape[0], -1, self.embed_dim)  # the bug: no transpose to [B, hw, D]


ONLY = ("patch_embed",)
LABEL = "vit.patch_order"

adapter = TorchModuleAdapter(
    "heldout.vit_patch_reshape_no_transpose",
    [
        TorchEntry(
            "patch_embed",
            make=lambda c: PatchEmbed(c.patch_size, c.channels, c.d_model),
            forward=lambda m, images: m(images),
            param_map={"weight": "proj.weight", "bias": "proj.bias"},
        )
    ],
)
