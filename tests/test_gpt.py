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
