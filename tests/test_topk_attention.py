"""The "topk" kind of layer (helpers.topk_attention): DeepSeek Sparse Attention's shape on the course's GPT.

Its gathered attention against a dense reference written here (every key scored, the unselected ones masked), its
cache against a run without one, a budget that keeps every key against the global layer, and its refusals."""

from __future__ import annotations

import math

import pytest
import torch

from helpers.analysis.cache_budget import cache_numbers_per_layer
from helpers.attention import masked_softmax, merge_heads
from helpers.gpt import GPT, GPTConfig, KVCache, generate
from helpers.layer_kind import kind_class
from helpers.selection import causal_topk, selected_mask
from helpers.topk_attention import TopKAttention, TopKSettings

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: one thread is fastest

V = 30
SETTINGS = TopKSettings(k=3, indexer_heads=2, indexer_dim=8)


def _config(kinds=("topk", "global"), settings=SETTINGS, **changes) -> GPTConfig:
    sizes = dict(vocab_size=V, embed_dim=32, num_heads=4, num_kv_heads=2, num_layers=len(kinds), ff_dim=48)
    kind_settings = None if settings is None else {"topk": settings}
    return GPTConfig(**(sizes | dict(layer_kinds=kinds, kind_settings=kind_settings) | changes))


def _model(config: GPTConfig, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(config).double().eval()


def _ids(N: int, T: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(V, (N, T), generator=torch.Generator().manual_seed(seed))


def _dense_reference(layer: TopKAttention):
    """The layer's forward without a cache, written out densely: scores against every key, a softmax over the
    causal *and* selected ones (masked_softmax), never the gather. Returns what the layer returns."""

    def forward(x, positions, past=None, need_weights=False, rotation=None):
        assert past is None, "the reference is a prefill"
        q, k, v = layer._project(x, positions, rotation)  # (N, h, L, d), (N, h_kv, L, d) x 2
        g = layer.num_heads // layer.num_kv_heads
        keys, values = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)  # (N, h, L, d)
        scale = layer.scale if layer.scale is not None else 1 / math.sqrt(layer.head_dim)
        scores = q @ keys.transpose(-2, -1) * scale  # (N, h, L, L)
        index_scores = layer.indexer.index_scores(x, layer.indexer.index_keys(x, positions), positions)
        indices = causal_topk(index_scores, layer.top_k)  # (N, L, k), the queries the last L keys
        L = x.size(1)
        causal = torch.ones(L, L, dtype=torch.bool).tril()  # True = may attend
        weights = masked_softmax(scores, causal & selected_mask(indices, L)[:, None])  # (N, h, L, L)
        out = merge_heads(weights @ values)
        if layer.gate_proj is not None:
            out = out * torch.sigmoid(layer.gate_proj(x))
        out = layer.projections.out_proj(out)
        return (out, None, weights) if need_weights else (out, None)

    return forward


SWITCHES = dict(qk_norm=True, output_gate=True, query_scale=0.4, rotary_fraction=0.5)


@pytest.mark.parametrize("kinds", [("topk", "global"), ("topk", "topk")])
@pytest.mark.parametrize("switches", [{}, SWITCHES], ids=["plain", "switches"])
def test_prefill_equals_dense_attention_over_the_selected_keys(kinds, switches, monkeypatch):
    model = _model(_config(kinds, **switches))
    ids = _ids(2, 9)
    with torch.no_grad():
        logits, weights = model(ids, need_weights=True)
        gathered = model(ids)  # no weights asked: the gathered path
        for layer in model.attention_layers:
            if isinstance(layer, TopKAttention):
                monkeypatch.setattr(layer, "forward", _dense_reference(layer))
        reference, reference_weights = model(ids, need_weights=True)
    torch.testing.assert_close(gathered, reference, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(logits, reference, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(weights[0], reference_weights[0], atol=1e-12, rtol=1e-12)
    # Each query reads at most k = 3 keys, one selection shared by the heads; the rows still sum to 1.
    read = weights[0] > 0
    assert int(read.sum(-1).max()) == 3 and torch.equal(read, read[:, :1].expand_as(read))
    torch.testing.assert_close(weights[0].sum(-1), torch.ones_like(weights[0].sum(-1)))
    # The test can fail: the selection changes the logits (dense attention over every earlier key does not match).
    monkeypatch.undo()
    everything = _model(_config(kinds, TopKSettings(k=9, indexer_heads=2, indexer_dim=8), **switches))
    with torch.no_grad():
        assert not torch.allclose(everything(ids), gathered, atol=1e-3)


@pytest.mark.parametrize("kinds", [("topk", "global"), ("topk", "topk")])
def test_cached_decoding_gives_the_logits_of_a_prefill_and_generate_the_same_tokens(kinds):
    model = _model(_config(kinds, num_kv_heads=1, **SWITCHES))
    ids = _ids(2, 10, seed=2)
    cache = model.new_cache()
    with torch.no_grad():
        steps = [model(ids[:, :4], cache)] + [model(ids[:, t : t + 1], cache) for t in range(4, 10)]
        whole = model(ids)
    torch.testing.assert_close(torch.cat(steps, dim=1), whole, atol=1e-10, rtol=1e-10)
    keys, values, index_keys = cache.layers[0]
    assert keys.shape == values.shape == (2, 1, 10, 8) and index_keys.shape == (2, 10, 8)
    cached, cached_logits = generate(model, ids[:, :3], 8)
    recomputed, recomputed_logits = generate(model, ids[:, :3], 8, use_cache=False)
    assert torch.equal(cached, recomputed)
    torch.testing.assert_close(cached_logits, recomputed_logits, atol=1e-10, rtol=1e-10)
    rolling, _ = generate(model, ids[:, :3], 8, rolling=True)  # a rolling cache keeps every token for it
    assert torch.equal(rolling, cached) and model.new_cache(rolling=True).keep[0] is None


@pytest.mark.parametrize("switches", [{}, SWITCHES], ids=["plain", "switches"])
def test_a_budget_that_keeps_every_key_is_the_global_layer(switches):
    T = 7
    topk = _model(_config(("topk", "topk"), TopKSettings(k=T, indexer_heads=2, indexer_dim=8), **switches))
    dense = _model(_config(("global", "global"), None, **switches), seed=5)
    shared = {name: tensor for name, tensor in topk.state_dict().items() if ".indexer." not in name}
    assert dense.load_state_dict(shared, strict=True) is not None  # every weight of the global model, copied
    ids = _ids(2, T, seed=3)
    with torch.no_grad():
        torch.testing.assert_close(topk(ids), dense(ids), atol=1e-12, rtol=1e-12)
        cache = topk.new_cache()
        steps = [topk(ids[:, t : t + 1], cache) for t in range(T)]
    torch.testing.assert_close(torch.cat(steps, dim=1), dense(ids), atol=1e-10, rtol=1e-10)


def test_a_malformed_cache_entry_is_refused_naming_the_shapes():
    model = _model(_config())
    ids = _ids(2, 5)
    cache = model.new_cache()
    model(ids, cache)
    keys, values, index_keys = cache.layers[0]
    cache.layers[0] = (keys, values)  # a global layer's entry
    expected = r"keys and values \(N, h_kv, T, d\) = \(2, 2, 5, 8\) and index_keys \(N, T, c\) = \(2, 5, 8\)"
    with pytest.raises(TypeError, match=rf"cache layer 0 is of kind 'topk'.*triple of tensors, {expected}"):
        model(ids[:, :1], cache)
    cache.layers[0] = (keys, values, index_keys[..., :4])
    with pytest.raises(ValueError, match=rf"index_keys of shape \(2, 5, 4\) but this call needs {expected}"):
        model(ids[:, :1], cache)
    cache.layers[0] = (keys, values, index_keys.float())
    with pytest.raises(TypeError, match=r"index_keys of dtype torch.float32 .* the model is torch.float64"):
        model(ids[:, :1], cache)
    cache.layers[0] = (keys[:, :1], values, index_keys)
    with pytest.raises(ValueError, match=r"cache layer 0 holds keys of shape \(2, 1, 5, 8\)"):
        model(ids[:, :1], cache)
    cache.layers[0] = (keys, values, index_keys)
    assert model(ids[:, :1], cache).shape == (2, 1, V)  # the entry as it was: accepted


def test_settings_that_are_missing_or_invalid_are_refused():
    expected = r"kind_settings\['topk'\], a TopKSettings\(k, indexer_heads=4, indexer_dim=32, indexer_rotary_dim=None\)"
    with pytest.raises(ValueError, match=rf"layer 0 is top-k attention: .*{expected}; got NoneType"):
        _config(settings=None)
    with pytest.raises(ValueError, match=rf"layer 1 is top-k attention: .*{expected}; got dict"):
        GPTConfig(vocab_size=V, layer_kinds=("global", "topk"), kind_settings={"topk": {"k": 4}})
    for wrong, message in [
        (dict(k=0), r"TopKSettings.k must be a positive int, got 0"),
        (dict(k=True), r"TopKSettings.k must be a positive int, got True"),
        (dict(k=4, indexer_dim=0), r"TopKSettings.indexer_dim must be a positive int"),
        (dict(k=4, indexer_heads=2.0), r"TopKSettings.indexer_heads must be a positive int, got 2.0"),
        (dict(k=4, indexer_dim=8, indexer_rotary_dim=3), r"indexer_rotary_dim must be None or an even int in 0 .. "),
        (dict(k=4, indexer_dim=8, indexer_rotary_dim=10), r"in 0 .. indexer_dim = 8 .*got 10"),
    ]:
        with pytest.raises(ValueError, match=message):
            TopKSettings(**wrong)
    assert kind_class("topk") is TopKAttention
    layer = TopKAttention(_config(settings=TopKSettings(k=2, indexer_dim=6, indexer_rotary_dim=0)))
    assert layer.indexer.rotary_dim == 0 and layer.top_k == 2


def test_what_the_kind_cannot_carry_is_refused_naming_the_layer_and_the_switch():
    with pytest.raises(ValueError, match=r"layer 1 is of kind 'topk', which cannot carry attention_sinks=True"):
        _config(("global", "topk"), attention_sinks=True)
    model = _model(_config())
    ids = _ids(1, 6)
    with pytest.raises(ValueError, match=r"cache layer 0 keeps only the last 4 tokens.*'topk'.*every earlier token"):
        model(ids, KVCache(2, keep=[4, None]))
    from helpers.analysis.passkey import made_local

    with pytest.raises(ValueError, match=r"layers \[0\] have no window to set"), made_local(model, [0], window=2):
        pass


def test_the_cache_budget_counts_the_index_keys():
    model = _model(_config(("topk", "topk")))
    per_token = 2 * 2 * 8 + 8  # keys and values of h_kv = 2 heads of d = 8, and the indexer's key of c = 8
    assert [layer.cache_numbers_per_token() for layer in model.attention_layers] == [per_token, per_token]
    assert cache_numbers_per_layer(model) == per_token
    cache = model.new_cache()
    N, T = 2, 5
    model(_ids(N, T), cache)
    assert cache.nbytes() == 2 * per_token * N * T * 8  # what a filled cache holds: 2 layers, float64


def test_an_experiment_that_replaces_the_softmax_reaches_the_selected_keys():
    from helpers.analysis.sinks import blocked_key

    model = _model(_config(("topk", "topk"), TopKSettings(k=4, indexer_heads=2, indexer_dim=8)))
    ids = _ids(2, 8, seed=4)
    with torch.no_grad():
        _, intact = model(ids, need_weights=True)
        with blocked_key(model, [0], key=0):
            logits, weights = model(ids, need_weights=True)
            plain = model(ids)  # no weights asked: the hook still runs (the dense path), not the gather
            cache = model.new_cache()
            steps = [model(ids[:, t : t + 1], cache) for t in range(8)]
    torch.testing.assert_close(plain, logits, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(torch.cat(steps, dim=1), logits, atol=1e-10, rtol=1e-10)
    blocked, kept = weights[0], intact[0]
    assert torch.equal(blocked[:, :, 1:, 0], torch.zeros_like(blocked[:, :, 1:, 0]))  # the later queries lose key 0
    assert bool((kept[:, :, 1:, 0] > 0).any())  # which some of them had selected
    assert torch.equal(blocked > 0, (kept > 0) & ~((torch.arange(8)[:, None] > 0) & (torch.arange(8) == 0)))
    torch.testing.assert_close(blocked.sum(-1)[:, :, 1:], torch.ones(2, 4, 7, dtype=torch.float64))
