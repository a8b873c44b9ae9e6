"""StreamingLLM (Xiao et al. 2023): a window plus the first ``sinks`` tokens. The mask (True = blocked), a model
prefilled with it at every layer, and a cache that keeps the first tokens plus the last window."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers.gpt import GPT, GPTConfig
from helpers.masks import causal_mask, sliding_window_mask, streaming_mask, streaming_mask_at
from helpers.streaming import StreamingCache, nll_by_position, streaming_attention, streaming_logits


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


def _tiny_gpt(window: int | None = None, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=50, embed_dim=32, num_heads=4, num_kv_heads=2, num_layers=2, ff_dim=64, window=window)
    return GPT(config).eval()


@pytest.fixture
def ids():
    return torch.randint(0, 50, (2, 23), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("window", [1, 4, 9])
def test_no_sinks_is_the_windowed_model(ids, window):
    """The course's GPT with config.window = W computes the window itself: streaming with no sinks must agree."""
    windowed = _tiny_gpt(window)
    plain = _tiny_gpt(None)
    plain.load_state_dict(windowed.state_dict())
    expected = F.cross_entropy(windowed(ids)[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
    torch.testing.assert_close(nll_by_position(plain, ids, window, 0), expected)


def test_a_window_as_long_as_the_text_is_full_causal(ids):
    model = _tiny_gpt()
    full = nll_by_position(model, ids)
    torch.testing.assert_close(nll_by_position(model, ids, ids.size(1), 3), full)
    assert not torch.allclose(nll_by_position(model, ids, 4, 0), full)  # a short window does change the loss
    assert not torch.allclose(nll_by_position(model, ids, 4, 2), nll_by_position(model, ids, 4, 0))  # so do sinks


def test_the_mask_reaches_every_layer_and_is_removed_after(ids):
    model = _tiny_gpt()
    with streaming_attention(model, 3, 1):
        _, weights = model(ids, need_weights=True)
    for layer in weights:
        assert torch.all(layer.masked_select(streaming_mask(ids.size(1), 3, 1)) == 0)
    assert all((block.attention.window, block.attention.keep_first) == (None, 0) for block in model.blocks)


@pytest.mark.parametrize(("window", "sinks", "prefill"), [(4, 2, 1), (5, 1, 8), (3, 0, 1), (1, 3, 2), (6, 4, 23)])
def test_the_streaming_cache_gives_the_masked_prefills_logits(ids, window, sinks, prefill):
    model = _tiny_gpt()
    with streaming_attention(model, window, sinks):
        expected = model(ids)
    torch.testing.assert_close(streaming_logits(model, ids, window, sinks, prefill), expected)


def test_the_streaming_cache_keeps_the_sinks_and_the_last_window_only(ids):
    model = _tiny_gpt()
    cache = StreamingCache(model, window=4, sinks=2)
    for t in range(ids.size(1)):
        model(ids[:, t : t + 1], cache=cache)
    keys, _ = cache.layers[0]
    assert keys.shape[-2] == 2 + 4 - 1 and cache.length == ids.size(1)
    full = model.new_cache()
    model(ids, cache=full)
    kept = list(range(2)) + list(range(ids.size(1) - 3, ids.size(1)))
    torch.testing.assert_close(keys, full.layers[0][0][..., kept, :])  # the original keys, rotated where they were


def test_models_with_their_own_window_and_bad_sizes_are_refused(ids):
    with pytest.raises(ValueError, match=r"layers \[0, 1\] have a window of their own"):
        nll_by_position(_tiny_gpt(4), ids, 4, 1)
    with pytest.raises(ValueError, match="window must be a positive int number of tokens, got 0"):
        nll_by_position(_tiny_gpt(), ids, 0, 1)
    with pytest.raises(ValueError, match="with window=None"):
        nll_by_position(_tiny_gpt(), ids, None, 2)
    with pytest.raises(ValueError, match="a streaming cache must keep a token"):
        StreamingCache(_tiny_gpt(), 1, 0)
    model = _tiny_gpt()
    cache = model.new_cache(rolling=False)
    model(ids[:, :5], cache=cache)
    cache.layers = [(k[..., 1:, :], v[..., 1:, :]) for k, v in cache.layers]  # no longer every key since 0
    cache._length = 5
    cache.keep = [4, 4]  # a bound on layers that see every earlier token: the cache disagrees with its model
    with streaming_attention(model, 3, 1), pytest.raises(ValueError, match="keeps only the last 4 tokens"):
        model(ids[:, 5:6], cache=cache)
    streaming = StreamingCache(model, 3, 1)  # the same bound, StreamingLLM's on purpose: the layers' own check
    model(ids[:, :5], cache=streaming)
    with streaming_attention(model, 3, 1), pytest.raises(ValueError, match="needs every key since position 0"):
        model(ids[:, 5:6], cache=streaming)
