"""FlashAttention-2 in Triton as a differentiable function: ``flash_attention_triton(q, k, v, causal, window, scale)``.

Forward and backward are the kernels of ``flash_forward`` and ``flash_backward``; this module only checks the
inputs, keeps what the backward needs (q, k, v, o and each row's log-sum-exp: O(T) numbers, never the (T, S)
weights) and hands the gradients back to autograd. The result equals ``F.scaled_dot_product_attention`` with
``is_causal=causal`` (a window adds the mask of ``helpers.sliding_window_mask``) and ``enable_gqa=True`` for
h_kv < h.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

from helpers.kernels import runtime
from helpers.kernels.checks import check_attention_inputs, check_scale, check_window
from helpers.kernels.flash_backward import flash_backward
from helpers.kernels.flash_forward import check_block, default_blocks, flash_forward

__all__ = ["FlashAttentionTriton", "flash_attention_triton"]


class FlashAttentionTriton(torch.autograd.Function):
    """Autograd's view of the kernels: forward saves (q, k, v, o, lse), backward recomputes the weights from lse.

    ``apply(q, k, v, causal, window, scale, block_q, block_k)`` with everything already checked (use
    ``flash_attention_triton``); gradients flow to q, k and v only.
    """

    @staticmethod
    def forward(
        ctx: FunctionCtx,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        causal: bool,
        window: int | None,
        scale: float,
        block_q: int,
        block_k: int,
    ) -> Tensor:
        o, lse = flash_forward(q, k, v, causal=causal, window=window, scale=scale, block_q=block_q, block_k=block_k)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.settings = (causal, window, scale, block_q, block_k)  # type: ignore[attr-defined]
        return o

    @staticmethod
    @once_differentiable  # the backward is a kernel, not torch operations: no gradient of the gradient
    def backward(ctx: FunctionCtx, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, o, lse = ctx.saved_tensors  # type: ignore[attr-defined]
        causal, window, scale, block_q, block_k = ctx.settings  # type: ignore[attr-defined]
        dq, dk, dv = flash_backward(q, k, v, o, lse, grad_out, causal, window, scale, block_q, block_k)
        return dq, dk, dv, None, None, None, None, None


def flash_attention_triton(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = False,
    window: int | None = None,
    scale: float | None = None,
    *,
    block_q: int | None = None,
    block_k: int | None = None,
) -> Tensor:
    """Attention by the FlashAttention-2 kernels, differentiable in q, k and v.

    Args:
        q: (N, h, T, d) queries; k, v: (N, h_kv, S, d) keys and values, h a multiple of h_kv (query head j reads
            key/value head j // (h / h_kv), as ``enable_gqa=True``). One dtype: float32, float16 or bfloat16; on
            the CPU when the kernels are interpreted, on a CUDA device when compiled (``runtime.INTERPRETED``).
        causal: query i reads keys 0 .. i (top-left aligned, as ``is_causal`` in torch).
        window: with causal, query i reads only keys i - window + 1 .. i (``helpers.sliding_window_mask``).
        scale: factor of the scores, default 1 / sqrt(d).
        block_q, block_k: queries per program (BM) and keys per loop step (BN), powers of two >= 16; defaults
            from ``flash_forward.default_blocks``. They change the work's shape, not the result.

    Returns:
        (N, h, T, d) in q's dtype. A query whose keys are all blocked (a window when T > S) gets zeros.
    """
    d = check_attention_inputs(q, k, v, runtime.INTERPRETED)[-1]
    window = check_window(window, bool(causal))
    scale = check_scale(scale, d)
    default_q, default_k = default_blocks(d)
    block_q = check_block("block_q", default_q if block_q is None else block_q)
    block_k = check_block("block_k", default_k if block_k is None else block_k)
    return FlashAttentionTriton.apply(q, k, v, bool(causal), window, scale, block_q, block_k)
