"""SwiGLU: the gated feed-forward block of Llama-style models.

Shapes, in the course notation: x (..., E), F the hidden width. Lesson 05's feed-forward is
``W_2 · GELU(W_1 x)``; SwiGLU (Shazeer, 2020) adds a second input projection that *gates* the first one,
feature by feature: ``W_down · (SiLU(W_gate x) ⊙ W_up x)``, with SiLU(z) = z · sigmoid(z) and no biases.
Three matrices instead of two, so models using it pick F ≈ 8/3 · E to keep the parameter count.
GeGLU (the same paper; Gemma's feed-forward) gates with GELU, tanh-approximated, instead of SiLU.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["GeGLU", "SwiGLU"]


class SwiGLU(nn.Module):
    """``down_proj(silu(gate_proj(x)) * up_proj(x))``: (..., E) -> (..., E) through F hidden features.

    ``gate_proj`` and ``up_proj`` are ``nn.Linear(E, F)``, ``down_proj`` is ``nn.Linear(F, E)``, all without bias
    (the names are those of the Llama checkpoints, so their state dicts load as they are).
    """

    def __init__(self, embed_dim: int, ff_dim: int) -> None:
        super().__init__()
        for name, value in (("embed_dim", embed_dim), ("ff_dim", ff_dim)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.gate_proj = nn.Linear(embed_dim, ff_dim, bias=False)
        self.up_proj = nn.Linear(embed_dim, ff_dim, bias=False)
        self.down_proj = nn.Linear(ff_dim, embed_dim, bias=False)

    def gate(self, z: Tensor) -> Tensor:
        """The gate's non-linearity: SiLU."""
        return F.silu(z)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(self.gate(self.gate_proj(x)) * self.up_proj(x))  # (..., F) gated, back to (..., E)


class GeGLU(SwiGLU):
    """``down_proj(gelu_tanh(gate_proj(x)) * up_proj(x))``: SwiGLU's three projections, gated by GELU with the tanh
    approximation (Gemma's ``gelu_pytorch_tanh``). (..., E) -> (..., E)."""

    def gate(self, z: Tensor) -> Tensor:
        return F.gelu(z, approximate="tanh")
