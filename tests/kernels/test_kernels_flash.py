"""The FlashAttention-2 kernels (helpers.kernels.flash_attention) equal F.scaled_dot_product_attention, forward and
backward, over a table of shapes, here under Triton's CPU interpreter (compiled where a GPU runs the suite).

Shapes are small (the interpreter runs each program in Python) but each one crosses what it is there for: T below,
at and above the block (BM = BN = 32 interpreted), d from 16 to 128, causal and not, h_kv < h, a window, S != T."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers.kernels import TRITON_MISSING, triton_available

if not triton_available():  # asked without importing Triton: its first import must follow the runtime's decision
    pytest.skip(TRITON_MISSING, allow_module_level=True)

from helpers.kernels import runtime
from helpers.kernels.flash_attention import flash_attention_triton
from helpers.kernels.flash_forward import flash_forward
from helpers.masks import sliding_window_mask

DEVICE = runtime.DEVICE

# (N, h, h_kv, T, S, d, causal, window): T below (20), at (32) and above (45, 70) the 32-query block
SHAPES = [
    (1, 2, 2, 20, 20, 16, False, None),
    (1, 2, 2, 32, 32, 16, True, None),
    (2, 2, 2, 45, 45, 32, True, None),
    (1, 4, 2, 45, 45, 16, False, None),  # grouped-query heads, g = 2
    (1, 4, 1, 37, 37, 32, True, None),  # multi-query: every query head reads the one key/value head
    (1, 2, 1, 70, 70, 16, True, 9),  # a window narrower than a block, across blocks
    (1, 2, 2, 40, 72, 16, False, None),  # S != T
    (1, 1, 1, 33, 33, 64, True, None),
    (1, 1, 1, 40, 40, 128, False, None),
    (1, 2, 2, 24, 24, 24, True, None),  # d not a power of two: masked past d
]


def reference(q, k, v, causal, window):
    """SDPA with repeated key/value heads made by SDPA itself (enable_gqa) and the window as a boolean mask."""
    if window is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    allowed = ~sliding_window_mask(q.size(-2), window, device=q.device)  # True = may attend
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)


def inputs(N, h, h_kv, T, S, d, seed=0):
    gen = torch.Generator().manual_seed(seed)
    make = lambda *shape: torch.randn(*shape, generator=gen).to(DEVICE).requires_grad_()  # noqa: E731
    return make(N, h, T, d), make(N, h_kv, S, d), make(N, h_kv, S, d)


@pytest.mark.parametrize(
    "shape", SHAPES, ids=lambda s: "N{}h{}kv{}T{}S{}d{}{}{}".format(*s[:6], "c" * s[6], s[7] or "")
)
def test_forward_and_gradients_equal_sdpa(shape):
    N, h, h_kv, T, S, d, causal, window = shape
    q, k, v = inputs(N, h, h_kv, T, S, d)
    out = flash_attention_triton(q, k, v, causal=causal, window=window)
    grad_out = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), grad_out)

    expected = reference(q, k, v, causal, window)
    expected_grads = torch.autograd.grad(expected, (q, k, v), grad_out)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)
    for name, got, want in zip("qkv", grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=0, msg=lambda m, name=name: f"d{name}: {m}")


def test_the_log_sum_exp_is_saved_for_every_row():
    q, k, v = (t.detach() for t in inputs(1, 2, 2, 45, 45, 16))
    _, lse = flash_forward(q, k, v, causal=True)
    scores = (q @ k.transpose(-2, -1)) / 4.0  # 1 / sqrt(16)
    blocked = torch.ones(45, 45, dtype=torch.bool, device=DEVICE).triu(1)
    expected = torch.logsumexp(scores.masked_fill(blocked, float("-inf")), dim=-1)
    torch.testing.assert_close(lse, expected, atol=1e-5, rtol=0)


def test_block_sizes_change_the_work_not_the_result():
    q, k, v = (t.detach() for t in inputs(1, 2, 2, 50, 50, 16))
    expected = reference(q, k, v, True, None)
    for block_q, block_k in [(16, 16), (16, 64), (64, 16)]:
        got = flash_attention_triton(q, k, v, causal=True, block_q=block_q, block_k=block_k)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_strided_inputs_are_read_through_their_strides():
    """q, k, v cut from one fused (N, T, 3, h, d) projection, as a model makes them: no copy, same answer."""
    fused = torch.randn(1, 40, 3, 2, 16).to(DEVICE)
    q, k, v = (fused[:, :, i].transpose(1, 2) for i in range(3))  # (N, h, T, d) views, not contiguous
    assert not q.is_contiguous()
    torch.testing.assert_close(
        flash_attention_triton(q, k, v, causal=True), reference(q, k, v, True, None), atol=1e-5, rtol=0
    )


def test_an_explicit_scale_is_used():
    q, k, v = (t.detach() for t in inputs(1, 1, 1, 20, 20, 16))
    got = flash_attention_triton(q, k, v, scale=0.5)
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, scale=0.5), atol=1e-5, rtol=0)


def test_half_precision_inputs_give_their_dtype_back_close_to_float32():
    """float16 and bfloat16 in, float32 accumulation inside: output and gradients near float32 SDPA's (bfloat16
    keeps 8 bits of mantissa, so about 1e-2 is all it can promise)."""
    q, k, v = inputs(1, 2, 2, 33, 33, 16)
    expected = reference(q, k, v, True, None)
    grad_out = torch.randn_like(expected)
    expected_grads = torch.autograd.grad(expected, (q, k, v), grad_out)
    for dtype, tolerance in ((torch.float16, 1e-2), (torch.bfloat16, 6e-2)):
        low = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
        got = flash_attention_triton(*low, causal=True)
        assert got.dtype == dtype
        torch.testing.assert_close(got.float(), expected, atol=tolerance, rtol=0)
        grads = torch.autograd.grad(got, low, grad_out.to(dtype))
        for grad, want in zip(grads, expected_grads, strict=True):
            assert grad.dtype == dtype
            torch.testing.assert_close(grad.float(), want, atol=3 * tolerance, rtol=0)


@pytest.mark.parametrize(
    ("change", "error", "words"),
    [
        (lambda q, k, v: (q[0], k, v), ValueError, "must be 4-D"),
        (lambda q, k, v: (q.double(), k.double(), v.double()), TypeError, "float32, float16 or bfloat16"),
        (lambda q, k, v: (q, k.half(), v), TypeError, "one dtype"),
        (lambda q, k, v: (q, k[:, :, :, :8], v[:, :, :, :8]), ValueError, "agree on N and d"),
        (lambda q, k, v: (q, k[:, :, :5], v), ValueError, "one shape"),
        (lambda q, k, v: (q[:, :3], k[:, :2], v[:, :2]), ValueError, "multiple of the key/value heads"),
        (lambda q, k, v: (q.numpy(), k, v), TypeError, "must be a torch.Tensor"),
    ],
)
def test_bad_inputs_are_refused_with_what_was_expected(change, error, words):
    q, k, v = (torch.randn(1, 4, 20, 16).to(DEVICE) for _ in range(3))
    with pytest.raises(error, match=words):
        flash_attention_triton(*change(q, k, v))


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"window": 4}, "window needs causal=True"),
        ({"causal": True, "window": 0}, "window"),
        ({"block_q": 24}, "power of two"),
        ({"block_k": 8}, "at least 16"),
        ({"scale": float("nan")}, "finite"),
    ],
)
def test_bad_settings_are_refused(settings, words):
    q = torch.randn(1, 1, 20, 16).to(DEVICE)
    with pytest.raises(ValueError, match=words):
        flash_attention_triton(q, q, q, **settings)


def test_queries_with_every_key_blocked_get_zeros_and_finite_gradients():
    """T > S with a window: queries 23 .. 39 see no key (their window lies past the last one). As lesson 07's
    helpers.flash_attention, they get zeros, and the backward pass (lse = +inf there) gives no NaN. The output's
    gradient here is a stride-0 expanded tensor (from .sum()), read through its strides."""
    from helpers.flash import flash_attention

    q, k, v = inputs(1, 2, 1, 40, 20, 16)
    out = flash_attention_triton(q, k, v, causal=True, window=4)
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    expected = flash_attention(q, k.expand(-1, 2, -1, -1), v.expand(-1, 2, -1, -1), is_causal=True, window=4)
    expected_grads = torch.autograd.grad(expected.sum(), (q, k, v))
    assert out[:, :, 23:].abs().max() == 0
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)
    for got, want in zip(grads, expected_grads, strict=True):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want, atol=1e-4, rtol=0)
