"""Attention that selects (lesson 15): each query keeps k of its earlier keys, and which k is the whole question.

Every rule here answers "which keys does query t read?" with an index tensor in one convention, shared with
``helpers.kernels.topk_reference`` (the gathered and dense forms of top-k attention) and lesson 16's kernel:

- ``indices`` (..., L, k), int64: row t lists the positions of the keys query t reads, best first;
- ``-1`` means "no key": a query with fewer than k earlier keys (the first ones of a causal model) pads its row
  with -1 (at the end for ``causal_topk``; anywhere in a row for other rules, as the kernel allows). A row never
  names a key after its query (the causal mask comes *before* the choice).

The rules, from the scores they need:

* ``causal_topk(scores, k)``: the k highest-scoring keys among the query's own and earlier ones; ties go to the
  earlier key. On a head's own scores it is the **oracle per head**; on ``summed_attention`` of a layer's heads
  it is the **shared oracle** (DeepSeek's DSA shape: one selection per query for all of a layer's heads); on a
  lightning indexer's scores (``helpers.lightning_indexer``) it is DSA itself.
* ``recent_keys(positions, k)``: the k most recent keys (a sliding window); ``recent_and_first_keys`` keeps the
  first ``first`` tokens as well (StreamingLLM's attention sinks, lesson 09) and k - first recent ones.
* ``block_topk(scores, k, block)``: MoBA's selection. The keys are cut into blocks of ``block``; a query scores a
  block by its mean-pooled key (q · mean(k) = the mean of the block's scores), keeps its own block and the best
  earlier ones, k keys in all.

``recall(weights, indices)`` is the share of a head's attention mass that the chosen keys hold; ``selected_mask``
turns indices into the (…, L, S) mask (True = may attend) that the model's softmax takes.

Shapes: N batch, h heads, L queries, S keys, k keys kept per query.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "SelectionCost",
    "block_topk",
    "causal_topk",
    "check_budget",
    "recall",
    "recent_and_first_keys",
    "recent_keys",
    "selected_mask",
    "summed_attention",
]


def check_budget(k, name: str = "k") -> int:
    """Refuse a budget that is not a positive int (a bool, a float, a tensor), naming what was expected."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"{name} must be a positive int number of keys kept per query, got {k!r:.60}")
    return k


def _query_positions(positions: Tensor | None, L: int, S: int, device: torch.device) -> Tensor:
    """The queries' positions (L,) among the S keys: by default the last L (a prefill: 0 .. S - 1 when L = S)."""
    if positions is None:
        return torch.arange(S - L, S, device=device)
    if not isinstance(positions, Tensor) or positions.shape != (L,):
        got = getattr(positions, "shape", positions)
        raise ValueError(f"positions must be (L,) = ({L},) query positions, got {got}")
    if L and (int(positions.min()) < 0 or int(positions.max()) >= S):
        raise ValueError(f"positions must lie in 0 .. S - 1 = {S - 1} got {positions.tolist()}")
    return positions.to(device)


def causal_topk(scores: Tensor, k: int, positions: Tensor | None = None) -> Tensor:
    """scores (..., L, S) -> indices (..., L, k): each query's k best keys among itself and the keys before it.

    ``positions`` (L,): where the queries stand among the S keys (default: the last L, as in a prefill).
    The future is masked **before** the choice, so a high score on a later key never takes a slot; a query with
    fewer than k keys to read (query t has t + 1) gets them all, then -1. The rows list keys from the highest
    score down. Ties go to the earlier key, always: ``torch.topk`` promises no order among equal scores, and a
    lightning indexer's ReLU gives many exact zeros, so a cached decode step (a row of another length) could
    keep other keys than the prefill did."""
    check_budget(k)
    if not isinstance(scores, Tensor) or scores.dim() < 2 or not scores.is_floating_point():
        raise ValueError(f"scores must be a float tensor (..., L, S), got {getattr(scores, 'shape', type(scores))}")
    L, S = scores.shape[-2:]
    where = _query_positions(positions, L, S, scores.device)
    future = torch.arange(S, device=scores.device)[None, :] > where[:, None]  # (L, S), True = after the query
    masked = scores.masked_fill(future, float("-inf"))
    order = masked.sort(dim=-1, descending=True, stable=True).indices[..., :k]  # (..., L, min(k, S))
    readable = (where + 1).clamp(max=S)[:, None]  # (L, 1): how many keys each query may read
    slot = torch.arange(order.size(-1), device=scores.device)[None, :]
    chosen = torch.where(slot < readable, order, torch.full_like(order, -1))  # masked keys are no keys
    if chosen.size(-1) < k:  # k larger than the keys there are: pad every row
        pad = chosen.new_full((*chosen.shape[:-1], k - chosen.size(-1)), -1)
        chosen = torch.cat([chosen, pad], dim=-1)
    return chosen


def selected_mask(indices: Tensor, S: int) -> Tensor:
    """indices (..., L, k) -> (..., L, S) boolean, **True where the query may attend**: the keys its row names."""
    allowed = torch.zeros(*indices.shape[:-1], S + 1, dtype=torch.bool, device=indices.device)
    allowed.scatter_(-1, torch.where(indices < 0, S, indices).long(), True)  # -1 lands in a spare column
    return allowed[..., :S]


def summed_attention(weights: Tensor) -> Tensor:
    """weights (N, h, L, S) -> (N, L, S): the heads' attention summed, then each row normalised to sum to 1.

    DSA's target for its indexer (the distribution over keys a layer's heads read, together). Summing then
    normalising is not averaging when a head's row sums to less than 1 (a head with a sink logit, lesson 14, or
    weights over some keys only); a row with no mass stays zero."""
    if not isinstance(weights, Tensor) or weights.dim() != 4:
        raise ValueError(f"weights must be (N, h, L, S), got {getattr(weights, 'shape', type(weights))}")
    total = weights.sum(dim=1)  # (N, L, S)
    mass = total.sum(dim=-1, keepdim=True)
    return torch.where(mass > 0, total / mass.clamp_min(torch.finfo(total.dtype).tiny), torch.zeros_like(total))


def recent_keys(positions: Tensor, k: int) -> Tensor:
    """positions (L,) -> indices (L, k): query t's k most recent keys, t, t - 1, .., t - k + 1 (a window)."""
    check_budget(k)
    back = positions[:, None] - torch.arange(k, device=positions.device)[None, :]  # (L, k)
    return torch.where(back >= 0, back, torch.full_like(back, -1))


def recent_and_first_keys(positions: Tensor, k: int, first: int = 4) -> Tensor:
    """positions (L,) -> indices (L, k): the first ``first`` tokens and the k - first most recent keys.

    StreamingLLM at a budget of k keys per query: the sinks cost slots. Overlaps (a query near the start) are
    named once and the row padded with -1."""
    check_budget(k)
    if isinstance(first, bool) or not isinstance(first, int) or not 0 <= first < k:
        raise ValueError(f"first must be an int in 0 .. k - 1 = {k - 1} (the window keeps at least one), got {first!r}")
    recent = recent_keys(positions, k - first)  # (L, k - first)
    sinks = torch.arange(first, device=positions.device)[None, :].expand(len(positions), -1)  # (L, first)
    is_new = (sinks <= positions[:, None]) & (sinks < (positions[:, None] - (k - first) + 1))  # not in the window
    sinks = torch.where(is_new, sinks, torch.full_like(sinks, -1))
    both = torch.cat([recent, sinks], dim=-1)
    return both.sort(dim=-1, descending=True).values  # -1 (no key) to the end of each row


def block_topk(scores: Tensor, k: int, block: int, positions: Tensor | None = None) -> Tensor:
    """MoBA's selection: scores (..., L, S) -> indices (..., L, k), whole blocks of ``block`` keys per query.

    A block's score is the mean of the query's scores over the block's keys (= the query against the block's
    mean-pooled key, since the score is linear in the key). Each query keeps its own block (causally cut) and the
    k / block - 1 best *earlier* blocks; ``k`` must be a multiple of ``block``."""
    check_budget(k)
    check_budget(block, "block")
    if k % block:
        raise ValueError(f"k = {k} must be a multiple of the block size {block}: MoBA keeps whole blocks")
    L, S = scores.shape[-2:]
    where = _query_positions(positions, L, S, scores.device)
    n_blocks = -(-S // block)
    padded = torch.nn.functional.pad(scores, (0, n_blocks * block - S))
    counts = torch.full((n_blocks,), block, device=scores.device)
    counts[-1] = S - (n_blocks - 1) * block
    pooled = padded.unflatten(-1, (n_blocks, block)).sum(-1) / counts  # (..., L, n_blocks)
    own = where // block  # (L,)
    earlier = torch.arange(n_blocks, device=scores.device)[None, :] < own[:, None]  # (L, n_blocks)
    pooled = pooled.masked_fill(~earlier, float("-inf"))
    best = pooled.sort(dim=-1, descending=True, stable=True).indices[..., : k // block - 1]  # (..., L, b - 1)
    ok = torch.arange(best.size(-1), device=scores.device)[None, :] < own[:, None]  # fewer earlier blocks than slots
    best = torch.where(ok, best, torch.full_like(best, -1))
    blocks = torch.cat([own.expand(*best.shape[:-1]).unsqueeze(-1), best], dim=-1)  # (..., L, k / block)
    offsets = torch.arange(block, device=scores.device)
    keys = blocks[..., None] * block + offsets  # (..., L, k / block, block)
    valid = (blocks[..., None] >= 0) & (keys <= where[:, None, None])
    return torch.where(valid, keys, torch.full_like(keys, -1)).flatten(-2)


def recall(weights: Tensor, indices: Tensor) -> Tensor:
    """The share of attention mass the chosen keys hold: weights (N, h, L, S), indices (N, h or 1, L, k) ->
    (h,), each head's mass on its chosen keys summed per query, averaged over the N·L queries."""
    if not isinstance(weights, Tensor) or weights.dim() != 4:
        raise ValueError(f"weights must be (N, h, L, S), got {getattr(weights, 'shape', type(weights))}")
    kept = weights * selected_mask(indices, weights.size(-1))  # a shared selection (h = 1) broadcasts
    return kept.sum(-1).mean(dim=(0, 2))


@dataclass(frozen=True)
class SelectionCost:
    """One layer's sizes, for counting the multiply-adds of a prefill of T tokens with and without selection.

    ``heads`` attention heads, each reading keys of ``qk_dim`` numbers and values of ``v_dim`` (with MLA's
    absorbed weights, DeepSeek V3.2 attends over its 576-number latent: qk_dim 576, v_dim 512); an indexer of
    ``indexer_heads`` heads of ``indexer_dim``; ``k`` keys kept per query."""

    heads: int
    qk_dim: int
    v_dim: int
    indexer_heads: int
    indexer_dim: int
    k: int

    def dense(self, T: int) -> int:
        """Dense causal attention: query t reads t + 1 keys, each costing q · k and a weight times v per head."""
        return T * (T + 1) // 2 * self.heads * (self.qk_dim + self.v_dim)

    def selected(self, T: int) -> int:
        """The attention over the chosen keys only: query t reads min(k, t + 1) of them."""
        full = min(self.k, T)  # queries 0 .. k - 1 read all their t + 1 keys, the others read k
        reads = full * (full + 1) // 2 + (T - full) * self.k
        return reads * self.heads * (self.qk_dim + self.v_dim)

    def indexer(self, T: int) -> int:
        """The indexer still scores every earlier key: H_I dot products of d_I, plus one weight per head."""
        return T * (T + 1) // 2 * self.indexer_heads * (self.indexer_dim + 1)
