"""helpers.sliding_window_mask: True = blocked, like causal_mask; each query sees itself and the window - 1 before."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from helpers import causal_mask, sliding_window_mask


def test_each_query_sees_itself_and_the_window_before_it():
    mask = sliding_window_mask(6, 3)
    for i in range(6):
        allowed = [j for j in range(6) if not mask[i, j]]
        assert allowed == list(range(max(0, i - 2), i + 1))


@pytest.mark.parametrize("size", [1, 5, 9])
def test_a_window_as_long_as_the_sequence_is_the_causal_mask(size):
    assert torch.equal(sliding_window_mask(size, size), causal_mask(size))
    assert torch.equal(sliding_window_mask(size, size + 10), causal_mask(size))
    assert torch.equal(sliding_window_mask(size, 1), ~torch.eye(size, dtype=torch.bool))  # itself only


def test_it_is_nn_multihead_attentions_convention():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(1, 7, 8)
    _, weights = mha(x, x, x, attn_mask=sliding_window_mask(7, 2))  # True = blocked, as torch reads it
    assert torch.all(weights[0][sliding_window_mask(7, 2)] == 0)
    assert torch.all(weights[0][~sliding_window_mask(7, 2)] > 0)


def test_bad_sizes():
    with pytest.raises(ValueError, match="positive"):
        sliding_window_mask(0, 3)
    with pytest.raises(ValueError, match="positive"):
        sliding_window_mask(4, 0)
