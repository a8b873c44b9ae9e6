"""Lesson 15's top-k attention as a Triton kernel: each query reads only its k selected keys, gathered by index.

A program takes a block of BM queries of one (batch, head). For each chunk of BK selected keys it loads the
queries' index rows (BM, BK), then gathers the keys and values those indices point at through pointers,
``K + index * stride_s``: a (BM, BK, d) block whose rows lie anywhere in the (S, d) keys. The scores are dot
products along d, and lesson 07's online softmax runs over the chunks, as in the flash kernel. Nothing of size S
is read or written: a query costs k keys and values whatever S is.

The indices follow ``topk_reference``'s convention: (N, h or h_kv, T, k), positions into S, -1 for "no key",
causal validity the caller's. Forward only: it has no backward, and refuses inputs that ask for gradients.
"""

from __future__ import annotations

import torch
from torch import Tensor

from helpers.kernels import runtime
from helpers.kernels.checks import check_attention_inputs, check_scale
from helpers.kernels.topk_reference import check_topk_indices

import triton  # isort: skip  (after runtime, which decides TRITON_INTERPRET)
import triton.language as tl  # isort: skip

__all__ = ["sparse_attention_triton"]


@triton.jit
def sparse_attention_kernel(
    Q, K, V, IDX, Out,  # q, out (N, h, T, d); k, v (N, h_kv, S, d); idx (N, h_idx, T, k)
    stride_qn, stride_qh, stride_qt, stride_qd,
    stride_kn, stride_kh, stride_ks, stride_kd,
    stride_vn, stride_vh, stride_vs, stride_vd,
    stride_in, stride_ih, stride_it, stride_ik,
    stride_on, stride_oh, stride_ot, stride_od,
    h, T, d, top_k, group, index_group, scale,  # index_group: 1 if each head selects, g if a group shares
    BM: tl.constexpr, BK: tl.constexpr, BD: tl.constexpr,
):  # fmt: skip
    block = tl.program_id(0)
    batch_head = tl.program_id(1)
    n = batch_head // h
    head = batch_head % h
    kv_head = head // group

    rows = block * BM + tl.arange(0, BM)
    picks = tl.arange(0, BK)  # which of the k selected keys, inside a chunk
    dims = tl.arange(0, BD)
    row_ok = rows < T
    dim_ok = dims < d
    q = tl.load(
        Q + n * stride_qn + head * stride_qh + rows[:, None] * stride_qt + dims[None, :] * stride_qd,
        mask=row_ok[:, None] & dim_ok[None, :],
        other=0.0,
    ).to(tl.float32)  # (BM, BD)
    idx_base = IDX + n * stride_in + (head // index_group) * stride_ih + rows[:, None] * stride_it
    k_base = K + n * stride_kn + kv_head * stride_kh
    v_base = V + n * stride_vn + kv_head * stride_vh

    row_max = tl.full([BM], float("-inf"), dtype=tl.float32)
    row_sum = tl.zeros([BM], dtype=tl.float32)
    acc = tl.zeros([BM, BD], dtype=tl.float32)
    for start in range(0, top_k, BK):
        slot = start + picks  # (BK,)
        index = tl.load(idx_base + slot[None, :] * stride_ik, mask=row_ok[:, None] & (slot < top_k)[None, :], other=-1)
        chosen = index >= 0  # (BM, BK): -1 is "no key"
        gather = chosen[:, :, None] & dim_ok[None, None, :]  # (BM, BK, BD)
        offsets = index[:, :, None] * stride_ks + dims[None, None, :] * stride_kd
        k = tl.load(k_base + offsets, mask=gather, other=0.0).to(tl.float32)  # (BM, BK, BD), rows from anywhere
        scores = tl.sum(q[:, None, :] * k, 2) * scale  # (BM, BK)
        scores = tl.where(chosen, scores, float("-inf"))

        row_max_new = tl.maximum(row_max, tl.max(scores, 1))
        reference = tl.where(row_max_new == float("-inf"), 0.0, row_max_new)  # no key so far: avoid -inf - -inf
        rescale = tl.exp(row_max - reference)
        p = tl.exp(scores - reference[:, None])
        row_sum = row_sum * rescale + tl.sum(p, 1)
        v_offsets = index[:, :, None] * stride_vs + dims[None, None, :] * stride_vd
        v = tl.load(v_base + v_offsets, mask=gather, other=0.0).to(tl.float32)
        acc = acc * rescale[:, None] + tl.sum(p[:, :, None] * v, 1)
        row_max = row_max_new

    out = acc / tl.where(row_sum > 0.0, row_sum, 1.0)[:, None]  # a query with no key gets 0
    o_ptrs = Out + n * stride_on + head * stride_oh + rows[:, None] * stride_ot + dims[None, :] * stride_od
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=row_ok[:, None] & dim_ok[None, :])


def sparse_attention_triton(
    q: Tensor, k: Tensor, v: Tensor, indices: Tensor, scale: float | None = None, *, block_q: int | None = None
) -> Tensor:
    """Top-k attention by the gathering kernel: equals ``topk_reference.topk_attention_dense``.

    Args:
        q: (N, h, T, d); k, v: (N, h_kv, S, d), h a multiple of h_kv (grouped-query heads by pointer).
        indices: (N, h or h_kv, T, k) int32/int64: positions into S, -1 for no key, distinct within a row.
        scale: factor of the scores, default 1 / sqrt(d).
        block_q: queries per program (a power of two); default 16.

    Returns:
        (N, h, T, d) in q's dtype; zeros for a query with no key. Forward only: inputs that require grad (with
        grad mode on) are refused, since there is no backward kernel.
    """
    N, h, h_kv, T, S, d = check_attention_inputs(q, k, v, runtime.INTERPRETED)
    check_topk_indices(indices, N, h, h_kv, T, S)
    if indices.device != q.device:
        raise ValueError(f"indices must be on q's device {q.device}, got {indices.device}")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise RuntimeError(
            "sparse_attention_triton has no backward kernel: call it under torch.no_grad() (or detach q, k, v), "
            "or use topk_reference.topk_attention_gather where gradients are needed"
        )
    scale = check_scale(scale, d)
    BM = 16 if block_q is None else block_q
    if isinstance(BM, bool) or not isinstance(BM, int) or BM < 1 or BM & (BM - 1):
        raise ValueError(f"block_q must be a power of two, got {block_q!r}")
    top_k = indices.size(-1)
    BK = min(16, triton.next_power_of_2(top_k))
    BD = triton.next_power_of_2(d)
    out = torch.empty_like(q)
    index_group = 1 if indices.size(1) == h else h // h_kv
    sparse_attention_kernel[(triton.cdiv(T, BM), N * h)](
        q, k, v, indices, out,
        *q.stride(), *k.stride(), *v.stride(), *indices.stride(), *out.stride(),
        h, T, d, top_k, h // h_kv, index_group, scale,
        BM=BM, BK=BK, BD=BD,
    )  # fmt: skip
    return out
