"""FlashAttention-2's forward pass as one Triton kernel: a program per block of queries and per (batch, head).

Each program loads its BM queries once, then walks over the keys and values in blocks of BN, keeping only a running
maximum m, a running sum l and an accumulator (BM, d) on chip: lesson 07's online softmax, moved into a kernel.
After the last block it writes O = acc / l and the log-sum-exp ``lse = m + log(l)`` of each row, which is all the
backward pass needs to recompute the weights (FlashAttention-2, Dao 2023, algorithm 1).

- causal: query i reads keys 0 .. i (top-left aligned, as ``is_causal`` in torch); the loop stops at the block's
  last query, so blocks above the diagonal are never read (about half the work and bytes).
- window (with causal): query i reads keys i - window + 1 .. i; the loop also starts late, so the cost is linear
  in T.
- grouped-query heads: query head j reads key/value head j // g (g = h / h_kv) through its pointer; nothing is
  repeated or copied.
- any T and S: the last, ragged block of queries or keys is masked (loads return 0, blocked scores -inf).
"""

from __future__ import annotations

import torch
from torch import Tensor

from helpers.kernels import runtime
from helpers.kernels.checks import check_attention_inputs, check_positive_int, check_scale, check_window

import triton  # isort: skip  (after runtime, which decides TRITON_INTERPRET)
import triton.language as tl  # isort: skip

__all__ = ["block_dot", "default_blocks", "flash_forward"]


@triton.jit
def block_dot(a, b, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """``tl.dot(a, b)`` of two blocks, accumulated in float32. UPCAST (bfloat16 in the interpreter only): Triton
    3.9's interpreter keeps bfloat16 blocks as their raw 16-bit patterns (numpy has no bfloat16) and its ``tl.dot``
    would multiply those integers, so the blocks, already rounded to bfloat16, are widened to float32 first."""
    if UPCAST:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    return tl.dot(a, b, input_precision=PRECISION)


@triton.jit
def flash_forward_kernel(
    Q, K, V, Out, LSE,  # pointers to q (N, h, T, d), k and v (N, h_kv, S, d), o (N, h, T, d), lse (N, h, T)
    stride_qn, stride_qh, stride_qt, stride_qd,
    stride_kn, stride_kh, stride_ks, stride_kd,
    stride_vn, stride_vh, stride_vs, stride_vd,
    stride_on, stride_oh, stride_ot, stride_od,
    h, T, S, d, group, scale, window,  # group = g = h / h_kv
    CAUSAL: tl.constexpr, WINDOWED: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    block = tl.program_id(0)  # which block of BM queries
    batch_head = tl.program_id(1)  # which (n, head)
    n = batch_head // h
    head = batch_head % h
    kv_head = head // group  # grouped-query heads: g query heads read one key/value head

    rows = block * BM + tl.arange(0, BM)  # (BM,) query positions
    cols = tl.arange(0, BN)  # (BN,) key offsets inside a block
    dims = tl.arange(0, BD)  # (BD,) features; BD is d rounded up to a power of two
    row_ok = rows < T  # the last block of queries may be ragged
    dim_ok = dims < d

    q_ptrs = Q + n * stride_qn + head * stride_qh + rows[:, None] * stride_qt + dims[None, :] * stride_qd
    q = tl.load(q_ptrs, mask=row_ok[:, None] & dim_ok[None, :], other=0.0)  # (BM, BD), read once
    k_base = K + n * stride_kn + kv_head * stride_kh
    v_base = V + n * stride_vn + kv_head * stride_vh

    row_max = tl.full([BM], float("-inf"), dtype=tl.float32)  # running maximum of each row's scores
    row_sum = tl.zeros([BM], dtype=tl.float32)  # running sum of exp(score - row_max)
    acc = tl.zeros([BM, BD], dtype=tl.float32)  # running sum of exp(score - row_max) * v

    lo = 0
    hi = S
    if CAUSAL:
        hi = tl.minimum(S, (block + 1) * BM)  # early stop: no query of this block reads past its last position
        if WINDOWED:
            lo = tl.maximum(0, block * BM - window + 1) // BN * BN  # late start: the first query's window
    for start in range(lo, hi, BN):
        keys = start + cols  # (BN,) key positions
        key_ok = keys < S
        k = tl.load(
            k_base + keys[:, None] * stride_ks + dims[None, :] * stride_kd,
            mask=key_ok[:, None] & dim_ok[None, :],
            other=0.0,
        )  # (BN, BD)
        scores = block_dot(q, tl.trans(k), PRECISION, UPCAST) * scale  # (BM, BN)
        keep = key_ok[None, :]
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None])
            if WINDOWED:
                keep = keep & (rows[:, None] - keys[None, :] < window)
        scores = tl.where(keep, scores, float("-inf"))

        row_max_new = tl.maximum(row_max, tl.max(scores, 1))
        # a row that has seen only blocked keys keeps row_max = -inf; exp(-inf - -inf) would be NaN, so it uses 0
        reference = tl.where(row_max_new == float("-inf"), 0.0, row_max_new)
        rescale = tl.exp(row_max - reference)  # exp(old max - new max) <= 1: what was summed so far shrinks
        p = tl.exp(scores - reference[:, None])  # (BM, BN)
        row_sum = row_sum * rescale + tl.sum(p, 1)
        v = tl.load(
            v_base + keys[:, None] * stride_vs + dims[None, :] * stride_vd,
            mask=key_ok[:, None] & dim_ok[None, :],
            other=0.0,
        )  # (BN, BD)
        acc = acc * rescale[:, None] + block_dot(p.to(v.dtype), v, PRECISION, UPCAST)
        row_max = row_max_new

    seen = row_sum > 0.0  # a row whose keys were all blocked (possible with a window when T > S) gets 0
    out = acc / tl.where(seen, row_sum, 1.0)[:, None]
    o_ptrs = Out + n * stride_on + head * stride_oh + rows[:, None] * stride_ot + dims[None, :] * stride_od
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=row_ok[:, None] & dim_ok[None, :])
    # lse = +inf for such a row, so that the backward pass recomputes its weights exp(s - lse) as 0
    lse = tl.where(seen, row_max + tl.log(tl.where(seen, row_sum, 1.0)), float("inf"))
    tl.store(LSE + batch_head * T + rows, lse, mask=row_ok)


def default_blocks(d: int) -> tuple[int, int]:
    """(BM, BN): 64 x 64 compiled (a common choice for d <= 128 on recent GPUs); 32 x 32 interpreted, where each
    program's loop step is a Python step, so fewer, larger blocks are faster, while small tests still cross blocks."""
    if runtime.INTERPRETED:
        return 32, 32
    return (64, 64) if d <= 64 else (64, 32)


def flash_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = False,
    window: int | None = None,
    scale: float | None = None,
    block_q: int | None = None,
    block_k: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Run the forward kernel: ``(o, lse)``.

    Args:
        q: (N, h, T, d) queries; k, v: (N, h_kv, S, d), h a multiple of h_kv. float32, float16 or bfloat16.
        causal: query i reads keys 0 .. i (top-left aligned when T != S, as torch's ``is_causal``).
        window: with causal, query i reads only keys i - window + 1 .. i.
        scale: factor of the scores, default 1 / sqrt(d).
        block_q, block_k: BM queries per program and BN keys per loop step (powers of two, at least 16);
            default ``default_blocks(d)``.

    Returns:
        o (N, h, T, d) in q's dtype, and lse (N, h, T) float32: each row's log of the sum of exp(scores).
    """
    N, h, h_kv, T, S, d = check_attention_inputs(q, k, v, runtime.INTERPRETED)
    window = check_window(window, causal)
    scale = check_scale(scale, d)
    BM, BN = default_blocks(d)
    BM = check_block("block_q", BM if block_q is None else block_q)
    BN = check_block("block_k", BN if block_k is None else block_k)
    o = torch.empty_like(q)
    lse = torch.empty((N, h, T), dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(T, BM), N * h)
    flash_forward_kernel[grid](
        q, k, v, o, lse,
        *q.stride(), *k.stride(), *v.stride(), *o.stride(),
        h, T, S, d, h // h_kv, scale, 0 if window is None else window,
        CAUSAL=bool(causal), WINDOWED=window is not None,
        BM=BM, BN=BN, BD=head_block(d), PRECISION=dot_precision(q.dtype), UPCAST=upcast(q.dtype),
    )  # fmt: skip
    return o, lse


def check_block(name: str, value: object) -> int:
    """A block size: a power of two (``tl.arange`` needs one) of at least 16 (``tl.dot`` needs 16 rows)."""
    size = check_positive_int(name, value)
    if size < 16 or size & (size - 1):
        raise ValueError(f"{name} must be a power of two of at least 16 (tl.arange and tl.dot need it), got {size}")
    return size


def head_block(d: int) -> int:
    """The features a program holds per row: d rounded up to a power of two, at least 16 (masked past d)."""
    return max(16, triton.next_power_of_2(d))


def upcast(dtype: torch.dtype) -> bool:
    """Whether ``block_dot`` widens bfloat16 blocks to float32: in the interpreter only (see ``block_dot``)."""
    return runtime.INTERPRETED and dtype == torch.bfloat16


def dot_precision(dtype: torch.dtype) -> str:
    """float32 products in full precision ("ieee"): a GPU's default, TF32, keeps 10 bits of mantissa, and the
    kernels are held to SDPA within 1e-5. 16-bit inputs are multiplied exactly either way."""
    return "ieee" if dtype == torch.float32 else "tf32"
