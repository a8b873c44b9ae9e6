"""The KV cache (helpers.kv_cache) as the GPT uses it: tagged with its model, every layer checked, clear errors;
and the one count of what a cache costs, against real caches."""

from __future__ import annotations

import pytest
import torch

from helpers.analysis.cache_budget import build_variant, cache_numbers_per_layer
from helpers.attention import GroupedQueryAttention
from helpers.gpt import GPT, GPTConfig, KVCache, kv_cache_bytes
from helpers.kv_cache import cache_bytes_per_token, layer_cache_numbers
from helpers.latent_attention import cache_bytes_per_token as latent_cache_bytes_per_token


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


@pytest.mark.parametrize(
    "rows, error, message",
    [
        (torch.tensor([0, 3]), ValueError, r"rows must be row numbers in 0 \.\. N - 1 = 2 .*got values 0 \.\. 3"),
        (torch.tensor([-1, 0]), ValueError, r"0 \.\. N - 1 = 2"),
        (torch.tensor([0.0, 1.0]), TypeError, r"rows must be a 1-D tensor.*got torch\.float32"),
        (torch.tensor([True, False]), ValueError, r"a boolean rows must have one entry per cached row, N = 3, got 2"),
        (torch.tensor([[0, 1]]), TypeError, r"rows must be a 1-D tensor"),
        ([0, 1], TypeError, r"rows must be a 1-D tensor.*got list"),
    ],
)
def test_select_refuses_rows_the_cache_does_not_hold_and_keeps_the_cache(rows, error, message):
    model = _model()
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.randint(10, (3, 4), generator=torch.Generator().manual_seed(3)), cache)
    before = [tuple(t.clone() for t in entry) for entry in cache.layers]
    with pytest.raises(error, match=message):
        cache.select(rows)
    for kept, old in zip(cache.layers, before, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(kept, old, strict=True))
    cache.select(torch.tensor([True, False, True]))  # a boolean of one entry per row still keeps rows
    assert cache.layers[0][0].size(0) == 2


def test_the_one_count_agrees_with_every_real_cache_and_its_old_names():
    """layer_cache_numbers is what a token adds to one layer's cache: the GPT's (MHA, GQA, MQA) and the latent one."""
    ids = torch.randint(20, (2, 5), generator=torch.Generator().manual_seed(4))
    for kind in ("MHA", "GQA", "MQA", "MLA"):
        model = build_variant(kind, vocab_size=20)  # E = 32, h = 4, h_kv = 2 (GQA), d_c = 12, d_R = 4 (MLA)
        cache = model.new_cache()
        with torch.no_grad():
            model(ids, cache)
        sizes = {"head_dim": 8, "num_heads": 4, "num_kv_heads": 2, "latent_dim": 12, "rotary_dim": 4}
        per_layer = layer_cache_numbers(kind, **sizes)
        assert cache.nbytes() == 2 * 5 * 2 * per_layer * 4  # N × T × n_layers × numbers × float32
        assert cache_numbers_per_layer(model) == per_layer
        assert cache_bytes_per_token(kind, 2, **sizes, bytes_per_number=4) * 2 * 5 == cache.nbytes()
    gqa = GroupedQueryAttention(32, 4, 2)
    assert gqa.kv_cache_numel(7, 3) == 3 * 7 * layer_cache_numbers("GQA", 8, 4, 2)
    assert kv_cache_bytes(2, 2, 8, 7, 4, 3) == 2 * 3 * 7 * layer_cache_numbers("GQA", 8, 4, 2) * 4


def test_grouped_query_heads_that_do_not_divide_the_query_heads_are_refused():
    assert latent_cache_bytes_per_token is cache_bytes_per_token  # lesson 11's import is the one count
    with pytest.raises(ValueError, match=r"num_heads \(9\) must be a multiple of num_kv_heads \(2\)"):
        cache_bytes_per_token("GQA", 30, 64, num_heads=9, num_kv_heads=2)
    assert cache_bytes_per_token("GQA", 30, 64, num_heads=9, num_kv_heads=3) == 2 * 3 * 64 * 30 * 2
    assert cache_bytes_per_token("GQA", 30, 64, num_kv_heads=3) == 2 * 3 * 64 * 30 * 2  # h not given: not checked
    with pytest.raises(ValueError, match="kind must be one of 'MHA', 'GQA', 'MQA', 'MLA', got 'GQ'"):
        layer_cache_numbers("GQ", 64, num_kv_heads=3)
    with pytest.raises(ValueError, match="latent_dim must be a positive int, got 0"):
        layer_cache_numbers("MLA", rotary_dim=4)
    with pytest.raises(ValueError, match="seq_len must be an int >= 0, got -1"):
        GroupedQueryAttention(32, 4, 2).kv_cache_numel(-1)
