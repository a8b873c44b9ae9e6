"""The KV cache (helpers.kv_cache) as the GPT uses it: tagged with its model, every layer checked, clear errors."""

from __future__ import annotations

import pytest
import torch

from helpers.gpt import GPT, GPTConfig, KVCache, kv_cache_bytes


def _model(seed: int = 0, **sizes) -> GPT:
    torch.manual_seed(seed)
    config = dict(vocab_size=10, embed_dim=16, num_heads=4, num_kv_heads=2, num_layers=2) | sizes
    return GPT(GPTConfig(**config)).eval()


def _filled(model: GPT, tokens: int = 4) -> KVCache:
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.randint(10, (1, tokens), generator=torch.Generator().manual_seed(1)), cache)
    return cache


def test_a_cache_filled_by_another_model_of_the_same_sizes_is_refused():
    first, second = _model(0), _model(1)
    cache = _filled(first)
    with pytest.raises(ValueError, match="belongs to another GPT"), torch.no_grad():
        second(torch.tensor([[3]]), cache)
    assert cache.length == 4 and cache.owner is first
    empty = first.new_cache()  # tagged at birth: refused before it holds anything
    with pytest.raises(ValueError, match="belongs to another GPT"), torch.no_grad():
        second(torch.tensor([[3]]), empty)
    untagged = KVCache(2)  # made by hand: belongs to the first model that fills it
    with torch.no_grad():
        second(torch.tensor([[3, 4]]), untagged)
        assert untagged.owner is second
        with pytest.raises(ValueError, match="belongs to another GPT"):
            first(torch.tensor([[5]]), untagged)


def test_every_layer_of_the_cache_is_checked_not_only_layer_0():
    model = _model()
    cache = _filled(model)
    keys, values = cache.layers[1]
    cache.layers[1] = (keys[:, :, :3], values[:, :, :3])  # layer 1 shorter than layer 0
    with pytest.raises(ValueError, match=r"cache layer 1 holds keys of shape \(1, 2, 3, 4\).*T = 4 as in layer 0"):
        model(torch.tensor([[3]]), cache)
    cache = _filled(model)
    cache.layers[0] = None  # layer 0 empty, layer 1 filled
    with pytest.raises(ValueError, match=r"cache layers \[0\] are empty but layers \[1\] are filled"):
        model(torch.tensor([[3]]), cache)
    cache = _filled(model)
    cache.layers[1] = cache.layers[1][0]  # a tensor where a (keys, values) pair belongs
    with pytest.raises(TypeError, match="cache layer 1 must be a \\(keys, values\\) pair"):
        model(torch.tensor([[3]]), cache)


def test_a_cache_of_another_dtype_or_a_plain_list_gets_a_clear_error():
    model = _model()
    cache = _filled(model)
    cache.layers = [tuple(t.double() for t in entry) for entry in cache.layers]
    with pytest.raises(TypeError, match=r"dtype torch\.float64.*model is torch\.float32"):
        model(torch.tensor([[3]]), cache)
    with pytest.raises(TypeError, match=r"cache must be a KVCache \(model.new_cache\(\)\) or None, got list"):
        model(torch.tensor([[3]]), [None, None])


@pytest.mark.parametrize(
    "arguments, message",
    [
        ((-1, 3, 64, 10), "num_layers must be a positive int, got -1"),
        ((0, 3, 64, 10), "num_layers must be a positive int, got 0"),
        ((30, 0, 64, 10), "num_kv_heads must be a positive int, got 0"),
        ((30, 3, -64, 10), "head_dim must be a positive int, got -64"),
        ((30, 3, 64, -1), "tokens must be an int >= 0"),
        ((30, 3, 64, 10, 0), "bytes_per_number must be a positive int, got 0"),
        ((30, 3, 64, 10, 2, -2), "batch_size must be a positive int, got -2"),
        ((30, 3, 64.5, 10), "head_dim must be a positive int, got 64.5"),
    ],
)
def test_kv_cache_bytes_refuses_sizes_below_one(arguments, message):
    with pytest.raises(ValueError, match=message):
        kv_cache_bytes(*arguments)


def test_kv_cache_bytes_counts_what_the_model_caches():
    model = _model(num_layers=3)
    cache = _filled(model, tokens=5)
    assert cache.nbytes() == kv_cache_bytes(3, 2, 4, 5, bytes_per_number=4) == 2 * 3 * 2 * 4 * 5 * 4
    assert kv_cache_bytes(3, 2, 4, 0) == 0


def test_select_keeps_and_reorders_rows_and_the_reordered_cache_still_matches_the_uncached_model():
    model = _model()
    prompt = torch.randint(10, (3, 5), generator=torch.Generator().manual_seed(2))
    cache = model.new_cache()
    with torch.no_grad():
        model(prompt, cache)
        rows = torch.tensor([2, 0, 0])
        cache.select(rows)
        step = torch.tensor([[1], [2], [3]])
        cached = model(step, cache)[:, -1]
        plain = model(torch.cat((prompt[rows], step), dim=1))[:, -1]
    torch.testing.assert_close(cached, plain, atol=1e-5, rtol=0)
    assert cache.length == 6
