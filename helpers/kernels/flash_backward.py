"""FlashAttention-2's backward pass as Triton kernels: the weights recomputed from the saved log-sum-exp.

The forward pass kept no (T, S) weights, only each row's ``lse``. So the backward pass recomputes every block of
weights ``P = exp(Q K^T * scale - lse)``, exactly the forward's softmax, and uses it at once (Dao 2023, algorithm 2):

    dV = P^T dO        dP = dO V^T        dS = P * (dP - D)        dQ = dS K * scale        dK = dS^T Q * scale

where ``D = rowsum(dO * O)`` (one number per query, computed first by its own small kernel) is the softmax's
``sum_j P_ij dP_ij`` in a cheaper form. Two kernels share the work, so that no two programs ever add into the same
place (no atomics, the same result every run):

- ``dkdv``: a program per block of BN keys and per (batch, key/value head) walks over the query blocks that read
  those keys and accumulates dK and dV on chip; with grouped-query heads it walks over the g query heads of its
  group too, so dK and dV are summed over the group there.
- ``dq``: a program per block of BM queries and per (batch, head) walks over its key blocks, as the forward does,
  and accumulates dQ.

Causal and window rules bound both loops as in the forward: a key block is read only by the queries at or after
it (and within window of it), a query block only reads the keys at or before it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from helpers.kernels.flash_forward import block_dot, dot_precision, head_block, upcast

import triton  # isort: skip  (after runtime, which decides TRITON_INTERPRET)
import triton.language as tl  # isort: skip

__all__ = ["flash_backward"]


@triton.jit
def row_dot_kernel(
    Out, DO, D,  # o and do (N, h, T, d); D (N, h, T) float32
    stride_on, stride_oh, stride_ot, stride_od,
    stride_dn, stride_dh, stride_dt, stride_dd,
    h, T, d,
    BM: tl.constexpr, BD: tl.constexpr,
):  # fmt: skip
    """D = rowsum(dO * Out) for a block of BM queries of one (batch, head)."""
    block = tl.program_id(0)
    batch_head = tl.program_id(1)
    n = batch_head // h
    head = batch_head % h
    rows = block * BM + tl.arange(0, BM)
    dims = tl.arange(0, BD)
    ok = (rows < T)[:, None] & (dims < d)[None, :]
    o = tl.load(
        Out + n * stride_on + head * stride_oh + rows[:, None] * stride_ot + dims[None, :] * stride_od,
        mask=ok,
        other=0.0,
    )
    do = tl.load(
        DO + n * stride_dn + head * stride_dh + rows[:, None] * stride_dt + dims[None, :] * stride_dd,
        mask=ok,
        other=0.0,
    )
    tl.store(D + batch_head * T + rows, tl.sum(o.to(tl.float32) * do.to(tl.float32), 1), mask=rows < T)


@triton.jit
def dkdv_kernel(
    Q, K, V, DO, LSE, D, DK, DV,  # q, do (N, h, T, d); k, v, dk, dv (N, h_kv, S, d); lse, D (N, h, T)
    stride_qn, stride_qh, stride_qt, stride_qd,
    stride_kn, stride_kh, stride_ks, stride_kd,
    stride_vn, stride_vh, stride_vs, stride_vd,
    stride_don, stride_doh, stride_dot, stride_dod,
    stride_gn, stride_gh, stride_gs, stride_gd,  # dk and dv, both contiguous (N, h_kv, S, d)
    h, h_kv, T, S, d, group, scale, window,
    CAUSAL: tl.constexpr, WINDOWED: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    """dK and dV of a block of BN keys of one (batch, key/value head), summed over the g query heads that read it."""
    block = tl.program_id(0)  # which block of BN keys
    batch_kv_head = tl.program_id(1)
    n = batch_kv_head // h_kv
    kv_head = batch_kv_head % h_kv

    keys = block * BN + tl.arange(0, BN)
    dims = tl.arange(0, BD)
    key_ok = keys < S
    dim_ok = dims < d
    kv_ok = key_ok[:, None] & dim_ok[None, :]
    k = tl.load(
        K + n * stride_kn + kv_head * stride_kh + keys[:, None] * stride_ks + dims[None, :] * stride_kd,
        mask=kv_ok,
        other=0.0,
    )  # (BN, BD), read once
    v = tl.load(
        V + n * stride_vn + kv_head * stride_vh + keys[:, None] * stride_vs + dims[None, :] * stride_vd,
        mask=kv_ok,
        other=0.0,
    )
    dk = tl.zeros([BN, BD], dtype=tl.float32)
    dv = tl.zeros([BN, BD], dtype=tl.float32)

    lo = 0
    hi = T
    if CAUSAL:
        lo = block * BN // BM * BM  # queries before this block's first key never read it
        if WINDOWED:
            hi = tl.minimum(T, (block + 1) * BN + window - 1)  # nor do queries past its last key's window
    for member in range(0, group):  # the g query heads that share this key/value head
        head = kv_head * group + member
        q_base = Q + n * stride_qn + head * stride_qh
        do_base = DO + n * stride_don + head * stride_doh
        row_base = (n * h + head) * T  # lse and D are (N, h, T), contiguous
        for start in range(lo, hi, BM):
            rows = start + tl.arange(0, BM)
            row_ok = rows < T
            q_ok = row_ok[:, None] & dim_ok[None, :]
            q = tl.load(q_base + rows[:, None] * stride_qt + dims[None, :] * stride_qd, mask=q_ok, other=0.0)
            do = tl.load(do_base + rows[:, None] * stride_dot + dims[None, :] * stride_dod, mask=q_ok, other=0.0)
            lse = tl.load(LSE + row_base + rows, mask=row_ok, other=float("inf"))
            delta = tl.load(D + row_base + rows, mask=row_ok, other=0.0)

            scores = block_dot(q, tl.trans(k), PRECISION, UPCAST) * scale  # (BM, BN)
            keep = row_ok[:, None] & key_ok[None, :]
            if CAUSAL:
                keep = keep & (keys[None, :] <= rows[:, None])
                if WINDOWED:
                    keep = keep & (rows[:, None] - keys[None, :] < window)
            p = tl.where(keep, tl.exp(scores - lse[:, None]), 0.0)  # the forward's weights, recomputed
            dv += block_dot(tl.trans(p).to(do.dtype), do, PRECISION, UPCAST)  # (BN, BD)
            dp = block_dot(do, tl.trans(v), PRECISION, UPCAST)  # (BM, BN)
            ds = p * (dp - delta[:, None])
            dk += block_dot(tl.trans(ds).to(q.dtype), q, PRECISION, UPCAST) * scale

    out = n * stride_gn + kv_head * stride_gh + keys[:, None] * stride_gs + dims[None, :] * stride_gd
    tl.store(DK + out, dk.to(DK.dtype.element_ty), mask=kv_ok)
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=kv_ok)


@triton.jit
def dq_kernel(
    Q, K, V, DO, LSE, D, DQ,  # q, do, dq (N, h, T, d); k, v (N, h_kv, S, d); lse, D (N, h, T)
    stride_qn, stride_qh, stride_qt, stride_qd,
    stride_kn, stride_kh, stride_ks, stride_kd,
    stride_vn, stride_vh, stride_vs, stride_vd,
    stride_don, stride_doh, stride_dot, stride_dod,
    stride_gn, stride_gh, stride_gt, stride_gd,  # dq
    h, T, S, d, group, scale, window,
    CAUSAL: tl.constexpr, WINDOWED: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    """dQ of a block of BM queries of one (batch, head), over the key blocks the forward read."""
    block = tl.program_id(0)
    batch_head = tl.program_id(1)
    n = batch_head // h
    head = batch_head % h
    kv_head = head // group

    rows = block * BM + tl.arange(0, BM)
    cols = tl.arange(0, BN)
    dims = tl.arange(0, BD)
    row_ok = rows < T
    dim_ok = dims < d
    q_ok = row_ok[:, None] & dim_ok[None, :]
    q = tl.load(
        Q + n * stride_qn + head * stride_qh + rows[:, None] * stride_qt + dims[None, :] * stride_qd,
        mask=q_ok,
        other=0.0,
    )
    do = tl.load(
        DO + n * stride_don + head * stride_doh + rows[:, None] * stride_dot + dims[None, :] * stride_dod,
        mask=q_ok,
        other=0.0,
    )
    lse = tl.load(LSE + batch_head * T + rows, mask=row_ok, other=float("inf"))
    delta = tl.load(D + batch_head * T + rows, mask=row_ok, other=0.0)
    k_base = K + n * stride_kn + kv_head * stride_kh
    v_base = V + n * stride_vn + kv_head * stride_vh
    dq = tl.zeros([BM, BD], dtype=tl.float32)

    lo = 0
    hi = S
    if CAUSAL:
        hi = tl.minimum(S, (block + 1) * BM)
        if WINDOWED:
            lo = tl.maximum(0, block * BM - window + 1) // BN * BN
    for start in range(lo, hi, BN):
        keys = start + cols
        key_ok = keys < S
        kv_ok = key_ok[:, None] & dim_ok[None, :]
        k = tl.load(k_base + keys[:, None] * stride_ks + dims[None, :] * stride_kd, mask=kv_ok, other=0.0)
        v = tl.load(v_base + keys[:, None] * stride_vs + dims[None, :] * stride_vd, mask=kv_ok, other=0.0)
        scores = block_dot(q, tl.trans(k), PRECISION, UPCAST) * scale
        keep = row_ok[:, None] & key_ok[None, :]
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None])
            if WINDOWED:
                keep = keep & (rows[:, None] - keys[None, :] < window)
        p = tl.where(keep, tl.exp(scores - lse[:, None]), 0.0)
        dp = block_dot(do, tl.trans(v), PRECISION, UPCAST)
        ds = p * (dp - delta[:, None])
        dq += block_dot(ds.to(k.dtype), k, PRECISION, UPCAST) * scale

    out = n * stride_gn + head * stride_gh + rows[:, None] * stride_gt + dims[None, :] * stride_gd
    tl.store(DQ + out, dq.to(DQ.dtype.element_ty), mask=q_ok)


def flash_backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    lse: Tensor,
    do: Tensor,
    causal: bool,
    window: int | None,
    scale: float,
    block_q: int,
    block_k: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients ``(dq, dk, dv)`` of attention, from what the forward kept: q (N, h, T, d), k and v (N, h_kv, S, d),
    o (N, h, T, d), lse (N, h, T) float32, and the output's gradient do (N, h, T, d). The arguments are those the
    forward was run with (already checked there); dq, dk, dv are contiguous, with q's, k's and v's shapes and dtypes."""
    N, h, T, d = q.shape
    h_kv, S = k.size(1), k.size(2)
    BD = head_block(d)
    precision = dot_precision(q.dtype)
    windowed, window_size = window is not None, 0 if window is None else window

    delta = torch.empty((N, h, T), dtype=torch.float32, device=q.device)
    row_dot_kernel[(triton.cdiv(T, block_q), N * h)](
        o, do, delta, *o.stride(), *do.stride(), h, T, d, BM=block_q, BD=BD
    )
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)  # contiguous, whatever q's strides
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    common = dict(
        CAUSAL=bool(causal),
        WINDOWED=windowed,
        BM=block_q,
        BN=block_k,
        BD=BD,
        PRECISION=precision,
        UPCAST=upcast(q.dtype),
    )
    dkdv_kernel[(triton.cdiv(S, block_k), N * h_kv)](
        q, k, v, do, lse, delta, dk, dv,
        *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dk.stride(),
        h, h_kv, T, S, d, h // h_kv, scale, window_size, **common,
    )  # fmt: skip
    dq_kernel[(triton.cdiv(T, block_q), N * h)](
        q, k, v, do, lse, delta, dq,
        *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dq.stride(),
        h, T, S, d, h // h_kv, scale, window_size, **common,
    )  # fmt: skip
    return dq, dk, dv
