"""The attention core (helpers.attention.attend, masked_softmax, AttentionCore) against PyTorch's own attention,
and its fast paths against the teaching code they replace when no weights are wanted."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.attention import (
    AttentionCore,
    GroupedQueryAttention,
    MultiHeadAttention,
    attend,
    causal_mask,
    fused_attention,
    fused_self_attention_heads,
    masked_softmax,
    masked_softmax_,
    merge_heads,
    repeat_kv_heads,
    scaled_dot_product_attention,
    split_heads,
)
from helpers.gpt import GPT, GPTConfig

N, L, S, D = 2, 5, 7, 8


def _heads(h: int, h_kv: int, dv: int = D, seed: int = 0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(N, h, L, D, generator=g, dtype=dtype)
    k = torch.randn(N, h_kv, S, D, generator=g, dtype=dtype)
    v = torch.randn(N, h_kv, S, dv, generator=g, dtype=dtype)
    return q, k, v


def _mask(kind: str, h: int):
    g = torch.Generator().manual_seed(3)
    may_attend = torch.rand(N, 1, L, S, generator=g) > 0.3
    may_attend[..., 0] = True  # every query keeps one key: torch's fused kernel gives NaN for an empty row
    if kind == "none":
        return None
    if kind == "bool":
        return may_attend
    return torch.zeros(N, h, L, S, dtype=torch.float64).masked_fill(~may_attend, float("-inf")) + 0.1


@pytest.mark.parametrize("h, h_kv", [(4, 4), (6, 2), (6, 3), (4, 1)])
@pytest.mark.parametrize("kind", ["none", "bool", "float"])
@pytest.mark.parametrize("need_weights", [False, True])
def test_attend_equals_torch_sdpa_for_every_grouping_and_mask(h, h_kv, kind, need_weights):
    q, k, v = _heads(h, h_kv, dv=5)
    mask = _mask(kind, h)
    out, weights = attend(q, k, v, mask, need_weights=need_weights)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=h != h_kv)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)
    assert out.shape == (N, h, L, 5)
    if need_weights:
        assert weights.shape == (N, h, L, S)
        torch.testing.assert_close(weights.sum(-1), torch.ones(N, h, L, dtype=weights.dtype))
        # weights @ values, with each key/value head copied for its group, is the output
        torch.testing.assert_close(weights @ repeat_kv_heads(v, h // h_kv), out, atol=1e-12, rtol=0)
    else:
        assert weights is None


def test_attend_with_explicit_scale_matches_torch():
    q, k, v = _heads(4, 2)
    out, _ = attend(q, k, v, need_weights=True, scale=0.3)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=0.3, enable_gqa=True))


def test_attend_behind_projections_equals_nn_multihead_attention():
    torch.manual_seed(0)
    E, h = 16, 4
    reference = nn.MultiheadAttention(E, h, batch_first=True).eval()
    x, memory = torch.randn(N, L, E), torch.randn(N, S, E)
    w_q, w_k, w_v = reference.in_proj_weight.split(E)
    b_q, b_k, b_v = reference.in_proj_bias.split(E)
    q = split_heads(F.linear(x, w_q, b_q), h)
    k, v = split_heads(F.linear(memory, w_k, b_k), h), split_heads(F.linear(memory, w_v, b_v), h)
    out, weights = attend(q, k, v, need_weights=True)
    expected, expected_weights = reference(x, memory, memory, average_attn_weights=False)
    torch.testing.assert_close(reference.out_proj(merge_heads(out)), expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(weights, expected_weights, atol=1e-6, rtol=0)


def test_masked_softmax_blocks_keys_zeroes_empty_rows_and_its_in_place_twin_agrees():
    scores = torch.randn(2, 3, 4, 6)
    may_attend = torch.rand(4, 6) > 0.4
    may_attend[1] = False  # a query with no key
    may_attend[0, 0] = True
    weights = masked_softmax(scores, may_attend)
    assert (weights[..., ~may_attend] == 0).all() and (weights[:, :, 1] == 0).all()
    rows = [0, 2, 3]
    expected = scores.masked_fill(~may_attend, float("-inf")).softmax(-1)[:, :, rows]
    torch.testing.assert_close(weights[:, :, rows], expected)
    copy = scores.clone()
    in_place = masked_softmax_(copy, may_attend)
    assert in_place.data_ptr() == copy.data_ptr()  # written over the scores, no second (…, L, S) tensor
    assert torch.equal(in_place, weights)
    assert torch.equal(masked_softmax_(scores.clone()), masked_softmax(scores))


def test_the_teaching_sdpa_leaves_its_inputs_alone_and_equals_the_core():
    q, k, v = _heads(4, 4, seed=2)
    before = [t.clone() for t in (q, k, v)]
    mask = ~causal_mask(S)[:L]
    with torch.no_grad():
        out, weights = scaled_dot_product_attention(q, k, v, attn_mask=mask)
        core_out, core_weights = attend(q, k, v, mask, need_weights=True)
    assert all(torch.equal(a, b) for a, b in zip(before, (q, k, v), strict=True))
    torch.testing.assert_close(out, core_out, atol=1e-12, rtol=0)
    torch.testing.assert_close(weights, core_weights, atol=1e-12, rtol=0)


def test_fused_attention_and_fused_qkv_equal_the_spelled_out_path():
    torch.manual_seed(1)
    E, h = 24, 3
    mha = MultiHeadAttention(E, h, batch_first=True).double()
    x = torch.randn(N, L, E, dtype=torch.float64)
    fused = fused_self_attention_heads(x, mha.in_proj_weight, mha.in_proj_bias, h)
    plain = (mha.project_query(x), *mha.project_key_value(x, x))
    for a, b in zip(fused, plain, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    q, k, v = plain
    torch.testing.assert_close(fused_attention(q, k, v), attend(q, k, v, need_weights=True)[0], atol=1e-12, rtol=0)
    fast, none = mha(x, x, x, need_weights=False)  # the fast path (fused QKV, fused kernel)
    slow, _ = mha(x, x, x, need_weights=True)  # the teaching path
    assert none is None
    torch.testing.assert_close(fast, slow, atol=1e-12, rtol=0)


def test_grouped_query_attention_without_weights_reads_the_kv_heads_in_place(monkeypatch):
    """No weights wanted: the core must not copy each key/value head g times (torch's enable_gqa reads them)."""
    torch.manual_seed(2)
    gqa = GroupedQueryAttention(16, 4, 2)
    x = torch.randn(N, L, 16)
    calls = []
    monkeypatch.setattr(torch.Tensor, "repeat_interleave", lambda *a, **k: calls.append(a) or pytest.fail("copied"))
    gqa(x, x, x)
    assert calls == []


class UniformAttention(GroupedQueryAttention):
    """A variant in one method: every allowed key gets the same weight (scores ignored)."""

    def scores_to_weights(self, scores, mask, positions):
        return masked_softmax(torch.zeros_like(scores), mask)


def test_a_variant_is_one_overridden_method_and_the_state_dict_stays_the_front_ends():
    torch.manual_seed(3)
    plain, uniform = GroupedQueryAttention(16, 4, 2), UniformAttention(16, 4, 2)
    uniform.load_state_dict(plain.state_dict())
    assert list(uniform.state_dict()) == list(plain.state_dict()) == list(GroupedQueryAttention(16, 4, 2).state_dict())
    x = torch.randn(N, L, 16)
    future = causal_mask(L)  # True = blocked, the front end's convention
    out, weights = uniform(x, x, x, attn_mask=future, need_weights=True, average_attn_weights=False)
    allowed = (~future).double()
    torch.testing.assert_close(weights, (allowed / allowed.sum(-1, keepdim=True)).float().expand(N, 4, L, L))
    values = split_heads(uniform.v_proj(x), 2)  # (N, h_kv, L, d)
    running_mean = values.cumsum(2) / torch.arange(1, L + 1).view(1, 1, L, 1)
    expected = uniform.out_proj(merge_heads(repeat_kv_heads(running_mean, 2)))
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)
    # the override runs even when no weights are asked for (the fused kernel would ignore it)
    torch.testing.assert_close(uniform(x, x, x, attn_mask=future)[0], out)


def test_every_front_end_is_an_attention_core_and_the_hook_reaches_each():
    from helpers.analysis.circuits import AttentionOnlyTransformer, HeadAttention
    from helpers.layers import EncoderLayer

    torch.manual_seed(4)
    seen = []

    def uniform(scores, mask, positions):
        seen.append(tuple(scores.shape))
        return masked_softmax(torch.zeros_like(scores), mask)

    gpt = GPT(GPTConfig(vocab_size=10, embed_dim=16, num_heads=4, num_kv_heads=2, num_layers=1))
    toy = AttentionOnlyTransformer(10, 16, 4, num_layers=1, max_len=8)
    modules = [MultiHeadAttention(16, 4), GroupedQueryAttention(16, 4, 2), gpt.blocks[0].attention, toy.layers[0]]
    assert all(isinstance(m, AttentionCore) for m in modules) and isinstance(toy.layers[0], HeadAttention)
    assert isinstance(EncoderLayer(16, 4).self_attn, AttentionCore)
    x = torch.randn(1, 6, 16)
    for module in modules:
        module.weights_from_scores = uniform
    modules[0](x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1))
    modules[1](x, x, x)
    gpt(torch.randint(10, (1, 6)))
    _, weights = toy.layers[0](x)
    assert seen == [(1, 4, 6, 6)] * 4
    torch.testing.assert_close(weights.sum(-1), torch.ones(1, 4, 6))
    torch.testing.assert_close(weights[0, 0, 5], torch.full((6,), 1 / 6))


def test_attend_refuses_heads_that_do_not_group():
    q, k, v = _heads(4, 3)
    with pytest.raises(ValueError, match=r"4 query heads must be a multiple"):
        attend(q, k, v)
    with pytest.raises(ValueError, match=r"per-head tensors query \(N, h, L, d\)"):
        attend(q[0], k[0], v[0])
    with pytest.raises(TypeError, match=r"key must be a torch\.Tensor"):
        attend(q, [1], v)
    q, k, v = _heads(4, 2)
    with pytest.raises(ValueError, match="same length S"):
        attend(q, k, v[:, :, :3])
