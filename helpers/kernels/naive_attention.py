"""Attention as three Triton kernels that go through global memory: the kernel FlashAttention was written to beat.

1. ``scores``: a program per (block of queries, block of keys) computes S = Q K^T * scale and **writes** it,
   (T, S) float32 numbers per head, to global memory;
2. ``softmax``: a program per block of query rows **reads** its full rows of S back and **writes** P = softmax(S);
3. ``weighted_sum``: a program per block of queries **reads** its rows of P back, block by block with V, and
   writes O = P V.

Each step is simple and each fits a GPU, but S and P make a round trip through global memory: about 4 T S float32
numbers moved per head (written, read, written, read), against the flash kernel's Q, K, V and O. That is the
Θ(T²) of FlashAttention's IO analysis (Dao et al. 2022, theorem 2), and ``memory_traffic`` counts it.
Forward only, causal or not, grouped-query heads by pointer as in the flash kernel.
"""

from __future__ import annotations

import torch
from torch import Tensor

from helpers.kernels import runtime
from helpers.kernels.checks import check_attention_inputs, check_scale
from helpers.kernels.flash_forward import block_dot, check_block, default_blocks, dot_precision, head_block, upcast

import triton  # isort: skip  (after runtime, which decides TRITON_INTERPRET)
import triton.language as tl  # isort: skip

__all__ = ["naive_attention_triton"]


@triton.jit
def scores_kernel(
    Q, K, SC,  # q (N, h, T, d), k (N, h_kv, S, d), scores (N, h, T, S) float32, contiguous
    stride_qn, stride_qh, stride_qt, stride_qd,
    stride_kn, stride_kh, stride_ks, stride_kd,
    h, T, S, d, group, scale,
    CAUSAL: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    """One (BM, BN) tile of the scores, written to global memory (-inf where causal attention blocks)."""
    block_q = tl.program_id(0)
    block_k = tl.program_id(1)
    batch_head = tl.program_id(2)
    n = batch_head // h
    head = batch_head % h
    rows = block_q * BM + tl.arange(0, BM)
    keys = block_k * BN + tl.arange(0, BN)
    dims = tl.arange(0, BD)
    dim_ok = dims < d
    q = tl.load(
        Q + n * stride_qn + head * stride_qh + rows[:, None] * stride_qt + dims[None, :] * stride_qd,
        mask=(rows < T)[:, None] & dim_ok[None, :],
        other=0.0,
    )
    k = tl.load(
        K + n * stride_kn + (head // group) * stride_kh + keys[:, None] * stride_ks + dims[None, :] * stride_kd,
        mask=(keys < S)[:, None] & dim_ok[None, :],
        other=0.0,
    )
    scores = block_dot(q, tl.trans(k), PRECISION, UPCAST) * scale
    if CAUSAL:
        scores = tl.where(keys[None, :] <= rows[:, None], scores, float("-inf"))
    tl.store(
        SC + batch_head * T * S + rows[:, None] * S + keys[None, :],
        scores,
        mask=(rows < T)[:, None] & (keys < S)[None, :],
    )


@triton.jit
def softmax_kernel(SC, P, T, S, BM: tl.constexpr, BS: tl.constexpr):
    """BM full rows of the scores (BS >= S columns) read back, softmax taken, P written: (N, h, T, S) each."""
    block = tl.program_id(0)
    batch_head = tl.program_id(1)
    rows = block * BM + tl.arange(0, BM)
    cols = tl.arange(0, BS)
    ok = (rows < T)[:, None] & (cols < S)[None, :]
    where = batch_head * T * S + rows[:, None] * S + cols[None, :]
    scores = tl.load(SC + where, mask=ok, other=float("-inf"))
    row_max = tl.max(scores, 1)
    e = tl.exp(scores - tl.where(row_max == float("-inf"), 0.0, row_max)[:, None])
    total = tl.sum(e, 1)
    tl.store(P + where, e / tl.where(total > 0.0, total, 1.0)[:, None], mask=ok)


@triton.jit
def weighted_sum_kernel(
    P, V, Out,  # p (N, h, T, S) float32 contiguous, v (N, h_kv, S, d), out (N, h, T, d)
    stride_vn, stride_vh, stride_vs, stride_vd,
    stride_on, stride_oh, stride_ot, stride_od,
    h, T, S, d, group,
    BM: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    """O = P V for a block of BM queries: the rows of P read back from global memory, block by block."""
    block = tl.program_id(0)
    batch_head = tl.program_id(1)
    n = batch_head // h
    head = batch_head % h
    rows = block * BM + tl.arange(0, BM)
    cols = tl.arange(0, BN)
    dims = tl.arange(0, BD)
    row_ok = rows < T
    dim_ok = dims < d
    v_base = V + n * stride_vn + (head // group) * stride_vh
    acc = tl.zeros([BM, BD], dtype=tl.float32)
    for start in range(0, S, BN):
        keys = start + cols
        key_ok = keys < S
        p = tl.load(
            P + batch_head * T * S + rows[:, None] * S + keys[None, :],
            mask=row_ok[:, None] & key_ok[None, :],
            other=0.0,
        )
        v = tl.load(
            v_base + keys[:, None] * stride_vs + dims[None, :] * stride_vd,
            mask=key_ok[:, None] & dim_ok[None, :],
            other=0.0,
        )
        acc += block_dot(p.to(v.dtype), v, PRECISION, UPCAST)
    o_ptrs = Out + n * stride_on + head * stride_oh + rows[:, None] * stride_ot + dims[None, :] * stride_od
    tl.store(o_ptrs, acc.to(Out.dtype.element_ty), mask=row_ok[:, None] & dim_ok[None, :])


def naive_attention_triton(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = False,
    scale: float | None = None,
    *,
    block_q: int | None = None,
    block_k: int | None = None,
) -> Tensor:
    """Attention through global memory (scores, then softmax, then P V): equals SDPA, forward only.

    q: (N, h, T, d), k and v: (N, h_kv, S, d) as in ``flash_attention_triton``; block_q, block_k as there.
    Returns (N, h, T, d). Allocates two (N, h, T, S) float32 buffers, the scores and the weights.
    """
    N, h, h_kv, T, S, d = check_attention_inputs(q, k, v, runtime.INTERPRETED)
    scale = check_scale(scale, d)
    default_q, default_k = default_blocks(d)
    BM = check_block("block_q", default_q if block_q is None else block_q)
    BN = check_block("block_k", default_k if block_k is None else block_k)
    BD, precision, widen = head_block(d), dot_precision(q.dtype), upcast(q.dtype)
    scores = torch.empty((N, h, T, S), dtype=torch.float32, device=q.device)
    weights = torch.empty_like(scores)
    out = torch.empty_like(q)
    scores_kernel[(triton.cdiv(T, BM), triton.cdiv(S, BN), N * h)](
        q, k, scores, *q.stride(), *k.stride(), h, T, S, d, h // h_kv, scale,
        CAUSAL=bool(causal), BM=BM, BN=BN, BD=BD, PRECISION=precision, UPCAST=widen,
    )  # fmt: skip
    softmax_kernel[(triton.cdiv(T, BM), N * h)](scores, weights, T, S, BM=BM, BS=triton.next_power_of_2(S))
    weighted_sum_kernel[(triton.cdiv(T, BM), N * h)](
        weights, v, out, *v.stride(), *out.stride(), h, T, S, d, h // h_kv,
        BM=BM, BN=BN, BD=BD, PRECISION=precision, UPCAST=widen,
    )  # fmt: skip
    return out
