"""StreamingLLM (Xiao et al. 2023): a window plus the first ``sinks`` tokens. The mask (True = blocked), a model
prefilled with it at every layer, and a cache that keeps the first tokens plus the last window."""

from __future__ import annotations

import pytest
import torch

from helpers.masks import causal_mask, sliding_window_mask, streaming_mask, streaming_mask_at


def _brute_streaming_mask(size: int, window: int, sinks: int) -> torch.Tensor:
    blocked = torch.ones(size, size, dtype=torch.bool)
    for i in range(size):
        for j in range(i + 1):
            if j > i - window or j < sinks:
                blocked[i, j] = False
    return blocked


@pytest.mark.parametrize(("size", "window", "sinks"), [(9, 3, 2), (9, 1, 1), (5, 2, 4), (6, 4, 0), (4, 9, 2)])
def test_the_streaming_mask_equals_a_loop_over_its_rule(size, window, sinks):
    assert torch.equal(streaming_mask(size, window, sinks), _brute_streaming_mask(size, window, sinks))


def test_a_hand_case_window_2_and_one_sink():
    may_attend = ~streaming_mask(5, 2, 1)
    expected = torch.tensor(
        [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 0, 1, 1, 0], [1, 0, 0, 1, 1]], dtype=torch.bool
    )
    assert torch.equal(may_attend, expected)


@pytest.mark.parametrize("window", [1, 3, 7])
def test_no_sinks_is_the_window_and_a_wide_window_is_causal(window):
    assert torch.equal(streaming_mask(7, window, 0), sliding_window_mask(7, window))
    assert torch.equal(streaming_mask(7, 7, 3), causal_mask(7))


def test_a_sink_stays_blocked_for_the_queries_before_it():
    """sinks > the query's position must not open a future key."""
    assert torch.equal(streaming_mask(4, 1, 4), causal_mask(4))


def test_a_cached_step_is_the_last_rows_of_the_full_streaming_mask():
    full = streaming_mask(8, 3, 2)
    assert torch.equal(streaming_mask_at(torch.tensor([6, 7]), 8, 3, 2), full[6:])


def test_bad_sinks_and_windows_are_refused():
    with pytest.raises(ValueError, match=r"sinks must be an int >= 0 .* got -1"):
        streaming_mask(4, 2, -1)
    with pytest.raises(ValueError, match="window must be a positive int number of tokens or None, got 0"):
        streaming_mask(4, 0, 1)
    with pytest.raises(ValueError, match="a streaming mask has a window"):
        streaming_mask_at(torch.arange(3), 3, None, 1)
