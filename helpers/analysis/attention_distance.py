"""How far back each head looks (lesson 13): the mean attention distance per layer and head, and by layer kind.

A query at position i that puts weight w_ij on key j looks back i - j tokens for that share; its **look-back
distance** is the weighted mean, sum_j w_ij (i - j). Averaged over the queries from position ``start`` on (the
first queries have few keys to choose from, so they would pull every head's mean down), it is one number per head.
A local (sliding-window) head cannot exceed ``window - 1``: its weights beyond the window are zero. A global head
can, and on long text some do: that is what the global layers are for.

``mean_distance`` reads it from a weights tensor; ``attention_distances`` runs one forward pass of a
``helpers.gpt.GPT`` with ``need_weights`` (as lessons 09-12 read their heads' weights) and returns the
(n_layers, h) table; ``distance_by_kind`` sums the table up by layer kind (local or global, read from each
layer's window, so a layer made local for an experiment counts as local).

Shapes (course notation): N sequences, L queries, T keys (the tokens so far), h heads, n_layers layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from helpers.gpt import GPT

__all__ = ["KindDistance", "attention_distances", "distance_by_kind", "layer_kinds", "mean_distance"]


def _start_ok(start, length: int) -> None:
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start < length:
        raise ValueError(f"start must be an int query position in 0 .. T - 1 = {length - 1}, got {start!r}")


def mean_distance(weights: Tensor, start: int = 0, first_key_out: bool = False) -> Tensor:
    """Each head's mean look-back distance: weights (N, h, L, T) -> (h,).

    The L queries are the last L of the T positions (L = T for a forward pass without a cache): query row r sits at
    position i = T - L + r and key column j at position j. For each query, sum_j w_ij (i - j); then the mean over
    the N sequences and the queries at positions i >= ``start``.

    ``first_key_out=True``: each query's weight on key 0 is left out and the rest renormalised to sum to 1. A
    global head parks most of its weight on the first token (<bos>, lesson 09's sink), which sits the farthest
    back of all: with it left out the distance says how far back the head reads the text (``start`` >= 1)."""
    if not isinstance(weights, Tensor) or weights.dim() != 4 or not weights.is_floating_point():
        shape = tuple(weights.shape) if isinstance(weights, Tensor) else type(weights).__name__
        raise ValueError(f"weights must be a float tensor (N, h, L, T) of attention weights, got {shape}")
    L, T = weights.shape[-2:]
    if L > T:
        raise ValueError(f"weights (N, h, L, T) must have L <= T (queries among the keys' positions), got L={L}, T={T}")
    _start_ok(start, T)
    if not isinstance(first_key_out, bool):
        raise TypeError(f"first_key_out must be True or False, got {first_key_out!r}")
    if first_key_out and start < 1:
        raise ValueError("with first_key_out the query at position 0 has no key left: start must be >= 1")
    if first_key_out:
        rest = weights[..., 1:].clone()  # (N, h, L, T - 1): keys 1 .. T - 1
        rest = rest / rest.sum(-1, keepdim=True).clamp_min(torch.finfo(rest.dtype).tiny)
        weights = torch.cat([torch.zeros_like(weights[..., :1]), rest], dim=-1)  # key 0's weight now 0
    queries = torch.arange(T - L, T, device=weights.device)  # (L,) positions i
    keys = torch.arange(T, device=weights.device)  # (T,) positions j
    back = (queries[:, None] - keys[None, :]).to(weights.dtype)  # (L, T): i - j
    per_query = (weights * back).sum(-1)  # (N, h, L)
    chosen = queries >= start  # never empty: the last query sits at T - 1 >= start
    return per_query[..., chosen].mean(dim=(0, 2))  # (h,)


@torch.no_grad()
def attention_distances(
    model: GPT, texts: Tensor | Sequence[Tensor], start: int = 0, first_key_out: bool = False
) -> Tensor:
    """The mean look-back distance of every layer's heads: (n_layers, h).

    ``texts``: ids (N, T), or a list of ids (1, T_k) of different lengths; each gets one forward pass with
    ``need_weights`` (no cache, the output layer on the last position only). The mean is over every query at
    position >= ``start`` of every text, each query counted once (a longer text weighs more)."""
    if not isinstance(model, GPT):
        raise TypeError(f"attention_distances needs a helpers.gpt.GPT, got {type(model).__name__}")
    batches = [texts] if isinstance(texts, Tensor) else list(texts)
    if not batches:
        raise ValueError("texts must hold at least one sequence of ids (N, T)")
    total, count = None, 0
    for ids in batches:
        if not isinstance(ids, Tensor) or ids.dim() != 2:
            shape = tuple(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__
            raise ValueError(f"each text must be ids (N, T), got {shape}")
        _start_ok(start, ids.size(1))
        _, weights = model(ids, need_weights=True, last_only=True)  # n_layers tensors (N, h, T, T)
        table = torch.stack([mean_distance(w, start, first_key_out) for w in weights])  # (n_layers, h)
        queries = ids.size(0) * (ids.size(1) - start)
        total = table * queries if total is None else total + table * queries
        count += queries
        del weights
    assert total is not None, "at least one text (checked above)"
    return total / count


def layer_kinds(model: GPT) -> tuple[str, ...]:
    """Each layer's kind as it attends now: a softmax layer "local" (it has a window) or "global" (none), even
    when made local for an experiment; any other layer its kind's name ("delta", "linear", "latent", ...)."""
    return tuple(
        ("global" if layer.window is None else "local") if layer.takes_a_window else layer.kind
        for layer in model.attention_layers
    )


@dataclass(frozen=True)
class KindDistance:
    """One row of ``distance_by_kind``: the ``kind``, its ``layers`` (indices), and the mean, lowest and highest
    look-back distance over their heads (tokens)."""

    kind: str
    layers: tuple[int, ...]
    heads: int
    mean: float
    low: float
    high: float


def distance_by_kind(distances: Tensor, kinds: Sequence[str]) -> list[KindDistance]:
    """The (n_layers, h) table summed up by layer kind, one row per kind in the order the kinds first appear.

    ``kinds``: one kind per layer (``layer_kinds(model)``, or the config's ``layer_kinds``)."""
    if not isinstance(distances, Tensor) or distances.dim() != 2:
        shape = tuple(distances.shape) if isinstance(distances, Tensor) else type(distances).__name__
        raise ValueError(f"distances must be a (n_layers, h) table, got {shape}")
    kinds = tuple(kinds)
    if len(kinds) != distances.size(0):
        raise ValueError(f"kinds must name one kind per layer: {distances.size(0)} layers, got {len(kinds)} kinds")
    rows = []
    for kind in dict.fromkeys(kinds):
        layers = tuple(i for i, k in enumerate(kinds) if k == kind)
        heads = distances[list(layers)]  # (layers of this kind, h)
        rows.append(
            KindDistance(kind, layers, heads.numel(), float(heads.mean()), float(heads.min()), float(heads.max()))
        )
    return rows
