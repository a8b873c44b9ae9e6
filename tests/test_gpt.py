"""The small GPT: cached generation equals uncached (tokens identical, logits within 1e-5) for every kind of
position, grouped-query and sliding-window settings; its attention is GroupedQueryAttention's; GQA with as many
kv heads as heads equals multi-head attention; the cache-size formula matches the cache actually held."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from helpers import GPT, GPTConfig, GroupedQueryAttention, MultiHeadAttention, causal_mask, generate, kv_cache_bytes
from helpers.gpt import CausalSelfAttention, train_gpt


@pytest.mark.parametrize("positions", ["rotary", "sinusoidal", "none"])
@pytest.mark.parametrize("num_kv_heads,window", [(4, None), (2, None), (1, 3)])
def test_cached_generation_equals_uncached(positions, num_kv_heads, window, one_torch_thread):
    torch.manual_seed(0)
    config = GPTConfig(
        vocab_size=40, embed_dim=32, num_heads=4, num_kv_heads=num_kv_heads, positions=positions, window=window
    )
    model = GPT(config).eval()
    prompt = torch.randint(40, (3, 5))
    cached, cached_logits = generate(model, prompt, 15, use_cache=True)
    plain, plain_logits = generate(model, prompt, 15, use_cache=False)
    assert torch.equal(cached, plain)
    torch.testing.assert_close(cached_logits, plain_logits, atol=1e-5, rtol=0)
    assert cached.shape == (3, 20) and cached_logits.shape == (3, 15, 40)


def test_a_trained_model_also_generates_identically(one_torch_thread):
    torch.manual_seed(1)
    model = GPT(GPTConfig(vocab_size=12, embed_dim=32, num_heads=4, num_kv_heads=2, num_layers=2, ff_dim=64))
    data = torch.randint(12, (200, 16))
    losses = train_gpt(model, data[:, :-1], data[:, 1:], steps=20, batch_size=16)
    assert len(losses) == 20 and losses[-1] < losses[0]
    prompt = data[:2, :4]
    (a, la), (b, lb) = generate(model, prompt, 10, True), generate(model, prompt, 10, False)
    assert torch.equal(a, b)
    torch.testing.assert_close(la, lb, atol=1e-5, rtol=0)


def test_the_cache_holds_what_the_formula_says():
    config = GPTConfig(vocab_size=20, embed_dim=32, num_heads=4, num_kv_heads=2, num_layers=3)
    model = GPT(config).eval()
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.randint(20, (2, 7)), cache)
        model(torch.randint(20, (2, 1)), cache)
    assert cache.length == 8
    assert cache.nbytes() == kv_cache_bytes(3, 2, 8, tokens=8, bytes_per_number=4, batch_size=2)
    assert kv_cache_bytes(32, 8, 128, 4096) == 2 * 32 * 8 * 128 * 4096 * 2  # a Llama-like model, float16


def test_the_attention_is_grouped_query_attentions_own():
    torch.manual_seed(2)
    config = GPTConfig(vocab_size=10, embed_dim=16, num_heads=4, num_kv_heads=2, positions="none")
    attention = CausalSelfAttention(config)
    x = torch.randn(2, 6, 16)
    ours, _ = attention(x, torch.arange(6))
    reference, _ = attention.projections(x, x, x, attn_mask=causal_mask(6))
    torch.testing.assert_close(ours, reference, atol=1e-6, rtol=0)


def test_gqa_with_as_many_kv_heads_as_heads_is_multi_head_attention():
    torch.manual_seed(3)
    E, h = 32, 4
    gqa = GroupedQueryAttention(E, h, num_kv_heads=h)
    theirs = nn.MultiheadAttention(E, h, batch_first=True)
    ours = MultiHeadAttention(E, h, batch_first=True)
    with torch.no_grad():  # map the weights: W_q, W_k, W_v stacked into in_proj_weight
        theirs.in_proj_weight.copy_(torch.cat([gqa.q_proj.weight, gqa.k_proj.weight, gqa.v_proj.weight]))
        theirs.in_proj_bias.copy_(torch.cat([gqa.q_proj.bias, gqa.k_proj.bias, gqa.v_proj.bias]))
        theirs.out_proj.load_state_dict(gqa.out_proj.state_dict())
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(3, 7, E)
    masks = {
        "attn_mask": causal_mask(7),
        "key_padding_mask": torch.tensor([[False] * 7, [False] * 5 + [True] * 2, [False] * 7]),
    }
    out_gqa, w_gqa = gqa(x, x, x, need_weights=True, average_attn_weights=False, **masks)
    out_torch, w_torch = theirs(x, x, x, average_attn_weights=False, **masks)
    out_ours, _ = ours(x, x, x, **masks)
    torch.testing.assert_close(out_gqa, out_torch, atol=1e-6, rtol=0)
    torch.testing.assert_close(out_gqa, out_ours, atol=1e-6, rtol=0)
    torch.testing.assert_close(w_gqa, w_torch, atol=1e-6, rtol=0)
    # fewer kv heads is a different model: the comparison can fail
    assert not torch.allclose(GroupedQueryAttention(E, h, num_kv_heads=2)(x, x, x)[0], out_torch, atol=1e-3)


def test_sliding_window_limits_what_one_layer_sees():
    torch.manual_seed(4)
    model = GPT(
        GPTConfig(vocab_size=10, embed_dim=16, num_heads=2, num_kv_heads=2, num_layers=1, window=3, positions="none")
    )
    x = model.embed(torch.randint(10, (1, 12))).detach().requires_grad_()
    model.run(x)[0, -1].sum().backward()
    reached = x.grad[0].abs().sum(-1) > 0
    assert reached.tolist() == [False] * 9 + [True] * 3  # the last token and the two before it


def test_bad_configs_and_inputs():
    with pytest.raises(ValueError, match="positions"):
        GPTConfig(vocab_size=10, positions="learned")
    with pytest.raises(ValueError, match="window"):
        GPTConfig(vocab_size=10, window=0)
    model = GPT(GPTConfig(vocab_size=10, embed_dim=16, num_heads=2, num_kv_heads=2))
    with pytest.raises(ValueError, match=r"\(N, L\)"):
        model(torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="prompt"):
        generate(model, torch.zeros(2, 0, dtype=torch.long), 3)


@pytest.mark.parametrize(
    "field,value",
    [("num_layers", 0), ("num_layers", -1), ("vocab_size", 0), ("vocab_size", 2.5), ("ff_dim", 0), ("num_heads", 0)],
)
def test_every_size_is_validated_by_name(field, value):
    with pytest.raises(ValueError, match=field):
        GPTConfig(**{"vocab_size": 10, field: value})


def test_generate_refuses_bad_lengths_and_ids_beyond_the_vocabulary():
    model = GPT(GPTConfig(vocab_size=10, embed_dim=16, num_heads=2, num_kv_heads=2)).eval()
    prompt = torch.zeros(1, 3, dtype=torch.long)
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match="max_new_tokens"):
            generate(model, prompt, bad)
    with pytest.raises(ValueError, match=r"0 \.\. V - 1 = 9"):
        model(torch.tensor([[3, 10]]))
    with pytest.raises(ValueError, match=r"0 \.\. V - 1 = 9"):
        model(torch.tensor([[-1, 2]]))
    with pytest.raises(TypeError, match="integer"):
        model(torch.zeros(1, 3))


def test_a_cache_from_another_model_or_batch_is_refused():
    torch.manual_seed(5)
    small = GPT(GPTConfig(vocab_size=10, embed_dim=16, num_heads=4, num_kv_heads=2, num_layers=2)).eval()
    deep = GPT(GPTConfig(vocab_size=10, embed_dim=16, num_heads=4, num_kv_heads=2, num_layers=3)).eval()
    other_heads = GPT(GPTConfig(vocab_size=10, embed_dim=16, num_heads=4, num_kv_heads=4, num_layers=2)).eval()
    with torch.no_grad():
        cache = deep.new_cache()
        deep(torch.randint(10, (2, 4)), cache)
        with pytest.raises(ValueError, match="3 layers but this model has 2"):
            small(torch.randint(10, (2, 1)), cache)
        cache = small.new_cache()
        small(torch.randint(10, (2, 4)), cache)
        with pytest.raises(ValueError, match="batch size N = 3"):
            small(torch.randint(10, (3, 1)), cache)
        with pytest.raises(ValueError, match="h_kv = 4"):
            other_heads(torch.randint(10, (2, 1)), cache)
        assert cache.length == 4  # the refused calls left it alone


def test_a_step_interrupted_half_way_leaves_the_cache_as_it_was():
    torch.manual_seed(6)
    model = GPT(GPTConfig(vocab_size=10, embed_dim=16, num_heads=2, num_kv_heads=1, num_layers=3)).eval()
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.randint(10, (1, 5)), cache)
    before = [tuple(t.clone() for t in entry) for entry in cache.layers]

    def interrupt(*_):
        raise KeyboardInterrupt

    handle = model.blocks[1].register_forward_hook(interrupt)  # Ctrl-C after layer 0 has run its step
    with pytest.raises(KeyboardInterrupt), torch.no_grad():
        model(torch.randint(10, (1, 1)), cache)
    handle.remove()
    assert cache.length == 5
    for (k0, v0), (k1, v1) in zip(before, cache.layers, strict=True):
        assert torch.equal(k0, k1) and torch.equal(v0, v1)
    # and the cache still works: its next step equals the uncached model on the whole sequence
    prompt, ids = torch.randint(10, (1, 5)), torch.randint(10, (1, 1))
    cache = model.new_cache()
    with torch.no_grad():
        model(prompt, cache)
        handle = model.blocks[2].register_forward_hook(interrupt)
        with pytest.raises(KeyboardInterrupt):
            model(ids, cache)
        handle.remove()
        cached = model(ids, cache)[:, -1]
        plain = model(torch.cat((prompt, ids), dim=1))[:, -1]
    torch.testing.assert_close(cached, plain, atol=1e-5, rtol=0)
    assert cache.length == 6


def test_generation_stops_at_eos_and_pads_finished_rows():
    torch.manual_seed(7)
    model = GPT(GPTConfig(vocab_size=12, embed_dim=16, num_heads=2, num_kv_heads=2)).eval()
    prompt = torch.randint(12, (3, 4))
    free, _ = generate(model, prompt, 20)
    eos = int(free[0, 4 + 2])  # the token row 0 writes third
    stopped, logits = generate(model, prompt, 20, eos_id=eos)
    new = stopped[:, 4:]
    reached = [(row == eos).nonzero() for row in new]
    first = [int(at[0]) if len(at) else None for at in reached]
    if None in first:  # a row that never writes eos runs the whole way
        assert new.size(1) == 20
    else:
        assert new.size(1) == max(first) + 1
    assert logits.size(1) == new.size(1)
    for row, at, unstopped in zip(new, first, free[:, 4:], strict=True):
        if at is None:
            assert torch.equal(row, unstopped)
        else:
            assert (row[at:] == eos).all()  # padded after its end
            assert torch.equal(row[: at + 1], unstopped[: at + 1])  # the same tokens up to eos
    assert first[0] is not None and first[0] <= 2
    # a prompt whose rows all stop: generation ends before max_new_tokens
    short, _ = generate(model, prompt[:1], 20, eos_id=eos)
    assert short.size(1) == 4 + first[0] + 1
    with pytest.raises(ValueError, match="eos_id"):
        generate(model, prompt, 5, eos_id=12)


@pytest.mark.parametrize("tie", [False, True])
def test_llama_style_blocks_cache_like_the_others(tie, one_torch_thread):
    torch.manual_seed(8)
    config = GPTConfig(
        vocab_size=30, embed_dim=32, num_heads=4, num_kv_heads=2, norm="rms", feed_forward="swiglu",
        rotary_base=100000.0, tie_embeddings=tie,
    )  # fmt: skip
    model = GPT(config).eval()
    assert (model.lm_head.weight is model.token_embedding.weight) == tie
    prompt = torch.randint(30, (2, 5))
    cached, cl = generate(model, prompt, 10, use_cache=True)
    plain, pl = generate(model, prompt, 10, use_cache=False)
    assert torch.equal(cached, plain)
    torch.testing.assert_close(cl, pl, atol=1e-5, rtol=0)


def test_need_weights_returns_every_layers_causal_weights_and_the_same_logits():
    torch.manual_seed(9)
    model = GPT(GPTConfig(vocab_size=20, embed_dim=32, num_heads=4, num_kv_heads=2, num_layers=3)).eval()
    ids = torch.randint(20, (2, 6))
    with torch.no_grad():
        logits, weights = model(ids, need_weights=True)
        plain = model(ids)
    torch.testing.assert_close(logits, plain, atol=1e-5, rtol=0)
    assert len(weights) == 3 and all(w.shape == (2, 4, 6, 6) for w in weights)
    for w in weights:
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 6))
        assert (w.triu(1) == 0).all()  # causal: nothing above the diagonal


def test_a_pre_hook_on_out_proj_sees_the_concatenated_heads():
    torch.manual_seed(10)
    model = GPT(GPTConfig(vocab_size=20, embed_dim=32, num_heads=4, num_kv_heads=2, num_layers=1)).eval()
    ids = torch.randint(20, (1, 5))
    seen = []

    def zero_head_2(module, inputs):
        (x,) = inputs
        seen.append(x.shape)
        x = x.clone()
        x[..., 2 * 8 : 3 * 8] = 0
        return (x,)

    with torch.no_grad():
        before = model(ids)
        handle = model.blocks[0].attention.projections.out_proj.register_forward_pre_hook(zero_head_2)
        after = model(ids)
        handle.remove()
    assert seen == [torch.Size([1, 5, 32])]
    assert not torch.allclose(before, after)


def test_weights_from_scores_replaces_the_masked_softmax_and_sees_the_scores_mask_and_positions():
    torch.manual_seed(12)
    config = GPTConfig(vocab_size=10, embed_dim=32, num_heads=4, num_kv_heads=2, window=3)
    attention = CausalSelfAttention(config).eval()
    past_x, x = torch.randn(2, 5, 32), torch.randn(2, 3, 32)
    seen = []

    def masked_softmax(scores, may_attend, positions):
        seen.append((scores.shape, may_attend.clone(), positions.clone()))
        return scores.masked_fill(~may_attend, float("-inf")).softmax(dim=-1)

    with torch.no_grad():
        _, past = attention(past_x, torch.arange(5))
        fast, _ = attention(x, torch.arange(5, 8), past)  # SDPA
        attention.weights_from_scores = masked_softmax
        same, _, weights = attention(x, torch.arange(5, 8), past, need_weights=True)
        attention.weights_from_scores = lambda scores, may_attend, positions: torch.full_like(scores, 1 / 8)
        uniform, _ = attention(x, torch.arange(5, 8), past)  # the replacement is used without need_weights too
        attention.weights_from_scores = None
    torch.testing.assert_close(same, fast, atol=1e-6, rtol=0)
    ((shape, may_attend, positions),) = seen
    assert shape == (2, 4, 3, 8) and positions.tolist() == [5, 6, 7]
    assert may_attend.tolist()[0] == [False, False, False, True, True, True, False, False]  # window 3 at 5
    assert not torch.allclose(uniform, fast, atol=1e-3)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 3))


@pytest.mark.parametrize("num_kv_heads,window", [(2, None), (1, 3), (4, None)])
def test_sdpa_with_enable_gqa_equals_copying_each_kv_head_for_its_group(num_kv_heads, window):
    torch.manual_seed(11)
    config = GPTConfig(vocab_size=10, embed_dim=32, num_heads=4, num_kv_heads=num_kv_heads, window=window)
    attention = CausalSelfAttention(config).eval()
    past_x, x = torch.randn(2, 5, 32), torch.randn(2, 3, 32)
    with torch.no_grad():
        _, past = attention(past_x, torch.arange(5))
        fast, fast_kv = attention(x, torch.arange(5, 8), past)  # enable_gqa, the cache never copied
        spelled, spelled_kv, _ = attention(x, torch.arange(5, 8), past, need_weights=True)  # repeat_interleave
    torch.testing.assert_close(fast, spelled, atol=1e-6, rtol=0)
    assert all(torch.equal(a, b) for a, b in zip(fast_kv, spelled_kv, strict=True))
    if 1 < num_kv_heads < 4:  # the other grouping (head i reading kv head i % h_kv) is another model: can fail
        q_rows = attention.projections.q_proj.weight.view(num_kv_heads, 4 // num_kv_heads, 8, 32)
        with torch.no_grad():
            attention.projections.q_proj.weight.copy_(q_rows.transpose(0, 1).reshape(32, 32))
            regrouped, _ = attention(x, torch.arange(5, 8), past)
        assert not torch.allclose(regrouped, spelled, atol=1e-3)


def test_last_only_gives_the_last_positions_logits_with_and_without_a_cache():
    torch.manual_seed(12)
    model = GPT(GPTConfig(vocab_size=20, embed_dim=32, num_heads=4, num_kv_heads=2, num_layers=2)).eval()
    ids = torch.randint(20, (2, 6))
    with torch.no_grad():
        full = model(ids)
        last = model(ids, last_only=True)
        cache = model.new_cache()
        cached = model(ids[:, :4], cache, last_only=True)
        step = model(ids[:, 4:], cache, last_only=True)
    assert last.shape == cached.shape == step.shape == (2, 1, 20)
    torch.testing.assert_close(last, full[:, -1:], atol=1e-6, rtol=0)
    torch.testing.assert_close(cached, full[:, 3:4], atol=1e-5, rtol=0)
    torch.testing.assert_close(step, full[:, -1:], atol=1e-5, rtol=0)
    assert cache.length == 6  # the cache still holds every position's keys and values
