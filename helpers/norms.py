"""RMSNorm: the normalisation of Llama-style models, LayerNorm without the mean and the bias.

Shapes, in the course notation: x (..., E). LayerNorm (lesson 05) subtracts each vector's mean, divides by its
standard deviation, then scales and shifts; RMSNorm (Zhang & Sennrich, 2019) only divides each vector by its
root mean square ``sqrt(mean(x²) + eps)`` and scales it by a learned weight (E,). Less work, one parameter
vector, and it trains as well: SmolLM2, Llama and most recent decoders use it.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["RMSNorm"]


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x², last dim) + eps) * weight``: (..., E) -> (..., E); equal to ``torch.nn.RMSNorm``.

    The mean of squares is taken in float32 even for half-precision inputs (as the reference models do),
    in float64 for float64 inputs (a float32 round would cap a float64 comparison at 1e-7), and the result is
    cast back to x's dtype before the weight multiplies it.
    """

    def __init__(self, embed_dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        if isinstance(embed_dim, bool) or not isinstance(embed_dim, int) or embed_dim < 1:
            raise ValueError(f"embed_dim must be a positive int (the size E of the last dim), got {embed_dim!r}")
        if not eps > 0:
            raise ValueError(f"eps must be a small positive number (it keeps a zero vector finite), got {eps!r}")
        self.embed_dim, self.eps = embed_dim, float(eps)
        self.weight = nn.Parameter(torch.ones(embed_dim))

    def forward(self, x: Tensor) -> Tensor:
        if x.size(-1) != self.embed_dim:
            raise ValueError(f"RMSNorm expects (..., {self.embed_dim}) inputs, got shape {tuple(x.shape)}")
        wide = x.to(torch.promote_types(x.dtype, torch.float32))  # float16, bfloat16 -> float32; float64 stays
        normed = wide * torch.rsqrt(wide.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (..., E)
        return normed.to(x.dtype) * self.weight

    def extra_repr(self) -> str:
        return f"{self.embed_dim}, eps={self.eps}"
