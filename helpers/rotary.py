"""Rotary position embeddings (RoPE): positions as rotations of the queries and keys, pair by pair.

Shapes, in the course notation: T a sequence length, d the head size (even), ``...`` any batch dimensions in
front (usually (N, h)). Letters: m a token's position, k numbers the d / 2 feature pairs (2k, 2k + 1), as in
lesson 01's sinusoidal encoding.

Lesson 04 rotated each (sin, cos) pair of a positional encoding by a 2-D rotation to move it along by some
positions. RoPE (Su et al., 2021) uses the same rotation the other way round: it leaves the token vectors
alone and **rotates the query and the key of position m**, pair k by the angle ``m · θ_k`` with
``θ_k = base^(-2k/d)`` (the frequencies of the sinusoidal encoding). Rotating both by their own positions
leaves their dot product depending only on the angle *between* them, ``(m_q - m_k) · θ_k``: attention scores
see the offset between two tokens, never where they are.

This module rotates *adjacent* pairs (2k, 2k + 1), as the paper and llama.cpp's files do; some libraries
rotate the two halves (k, k + d / 2) instead, which is the same rotation of features stored in another order.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["apply_rotary", "halves_to_pairs", "rotary_angles", "rotary_cos_sin", "rotate_first", "rotate_pairs"]


def _check_base(base: float) -> None:
    if isinstance(base, bool) or not isinstance(base, int | float) or not math.isfinite(base) or base <= 0:
        raise ValueError(f"base must be a finite positive number (θ_k = base^(-2k/d); 10000 in the paper), got {base}")


def rotary_angles(positions: Tensor | int, head_dim: int, base: float = 10000.0) -> Tensor:
    """Angles (T, d / 2): row t, column k is ``positions[t] · base^(-2k / d)``.

    ``positions`` is a (T,) tensor of positions, or an int T ≥ 0 for positions 0 .. T - 1. Computed in float64
    (a position of several thousand times a small frequency must keep its digits), returned as float64.
    """
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 2 or head_dim % 2:
        raise ValueError(f"rotary embeddings rotate pairs of features: the head size must be even, got {head_dim}")
    _check_base(base)
    if isinstance(positions, bool) or not isinstance(positions, int | Tensor):
        raise TypeError(
            f"positions must be a (T,) tensor of positions or an int T, got {type(positions).__name__} "
            f"(wrap a list in torch.tensor(...))"
        )
    if isinstance(positions, int):
        if positions < 0:
            raise ValueError(f"positions as an int is a length T >= 0 (positions 0 .. T - 1), got {positions}")
        positions = torch.arange(positions)
    if positions.dim() != 1:
        raise ValueError(f"positions must be a 1-D tensor (T,), got shape {tuple(positions.shape)}")
    if positions.is_complex() or positions.dtype == torch.bool:
        raise TypeError(f"positions must be integer or real numbers, got dtype {positions.dtype}")
    frequencies = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (d / 2,), θ_k
    return positions.to(device=frequencies.device, dtype=torch.float64)[:, None] * frequencies  # (T, d / 2)


def rotary_cos_sin(
    positions: Tensor, head_dim: int, base: float = 10000.0, dtype: torch.dtype = torch.float32
) -> tuple[Tensor, Tensor]:
    """cos and sin of ``rotary_angles``, (T, d / 2) each, in ``dtype``: computed once, they rotate every layer."""
    angles = rotary_angles(positions, head_dim, base)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate each pair (2k, 2k + 1) of x (..., T, d) by the angles whose cos and sin are (T, d / 2)."""
    a, b = x[..., 0::2], x[..., 1::2]  # (..., T, d / 2): the first and second feature of every pair
    rotated = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1)  # (..., T, d / 2, 2)
    return rotated.flatten(-2)  # pairs back in place: (..., T, d)


def rotate_first(x: Tensor, cos: Tensor, sin: Tensor, r: int) -> Tensor:
    """Rotate the first r of x's d features (..., T, d) pair by pair (cos and sin (T, r / 2)); the other d - r
    pass unrotated (partial rotary, Qwen3-Next's ``partial_rotary_factor``)."""
    if r == x.size(-1):
        return rotate_pairs(x, cos, sin)
    return torch.cat((rotate_pairs(x[..., :r], cos, sin), x[..., r:]), dim=-1)


def apply_rotary(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> Tensor:
    """Rotate each feature pair (2k, 2k + 1) of x at position m by the angle ``m · base^(-2k/d)``.

    x: (..., T, d) queries or keys (at least 2-D); positions: (T,) their positions (default 0 .. T - 1; a
    decoder with a KV cache passes the positions of its new tokens). Returns (..., T, d), the same dtype.

    The rotation of a pair (a, b) by an angle φ is the one of lesson 04: (a cos φ - b sin φ, a sin φ + b cos φ).
    Rotations keep lengths, so only the directions of queries and keys change.
    """
    if not isinstance(x, Tensor) or x.dim() < 2:
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x must be (..., T, d) queries or keys, at least 2-D, got {shape}")
    if not x.is_floating_point():
        raise TypeError(f"x must be floating point (queries or keys), got dtype {x.dtype}")
    T, d = x.size(-2), x.size(-1)
    if positions is None:
        positions = torch.arange(T, device=x.device)
    elif not isinstance(positions, Tensor):
        raise TypeError(
            f"positions must be a (T,) tensor, got {type(positions).__name__} (wrap it in torch.tensor(...))"
        )
    if positions.shape != (T,):
        raise ValueError(
            f"positions must have shape (T,) = ({T},) to match x (..., T, d), got {tuple(positions.shape)}"
        )
    cos, sin = rotary_cos_sin(positions, d, base, x.dtype)
    return rotate_pairs(x, cos.to(x.device), sin.to(x.device))


def halves_to_pairs(weight: Tensor, head_dim: int, rotary_dim: int | None = None) -> Tensor:
    """Reorder each head's d features from the rotate-halves order (feature k pairs with k + d / 2) to the
    adjacent-pairs order of ``helpers.rotary`` (2k pairs with 2k + 1): rows of a projection (h·d, E), or a
    (d,) QK-norm weight. New feature 2k is old k, new 2k + 1 is old k + d / 2.

    ``rotary_dim``: r < d when only the first r features rotate (partial rotary, Qwen3-Next): those r are
    reordered within themselves (k pairs with k + r / 2) and the other d - r keep their places."""
    r = head_dim if rotary_dim is None else rotary_dim
    if head_dim % 2 or weight.size(0) % head_dim or r % 2 or not 2 <= r <= head_dim:
        raise ValueError(
            f"expected whole heads of an even d = {head_dim} along dim 0 and an even rotary_dim in 2 .. d, got "
            f"shape {tuple(weight.shape)} and rotary_dim {rotary_dim}"
        )
    half = r // 2
    pairs = torch.stack((torch.arange(half), torch.arange(half, r)), dim=1).flatten()  # 0, r/2, 1, r/2+1, …
    order = torch.cat((pairs, torch.arange(r, head_dim)))
    heads = weight.reshape(weight.size(0) // head_dim, head_dim, *weight.shape[1:])  # (h, d, ...)
    return heads[:, order].reshape(weight.shape)
