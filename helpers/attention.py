"""Scaled dot-product attention, masks, and the one attention core under every multi-head front end.

One shape notation throughout the course (the one ``torch.nn.MultiheadAttention`` uses):

    N  batch size              L  target (query) length     S  source (key/value) length
    E  embedding size          h  query heads               d  head size, E / h
    h_kv  key/value heads (h a multiple of h_kv)            g  = h / h_kv query heads per key/value head

The masks live in ``helpers.masks`` (re-exported here: ``causal_mask``, ``sliding_window_mask``, ``causal_mask_at``,
``padding_mask``, ``merge_masks``, ...), in its one convention, **True where attention is blocked**, which is also
what ``MultiHeadAttention`` and ``GroupedQueryAttention`` take, as ``torch.nn.MultiheadAttention`` does. The functions
that mirror ``torch.nn.functional.scaled_dot_product_attention`` take its convention, **True where a query may
attend**: ``scaled_dot_product_attention``, ``masked_softmax`` and the core's ``attend`` (which hands the mask to
that kernel). ``helpers.masks.sdpa_mask`` flips one into the other; each function below says which it takes. A
float mask means the same in both: it is added to the scores (``-inf`` blocks).

The attention core (every front end is a thin layer over it)
------------------------------------------------------------
A front end owns its projections (and positions, and cache); the core owns what happens between heads in and
heads out, in four steps, each in one place:

1. ``split_heads(x (N, T, h·d), h) -> (N, h, T, d)``: features become heads (a view); ``unflatten_heads`` cuts
   the features into the heads' blocks in place, (N, T, h·d) -> (N, T, h, d), where a hook reads one head.
2. ``attend(q (N, h, L, d), k (N, h_kv, S, d), v (N, h_kv, S, dv), mask) -> (out (N, h, L, dv), weights)``:
   scores ``q·kᵀ / √d`` (N, h, L, S), then **weights** from scores, then the weighted sum of the values.
   Query head i reads key/value head i // g (``repeat_kv_heads``). ``mask``: None, boolean (True = may
   attend) or float (added), broadcastable to (N, h, L, S). ``weights`` is (N, h, L, S), or None when not
   asked for: then torch's fused kernel runs (``fused_attention``), which never builds the weights and reads
   grouped keys and values in place (``enable_gqa``) instead of copying the cache g times.
3. ``masked_softmax(scores, mask, sink) -> weights``: the one rule that turns scores into weights (softmax over the
   keys; a query with no key left gets zero weights, as in ``F.scaled_dot_product_attention``). With ``sink``,
   one logit per head (h,) (gpt-oss), the softmax also runs over that extra column, whose weight is dropped: a
   head may attend to almost nothing. An experiment replaces the rule with a
   ``weights_from_scores(scores (N, h, L, S), mask, positions (L,)) -> weights`` function.
4. ``merge_heads(out (N, h, L, d)) -> (N, L, h·d)``: the heads side by side, head i in features i·d .. (i+1)·d - 1,
   the input of the front end's output projection (where a hook sees, zeroes or patches one head).

``AttentionCore`` is the base class of the front ends (``MultiHeadAttention``, ``GroupedQueryAttention``,
``helpers.gpt.CausalSelfAttention``, ``helpers.analysis.circuits.HeadAttention``,
``helpers.latent_attention.MultiHeadLatentAttention``). It has no parameters of its
own (state dicts are the front ends'), and gives each one ``attend_heads`` (step 2 with this module's weights)
and ``scores_to_weights``, the one method a variant overrides, or that an experiment replaces by setting
``module.weights_from_scores``. A new variant is a subclass with new projections: it projects to q, k, v heads
(its own sizes, rotations or latent up-projections), calls ``attend_heads``, merges and projects out. What a
decoder keeps between steps is a ``helpers.kv_cache.KVCache`` of projected tensors, one entry per layer.

Fast paths sit beside the teaching code, named as such, and are tested equal to it: ``fused_attention``
(torch's kernel, when no weights are wanted), ``fused_self_attention_heads`` (one strided (E, 3E) product for
self-attention's q, k, v) and ``masked_softmax_`` (in place, when no gradient will flow).
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.kv_cache import layer_cache_numbers
from helpers.masks import (
    causal_mask,
    causal_mask_at,
    merge_masks,
    padding_mask,
    sdpa_mask,
    sdpa_mask_from_padding,
    sliding_window_mask,
    streaming_mask,
    streaming_mask_at,
)

__all__ = [
    "AttentionCore",
    "GroupedQueryAttention",
    "MaskConventionWarning",
    "MultiHeadAttention",
    "WeightsFromScores",
    "attend",
    "causal_mask",
    "causal_mask_at",
    "fused_attention",
    "fused_self_attention_heads",
    "masked_softmax",
    "masked_softmax_",
    "merge_heads",
    "merge_masks",
    "padding_mask",
    "repeat_kv_heads",
    "scaled_dot_product_attention",
    "sdpa_mask",
    "sdpa_mask_from_padding",
    "sliding_window_mask",
    "split_heads",
    "streaming_mask",
    "streaming_mask_at",
    "unflatten_heads",
]


class MaskConventionWarning(UserWarning):
    """A boolean mask that looks like it was written for the other convention (True = blocked vs may attend)."""


# ---------------------------------------------------------------------------------------------
# Heads: the one place where features become heads and heads become features again (lesson 04)
# ---------------------------------------------------------------------------------------------
def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """(N, T, h·d) -> (N, h, T, d): head i gets features i·d .. (i + 1)·d - 1 (a view, no copy)."""
    if x.dim() != 3:
        raise ValueError(f"split_heads expects (N, T, h·d), got shape {tuple(x.shape)}")
    N, T, features = x.shape
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1 or features % num_heads:
        raise ValueError(f"num_heads must be a positive divisor of the {features} features, got {num_heads!r}")
    return x.view(N, T, num_heads, features // num_heads).transpose(1, 2)


def unflatten_heads(x: Tensor, num_heads: int) -> Tensor:
    """(..., h·d) -> (..., h, d): the last dim cut into the h heads' blocks, head i's d features at index i (a view).

    What a hook on an output projection sees per head: its input (N, T, h·d) becomes (N, T, h, d), the
    heads side by side; and the projection's weight (E, h·d) becomes (E, h, d), head i's columns at [:, i].
    ``.flatten(-2)`` undoes it. Unlike ``split_heads`` the head axis stays beside the features, not before T."""
    if not isinstance(x, Tensor) or x.dim() < 1:
        raise ValueError("unflatten_heads expects a tensor (..., h·d) with at least one dim")
    features = x.size(-1)
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1 or features % num_heads:
        raise ValueError(f"num_heads must be a positive divisor of the {features} features, got {num_heads!r}")
    return x.unflatten(-1, (num_heads, features // num_heads))


def merge_heads(x: Tensor) -> Tensor:
    """(N, h, T, d) -> (N, T, h·d): the heads' outputs side by side, head 0's d numbers first."""
    if x.dim() != 4:
        raise ValueError(f"merge_heads expects (N, h, T, d), got shape {tuple(x.shape)}")
    N, h, T, d = x.shape
    return x.transpose(1, 2).reshape(N, T, h * d)


def repeat_kv_heads(x: Tensor, groups: int) -> Tensor:
    """(N, h_kv, S, d) -> (N, h_kv·g, S, d): each key/value head copied for the g query heads of its group.

    Query head i reads key/value head i // g, as ``F.scaled_dot_product_attention(..., enable_gqa=True)`` does."""
    if x.dim() != 4:
        raise ValueError(f"repeat_kv_heads expects (N, h_kv, S, d), got shape {tuple(x.shape)}")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ValueError(f"groups (query heads per key/value head) must be a positive int, got {groups!r}")
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


# ---------------------------------------------------------------------------------------------
# Scaled dot-product attention, step by step (lesson 03)
# ---------------------------------------------------------------------------------------------
def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """Attention written out step by step; returns ``(output, weights)``.

    Same arguments and mask meaning as ``torch.nn.functional.scaled_dot_product_attention``,
    which returns only the output.

    Args:
        query: (..., L, d) queries.
        key:   (..., S, d) keys.
        value: (..., S, dv) values.
        attn_mask: broadcastable to (..., L, S). Boolean: **True = may attend** (take part).
            Float: added to the scores (``-inf`` blocks).
        dropout_p: probability of zeroing an attention weight (applied whenever > 0, as in torch).
        is_causal: block keys after each query (query i sees keys 0..i); not with ``attn_mask``.
        scale: factor for the scores; default ``1 / sqrt(d)``.

    Returns:
        output:  (..., L, dv), the weighted sums of the values.
        weights: (..., L, S), each row sums to 1 (after dropout, the weights actually used).

    A query whose every key is blocked gets all-zero weights and a zero output, as in
    ``F.scaled_dot_product_attention`` (a plain softmax would give NaN). A *boolean* mask that
    blocks every key of a query in a way that is almost always a mistake (a row of a shared
    (L, S) mask, or every query of a sequence) raises :class:`MaskConventionWarning`: the usual
    cause is a mask written as True = blocked, such as ``causal_mask(L)``. Padding queries of a
    batch, blocked while other queries of their sentence attend, do not warn; nor do float masks.
    """
    check_query_key_value(query, key, value)
    check_scale(scale)
    L, S = query.size(-2), key.size(-2)
    scale = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale

    # 1. Scores: how well each query matches each key, scaled.  (..., L, d) @ (..., d, S) -> (..., L, S)
    #    (q * scale) @ k^T equals (q @ k^T) * scale; scaling the smaller (L, d) tensor is cheaper.
    scores = (query * scale) @ key.transpose(-2, -1)

    # 2. Masks: which keys each query may read (a causal mask: keys 0..i only).
    if is_causal:
        if attn_mask is not None:
            raise ValueError("pass either attn_mask or is_causal=True, not both")
        # Query i may attend to keys 0..i (top-left aligned when L != S, as in torch).
        attn_mask = torch.ones(L, S, dtype=torch.bool, device=query.device).tril()  # True = may attend

    # 3. Softmax over the keys (the last dimension), blocked keys at -inf so that they get weight 0:
    #    every row becomes a probability distribution.
    weights = masked_softmax(scores, attn_mask)
    if attn_mask is not None and attn_mask.dtype == torch.bool and not is_causal:
        _warn_if_inverted(attn_mask)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)

    # 4. Weighted sum of the values.  (..., L, S) @ (..., S, dv) -> (..., L, dv)
    return weights @ value, weights


def masked_softmax(scores: Tensor, mask: Tensor | None = None, sink: Tensor | None = None) -> Tensor:
    """Scores (..., L, S) -> weights (..., L, S): the one place where attention scores become weights.

    ``mask``: None, boolean broadcastable to the scores (**True = may attend**), or float (added to the
    scores, ``-inf`` blocks). Softmax over the keys; a query whose every key is blocked gets all-zero weights
    (a plain softmax of -inf everywhere would be NaN, with NaN gradients), as in
    ``F.scaled_dot_product_attention``.

    ``sink``: None, or one logit per head, (h,) for scores (..., h, L, S) (gpt-oss's attention sinks). The
    softmax then runs over the S scores and one more column holding the head's sink logit, and that column's
    weight is dropped: a row's weights over the real keys sum to 1 / (1 + e^(s - logsumexp(scores))) < 1, so
    a head whose scores are all low may attend to almost nothing. ``sink = -inf`` is plain attention.
    """
    if sink is not None:
        return _softmax_with_sink(scores, mask, sink)
    if mask is None:
        return scores.softmax(dim=-1)
    scores = scores + _additive_mask(mask, scores)
    blocked_row = torch.isneginf(scores).all(dim=-1, keepdim=True)  # (..., L, 1): no key left to read
    return scores.masked_fill(blocked_row, 0.0).softmax(dim=-1).masked_fill(blocked_row, 0.0)


def _softmax_with_sink(scores: Tensor, mask: Tensor | None, sink: Tensor) -> Tensor:
    """``masked_softmax`` over the scores (..., h, L, S) and a column of sink logits (h,), that column dropped."""
    _check_sink(sink, scores)
    if mask is not None:
        scores = scores + _additive_mask(mask, scores)
    sink_column = sink.to(scores.dtype).view(-1, 1, 1).expand(*scores.shape[:-1], 1)  # (..., h, L, 1)
    logits = torch.cat((scores, sink_column), dim=-1)  # (..., h, L, S + 1)
    # Only a row blocked everywhere with a sink of -inf has nothing left: zeros, as without a sink.
    blocked_row = torch.isneginf(logits).all(dim=-1, keepdim=True)
    weights = logits.masked_fill(blocked_row, 0.0).softmax(dim=-1).masked_fill(blocked_row, 0.0)
    return weights[..., :-1]  # the sink's weight goes nowhere: (..., h, L, S)


def _check_sink(sink: Tensor, scores: Tensor) -> None:
    """A sink is one real logit per head: (h,) with h = scores.size(-3) for scores (..., h, L, S)."""
    if not isinstance(sink, Tensor) or not sink.is_floating_point():
        kind = sink.dtype if isinstance(sink, Tensor) else type(sink).__name__
        raise TypeError(f"sink must be a floating-point tensor (h,) of one logit per head, got {kind}")
    if scores.dim() < 3 or sink.dim() != 1 or sink.size(0) != scores.size(-3):
        heads = scores.size(-3) if scores.dim() >= 3 else "h"
        raise ValueError(
            f"sink must hold one logit per head, shape ({heads},) for scores {tuple(scores.shape)} (..., h, L, S); "
            f"got shape {tuple(sink.shape)}"
        )
    if bool((torch.isposinf(sink) | torch.isnan(sink)).any()):
        raise ValueError(
            f"sink logits must be real numbers or -inf (plain attention), got {sink.tolist()}: a sink of +inf or NaN "
            "would take every weight and leave NaN"
        )


def check_query_key_value(query: Tensor, key: Tensor, value: Tensor) -> None:
    """Refuse query (..., L, d), key (..., S, d), value (..., S, dv) that no attention could combine.

    The one check behind ``scaled_dot_product_attention`` and ``helpers.flash_attention``: real floating tensors of
    one dtype, at least 2 dims, leading (batch, head) dims that broadcast, one head size d > 0 for query and key,
    one length S for key and value. Each error names the argument and the shape it expected.
    """
    tensors = {"query": query, "key": key, "value": value}
    for name, tensor in tensors.items():
        if not isinstance(tensor, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if not tensor.is_floating_point():
            raise TypeError(
                f"{name} must be a real floating-point tensor (float32, float64, bfloat16…), got {tensor.dtype}"
            )
    if len({t.dtype for t in tensors.values()}) > 1:
        raise TypeError(
            f"query, key and value must have one dtype, got {query.dtype}, {key.dtype}, {value.dtype} "
            "(convert them with .to(dtype) first)"
        )
    if query.dim() < 2 or key.dim() < 2 or value.dim() < 2:
        raise ValueError(
            "query, key and value need at least 2 dims (..., length, features); got shapes "
            f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
        )
    # The leading (batch, head) dims must broadcast, as in F.scaled_dot_product_attention; equal ones (every
    # decoding step's) do, and torch.broadcast_shapes, written in Python, cost 3 % of SmolLM2's generation.
    try:
        if not query.shape[:-2] == key.shape[:-2] == value.shape[:-2]:
            torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    except RuntimeError:
        raise ValueError(
            "the leading (batch, head) dims of query, key and value must be equal or 1: got query "
            f"{tuple(query.shape)} (..., L, d), key {tuple(key.shape)} (..., S, d), value {tuple(value.shape)} "
            "(..., S, dv)"
        ) from None
    if query.size(-1) != key.size(-1):
        raise ValueError(
            f"query and key must have the same feature size d: query (..., L, {query.size(-1)}) "
            f"vs key (..., S, {key.size(-1)})"
        )
    if query.size(-1) == 0:
        raise ValueError(f"the head size d must be at least 1, got query {tuple(query.shape)} (..., L, 0)")
    if key.size(-2) != value.size(-2):
        raise ValueError(
            f"key and value must have the same length S: key (..., {key.size(-2)}, d) "
            f"vs value (..., {value.size(-2)}, dv)"
        )


def check_scale(scale: float | None) -> None:
    """None (1/√d) or a finite real number: a NaN or infinite scale would silently give NaN weights."""
    if scale is None:
        return
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not math.isfinite(scale):
        raise ValueError(f"scale must be a finite number (or None for 1/sqrt(d)), got {scale!r}")


def _additive_mask(attn_mask: Tensor, scores: Tensor) -> Tensor:
    """Turn an sdpa-style mask (bool True = take part, or float) into a float mask to add to scores."""
    try:
        fits = torch.broadcast_shapes(attn_mask.shape, scores.shape) == scores.shape
    except RuntimeError:
        fits = False
    if not fits:  # a mask with more batch dims than the scores would silently add them to the output
        raise ValueError(
            f"attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to the scores' shape "
            f"{tuple(scores.shape)} (..., L, S): each of its dims must equal the scores' or be 1, and it "
            "may not have more dims"
        ) from None
    if attn_mask.dtype == torch.bool:
        return torch.zeros_like(attn_mask, dtype=scores.dtype).masked_fill(~attn_mask, float("-inf"))
    if attn_mask.is_floating_point():
        return attn_mask.to(scores.dtype)
    raise TypeError(f"attn_mask must be bool or floating point, got {attn_mask.dtype}")


def _warn_if_inverted(may_attend: Tensor) -> None:
    """Warn when a boolean sdpa mask (True = may attend) blocks every key of a query where that is a mistake.

    Two patterns: a row of a mask shared by every sequence ((L, S): no sequence can use that query), and a
    sequence whose every query is blocked (an inverted padding mask blocks whole unpadded sentences).
    Padding *queries* blocked inside a batched mask are legitimate and pass silently.
    """
    blocked = ~may_attend.any(dim=-1)  # (..., L): True where a query has no key it may attend to
    if not blocked.any():
        return
    shared = may_attend.dim() <= 2
    if not shared and not blocked.all(dim=-1).any():
        return
    where = "a query of this mask, shared by every sequence," if shared else "every query of some sequence"
    warnings.warn(
        f"attn_mask leaves {where} with no key to attend to (zero weights, zero output). "
        "helpers.scaled_dot_product_attention follows F.scaled_dot_product_attention: a boolean mask is "
        "True where a query MAY attend. helpers.causal_mask and helpers.padding_mask follow "
        "nn.MultiheadAttention (True = blocked): if you passed one of them, flip it, e.g. ~causal_mask(L).",
        MaskConventionWarning,
        stacklevel=3,
    )


# ---------------------------------------------------------------------------------------------
# The attention core: heads in, heads out (every multi-head front end below and beyond calls it)
# ---------------------------------------------------------------------------------------------
WeightsFromScores = Callable[[Tensor, "Tensor | None", "Tensor | None"], Tensor]
"""``(scores (N, h, L, S), mask, positions (L,) or None) -> weights (N, h, L, S)``: replaces ``masked_softmax``."""


def attend(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    *,
    need_weights: bool = False,
    weights_from_scores: WeightsFromScores | None = None,
    positions: Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
    sink: Tensor | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Per-head attention: query (N, h, L, d), key (N, h_kv, S, d), value (N, h_kv, S, dv) -> (out, weights).

    Query head i reads key/value head i // g (g = h / h_kv; h_kv = h is multi-head attention). ``mask``:
    None, boolean (**True = may attend**) or float (added to the scores), broadcastable to (N, h, L, S).
    ``out`` is (N, h, L, dv); ``weights`` (N, h, L, S), or None unless ``need_weights``.

    With ``need_weights`` or a ``weights_from_scores`` the attention is spelled out: scores q·kᵀ / √d (or
    × ``scale``), weights from ``weights_from_scores(scores, mask, positions)`` (default ``masked_softmax``),
    dropout, weighted sum. Otherwise ``fused_attention`` computes the same output without building the weights
    (tested equal). ``positions`` (L,): the queries' positions, passed on to ``weights_from_scores`` only.
    ``sink``: None, or one sink logit per query head, (h,), for ``masked_softmax`` (gpt-oss; the attention is then
    spelled out: torch's kernel has no sink column). A ``weights_from_scores`` replaces the softmax, so it
    cannot be combined with a sink (an error, not a sink silently dropped).
    """
    _check_heads(query, key, value)
    check_scale(scale)
    if sink is not None and weights_from_scores is not None:
        raise ValueError(
            "weights_from_scores replaces masked_softmax and would drop the sink: pass one of them, or call "
            "masked_softmax(scores, mask, sink=sink) inside your weights_from_scores"
        )
    if not (need_weights or weights_from_scores is not None or sink is not None):
        return fused_attention(query, key, value, mask, dropout_p=dropout_p, scale=scale), None
    groups = query.size(1) // key.size(1)
    keys, values = repeat_kv_heads(key, groups), repeat_kv_heads(value, groups)  # (N, h, S, ·)
    scores = query @ keys.transpose(-2, -1)  # (N, h, L, d) @ (N, h, d, S) -> (N, h, L, S)
    # Without a gradient to follow, the (N, h, L, S) scores are scaled and turned into weights in place.
    in_place = not (torch.is_grad_enabled() and scores.requires_grad)
    if scale is None:
        scores = scores.div_(math.sqrt(query.size(-1))) if in_place else scores / math.sqrt(query.size(-1))
    else:
        scores = scores.mul_(scale) if in_place else scores * scale
    if weights_from_scores is not None:
        weights = weights_from_scores(scores, mask, positions)
    elif sink is not None:
        weights = masked_softmax(scores, mask, sink)
    else:
        weights = masked_softmax_(scores, mask) if in_place else masked_softmax(scores, mask)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ values, weights  # (N, h, L, S) @ (N, h, S, dv) -> (N, h, L, dv)


def _check_heads(query: Tensor, key: Tensor, value: Tensor) -> None:
    """query (N, h, L, d), key (N, h_kv, S, d), value (N, h_kv, S, dv), h a multiple of h_kv."""
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        if not isinstance(tensor, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise ValueError(
            "attend expects per-head tensors query (N, h, L, d), key (N, h_kv, S, d), value (N, h_kv, S, dv) "
            f"(split_heads makes them); got {tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
        )
    if key.size(1) == 0 or key.size(1) != value.size(1) or query.size(1) % key.size(1):
        raise ValueError(
            f"the {query.size(1)} query heads must be a multiple of the key/value heads, and key and value need "
            f"one head count: got query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
        )
    check_query_key_value(query[:, :1], key[:, :1], value[:, :1])  # dtypes, batch, d and S; heads checked above


class AttentionCore(nn.Module):
    """The base of every multi-head front end: one ``attend_heads`` and one rule from scores to weights.

    No parameters of its own: a subclass adds its projections (and so its state dict). It projects its inputs
    to heads, q (N, h, L, d) and k, v (N, h_kv, S, ·), calls ``self.attend_heads(q, k, v, mask)`` and merges
    the heads (``merge_heads``) into its output projection.

    ``weights_from_scores``: None (``masked_softmax``) or a ``WeightsFromScores`` function that replaces it,
    for an experiment that changes what the heads may read (``helpers.analysis.sinks.blocked_key`` hides one
    key with it). A variant whose rule differs for good overrides ``scores_to_weights`` instead. Either way
    the attention is spelled out, as with ``need_weights``.

    ``sinks``: a front end that registers a parameter ``sinks`` (h,) (``helpers.gpt`` with
    ``GPTConfig(attention_sinks=True)``) gets gpt-oss's sink logits in ``masked_softmax``: one extra column per
    head whose weight is dropped. A ``weights_from_scores`` hook would drop them silently, so the two together
    are an error. (Not a class attribute: ``nn.Module`` keeps parameters apart and would not find it.)
    """

    weights_from_scores: WeightsFromScores | None = None

    @property
    def sink_logits(self) -> Tensor | None:
        """The front end's ``sinks`` (h,) parameter, or None when it has none."""
        return getattr(self, "sinks", None)

    def scores_to_weights(self, scores: Tensor, mask: Tensor | None, positions: Tensor | None) -> Tensor:
        """scores (N, h, L, S) -> weights (N, h, L, S): the hook if one is set, else ``masked_softmax``
        (with the module's sink logits, if it has any)."""
        if self.weights_from_scores is not None:
            return self.weights_from_scores(scores, mask, positions)
        return masked_softmax(scores, mask, self.sink_logits)

    def attend_heads(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        need_weights: bool = False,
        positions: Tensor | None = None,
        dropout_p: float = 0.0,
        scale: float | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """``attend`` with this module's rule from scores to weights: (out (N, h, L, dv), weights or None)."""
        sink = self.sink_logits
        if sink is not None and self.weights_from_scores is not None:
            raise ValueError(
                "this attention has sink logits (sinks) and a weights_from_scores hook, which replaces "
                "masked_softmax and would drop them: call masked_softmax(scores, mask, sink=module.sinks) in the hook "
                "and set module.sinks = None, or remove the hook"
            )
        replaced = self.weights_from_scores is not None or type(self).scores_to_weights is not (
            AttentionCore.scores_to_weights
        )
        return attend(
            query,
            key,
            value,
            mask,
            need_weights=need_weights,
            weights_from_scores=self.scores_to_weights if replaced else None,
            positions=positions,
            dropout_p=dropout_p,
            scale=scale,
            sink=None if replaced else sink,
        )


# ---------------------------------------------------------------------------------------------
# Fast paths: the same numbers as the teaching code above, computed with less time or memory
# ---------------------------------------------------------------------------------------------
def fused_attention(
    query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None, dropout_p: float = 0.0, scale=None
) -> Tensor:
    """``attend``'s output without its weights: torch's fused kernel. (N, h, L, d), (N, h_kv, S, d) x 2 -> (N, h, L, d).

    It never materialises the (N, h, L, S) weights, and with h_kv < h it reads each key/value head for its g
    query heads in place (``enable_gqa``) instead of copying the keys and values g times."""
    grouped = query.size(1) != key.size(1)
    return F.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, dropout_p=dropout_p, scale=scale, enable_gqa=grouped
    )


def masked_softmax_(scores: Tensor, mask: Tensor | None = None) -> Tensor:
    """``masked_softmax`` written over ``scores`` (returned): for when no gradient flows through them.

    Saves allocating and filling a second (..., L, S) tensor, the largest of the whole computation."""
    if mask is None:
        return torch.softmax(scores, dim=-1, out=scores)
    scores.add_(_additive_mask(mask, scores))
    blocked_row = torch.isneginf(scores).all(dim=-1, keepdim=True)  # (..., L, 1)
    return torch.softmax(scores.masked_fill_(blocked_row, 0.0), dim=-1, out=scores).masked_fill_(blocked_row, 0.0)


def fused_self_attention_heads(
    x: Tensor, in_proj_weight: Tensor, in_proj_bias: Tensor | None, num_heads: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Self-attention's q, k, v heads from one product: x (N, L, E), weight (3E, E) -> (N, h, L, d) x 3.

    The same numbers as projecting with W_q, W_k, W_v one by one and ``split_heads``; one (N, L, E) @ (E, 3E)
    product instead of three, and the heads are strided views into it: torch's fused kernel reads them in place
    and writes its output token-major, so merging the heads afterwards is free too."""
    N, L, _ = x.shape
    qkv = F.linear(x, in_proj_weight, in_proj_bias)  # (N, L, 3E)
    qkv = qkv.view(N, L, 3, num_heads, -1).permute(2, 0, 3, 1, 4)  # (3, N, h, L, d), a view
    q, k, v = qkv.unbind(0)
    return q, k, v


# ---------------------------------------------------------------------------------------------
# Multi-head attention (lesson 04), a drop-in for torch.nn.MultiheadAttention
# ---------------------------------------------------------------------------------------------
class MultiHeadAttention(AttentionCore):
    """Multi-head attention built from scratch, drop-in compatible with ``nn.MultiheadAttention``.

    Same constructor, parameter names (``in_proj_weight`` or ``q/k/v_proj_weight``,
    ``in_proj_bias``, ``out_proj.weight``, ``out_proj.bias``), so ``load_state_dict`` works in both
    directions; same ``forward`` signature and outputs.

    Shapes (``batch_first=False`` puts the length first: (L, N, E) instead of (N, L, E)):
        query: (N, L, E)        key: (N, S, kdim)        value: (N, S, vdim)
        key_padding_mask: (N, S), bool **True = padding, ignore**, or float added to the scores
        attn_mask: (L, S) or (N*h, L, S), bool **True = blocked**, or float added to the scores
        returns output (N, L, E) and weights (N, L, S) averaged over heads, or (N, h, L, S) with
        ``average_attn_weights=False``, or None with ``need_weights=False``.
    Unbatched inputs drop the N dimension everywhere.

    The steps, as lesson 04 teaches them: ``project_query`` and ``project_key_value`` (W_q, W_k, W_v, then
    ``split_heads``), ``attend_projected`` (the core's ``attend_heads``, ``merge_heads``, W_o). Self-attention
    without weights takes the fast path instead (``fused_self_attention_heads``, then the fused kernel): the
    same numbers, tested.

    Differences from torch, on purpose: ``add_bias_kv`` and ``add_zero_attn`` raise
    ``NotImplementedError``; a query whose every key is masked gets zero weights (torch gives NaN
    when it returns weights, zeros when it does not).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        _check_sizes(embed_dim=embed_dim, num_heads=num_heads, kdim=kdim, vdim=vdim, dropout=dropout)
        if add_bias_kv or add_zero_attn:
            raise NotImplementedError("add_bias_kv and add_zero_attn are not supported by this teaching module")
        factory = {"device": device, "dtype": dtype}
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.dropout, self.batch_first = dropout, batch_first
        # No bias_k / bias_v; kept as attributes because nn.Transformer layers read them.
        self.bias_k = self.bias_v = None
        self.add_zero_attn = False

        # The three input projections W_q, W_k, W_v. When all inputs have size E they are stacked
        # in one (3E, E) matrix, exactly as torch stores them (so state dicts are interchangeable).
        if self._qkv_same_embed_dim:
            self.in_proj_weight = nn.Parameter(torch.empty(3 * embed_dim, embed_dim, **factory))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = nn.Parameter(torch.empty(embed_dim, embed_dim, **factory))
            self.k_proj_weight = nn.Parameter(torch.empty(embed_dim, self.kdim, **factory))
            self.v_proj_weight = nn.Parameter(torch.empty(embed_dim, self.vdim, **factory))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = nn.Parameter(torch.empty(3 * embed_dim, **factory))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        # The same initialisation as torch: Xavier-uniform projections, zero biases.
        if self._qkv_same_embed_dim:
            nn.init.xavier_uniform_(self.in_proj_weight)
        else:
            for weight in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                nn.init.xavier_uniform_(weight)
        if self.in_proj_bias is not None:
            nn.init.zeros_(self.in_proj_bias)
            nn.init.zeros_(self.out_proj.bias)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = True,
        attn_mask: Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        unbatched = query.dim() == 2
        query, key, value, key_padding_mask = self._to_batch_first(query, key, value, key_padding_mask, unbatched)
        N, L, _ = query.shape
        S = key.size(1)
        if is_causal and attn_mask is None:
            raise ValueError("is_causal=True is a hint that attn_mask is causal: pass the causal attn_mask too")
        mask = merge_masks(attn_mask, key_padding_mask, N, self.num_heads, L, S, query.dtype)  # (N|1, h|1, L, S)

        if not need_weights and self._qkv_same_embed_dim and query is key and key is value:
            # Fast path, the same numbers: self-attention's three projections as one strided product.
            q, k, v = fused_self_attention_heads(query, self.in_proj_weight, self.in_proj_bias, self.num_heads)
        else:
            q, (k, v) = self.project_query(query), self.project_key_value(key, value)  # (N, h, L|S, d)
            if need_weights:  # the spelled-out products read head-major matrices faster: one copy each
                q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        out, weights = self.attend_projected(q, k, v, mask, need_weights)  # (N, L, E), (N, h, L, S) or None

        if weights is not None and average_attn_weights:
            weights = weights.mean(dim=1)  # (N, h, L, S) -> (N, L, S)
        if unbatched:
            out = out.squeeze(0)
            weights = None if weights is None else weights.squeeze(0)
        elif not self.batch_first:
            out = out.transpose(0, 1)  # (N, L, E) -> (L, N, E)
        return out, weights

    # -- steps of the forward pass (batch first), also what a decoder runs one position at a time -------
    def project_query(self, query: Tensor) -> Tensor:
        """W_q (and its bias), then split heads: query (N, L, E) -> (N, h, L, d)."""
        E = self.embed_dim
        weight = self.in_proj_weight[:E] if self._qkv_same_embed_dim else self.q_proj_weight
        bias = None if self.in_proj_bias is None else self.in_proj_bias[:E]
        return split_heads(F.linear(query, weight, bias), self.num_heads)

    def project_key_value(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """W_k and W_v (and biases), then split heads: key (N, S, kdim), value (N, S, vdim) -> (N, h, S, d) x 2.

        What a decoder caches of its earlier positions, or of the encoder's memory (``helpers.kv_cache``)."""
        E = self.embed_dim
        if self._qkv_same_embed_dim:
            w_k, w_v = self.in_proj_weight[E : 2 * E], self.in_proj_weight[2 * E :]
        else:
            w_k, w_v = self.k_proj_weight, self.v_proj_weight
        b_k = b_v = None
        if self.in_proj_bias is not None:
            b_k, b_v = self.in_proj_bias[E : 2 * E], self.in_proj_bias[2 * E :]
        k, v = F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)  # (N, S, E) each
        return split_heads(k, self.num_heads), split_heads(v, self.num_heads)

    def attend_projected(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """Heads already projected, q (N, h, L, d), k and v (N, h, S, d); ``mask`` broadcastable to
        (N, h, L, S), True = may attend or float added (``merge_masks`` makes one from torch-style masks).
        Returns the output (N, L, E) after W_o and the weights (N, h, L, S) or None."""
        dropout_p = self.dropout if self.training else 0.0
        out, weights = self.attend_heads(q, k, v, mask, need_weights=need_weights, dropout_p=dropout_p)
        return self.out_proj(merge_heads(out)), weights  # (N, h, L, d) -> (N, L, E) -> W_o -> (N, L, E)

    def _to_batch_first(self, query, key, value, key_padding_mask, unbatched):
        """Check shapes and bring every input to (N, T, features)."""
        _check_dtypes(self.out_proj.weight.dtype, query=query, key=key, value=value)
        expected_dims = 2 if unbatched else 3
        for name, x in (("query", query), ("key", key), ("value", value)):
            if x.dim() != expected_dims:
                raise ValueError(
                    f"{name} must be {'2-D (unbatched, T x E)' if unbatched else '3-D (batched)'} like the "
                    f"query, got shape {tuple(x.shape)}"
                )
        for name, x, size in (("query", query, self.embed_dim), ("key", key, self.kdim), ("value", value, self.vdim)):
            if x.size(-1) != size:
                raise ValueError(f"{name} must have {size} features in its last dim, got shape {tuple(x.shape)}")
        if unbatched:
            query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
            if key_padding_mask is not None:
                if key_padding_mask.dim() != 1:
                    raise ValueError(
                        f"unbatched input needs a 1-D key_padding_mask (S,), got shape {tuple(key_padding_mask.shape)}"
                    )
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif not self.batch_first:
            query, key, value = (x.transpose(0, 1) for x in (query, key, value))  # (T, N, ·) -> (N, T, ·)
        layout = None if unbatched else ("(N, T, E)" if self.batch_first else "(T, N, E)")
        _check_batch_and_length(query, key, value, layout)
        return query, key, value, key_padding_mask


def _check_sizes(embed_dim, num_heads, dropout: float, num_kv_heads=None, kdim=None, vdim=None) -> None:
    """Constructor checks shared by MultiHeadAttention and GroupedQueryAttention (clear messages, not torch's)."""
    sizes = {"embed_dim": embed_dim, "num_heads": num_heads, "num_kv_heads": num_kv_heads, "kdim": kdim, "vdim": vdim}
    for name, value in sizes.items():
        if value is None and name in ("num_kv_heads", "kdim", "vdim"):
            continue
        if not isinstance(value, numbers.Integral) or isinstance(value, bool):
            raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")
    if embed_dim % num_heads != 0:
        raise ValueError(
            f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads}): each head gets "
            f"embed_dim / num_heads features"
        )
    if not isinstance(dropout, numbers.Real) or isinstance(dropout, bool) or not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout is the probability of zeroing an attention weight: expected [0, 1), got {dropout!r}")


def _check_dtypes(weights_dtype: torch.dtype, **inputs: Tensor) -> None:
    """Inputs must be tensors of the module's dtype (a float16 module given float32 fails deep inside F.linear)."""
    for name, x in inputs.items():
        if not isinstance(x, Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(x).__name__}")
        if x.dtype != weights_dtype:
            raise TypeError(
                f"{name} has dtype {x.dtype} but the module's weights are {weights_dtype}: convert one to the "
                f"other (e.g. module.to({x.dtype}) or {name}.to({weights_dtype}))"
            )


def _check_batch_and_length(
    query: Tensor, key: Tensor, value: Tensor, layout: str | None, switchable: bool = True
) -> None:
    """Batch-first (N, T, ·) inputs: equal batch sizes, key and value of one length S.

    ``layout`` is how the caller read the inputs ("(T, N, E)" or "(N, T, E)", None if unbatched): when the other
    reading would make the batch sizes agree, the message says so (the ``batch_first`` mix-up); ``switchable``
    says whether the module has a ``batch_first`` option to suggest, or only transposing helps.
    """
    if key.shape[:2] != value.shape[:2]:
        raise ValueError(
            f"key and value must have the same batch size and length, got {tuple(key.shape)} and "
            f"{tuple(value.shape)} (read as (N, S, ·))"
        )
    if query.size(0) != key.size(0):
        message = f"query and key must have the same batch size, got {query.size(0)} and {key.size(0)}"
        if layout is not None and query.size(1) == key.size(1):
            other = "(N, T, E)" if layout == "(T, N, E)" else "(T, N, E)"
            flag = "True" if other == "(N, T, E)" else "False"
            fix = f"build it with batch_first={flag}, or transpose the inputs" if switchable else "transpose them"
            message += f". This module reads inputs as {layout}; read as {other} the batch sizes would agree: {fix}"
        raise ValueError(message)


# ---------------------------------------------------------------------------------------------
# Grouped-query attention (lesson 04's modern variant)
# ---------------------------------------------------------------------------------------------
class GroupedQueryAttention(AttentionCore):
    """Attention whose ``num_heads`` query heads share ``num_kv_heads`` key/value heads.

    ``num_kv_heads == num_heads`` is standard multi-head attention; ``num_kv_heads == 1`` is
    multi-query attention. Fewer key/value heads shrink the key/value cache a decoder keeps by a
    factor ``num_heads / num_kv_heads`` (see ``kv_cache_numel``).

    Always batch first. Shapes: query (N, L, E), key/value (N, S, E); masks as in
    ``MultiHeadAttention`` (True = blocked); returns output (N, L, E) and weights (N, L, S) averaged
    over the query heads, (N, h, L, S) with ``average_attn_weights=False``, or None.

    ``head_dim``: d, when the heads are not E / h wide (Gemma 3 270M: h = 4 heads of d = 256 on E = 640): the
    query projection is then E -> h·d and the output projection h·d -> E.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        num_kv_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        head_dim: int | None = None,
    ) -> None:
        super().__init__()
        if head_dim is not None and (isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 1):
            raise ValueError(f"head_dim must be a positive int (d) or None (E / h), got {head_dim!r}")
        if head_dim is None:  # E / h must then be a whole number; with its own d any E serves
            _check_sizes(embed_dim=embed_dim, num_heads=num_heads, num_kv_heads=num_kv_heads, dropout=dropout)
        else:
            _check_sizes(
                embed_dim=num_heads * head_dim, num_heads=num_heads, num_kv_heads=num_kv_heads, dropout=dropout
            )
            _check_sizes(embed_dim=embed_dim, num_heads=1, dropout=dropout)
        if num_heads % num_kv_heads != 0:
            raise ValueError(
                f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads}): each key/value "
                f"head serves a whole group of query heads"
            )
        self.embed_dim, self.num_heads, self.num_kv_heads = embed_dim, num_heads, num_kv_heads
        self.head_dim = embed_dim // num_heads if head_dim is None else head_dim
        self.dropout = dropout
        q_dim, kv_dim = num_heads * self.head_dim, num_kv_heads * self.head_dim
        self.q_proj = nn.Linear(embed_dim, q_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, kv_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, kv_dim, bias=bias)
        self.out_proj = nn.Linear(q_dim, embed_dim, bias=bias)

    def kv_cache_numel(self, seq_len: int, batch_size: int = 1) -> int:
        """Numbers a decoder caches per layer for ``seq_len`` tokens: keys and values of every kv head,
        N · T · 2 · h_kv · d (counted by ``helpers.kv_cache.layer_cache_numbers``)."""
        for name, value in (("seq_len", seq_len), ("batch_size", batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        per_token = layer_cache_numbers("GQA", self.head_dim, self.num_heads, self.num_kv_heads)
        return batch_size * seq_len * per_token

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = False,
        attn_mask: Tensor | None = None,
        average_attn_weights: bool = True,
    ) -> tuple[Tensor, Tensor | None]:
        if query.dim() != 3 or key.dim() != 3 or value.dim() != 3:
            raise ValueError(
                f"GroupedQueryAttention expects batch-first 3-D inputs (N, T, E); got {tuple(query.shape)}, "
                f"{tuple(key.shape)}, {tuple(value.shape)}"
            )
        _check_dtypes(self.q_proj.weight.dtype, query=query, key=key, value=value)
        for name, x in (("query", query), ("key", key), ("value", value)):
            if x.size(-1) != self.embed_dim:
                raise ValueError(
                    f"{name} must have {self.embed_dim} features in its last dim, got shape {tuple(x.shape)}"
                )
        _check_batch_and_length(query, key, value, "(N, T, E)", switchable=False)
        N, L, _ = query.shape
        S = key.size(1)
        q = split_heads(self.q_proj(query), self.num_heads)  # (N, h, L, d)
        k = split_heads(self.k_proj(key), self.num_kv_heads)  # (N, h_kv, S, d)
        v = split_heads(self.v_proj(value), self.num_kv_heads)  # (N, h_kv, S, d): each serves g query heads
        mask = merge_masks(attn_mask, key_padding_mask, N, self.num_heads, L, S, q.dtype)
        dropout_p = self.dropout if self.training else 0.0
        out, weights = self.attend_heads(q, k, v, mask, need_weights=need_weights, dropout_p=dropout_p)
        if weights is not None and average_attn_weights:
            weights = weights.mean(dim=1)  # (N, h, L, S) -> (N, L, S)
        return self.out_proj(merge_heads(out)), weights  # (N, h, L, d) -> (N, L, E) -> W_o
