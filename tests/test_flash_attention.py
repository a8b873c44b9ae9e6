"""helpers.flash_attention equals F.scaled_dot_product_attention (float32, 1e-5) on a randomized grid of shapes,
block sizes and masks; the online softmax equals torch.softmax; bad arguments get clear errors.

Speed and memory are measured by benchmarks/attention_cost.py, not here."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import (
    flash_attention,
    online_softmax,
    online_softmax_update,
    scaled_dot_product_attention,
    sliding_window_mask,
)

ATOL = 1e-5

shapes = st.fixed_dictionaries(
    {
        "N": st.integers(1, 2),
        "h": st.integers(1, 3),
        "L": st.integers(1, 40),
        "S": st.integers(1, 40),
        "d": st.sampled_from([1, 4, 8, 16]),
        "dv": st.sampled_from([1, 3, 8]),
        "block": st.integers(1, 17),
        "q_block": st.integers(1, 17),
        "seed": st.integers(0, 10_000),
    }
)


def _qkv(s):
    g = torch.Generator().manual_seed(s["seed"])
    q = torch.randn(s["N"], s["h"], s["L"], s["d"], generator=g) * 2
    k = torch.randn(s["N"], s["h"], s["S"], s["d"], generator=g) * 2
    v = torch.randn(s["N"], s["h"], s["S"], s["dv"], generator=g)
    return q, k, v, g


def _flash(q, k, v, s, **kwargs):
    return flash_attention(q, k, v, block_size=s["block"], query_block_size=s["q_block"], **kwargs)


@settings(max_examples=30, deadline=None)
@given(shapes)
def test_no_mask_and_causal_equal_torch(s):
    q, k, v, _ = _qkv(s)
    for causal in (False, True):
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.testing.assert_close(_flash(q, k, v, s, is_causal=causal), expected, atol=ATOL, rtol=0)


@settings(max_examples=30, deadline=None)
@given(shapes)
def test_padding_and_arbitrary_masks_equal_torch(s):
    q, k, v, g = _qkv(s)
    lengths = torch.randint(0, s["S"] + 1, (s["N"],), generator=g)  # 0: a sentence that is all padding
    padding = (torch.arange(s["S"])[None, :] < lengths[:, None])[:, None, None, :]  # (N, 1, 1, S), True = may attend
    arbitrary = torch.rand(s["L"], s["S"], generator=g) > 0.5  # (L, S), some rows fully blocked
    additive = torch.randn(s["N"], s["h"], s["L"], s["S"], generator=g)  # a float mask is added to the scores
    for mask in (padding, arbitrary, additive):
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        torch.testing.assert_close(_flash(q, k, v, s, attn_mask=mask), expected, atol=ATOL, rtol=0)


@settings(max_examples=40, deadline=None)
@given(shapes, st.integers(1, 12))
def test_sliding_window_equals_torch_with_the_window_mask(s, window):
    q, k, v, _ = _qkv({**s, "S": s["L"]})
    may_attend = ~sliding_window_mask(s["L"], window)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=may_attend)
    torch.testing.assert_close(_flash(q, k, v, s, is_causal=True, window=window), expected, atol=ATOL, rtol=0)


def test_unbatched_and_scaled_inputs_and_default_blocks():
    q, k, v = torch.randn(300, 8), torch.randn(700, 8), torch.randn(700, 5)
    torch.testing.assert_close(
        flash_attention(q, k, v, scale=0.3), F.scaled_dot_product_attention(q, k, v, scale=0.3), atol=ATOL, rtol=0
    )


@settings(max_examples=25, deadline=None)
@given(shapes, st.sampled_from(["none", "causal", "padding", "window", "float"]))
def test_gradients_equal_torch(s, masking):
    q, k, v, g = _qkv({**s, "S": s["L"]} if masking == "window" else s)
    q, k, v = (t.double().requires_grad_() for t in (q, k, v))
    kwargs, reference = {}, {}
    if masking == "causal":
        kwargs = reference = {"is_causal": True}
    elif masking == "padding":
        lengths = torch.randint(1, s["S"] + 1, (s["N"],), generator=g)  # at least one key: torch's gradient is defined
        kwargs = reference = {"attn_mask": (torch.arange(s["S"])[None, :] < lengths[:, None])[:, None, None, :]}
    elif masking == "window":
        kwargs, reference = {"is_causal": True, "window": 3}, {"attn_mask": ~sliding_window_mask(s["L"], 3)}
    elif masking == "float":
        kwargs = reference = {"attn_mask": torch.randn(s["L"], s["S"], generator=g, dtype=torch.float64)}
    grad_out = torch.randn(s["N"], s["h"], s["L"], s["dv"], generator=g, dtype=torch.float64)
    ours = torch.autograd.grad(_flash(q, k, v, s, **kwargs), (q, k, v), grad_out)
    theirs = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, **reference), (q, k, v), grad_out)
    for mine, torchs in zip(ours, theirs, strict=True):
        torch.testing.assert_close(mine, torchs, atol=1e-9, rtol=1e-7)


def test_gradients_in_float32_and_broadcast_batch_dims():
    q = torch.randn(2, 3, 50, 8, requires_grad=True)
    k, v = torch.randn(1, 3, 70, 8, requires_grad=True), torch.randn(3, 70, 5, requires_grad=True)  # shared over N
    ours = torch.autograd.grad(flash_attention(q, k, v, block_size=16, query_block_size=8).sum(), (q, k, v))
    theirs = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v).sum(), (q, k, v))
    for mine, torchs in zip(ours, theirs, strict=True):
        assert mine.shape == torchs.shape
        torch.testing.assert_close(mine, torchs, atol=1e-5, rtol=1e-4)


def test_a_query_with_no_key_gets_zero_gradients():
    q, k, v = (torch.randn(4, 6, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[2] = False  # query 2 may attend to nothing
    flash_attention(q, k, v, attn_mask=mask, block_size=3).sum().backward()
    assert torch.all(q.grad[2] == 0) and torch.isfinite(k.grad).all() and torch.isfinite(v.grad).all()


@pytest.mark.parametrize(
    "kwargs,error",
    [
        ({"is_causal": True, "attn_mask": torch.ones(4, 6, dtype=torch.bool)}, "not both"),
        ({"attn_mask": torch.ones(5, 6, dtype=torch.bool)}, "does not broadcast"),
        ({"attn_mask": torch.ones(4, 6, dtype=torch.int64)}, "bool"),
        ({"block_size": 0}, "positive"),
        ({"block_size": 2.5}, "block_size must be a positive whole number, got 2.5"),
        ({"block_size": "4"}, "block_size must be a positive whole number, got '4'"),
        ({"query_block_size": True}, "query_block_size must be a positive whole number"),
        ({"window": 3}, "is_causal"),
        ({"window": 2.5, "is_causal": True}, r"window \(a number of keys\) must be a positive whole number, got 2.5"),
        ({"scale": float("nan")}, "scale must be a finite number"),
        ({"scale": "0.5"}, "scale must be a finite number"),
    ],
)
def test_bad_arguments_say_what_was_expected(kwargs, error):
    q, k, v = torch.randn(2, 4, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 8)
    with pytest.raises((ValueError, TypeError), match=error):
        flash_attention(q, k, v, **kwargs)


@pytest.mark.parametrize(
    "q,k,v,error",
    [
        (torch.randn(2, 4, 8), torch.randn(3, 6, 8), torch.randn(3, 6, 8), "leading .batch, head. dims"),
        (torch.ones(4, 8, dtype=torch.int64), torch.randn(6, 8), torch.randn(6, 8), "query must be a real floating"),
        (torch.randn(4, 8), torch.randn(6, 8, dtype=torch.complex64), torch.randn(6, 8), "key must be a real floating"),
        (torch.randn(4, 8), torch.randn(6, 8), torch.randn(6, 8, dtype=torch.float64), "one dtype"),
        (torch.randn(4, 0), torch.randn(6, 0), torch.randn(6, 8), "head size d must be at least 1"),
    ],
)
def test_inputs_no_attention_could_combine_are_refused_by_name(q, k, v, error):
    with pytest.raises((ValueError, TypeError), match=error):
        flash_attention(q, k, v)
    with pytest.raises((ValueError, TypeError), match=error):  # the same check as the course's sdpa
        scaled_dot_product_attention(q, k, v)


def test_a_float_mask_that_requires_grad_is_refused_not_silently_ungraded():
    q, k, v = (torch.randn(4, 8, requires_grad=True) for _ in range(3))
    mask = torch.zeros(4, 4, requires_grad=True)
    with pytest.raises(ValueError, match="no gradient for a float attn_mask"):
        flash_attention(q, k, v, attn_mask=mask)
    flash_attention(q, k, v, attn_mask=mask.detach()).sum().backward()  # detached: fine


def test_a_second_derivative_is_refused_rather_than_wrong():
    q, k, v = (torch.randn(1, 5, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    out = flash_attention(q, k, v, block_size=2, query_block_size=2)
    (grad_q,) = torch.autograd.grad(out.pow(2).sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        grad_q.sum().backward()


@pytest.mark.parametrize("block,error", [(0, "positive whole number"), (2.5, "got 2.5"), ("4", "got '4'")])
def test_online_softmax_refuses_block_sizes_that_are_not_counts(block, error):
    with pytest.raises(ValueError, match=error):
        online_softmax(torch.randn(2, 6), block)


def test_online_softmax_refuses_integer_scores():
    with pytest.raises(TypeError, match="real floating-point tensor"):
        online_softmax(torch.arange(6), 2)


def test_mismatched_shapes_are_refused():
    with pytest.raises(ValueError, match="same feature size d"):
        flash_attention(torch.randn(4, 8), torch.randn(6, 7), torch.randn(6, 8))
    with pytest.raises(ValueError, match="same length S"):
        flash_attention(torch.randn(4, 8), torch.randn(6, 8), torch.randn(5, 8))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 30), st.integers(1, 9), st.integers(0, 1000))
def test_online_softmax_equals_softmax(length, block, seed):
    scores = torch.randn(3, length, generator=torch.Generator().manual_seed(seed)) * 20  # large: overflow without max
    torch.testing.assert_close(online_softmax(scores, block), torch.softmax(scores, -1), atol=1e-6, rtol=0)


def test_online_softmax_update_rescales_the_old_sum():
    running_max, running_sum = online_softmax_update(
        torch.tensor([float("-inf")]), torch.zeros(1), torch.tensor([[1.0, 2.0]])
    )
    assert running_max.item() == 2.0
    torch.testing.assert_close(running_sum, torch.exp(torch.tensor([-1.0])) + 1)
    new_max, new_sum = online_softmax_update(running_max, running_sum, torch.tensor([[4.0]]))
    exact = torch.exp(torch.tensor([1.0, 2.0, 4.0]) - 4).sum()
    assert new_max.item() == 4.0 and torch.allclose(new_sum, exact)
    # a row blocked so far (-inf everywhere) stays finite: no NaN
    assert (
        not online_softmax_update(torch.tensor([float("-inf")]), torch.zeros(1), torch.full((1, 2), float("-inf")))[1]
        .isnan()
        .any()
    )


def test_a_second_derivative_of_a_plain_sum_is_refused_by_name():
    q, k, v = (torch.randn(1, 5, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    out = flash_attention(q, k, v, block_size=2, query_block_size=2)
    with pytest.raises(RuntimeError, match="flash_attention has first derivatives only"):
        torch.autograd.grad(out.sum(), q, create_graph=True)
    (first,) = torch.autograd.grad(flash_attention(q, k, v, block_size=2).sum(), q)  # a first derivative: fine
    assert first.shape == q.shape
