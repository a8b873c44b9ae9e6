"""helpers.masks: every mask in one convention, True = blocked, and the one crossing into the attention core's
(and F.scaled_dot_product_attention's) True = may attend; what helpers.attention re-exports is the same object."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F

import helpers.attention
import helpers.masks
from helpers.masks import causal_mask, causal_mask_at, sdpa_mask, sliding_window_mask


def test_every_mask_function_names_its_convention():
    for name in helpers.masks.__all__:
        doc = inspect.getdoc(getattr(helpers.masks, name)) or ""
        assert "True = blocked" in doc, f"{name}'s docstring does not say its convention: True = blocked"


def test_helpers_attention_re_exports_the_same_masks():
    for name in helpers.masks.__all__:
        assert getattr(helpers.attention, name) is getattr(helpers.masks, name), name


@pytest.mark.parametrize("window", [None, 1, 3, 10])
def test_queries_at_the_start_give_the_causal_and_the_sliding_window_masks(window):
    full = causal_mask_at(torch.arange(6), 6, window)
    assert torch.equal(full, causal_mask(6) if window is None else sliding_window_mask(6, window))


@pytest.mark.parametrize("window", [None, 2])
def test_a_cached_step_is_the_last_rows_of_the_full_mask(window):
    """The queries of a cached step sit at the end: their rows of the full mask, not SDPA's top-left is_causal."""
    full = causal_mask_at(torch.arange(7), 7, window)
    assert torch.equal(causal_mask_at(torch.tensor([5, 6]), 7, window), full[5:])
    top_left = torch.ones(2, 7, dtype=torch.bool).tril()  # what is_causal=True would read (True = may attend)
    assert not torch.equal(sdpa_mask(causal_mask_at(torch.tensor([5, 6]), 7, window)), top_left)


def test_the_crossing_into_sdpa_gives_sdpas_causal_attention():
    q, k, v = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    ours = F.scaled_dot_product_attention(q, k, v, attn_mask=sdpa_mask(causal_mask_at(torch.arange(5), 5)))
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_bad_masks_and_positions_are_refused():
    with pytest.raises(TypeError, match=r"sdpa_mask flips a boolean mask \(True = blocked\), got torch\.float32"):
        sdpa_mask(torch.zeros(2, 2))
    with pytest.raises(ValueError, match=r"query_positions must be a 1-D tensor \(L,\)"):
        causal_mask_at(torch.zeros(2, 2, dtype=torch.long), 3)
    with pytest.raises(ValueError, match=r"num_keys \(T\) must be an int >= 0, got -1"):
        causal_mask_at(torch.arange(2), -1)
    with pytest.raises(ValueError, match="window must be a positive int number of tokens or None, got 0"):
        causal_mask_at(torch.arange(2), 2, 0)
