"""helpers.attention against PyTorch's own attention: outputs, weights, gradients, state dicts, errors."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from helpers import (
    GroupedQueryAttention,
    MultiHeadAttention,
    causal_mask,
    merge_heads,
    padding_mask,
    repeat_kv_heads,
    scaled_dot_product_attention,
    sdpa_mask_from_padding,
    split_heads,
)
from helpers.attention import MaskConventionWarning, unflatten_heads

ATOL = 1e-5


# ---------------------------------------------------------------------------------------------
# scaled_dot_product_attention vs F.scaled_dot_product_attention
# ---------------------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(
    batch=st.integers(1, 3),
    heads=st.integers(1, 3),
    L=st.integers(1, 7),
    S=st.integers(1, 7),
    d=st.sampled_from([1, 4, 8]),
    dv=st.sampled_from([2, 5]),
    mask_kind=st.sampled_from(["none", "bool", "float", "causal"]),
    scale=st.sampled_from([None, 0.5]),
    seed=st.integers(0, 2**16),
)
def test_sdpa_matches_torch(batch, heads, L, S, d, dv, mask_kind, scale, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, L, d, generator=g, requires_grad=True)
    k = torch.randn(batch, heads, S, d, generator=g, requires_grad=True)
    v = torch.randn(batch, heads, S, dv, generator=g, requires_grad=True)
    kwargs = {"scale": scale}
    if mask_kind == "bool":
        kwargs["attn_mask"] = torch.rand(batch, 1, L, S, generator=g) > 0.3
    elif mask_kind == "float":
        kwargs["attn_mask"] = torch.randn(batch, 1, L, S, generator=g)
    elif mask_kind == "causal":
        kwargs["is_causal"] = True

    with warnings.catch_warnings():  # random masks may block a whole sequence on purpose: not the point here
        warnings.simplefilter("ignore", MaskConventionWarning)
        ours, weights = scaled_dot_product_attention(q, k, v, **kwargs)
    theirs = F.scaled_dot_product_attention(q, k, v, **kwargs)
    torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=1e-4)

    # Weights are probabilities over the keys (rows sum to 1 unless every key is blocked).
    row_sums = weights.sum(-1)
    fully_blocked = row_sums == 0
    assert torch.allclose(row_sums[~fully_blocked], torch.ones(()), atol=1e-5)

    grad = torch.randn_like(ours)
    ours_grads = torch.autograd.grad(ours, (q, k, v), grad)
    theirs_grads = torch.autograd.grad(theirs, (q, k, v), grad)
    for a, b in zip(ours_grads, theirs_grads, strict=True):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=1e-4)


def test_sdpa_weights_are_softmax_of_scaled_scores():
    q, k, v = torch.randn(4, 3), torch.randn(5, 3), torch.randn(5, 2)
    _, weights = scaled_dot_product_attention(q, k, v)
    expected = torch.softmax(q @ k.T / 3**0.5, dim=-1)
    torch.testing.assert_close(weights, expected)


def test_sdpa_fully_blocked_row_attends_to_nothing():
    q, k, v = torch.randn(3, 4, requires_grad=True), torch.randn(5, 4), torch.randn(5, 2)
    allowed = torch.ones(3, 5, dtype=torch.bool)
    allowed[1] = False
    with pytest.warns(MaskConventionWarning):  # a shared (L, S) mask that blocks a query: warned, still computed
        out, weights = scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    assert torch.equal(weights[1], torch.zeros(5)) and torch.equal(out[1], torch.zeros(2))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=allowed))
    out.sum().backward()
    assert torch.isfinite(q.grad).all(), "a fully blocked row must not poison the gradients with NaN"


def test_sdpa_rejects_bad_input():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    with pytest.raises(ValueError, match=r"same feature size d.*\(\.\.\., L, 4\).*\(\.\.\., S, 3\)"):
        scaled_dot_product_attention(q, torch.randn(2, 5, 3), v)
    with pytest.raises(ValueError, match=r"same length S.*key \(\.\.\., 5, d\).*value \(\.\.\., 4, dv\)"):
        scaled_dot_product_attention(q, k, torch.randn(2, 4, 6))
    with pytest.raises(ValueError, match=r"attn_mask of shape \(3, 4\) does not broadcast.*\(2, 3, 5\)"):
        scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match=r"attn_mask must be bool or floating point, got torch\.int64"):
        scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(3, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="either attn_mask or is_causal"):
        scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(3, 5, dtype=torch.bool), is_causal=True)


# ---------------------------------------------------------------------------------------------
# Masks
# ---------------------------------------------------------------------------------------------
def test_causal_mask_blocks_the_future():
    mask = causal_mask(4)
    assert mask.dtype == torch.bool
    assert torch.equal(mask, nn.Transformer.generate_square_subsequent_mask(4) == float("-inf"))
    with pytest.raises(ValueError, match="positive size"):
        causal_mask(0)


def test_padding_mask_marks_padding_true():
    mask = padding_mask([3, 1, 0], max_len=4)
    expected = torch.tensor([[False, False, False, True], [False, True, True, True], [True, True, True, True]])
    assert torch.equal(mask, expected)
    assert padding_mask(torch.tensor([2, 5])).shape == (2, 5)
    with pytest.raises(ValueError, match="exceeds max_len=2"):
        padding_mask([3], max_len=2)
    with pytest.raises(ValueError, match=r"1-D tensor of lengths \(N,\)"):
        padding_mask(torch.ones(2, 2, dtype=torch.long))


# ---------------------------------------------------------------------------------------------
# MultiHeadAttention vs nn.MultiheadAttention
# ---------------------------------------------------------------------------------------------
def make_pair(E, h, seed, **kwargs):
    torch.manual_seed(seed)
    theirs = nn.MultiheadAttention(E, h, **kwargs)
    ours = MultiHeadAttention(E, h, **kwargs)
    ours.load_state_dict(theirs.state_dict())
    return ours, theirs


def test_state_dict_names_and_shapes_match_both_ways():
    for kwargs in ({}, {"kdim": 6, "vdim": 10}, {"bias": False}):
        torch.manual_seed(0)
        theirs = nn.MultiheadAttention(16, 4, **kwargs)
        ours = MultiHeadAttention(16, 4, **kwargs)
        assert {k: v.shape for k, v in ours.state_dict().items()} == {
            k: v.shape for k, v in theirs.state_dict().items()
        }
        theirs.load_state_dict(ours.state_dict())  # ours -> torch
        for name, tensor in ours.state_dict().items():
            assert torch.equal(theirs.state_dict()[name], tensor)
        ours2 = MultiHeadAttention(16, 4, **kwargs)
        ours2.load_state_dict(theirs.state_dict())  # torch -> ours
        for name, tensor in theirs.state_dict().items():
            assert torch.equal(ours2.state_dict()[name], tensor)


def test_parameter_count_matches_torch():
    ours, theirs = make_pair(512, 8, seed=0)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(ours) == count(theirs) == 4 * 512 * 512 + 4 * 512


@settings(max_examples=60, deadline=None)
@given(
    heads_and_dim=st.sampled_from([(1, 4), (2, 8), (4, 8), (3, 12), (8, 16)]),
    N=st.integers(1, 3),
    L=st.integers(1, 6),
    S=st.integers(1, 6),
    batch_first=st.booleans(),
    mode=st.sampled_from(["self", "cross", "kvdim"]),
    bias=st.booleans(),
    attn_mask_kind=st.sampled_from(["none", "bool2d", "float2d", "bool3d", "float3d"]),
    kpm_kind=st.sampled_from(["none", "bool", "float"]),
    need_weights=st.booleans(),
    average=st.booleans(),
    train=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_multihead_matches_torch(
    heads_and_dim, N, L, S, batch_first, mode, bias, attn_mask_kind, kpm_kind, need_weights, average, train, seed
):
    h, E = heads_and_dim
    if mode == "self":
        S = L
    kdim, vdim = (5, 7) if mode == "kvdim" else (None, None)
    ours, theirs = make_pair(E, h, seed, batch_first=batch_first, bias=bias, kdim=kdim, vdim=vdim)
    ours.train(train)
    theirs.train(train)

    g = torch.Generator().manual_seed(seed)
    shape = lambda T, F_: (N, T, F_) if batch_first else (T, N, F_)  # noqa: E731
    query = torch.randn(shape(L, E), generator=g, requires_grad=True)
    if mode == "self":
        key = value = query
    else:
        key = torch.randn(shape(S, kdim or E), generator=g, requires_grad=True)
        value = torch.randn(shape(S, vdim or E), generator=g, requires_grad=True)

    # Keep at least one key visible to every query: torch gives NaN for fully masked rows when it
    # returns weights (ours gives zeros, tested separately).
    attn_mask = None
    if attn_mask_kind != "none":
        lead = (L, S) if attn_mask_kind.endswith("2d") else (N * h, L, S)
        blocked = torch.rand(lead, generator=g) > 0.6
        blocked[..., 0] = False
        attn_mask = blocked if attn_mask_kind.startswith("bool") else torch.randn(lead, generator=g)
    key_padding_mask = None
    if kpm_kind != "none":
        if attn_mask is not None:  # torch deprecates mixing bool and float masks: use attn_mask's kind
            kpm_kind = "bool" if attn_mask.dtype == torch.bool else "float"
        pad = torch.rand(N, S, generator=g) > 0.6
        pad[:, 0] = False
        key_padding_mask = pad if kpm_kind == "bool" else torch.randn(N, S, generator=g)

    kwargs = dict(
        key_padding_mask=key_padding_mask, attn_mask=attn_mask, need_weights=need_weights, average_attn_weights=average
    )
    out_ours, w_ours = ours(query, key, value, **kwargs)
    out_theirs, w_theirs = theirs(query, key, value, **kwargs)
    torch.testing.assert_close(out_ours, out_theirs, atol=ATOL, rtol=1e-4)
    if need_weights:
        torch.testing.assert_close(w_ours, w_theirs, atol=ATOL, rtol=1e-4)
    else:
        assert w_ours is None and w_theirs is None

    # Gradients with respect to inputs and every parameter.
    grad = torch.randn_like(out_ours)
    inputs = [t for t in {id(t): t for t in (query, key, value)}.values()]
    grads_ours = torch.autograd.grad(out_ours, inputs + list(ours.parameters()), grad)
    grads_theirs = torch.autograd.grad(out_theirs, inputs + list(theirs.parameters()), grad)
    for a, b in zip(grads_ours, grads_theirs, strict=True):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=1e-4)


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("average", [True, False])
def test_unbatched_input_matches_torch(need_weights, average):
    ours, theirs = make_pair(8, 2, seed=1)
    x, memory = torch.randn(4, 8), torch.randn(6, 8)
    pad = torch.tensor([False, False, True, False, True, False])
    kwargs = dict(key_padding_mask=pad, need_weights=need_weights, average_attn_weights=average)
    out_ours, w_ours = ours(x, memory, memory, **kwargs)
    out_theirs, w_theirs = theirs(x, memory, memory, **kwargs)
    torch.testing.assert_close(out_ours, out_theirs, atol=ATOL, rtol=1e-4)
    assert out_ours.shape == (4, 8)
    if need_weights:
        torch.testing.assert_close(w_ours, w_theirs, atol=ATOL, rtol=1e-4)
        assert w_ours.shape == ((4, 6) if average else (2, 4, 6))


@pytest.mark.parametrize("need_weights", [True, False])
def test_is_causal_hint_matches_torch(need_weights):
    ours, theirs = make_pair(16, 4, seed=2, batch_first=True)
    x = torch.randn(2, 5, 16)
    mask = causal_mask(5)
    out_ours, _ = ours(x, x, x, attn_mask=mask, is_causal=True, need_weights=need_weights)
    out_theirs, _ = theirs(x, x, x, attn_mask=mask, is_causal=True, need_weights=need_weights)
    torch.testing.assert_close(out_ours, out_theirs, atol=ATOL, rtol=1e-4)
    # Causality: the first position's output cannot depend on later tokens.
    x2 = x.clone()
    x2[:, 1:] = torch.randn(2, 4, 16)
    torch.testing.assert_close(ours(x2, x2, x2, attn_mask=mask)[0][:, 0], out_ours[:, 0], atol=ATOL, rtol=1e-4)
    with pytest.raises(ValueError, match="pass the causal attn_mask too"):
        ours(x, x, x, is_causal=True)


def test_drop_in_inside_torch_transformer_layer():
    """Swapped into nn.TransformerEncoderLayer, our module gives the stock layer's output."""
    torch.manual_seed(3)
    stock = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0, batch_first=True)
    swapped = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0, batch_first=True)
    swapped.load_state_dict(stock.state_dict())
    ours = MultiHeadAttention(16, 4, batch_first=True)
    ours.load_state_dict(stock.self_attn.state_dict())
    swapped.self_attn = ours
    x = torch.randn(2, 5, 16)
    pad = padding_mask([5, 3])
    stock.train()  # training mode: no nested-tensor fast path, which would bypass self_attn
    swapped.train()
    torch.testing.assert_close(
        swapped(x, src_key_padding_mask=pad), stock(x, src_key_padding_mask=pad), atol=ATOL, rtol=1e-4
    )


def test_fully_masked_query_gets_zero_weights_not_nan():
    ours, theirs = make_pair(8, 2, seed=4, batch_first=True)
    x = torch.randn(2, 3, 8)
    pad = torch.tensor([[True, True, True], [False, False, True]])
    out, weights = ours(x, x, x, key_padding_mask=pad)
    assert torch.equal(weights[0], torch.zeros(3, 3))
    assert torch.isfinite(out).all()
    # Where torch does not return weights it agrees with us: zero attention, only the output bias.
    out_theirs, _ = theirs(x, x, x, key_padding_mask=pad, need_weights=False)
    torch.testing.assert_close(out, out_theirs, atol=ATOL, rtol=1e-4)


def test_multihead_rejects_bad_input():
    with pytest.raises(ValueError, match=r"embed_dim \(10\) must be divisible by num_heads \(4\)"):
        MultiHeadAttention(10, 4)
    with pytest.raises(NotImplementedError, match="add_bias_kv"):
        MultiHeadAttention(8, 2, add_bias_kv=True)
    mha = MultiHeadAttention(8, 2, batch_first=True)
    x = torch.randn(2, 3, 8)
    with pytest.raises(ValueError, match=r"key must have 8 features in its last dim, got shape \(2, 3, 6\)"):
        mha(x, torch.randn(2, 3, 6), x)
    with pytest.raises(ValueError, match=r"key must be 3-D \(batched\) like the query, got shape \(3, 8\)"):
        mha(x, torch.randn(3, 8), x)
    with pytest.raises(ValueError, match=r"key and value must have the same batch size and length"):
        mha(x, x, torch.randn(2, 4, 8))
    with pytest.raises(ValueError, match=r"attn_mask should have shape \(3, 3\).*got \(3, 4\)"):
        mha(x, x, x, attn_mask=torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"attn_mask should have shape \(4, 3, 3\).*got \(2, 3, 3\)"):
        mha(x, x, x, attn_mask=torch.ones(2, 3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"key_padding_mask should have shape \(N, S\) = \(2, 3\), got \(3, 2\)"):
        mha(x, x, x, key_padding_mask=torch.ones(3, 2, dtype=torch.bool))
    with pytest.raises(TypeError, match=r"key_padding_mask must be bool \(True = blocked\).*torch.int64"):
        mha(x, x, x, key_padding_mask=torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"unbatched input needs a 1-D key_padding_mask \(S,\)"):
        mha(x[0], x[0], x[0], key_padding_mask=torch.ones(1, 3, dtype=torch.bool))


# ---------------------------------------------------------------------------------------------
# Grouped-query attention
# ---------------------------------------------------------------------------------------------
def gqa_from_mha(mha: MultiHeadAttention, num_kv_heads: int) -> GroupedQueryAttention:
    gqa = GroupedQueryAttention(mha.embed_dim, mha.num_heads, num_kv_heads)
    w_q, w_k, w_v = mha.in_proj_weight.detach().chunk(3)
    b_q, b_k, b_v = mha.in_proj_bias.detach().chunk(3)
    with torch.no_grad():
        for proj, w, b in ((gqa.q_proj, w_q, b_q), (gqa.k_proj, w_k, b_k), (gqa.v_proj, w_v, b_v)):
            proj.weight.copy_(w)
            proj.bias.copy_(b)
        gqa.out_proj.load_state_dict(mha.out_proj.state_dict())
    return gqa


@pytest.mark.parametrize("need_weights", [True, False])
def test_gqa_with_all_kv_heads_is_multihead(need_weights):
    torch.manual_seed(5)
    mha = MultiHeadAttention(16, 4, batch_first=True)
    gqa = gqa_from_mha(mha, num_kv_heads=4)
    q, kv = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    pad = padding_mask([7, 4])
    out_mha, w_mha = mha(q, kv, kv, key_padding_mask=pad, need_weights=True, average_attn_weights=False)
    out_gqa, w_gqa = gqa(q, kv, kv, key_padding_mask=pad, need_weights=need_weights, average_attn_weights=False)
    torch.testing.assert_close(out_gqa, out_mha, atol=ATOL, rtol=1e-4)
    if need_weights:
        torch.testing.assert_close(w_gqa, w_mha, atol=ATOL, rtol=1e-4)


def test_multi_query_shares_one_kv_head_across_all_query_heads():
    torch.manual_seed(6)
    mqa = GroupedQueryAttention(16, 4, num_kv_heads=1)
    assert mqa.k_proj.out_features == mqa.v_proj.out_features == 4  # one head of size d = 16 / 4
    # Every query head attends with the same keys: same query projection per head -> same weights.
    with torch.no_grad():
        mqa.q_proj.weight.copy_(mqa.q_proj.weight[:4].repeat(4, 1))
        mqa.q_proj.bias.copy_(mqa.q_proj.bias[:4].repeat(4))
    x = torch.randn(1, 5, 16)
    _, w = mqa(x, x, x, need_weights=True, average_attn_weights=False)
    for head in range(1, 4):
        torch.testing.assert_close(w[:, head], w[:, 0])


def test_gqa_groups_match_repeated_kv_multihead():
    """2 kv heads for 4 query heads equals MHA whose kv projections repeat each kv head twice."""
    torch.manual_seed(7)
    gqa = GroupedQueryAttention(16, 4, num_kv_heads=2)
    mha = MultiHeadAttention(16, 4, batch_first=True)
    d = 4
    expand = lambda w: w.view(2, d, *w.shape[1:]).repeat_interleave(2, dim=0).reshape(16, *w.shape[1:])  # noqa: E731
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([gqa.q_proj.weight, expand(gqa.k_proj.weight), expand(gqa.v_proj.weight)]))
        mha.in_proj_bias.copy_(torch.cat([gqa.q_proj.bias, expand(gqa.k_proj.bias), expand(gqa.v_proj.bias)]))
        mha.out_proj.load_state_dict(gqa.out_proj.state_dict())
    x = torch.randn(2, 6, 16)
    torch.testing.assert_close(gqa(x, x, x)[0], mha(x, x, x)[0], atol=ATOL, rtol=1e-4)


def test_gqa_kv_cache_shrinks_with_fewer_kv_heads():
    sizes = {g: GroupedQueryAttention(512, 8, g).kv_cache_numel(seq_len=100, batch_size=2) for g in (8, 2, 1)}
    assert sizes[8] == 2 * 2 * 100 * 512
    assert sizes[8] == 4 * sizes[2] == 8 * sizes[1]


def test_gqa_rejects_bad_groups():
    with pytest.raises(ValueError, match=r"num_heads \(8\) must be a multiple of num_kv_heads \(3\)"):
        GroupedQueryAttention(64, 8, 3)
    with pytest.raises(ValueError, match=r"embed_dim \(30\) must be divisible by num_heads \(8\)"):
        GroupedQueryAttention(30, 8, 2)
    with pytest.raises(ValueError, match=r"batch-first 3-D inputs"):
        GroupedQueryAttention(16, 4, 2)(torch.randn(5, 16), torch.randn(5, 16), torch.randn(5, 16))


@pytest.mark.parametrize("mask_kind", ["none", "bool", "float"])
def test_sdpa_without_autograd_matches_torch(mask_kind):
    """Without autograd softmax runs in place; results must not change (fully blocked rows included)."""
    torch.manual_seed(8)
    q, k, v = torch.randn(2, 3, 6, 4), torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 2)
    allowed = torch.rand(6, 5) > 0.4
    allowed[2] = False
    allowed = allowed.expand(2, 1, 6, 5)  # per sequence: a blocked query here is deliberate, no warning
    mask = {"none": None, "bool": allowed, "float": torch.zeros(6, 5).masked_fill(~allowed, float("-inf"))}[mask_kind]
    with_grad_out, with_grad_weights = scaled_dot_product_attention(q.requires_grad_(), k, v, attn_mask=mask)
    with torch.inference_mode():
        out, weights = scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q.detach(), k, v, attn_mask=mask))
    torch.testing.assert_close(weights, with_grad_weights.detach())
    torch.testing.assert_close(out, with_grad_out.detach())


def test_sdpa_mask_from_padding_flips_and_broadcasts_over_queries():
    pad = padding_mask([3, 1], max_len=3)  # (N, S), True = padding
    mask = sdpa_mask_from_padding(pad)
    assert mask.shape == (2, 1, 3) and torch.equal(mask[:, 0], ~pad)
    q, k, v = torch.randn(2, 4, 8), torch.randn(2, 3, 8), torch.randn(2, 3, 8)
    mha_style = torch.zeros(2, 1, 3).masked_fill(pad[:, None, :], float("-inf"))
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, attn_mask=mask)[0],
        F.scaled_dot_product_attention(q, k, v, attn_mask=mha_style),
    )
    with pytest.raises(ValueError, match=r"boolean \(N, S\) key padding mask, got torch.float32 of shape \(2, 3\)"):
        sdpa_mask_from_padding(pad.float())


# ---------------------------------------------------------------------------------------------
# Checks as F.scaled_dot_product_attention does them; GQA and MHA refuse bad input clearly
# ---------------------------------------------------------------------------------------------
def _torch_refuses(*args, **kwargs) -> bool:
    try:
        F.scaled_dot_product_attention(*args, **kwargs)
    except RuntimeError:
        return True
    return False


def test_sdpa_mask_that_would_add_a_batch_dim_is_refused_like_torch():
    q, k, v = torch.randn(3, 8), torch.randn(4, 8), torch.randn(4, 8)
    mask = torch.ones(2, 3, 4, dtype=torch.bool)
    assert _torch_refuses(q, k, v, attn_mask=mask)
    with pytest.raises(ValueError, match=r"attn_mask of shape \(2, 3, 4\) does not broadcast.*\(3, 4\).*more dims"):
        scaled_dot_product_attention(q, k, v, attn_mask=mask)
    with pytest.raises(ValueError, match=r"attn_mask of shape \(3, 2, 3, 4\)"):
        scaled_dot_product_attention(q.expand(2, 3, 8), k, v, attn_mask=torch.ones(3, 2, 3, 4, dtype=torch.bool))
    # what torch accepts, we accept: a mask of size 1 (or absent) in a batch dim broadcasts
    out, _ = scaled_dot_product_attention(q.expand(2, 3, 8), k, v, attn_mask=torch.ones(1, 3, 4, dtype=torch.bool))
    assert out.shape == (2, 3, 8)


def test_sdpa_batch_mismatch_is_a_clear_error_and_size_one_broadcasts_like_torch():
    q, k, v = torch.randn(2, 3, 8), torch.randn(3, 4, 8), torch.randn(3, 4, 8)
    assert _torch_refuses(q, k, v)
    with pytest.raises(ValueError, match=r"leading \(batch, head\) dims.*query \(2, 3, 8\).*key \(3, 4, 8\)"):
        scaled_dot_product_attention(q, k, v)
    with pytest.raises(ValueError, match=r"value \(3, 4, 8\)"):
        scaled_dot_product_attention(q, k[:2], v)
    for q, k, v in [  # what torch broadcasts
        (torch.randn(1, 3, 8), torch.randn(2, 4, 8), torch.randn(2, 4, 8)),
        (torch.randn(2, 4, 3, 8), torch.randn(2, 1, 4, 8), torch.randn(2, 1, 4, 8)),
        (torch.randn(3, 8), torch.randn(2, 4, 8), torch.randn(2, 4, 8)),
    ]:
        torch.testing.assert_close(scaled_dot_product_attention(q, k, v)[0], F.scaled_dot_product_attention(q, k, v))


def test_causal_mask_passed_to_sdpa_warns_with_the_convention_and_the_cause():
    q = k = v = torch.randn(2, 5, 8)
    with pytest.warns(MaskConventionWarning, match=r"True where a query MAY attend.*causal_mask.*True = blocked"):
        scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(5))
    with pytest.warns(MaskConventionWarning, match="every query of some sequence"):  # an inverted padding mask
        scaled_dot_product_attention(q, k, v, attn_mask=padding_mask([5, 3])[:, None, :])


def test_correct_masks_and_the_packages_own_calls_do_not_warn():
    torch.manual_seed(0)
    q = k = v = torch.randn(2, 5, 8)
    lengths = [5, 3]
    may_attend = ~causal_mask(5) & sdpa_mask_from_padding(padding_mask(lengths))  # (N, L, S)
    may_attend_queries = may_attend & ~padding_mask(lengths)[:, :, None]  # padding queries blocked: legitimate
    mha = MultiHeadAttention(8, 2, batch_first=True)
    gqa = GroupedQueryAttention(8, 2, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scaled_dot_product_attention(q, k, v, attn_mask=~causal_mask(5))
        scaled_dot_product_attention(q, k, v, is_causal=True)
        scaled_dot_product_attention(q, k, v, attn_mask=may_attend)
        scaled_dot_product_attention(q, k, v, attn_mask=may_attend_queries)
        fully_padded = torch.tensor([[True] * 5, [False, False, False, True, True]])  # a whole padded row
        for module in (mha, gqa):
            module(q, k, v, key_padding_mask=fully_padded, attn_mask=causal_mask(5), need_weights=True)


def test_gqa_refuses_bad_input_like_multihead():
    with pytest.raises(ValueError, match="num_heads must be positive, got 0"):
        GroupedQueryAttention(16, 0, 1)
    with pytest.raises(ValueError, match="num_kv_heads must be positive, got 0"):
        GroupedQueryAttention(16, 4, 0)
    with pytest.raises(ValueError, match=r"dropout .* expected \[0, 1\), got 1.5"):
        GroupedQueryAttention(16, 4, 2, dropout=1.5)
    gqa = GroupedQueryAttention(16, 4, 2)
    x = torch.randn(2, 3, 16)
    with pytest.raises(ValueError, match=r"query must have 16 features in its last dim, got shape \(2, 3, 12\)"):
        gqa(torch.randn(2, 3, 12), x, x)
    with pytest.raises(ValueError, match=r"key and value must have the same batch size and length"):
        gqa(x, x, torch.randn(2, 4, 16))
    with pytest.raises(ValueError, match=r"query and key must have the same batch size, got 2 and 3$"):
        gqa(x, torch.randn(3, 4, 16), torch.randn(3, 4, 16))
    with pytest.raises(ValueError, match=r"got 5 and 7.*reads inputs as \(N, T, E\).*transpose them$"):
        gqa(torch.randn(5, 2, 16), torch.randn(7, 2, 16), torch.randn(7, 2, 16))  # sequence-first tensors


def test_multihead_constructor_and_dtype_checks():
    with pytest.raises(ValueError, match=r"dropout .* expected \[0, 1\), got 1.0"):
        MultiHeadAttention(8, 2, dropout=1.0)
    with pytest.raises(ValueError, match=r"got -0.1"):
        MultiHeadAttention(8, 2, dropout=-0.1)
    with pytest.raises(TypeError, match=r"embed_dim must be an integer, got float 8\.0"):
        MultiHeadAttention(8.0, 2)
    with pytest.raises(TypeError, match="num_heads must be an integer, got str '2'"):
        MultiHeadAttention(8, "2")
    half = MultiHeadAttention(8, 2, batch_first=True, dtype=torch.float16)
    x = torch.randn(2, 3, 8)
    with pytest.raises(TypeError, match=r"query has dtype torch.float32 but the module's weights are torch.float16"):
        half(x, x, x)


def test_batch_first_mixup_is_named():
    seq_first = MultiHeadAttention(8, 2)  # batch_first=False: (T, N, E)
    query, memory = torch.randn(3, 5, 8), torch.randn(3, 7, 8)  # batch-first (N=3, L=5) and (N=3, S=7)
    with pytest.raises(ValueError, match=r"got 5 and 7.*reads inputs as \(T, N, E\).*batch_first=True"):
        seq_first(query, memory, memory)
    batch_first = MultiHeadAttention(8, 2, batch_first=True)
    with pytest.raises(ValueError, match=r"got 5 and 7.*batch_first=False"):
        batch_first(query.transpose(0, 1), memory.transpose(0, 1), memory.transpose(0, 1))
    with pytest.raises(ValueError, match=r"got 3 and 4$"):  # no other reading fits: no hint
        batch_first(torch.randn(3, 5, 8), torch.randn(4, 7, 8), torch.randn(4, 7, 8))


# --- the one place heads are split, merged and shared -------------------------------------------------
def test_split_and_merge_heads_are_inverse_and_slice_features_by_head():
    x = torch.randn(2, 5, 12)
    heads = split_heads(x, 3)  # (N, h, T, d)
    assert heads.shape == (2, 3, 5, 4)
    torch.testing.assert_close(heads[:, 1], x[..., 4:8])  # head 1 owns features 4..7
    torch.testing.assert_close(merge_heads(heads), x)


@pytest.mark.parametrize("bad", [0, 5, -3, True, 2.0])
def test_split_heads_refuses_heads_that_do_not_divide_the_features(bad):
    with pytest.raises(ValueError, match="num_heads"):
        split_heads(torch.randn(2, 5, 12), bad)


def test_unflatten_heads_cuts_the_features_into_the_heads_blocks_in_place():
    x = torch.randn(2, 5, 12)
    blocks = unflatten_heads(x, 3)  # (N, T, h, d)
    assert blocks.shape == (2, 5, 3, 4) and blocks.data_ptr() == x.data_ptr()  # a view
    torch.testing.assert_close(blocks, split_heads(x, 3).transpose(1, 2))  # split_heads with T before h
    torch.testing.assert_close(blocks.flatten(-2), x)
    projection = nn.Linear(12, 7, bias=False)  # an output projection: weight (E, h·d) = (7, 12)
    columns = unflatten_heads(projection.weight, 3)  # (E, h, d): head 1's columns at [:, 1]
    torch.testing.assert_close(columns[:, 1], projection.weight[:, 4:8])


@pytest.mark.parametrize("bad", [0, 5, -3, True, 2.0])
def test_unflatten_heads_refuses_heads_that_do_not_divide_the_features(bad):
    with pytest.raises(ValueError, match="num_heads must be a positive divisor of the 12 features"):
        unflatten_heads(torch.randn(2, 5, 12), bad)


def test_split_and_merge_heads_refuse_the_wrong_rank():
    with pytest.raises(ValueError, match=r"\(N, T, h·d\)"):
        split_heads(torch.randn(5, 12), 3)
    with pytest.raises(ValueError, match=r"\(N, h, T, d\)"):
        merge_heads(torch.randn(5, 12))


def test_repeat_kv_heads_matches_sdpa_enable_gqa():
    q, k, v = torch.randn(2, 6, 4, 8), torch.randn(2, 2, 7, 8), torch.randn(2, 2, 7, 8)
    expected = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    got = F.scaled_dot_product_attention(q, repeat_kv_heads(k, 3), repeat_kv_heads(v, 3))
    torch.testing.assert_close(got, expected)
    assert repeat_kv_heads(k, 1) is k
    with pytest.raises(ValueError, match="groups"):
        repeat_kv_heads(k, 0)
