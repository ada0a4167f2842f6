"""The plain-torch definition of the op; the tests' ground truth."""

from __future__ import annotations

import torch


def merge(lo: torch.Tensor, hi: torch.Tensor, num_heads: int, H: int, W: int) -> torch.Tensor:
    """``lo``, ``hi``: ``[B*nh, H*W, kd]`` -> ``[B, 2*nh*kd, H, W]``, heads interleaving lo/hi."""
    rows, n, kd = lo.shape
    both = torch.stack((lo, hi), dim=1).view(rows // num_heads, num_heads, 2, n, kd)
    return both.permute(0, 1, 2, 4, 3).reshape(rows // num_heads, 2 * num_heads * kd, H, W)


def merge_backward(d_merged: torch.Tensor, num_heads: int, key_dim: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse gather: ``[B, c, H, W]`` -> ``(d_lo, d_hi)``, each ``[B*nh, H*W, kd]``."""
    batch = d_merged.shape[0]
    g = d_merged.reshape(batch, num_heads, 2, key_dim, -1).permute(0, 1, 2, 4, 3)
    return (g[:, :, 0].reshape(batch * num_heads, -1, key_dim).contiguous(),
            g[:, :, 1].reshape(batch * num_heads, -1, key_dim).contiguous())


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equal (the op only moves elements: no tolerance, and NaNs compare too)."""
    ints = {2: torch.int16, 4: torch.int32}[a.element_size()]
    return bool(torch.equal(a.contiguous().view(ints), b.contiguous().view(ints)))
