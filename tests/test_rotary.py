"""Rotary position embeddings: the rotation of lesson 04, applied pair by pair; scores depend only on m - n."""

from __future__ import annotations

import math

import pytest
import torch

from helpers import apply_rotary, rotary_angles
from helpers.rotary import rotary_cos_sin, rotate_pairs


def test_each_pair_is_rotated_by_position_times_its_frequency():
    d, position = 6, 5
    x = torch.randn(1, d, dtype=torch.float64)
    rotated = apply_rotary(x.expand(position + 1, d), torch.arange(position + 1))[position]
    for m in range(d // 2):
        angle = position * 10000 ** (-2 * m / d)
        R = torch.tensor([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]], dtype=torch.float64)
        torch.testing.assert_close(rotated[2 * m : 2 * m + 2], R @ x[0, 2 * m : 2 * m + 2])


def test_position_zero_is_unchanged_and_lengths_are_kept():
    x = torch.randn(2, 3, 7, 8)
    rotated = apply_rotary(x)
    torch.testing.assert_close(rotated[..., 0, :], x[..., 0, :])
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1))


@pytest.mark.parametrize("offset", [-7, 0, 3, 250])
def test_scores_depend_only_on_the_offset(offset):
    g = torch.Generator().manual_seed(offset + 100)
    q, k = torch.randn(16, dtype=torch.float64, generator=g), torch.randn(16, dtype=torch.float64, generator=g)
    scores = []
    for m in (300, 301, 517, 2000):  # query position m, key position n = m - offset
        n = m - offset
        q_m = apply_rotary(q[None], torch.tensor([m]))[0]
        k_n = apply_rotary(k[None], torch.tensor([n]))[0]
        scores.append(q_m @ k_n)
    torch.testing.assert_close(torch.stack(scores), scores[0].expand(4), atol=1e-9, rtol=0)
    # ... and a different offset gives a different score: the test could fail
    q_m, k_n = apply_rotary(q[None], torch.tensor([300]))[0], apply_rotary(k[None], torch.tensor([300 - offset - 1]))[0]
    assert not torch.isclose(q_m @ k_n, scores[0])


def test_bad_inputs():
    with pytest.raises(ValueError, match="even"):
        apply_rotary(torch.randn(4, 5))
    with pytest.raises(ValueError, match=r"shape \(T,\)"):
        apply_rotary(torch.randn(4, 6), torch.arange(3))
    assert rotary_angles(3, 4).shape == (3, 2)


def test_more_bad_inputs_name_what_was_expected():
    with pytest.raises(ValueError, match="at least 2-D"):
        apply_rotary(torch.randn(8))
    with pytest.raises(TypeError, match="tensor"):
        apply_rotary(torch.randn(3, 8), [0, 1, 2])
    with pytest.raises(TypeError, match="tensor"):
        rotary_angles([0, 1, 2], 8)
    with pytest.raises(ValueError, match="T >= 0"):
        rotary_angles(-3, 8)
    for base in (0, -10.0, float("nan")):
        with pytest.raises(ValueError, match="base"):
            rotary_angles(4, 8, base=base)
        with pytest.raises(ValueError, match="base"):
            apply_rotary(torch.randn(4, 8), base=base)


def test_rotate_pairs_with_precomputed_angles_is_apply_rotary():
    x = torch.randn(2, 3, 5, 8)
    positions = torch.arange(7, 12)
    cos, sin = rotary_cos_sin(positions, 8, base=100000.0)
    torch.testing.assert_close(rotate_pairs(x, cos, sin), apply_rotary(x, positions, base=100000.0))
    assert not torch.allclose(rotate_pairs(x, cos, sin), apply_rotary(x, positions))  # the base matters
