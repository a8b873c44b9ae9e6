"""Lesson 15's top-k attention: the gathering kernel (helpers.kernels.sparse_attention) equals the masked dense form
(helpers.kernels.topk_reference), which itself equals F.scaled_dot_product_attention where a selection makes it
dense (every past key selected = causal attention)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers.kernels import TRITON_MISSING, triton_available
from helpers.kernels.topk_reference import topk_attention_dense, topk_attention_gather
from helpers.selection import selected_mask

if not triton_available():  # asked without importing Triton: its first import must follow the runtime's decision
    pytest.skip(TRITON_MISSING, allow_module_level=True)

from helpers.kernels import runtime
from helpers.kernels.sparse_attention import sparse_attention_triton

DEVICE = runtime.DEVICE


def random_selection(N, h_idx, T, S, k, seed=0):
    """k distinct keys per query, in random order, every third slot -1 ("no key"), query 0 of head 0 with none."""
    gen = torch.Generator().manual_seed(seed)
    indices = torch.rand(N, h_idx, T, S, generator=gen).argsort(-1)[..., :k]
    indices[..., ::3] = -1
    indices[0, 0, 0] = -1
    return indices.to(DEVICE)


def qkv(N, h, h_kv, T, S, d, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(N, heads, length, d, generator=gen).to(DEVICE) for heads, length in
                 ((h, T), (h_kv, S), (h_kv, S)))  # fmt: skip


@pytest.mark.parametrize(
    ("N", "h", "h_kv", "T", "S", "d", "k", "shared"),
    [
        (1, 2, 2, 40, 40, 16, 8, False),  # each head its own selection
        (2, 4, 2, 37, 50, 32, 20, True),  # one selection per key/value head, shared by its g = 2 query heads
        (1, 4, 1, 33, 33, 16, 5, False),  # k not a power of two, multi-query
        (1, 1, 1, 20, 64, 128, 40, False),  # d = 128, k > one chunk of 16
    ],
)
def test_the_kernel_equals_the_masked_dense_form(N, h, h_kv, T, S, d, k, shared):
    q, keys, values = qkv(N, h, h_kv, T, S, d)
    indices = random_selection(N, h_kv if shared else h, T, S, k)
    got = sparse_attention_triton(q, keys, values, indices)
    expected = topk_attention_dense(q, keys, values, indices)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    assert got[0, 0, 0].abs().max() == 0  # the query with no key at all reads nothing
    torch.testing.assert_close(topk_attention_gather(q, keys, values, indices), expected, atol=1e-5, rtol=0)


def test_selecting_every_past_key_is_causal_attention():
    """An independent check of the dense form and the kernel: indices 0 .. t for query t (-1 after) is SDPA with
    is_causal=True, whatever order the indices come in."""
    T, d = 24, 16
    q, keys, values = qkv(1, 2, 2, T, T, d)
    past = torch.arange(T)[None, :].expand(T, T)
    indices = torch.where(past <= torch.arange(T)[:, None], past, -1).flip(-1)  # (T, T): -1s first, then t .. 0
    indices = indices.expand(1, 2, T, T).contiguous().to(DEVICE)
    expected = F.scaled_dot_product_attention(q, keys, values, is_causal=True)
    torch.testing.assert_close(topk_attention_dense(q, keys, values, indices), expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(sparse_attention_triton(q, keys, values, indices), expected, atol=1e-5, rtol=0)


def test_the_mask_marks_exactly_the_selected_keys():
    indices = torch.tensor([[[[2, -1, 0], [-1, -1, -1]]]])  # (1, 1, 2, 3)
    assert selected_mask(indices, 4).tolist() == [[[[True, False, True, False], [False, False, False, False]]]]


def test_int32_indices_and_half_precision_are_read():
    q, keys, values = qkv(1, 2, 2, 20, 30, 16)
    indices = random_selection(1, 2, 20, 30, 6)
    expected = topk_attention_dense(q, keys, values, indices)
    got = sparse_attention_triton(q.half(), keys.half(), values.half(), indices.int())
    assert got.dtype == torch.float16
    torch.testing.assert_close(got.float(), expected, atol=1e-2, rtol=0)


@pytest.mark.parametrize(
    ("change", "error", "words"),
    [
        (lambda i: i.float(), TypeError, "int32 or int64"),
        (lambda i: i[:, :, :5], ValueError, r"\(N, h_idx, T, k\)"),
        (lambda i: i.clamp(max=0) + 30, ValueError, "S - 1"),
        (lambda i: i - 5, ValueError, "-1 for no key"),
        (lambda i: torch.zeros_like(i), ValueError, "distinct"),
    ],
)
def test_indices_that_break_the_convention_are_refused(change, error, words):
    q, keys, values = qkv(1, 2, 2, 20, 30, 16)
    indices = random_selection(1, 2, 20, 30, 6)
    with pytest.raises(error, match=words):
        sparse_attention_triton(q, keys, values, change(indices))
    with pytest.raises(error, match=words):
        topk_attention_dense(q, keys, values, change(indices))


def test_inputs_that_want_gradients_are_refused_rather_than_silently_detached():
    q, keys, values = qkv(1, 2, 2, 20, 30, 16)
    with pytest.raises(RuntimeError, match="no backward kernel"):
        sparse_attention_triton(q.requires_grad_(), keys, values, random_selection(1, 2, 20, 30, 6))


def test_an_explicit_scale_is_used_and_a_nan_one_refused():
    q, keys, values = qkv(1, 2, 2, 20, 30, 16)
    indices = random_selection(1, 2, 20, 30, 6)
    got = sparse_attention_triton(q, keys, values, indices, scale=0.5)
    torch.testing.assert_close(got, topk_attention_dense(q, keys, values, indices, scale=0.5), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="finite"):
        sparse_attention_triton(q, keys, values, indices, scale=float("nan"))
