"""CIFAR training augmentation on whole batched tensors: random crop with zero padding plus a
random horizontal flip (torchvision's ``RandomCrop(32, padding=4)`` + ``RandomHorizontalFlip()``,
applied to the uint8 image before normalisation, so the padding is black), for every image of
every client at once: one gather, no Python loop over images.

A crop is three integers per image: (dy, dx) in [0, 2 * pad] (the top-left corner inside the
padded image) and flip in {0, 1}.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

Tensor = torch.Tensor


def draw_crops(shape: tuple[int, ...], pad: int, generator: torch.Generator,
               device: torch.device | str) -> Tensor:
    """(*shape, 3) int64: offsets uniform on {0, ..., 2 pad}, flip with probability 1/2."""
    off = torch.randint(0, 2 * pad + 1, (*shape, 2), generator=generator, device=device)
    flip = torch.randint(0, 2, (*shape, 1), generator=generator, device=device)
    return torch.cat([off, flip], -1)


def crop_flip(images: Tensor, crops: Tensor, pad: int) -> Tensor:
    """images (n, C, H, W), crops (n, 3) -> (n, C, H, W): image i padded by ``pad`` zeros on each
    side, cut at (dy_i, dx_i) to H x W, mirrored left-right when flip_i."""
    n, c, h, w = images.shape
    padded = F.pad(images, (pad, pad, pad, pad))                                # (n, C, H+2p, W+2p)
    ar_h = torch.arange(h, device=images.device)
    ar_w = torch.arange(w, device=images.device)
    rows = crops[:, 0:1] + ar_h                                                 # (n, H)
    cols = crops[:, 1:2] + torch.where(crops[:, 2:3].bool(), w - 1 - ar_w, ar_w)  # (n, W)
    nn_ = torch.arange(n, device=images.device).view(n, 1, 1)
    out = padded.permute(0, 2, 3, 1)[nn_, rows[:, :, None], cols[:, None, :]]   # (n, H, W, C)
    return out.permute(0, 3, 1, 2).contiguous()
