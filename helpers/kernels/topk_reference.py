"""Top-k attention (each query keeps its k best keys) in plain PyTorch: the two forms the sparse kernel is
checked against.

Each query reads only k keys of its own choosing, named by an index tensor. The convention, shared by the kernel
(``sparse_attention``) and whatever selects the keys (an oracle, a lightning indexer):

- ``indices``: an integer tensor (N, h_idx, T, k): row (n, j, t) lists the positions in 0 .. S - 1 of the keys
  query t reads. h_idx is h (each query head selects its own keys) or h_kv (the g query heads of a group share
  their key/value head's selection, as DeepSeek's DSA shares one selection among a layer's heads).
- ``-1`` means "no key" (padding, where a query has fewer than k keys to read, e.g. the first queries of a causal
  model); it may stand anywhere in the row. The other entries of a row must be distinct.
- causal validity is the caller's: an index past the query's own position is read like any other.

A query with no key at all (a row of -1) gets a zero output.

The selection rules that make the indices (lesson 15) are ``helpers.selection``'s, and so is the mask
(``selected_mask``). Does not import Triton.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from helpers.selection import selected_mask

__all__ = ["check_topk_indices", "topk_attention_dense", "topk_attention_gather"]


def check_topk_indices(indices: Tensor, N: int, h: int, h_kv: int, T: int, S: int) -> None:
    """Refuse an index tensor that breaks the convention above, naming what was expected."""
    if not isinstance(indices, Tensor) or indices.dtype not in (torch.int32, torch.int64):
        kind = indices.dtype if isinstance(indices, Tensor) else type(indices).__name__
        raise TypeError(f"indices must be an int32 or int64 tensor (N, h or h_kv, T, k), got {kind}")
    if indices.dim() != 4 or indices.size(0) != N or indices.size(2) != T or indices.size(1) not in (h, h_kv):
        raise ValueError(
            f"indices must be (N, h_idx, T, k) = ({N}, {h} or {h_kv}, {T}, k) for q (N, h, T, d) and k "
            f"(N, h_kv, S, d), got {tuple(indices.shape)}"
        )
    if indices.size(3) < 1:
        raise ValueError(f"indices must select at least one key per query (k >= 1), got {tuple(indices.shape)}")
    if indices.numel() and (int(indices.min()) < -1 or int(indices.max()) >= S):
        raise ValueError(
            f"indices must be key positions 0 .. S - 1 = {S - 1}, or -1 for no key; got values from "
            f"{int(indices.min())} to {int(indices.max())}"
        )
    ordered = indices.sort(dim=-1).values
    if ((ordered[..., 1:] == ordered[..., :-1]) & (ordered[..., 1:] >= 0)).any():
        raise ValueError("each query's indices must be distinct (apart from -1): a key selected twice is ambiguous")


def topk_attention_dense(q: Tensor, k: Tensor, v: Tensor, indices: Tensor, scale: float | None = None) -> Tensor:
    """Top-k attention as dense attention with a mask: SDPA over all S keys, the unselected ones blocked.

    q: (N, h, T, d), k and v: (N, h_kv, S, d), indices (N, h or h_kv, T, k) as in the module's convention.
    Returns (N, h, T, d); a query with no selected key gets zeros. Memory: the (T, S) scores, like any dense form.
    """
    N, h, T, _ = q.shape
    h_kv, S = k.size(1), k.size(2)
    check_topk_indices(indices, N, h, h_kv, T, S)
    allowed = selected_mask(indices, S)  # (N, h_idx, T, S), True = may attend
    if allowed.size(1) != h:  # one selection per key/value head: its g query heads share it
        allowed = allowed.repeat_interleave(h // h_kv, dim=1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale, enable_gqa=True)
    return torch.where(allowed.any(-1, keepdim=True), out, torch.zeros_like(out))  # SDPA gives NaN for empty rows


def topk_attention_gather(q: Tensor, k: Tensor, v: Tensor, indices: Tensor, scale: float | None = None) -> Tensor:
    """Top-k attention by gathering: each query's k keys and values copied out, (N, h, T, k, d), never (T, S).

    The same arguments and result as ``topk_attention_dense``: memory T * k per head instead of T * S.
    """
    N, h, T, d = q.shape
    h_kv, S = k.size(1), k.size(2)
    check_topk_indices(indices, N, h, h_kv, T, S)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    group = h // h_kv
    if indices.size(1) != h:
        indices = indices.repeat_interleave(group, dim=1)  # (N, h, T, k)
    keys = k.repeat_interleave(group, dim=1)  # (N, h, S, d): the reference may copy; the kernel does not
    values = v.repeat_interleave(group, dim=1)
    chosen = indices.clamp(min=0).long()  # -1 reads key 0, then is blocked below
    flat = chosen.flatten(2)  # (N, h, T * k)
    k_sel = keys.gather(2, flat[..., None].expand(-1, -1, -1, d)).view(N, h, T, -1, d)  # (N, h, T, k, d)
    v_sel = values.gather(2, flat[..., None].expand(-1, -1, -1, d)).view(N, h, T, -1, d)
    scores = torch.einsum("nhtd,nhtkd->nhtk", q, k_sel) * scale
    scores = scores.masked_fill(indices < 0, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a row of -1 only: all -inf, NaN -> 0
    return torch.einsum("nhtk,nhtkd->nhtd", weights, v_sel)
