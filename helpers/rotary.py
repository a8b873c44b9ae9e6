"""Rotary position embeddings (RoPE): positions as rotations of the queries and keys, pair by pair.

Shapes, in the course notation: T a sequence length, d the head size (even), ``...`` any batch dimensions in
front (usually (N, h)). New letter: m numbers the d / 2 feature pairs (2m, 2m + 1).

Lesson 04 rotated each (sin, cos) pair of a positional encoding by a 2-D rotation to move it along by some
positions. RoPE (Su et al., 2021) uses the same rotation the other way round: it leaves the token vectors
alone and **rotates the query and the key of position t**, pair m by the angle ``t · θ_m`` with
``θ_m = base^(-2m/d)`` (the frequencies of the sinusoidal encoding). Rotating both by their own positions
leaves their dot product depending only on the angle *between* them, ``(t_q - t_k) · θ_m``: attention scores
see the offset between two tokens, never where they are.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["apply_rotary", "rotary_angles"]


def rotary_angles(positions: Tensor | int, head_dim: int, base: float = 10000.0) -> Tensor:
    """Angles (T, d / 2): row t, column m is ``positions[t] · base^(-2m / d)``.

    ``positions`` is a (T,) tensor of positions, or an int T for positions 0 .. T - 1. Computed in float64
    (a position of several thousand times a small frequency must keep its digits), returned as float64.
    """
    if head_dim < 2 or head_dim % 2:
        raise ValueError(f"rotary embeddings rotate pairs of features: the head size must be even, got {head_dim}")
    if isinstance(positions, int):
        positions = torch.arange(positions)
    if positions.dim() != 1:
        raise ValueError(f"positions must be a 1-D tensor (T,), got shape {tuple(positions.shape)}")
    frequencies = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (d / 2,), θ_m
    return positions.to(device=frequencies.device, dtype=torch.float64)[:, None] * frequencies  # (T, d / 2)


def apply_rotary(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> Tensor:
    """Rotate each feature pair (2m, 2m + 1) of x at position t by the angle ``t · base^(-2m/d)``.

    x: (..., T, d) queries or keys; positions: (T,) their positions (default 0 .. T - 1; a decoder with a
    KV cache passes the positions of its new tokens). Returns (..., T, d), the same dtype.

    The rotation of a pair (a, b) by an angle φ is the one of lesson 04: (a cos φ - b sin φ, a sin φ + b cos φ).
    Rotations keep lengths, so only the directions of queries and keys change.
    """
    T, d = x.size(-2), x.size(-1)
    positions = torch.arange(T, device=x.device) if positions is None else positions
    if positions.shape != (T,):
        raise ValueError(
            f"positions must have shape (T,) = ({T},) to match x (..., T, d), got {tuple(positions.shape)}"
        )
    angles = rotary_angles(positions, d, base).to(device=x.device)  # (T, d / 2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)  # each (T, d / 2)
    a, b = x[..., 0::2], x[..., 1::2]  # (..., T, d / 2): the first and second feature of every pair
    rotated = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1)  # (..., T, d / 2, 2)
    return rotated.flatten(-2)  # pairs back in place: (..., T, d)
