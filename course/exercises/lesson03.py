"""Checks for lesson 03's exercises: attention weights, and masked scaled dot-product attention.

The masks here follow ``torch.nn.functional.scaled_dot_product_attention``: a boolean mask is
**True where a query may attend** to a key.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor

from course.exercises.feedback import (
    LearnerError,
    Verdict,
    as_tensor,
    call_learner,
    close,
    diagnose,
    expect_plain_tensor,
    expect_shape,
    run_check,
    wrong,
)
from helpers.attention import scaled_dot_product_attention

__all__ = ["check_attention_weights", "check_masked_attention", "check_padding_to_attn_mask"]


def _weights(
    q: Tensor,
    k: Tensor,
    mask: Tensor | None = None,
    *,
    scale: float | None = None,
    softmax_dim: int = -1,
    transpose_keys: bool = True,
    mask_fill: float = float("-inf"),
    mask_after_softmax: bool = False,
) -> Tensor:
    """Attention weights, with switches that reproduce the usual mistakes one at a time."""
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    keys = k.transpose(-2, -1) if transpose_keys else k
    scores = q @ keys * scale  # (..., L, S)
    if mask is not None and not mask_after_softmax:
        scores = scores.masked_fill(~mask, mask_fill)
    weights = torch.softmax(scores, dim=softmax_dim)
    if mask is not None and mask_after_softmax:
        weights = weights.masked_fill(~mask, 0.0)
    return weights


def _scaled_scores(q: Tensor, k: Tensor) -> Tensor:
    """Q Kᵀ / √d: what forgetting the softmax returns."""
    return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))


def _unscaled_then_divided(q: Tensor, k: Tensor) -> Tensor:
    """softmax(Q Kᵀ) / √d: the scaling applied to the weights instead of the scores."""
    return torch.softmax(q @ k.transpose(-2, -1), dim=-1) / math.sqrt(q.size(-1))


def _mask_added(q: Tensor, k: Tensor, mask: Tensor) -> Tensor:
    """softmax(Q Kᵀ / √d + mask): a boolean mask added as 0 / 1 instead of blocking."""
    return torch.softmax(_scaled_scores(q, k) + mask.to(q.dtype), dim=-1)


def _keys_times_queries(q: Tensor, k: Tensor) -> Tensor:
    """softmax(K Qᵀ / √d): the product taken in the wrong order, (S, L) instead of (L, S)."""
    return torch.softmax(k @ q.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)


def _times(weights: Callable[[], Tensor], v: Tensor) -> Tensor:
    """The output ``weights() @ v`` of a mistake given by its weights."""
    return weights() @ v


def _not_transposed_hint(error: Exception) -> str:
    return (
        f"your code works for one sentence but not for a batch ({error}). `k.T` reverses EVERY dimension of a "
        "batched (N, S, d) tensor; swap only the last two: `k.transpose(-2, -1)`, giving (N, d, S)."
    )


def _call_learner(function: Callable[..., Tensor], args: tuple[Tensor, ...], name: str, shapes_differ: bool) -> Tensor:
    """Run the learner's function on copies of ``args``; where L != S, a shape error means untransposed keys."""
    try:
        result = call_learner(function, *(a.clone() for a in args))
    except LearnerError as problem:
        if shapes_differ and isinstance(problem.error, RuntimeError):
            raise wrong(_not_transposed_hint(problem.error)) from None
        raise
    return as_tensor(result, name)


def _batch_hints(q64: Tensor, k64: Tensor, mask: Tensor | None = None) -> dict[str, Callable[[], Tensor]]:
    """Mistakes that only show with a batch in front: code that counts dimensions from the start.

    For one sentence, q is (L, d) and the scores (L, S): ``q.shape[1]`` is d and ``dim=1`` the keys.
    With a batch, q is (N, L, d) and the scores (N, L, S): the same code reads L and softmaxes over the queries.
    """
    length_scale = 1.0 / math.sqrt(q64.size(-2))
    return {
        "the softmax runs over dim=1: for one sentence's (L, S) scores that is the keys, but for a batch's "
        "(N, L, S) scores it is the queries. Count from the end, `softmax(scores, dim=-1)`, and your code works "
        "with or without a batch.": partial(_weights, q64, k64, mask, softmax_dim=-2),
        "the scale uses `q.shape[1]`: for one sentence's (L, d) queries that is d, but for a batch's (N, L, d) "
        "it is L. Take the last dimension, `d = q.shape[-1]`.": partial(_weights, q64, k64, mask, scale=length_scale),
        # last: with a padding mask both are all NaN, and the simpler hint should win there
        "`dim=1` and `q.shape[1]` count from the front: for one sentence they are the keys and d, but with a batch "
        "in front, (N, L, S) scores and (N, L, d) queries, they are the queries and L. Count from the end: "
        "`softmax(scores, dim=-1)` and `d = q.shape[-1]`.": partial(
            _weights, q64, k64, mask, scale=length_scale, softmax_dim=-2
        ),
    }


# ---------------------------------------------------------------------------------------------
# Exercise 1: attention weights softmax(Q Kᵀ / √d)
# ---------------------------------------------------------------------------------------------
def check_attention_weights(attention_weights: Callable[[Tensor, Tensor], Tensor]) -> Verdict:
    """Check ``attention_weights(q, k)``: q (..., L, d), k (..., S, d) -> weights (..., L, S)."""

    def body() -> str:
        generator = torch.Generator().manual_seed(4)
        # Case 1: square (L = S = d), where forgetting to transpose the keys still runs.
        # Case 2: a batch with L != S, where the shapes tell the dimensions apart.
        cases = [(torch.randn(4, 4, generator=generator) * 2, torch.randn(4, 4, generator=generator) * 2)]
        cases.append((torch.randn(2, 3, 8, generator=generator), torch.randn(2, 5, 8, generator=generator)))
        for index, (q, k) in enumerate(cases):
            expected = _weights(q.double(), k.double())
            answer = _call_learner(attention_weights, (q, k), "the weights", shapes_differ=index == 1)
            expect_shape(answer, expected.shape, "the weights", "(..., L, S)")
            if close(answer, expected):
                continue
            q64, k64 = q.double(), k.double()
            d = q.size(-1)
            mistakes = _batch_hints(q64, k64) if index == 1 else {}
            mistakes |= {
                "the scores are not scaled: divide Q Kᵀ by √d (here √" + f"{d}" + ") before the softmax.": partial(
                    _weights, q64, k64, scale=1.0
                ),
                "the scores are divided by d instead of √d: use `/ math.sqrt(d)` (or `* d ** -0.5`).": partial(
                    _weights, q64, k64, scale=1.0 / d
                ),
                "the softmax runs over the wrong dimension: each QUERY's row (the last dimension, over the keys) "
                "must sum to 1, so use `softmax(scores, dim=-1)`.": partial(_weights, q64, k64, softmax_dim=-2),
                # only computable where L = S = d; elsewhere the shapes do not fit and diagnose skips it
                "the keys are not transposed: the scores are Q Kᵀ, `q @ k.transpose(-2, -1)`. With L = S = d "
                "`q @ k` runs too, but multiplies queries with the wrong numbers.": partial(
                    _weights, q64, k64, transpose_keys=False
                ),
                "the softmax is missing: these are the scaled scores; turn each row into weights with "
                "`torch.softmax(scores, dim=-1)`.": partial(_scaled_scores, q64, k64),
                "the keys are not transposed AND the scores are not scaled.": partial(
                    _weights, q64, k64, scale=1.0, transpose_keys=False
                ),
                "the scores are multiplied by √d: divide them, `/ math.sqrt(d)`, so that large head sizes give "
                "smaller, not larger, scores.": partial(_weights, q64, k64, scale=math.sqrt(d)),
                "the scaling comes after the softmax: divide the SCORES by √d, then take the softmax (dividing the "
                "weights leaves rows that sum to 1 / √d).": partial(_unscaled_then_divided, q64, k64),
                "the scores are divided by √S, the number of keys: the scale is the size of a query or key, "
                "`d = q.shape[-1]`.": partial(_weights, q64, k64, scale=1.0 / math.sqrt(k.size(-2))),
                # S, L order: only computable where L = S; elsewhere the shape check has already answered
                "the scores are K Qᵀ, one row per KEY: compute `q @ k.transpose(-2, -1)` so that row i holds query "
                "i's scores.": partial(_keys_times_queries, q64, k64),
            }
            if index == 1:
                mistakes[
                    "the softmax runs over dim=0, the batch: `softmax` without `dim=` (or with `dim=0`) picks the "
                    "first dimension of a batched (N, L, S) tensor. Always give `dim=-1`, the keys."
                ] = partial(_weights, q64, k64, softmax_dim=0)
            if answer.dim() and torch.allclose(answer.sum(-1), torch.ones(()).double(), atol=1e-4):
                fallback = "each row sums to 1, but the numbers differ from softmax(Q Kᵀ / √d)."
            else:
                fallback = "the rows do not sum to 1: the weights of each query are a softmax over the keys."
            raise diagnose(answer, mistakes, fallback)
        return "softmax(Q Kᵀ / √d) over the keys, for one sentence and for a batch."

    return run_check("attention weights", body)


# ---------------------------------------------------------------------------------------------
# Exercise 2: masked scaled dot-product attention (output only)
# ---------------------------------------------------------------------------------------------
def check_masked_attention(masked_attention: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]) -> Verdict:
    """Check ``masked_attention(q, k, v, mask)`` -> output (..., L, dv); mask (L, S) bool, True = may attend."""

    def body() -> str:
        generator = torch.Generator().manual_seed(5)
        causal_keep = torch.ones(4, 4, dtype=torch.bool).tril()  # True = may attend (query i sees keys 0..i)
        padding_keep = torch.tensor([True, True, True, False, False]).expand(3, 5)  # the last 2 keys are padding
        cases = [
            # square, so that untransposed keys still run; dv = 3 differs from S so returned weights show
            (
                torch.randn(4, 4, generator=generator) * 2,
                torch.randn(4, 4, generator=generator) * 2,
                torch.randn(4, 3, generator=generator),
                causal_keep,
            ),
            (
                torch.randn(2, 3, 8, generator=generator),
                torch.randn(2, 5, 8, generator=generator),
                torch.randn(2, 5, 6, generator=generator),
                padding_keep,
            ),
            # a blocked key with a huge score (70): a finite fill such as -10 lets it through, -inf does not
            (
                torch.tensor([[10.0, 0.0]]),
                torch.tensor([[0.0, 1.0], [10.0, 0.0]]),
                torch.tensor([[1.0], [1000.0]]),
                torch.tensor([[True, False]]),
            ),
        ]
        for index, (q, k, v, mask) in enumerate(cases):
            expected, expected_weights = scaled_dot_product_attention(
                q.double(), k.double(), v.double(), attn_mask=mask
            )
            answer = _call_learner(masked_attention, (q, k, v, mask), "the output", shapes_differ=index == 1)
            if tuple(answer.shape) == tuple(expected_weights.shape) and answer.shape != expected.shape:
                raise wrong(
                    f"the result has the shape of the weights (..., L, S) = {tuple(expected_weights.shape)}: "
                    "return the "
                    "weighted sum of the values, `weights @ v`, of shape (..., L, dv)."
                )
            expect_shape(answer, expected.shape, "the output", "(..., L, dv)")
            if close(answer, expected):
                continue
            q64, k64, v64 = q.double(), k.double(), v.double()
            mistakes = _batch_hints(q64, k64, mask) if index == 1 else {}
            mistakes |= {
                "the softmax runs over the wrong dimension: each query's row must sum to 1, "
                "`softmax(scores, dim=-1)`.": partial(_weights, q64, k64, mask, softmax_dim=-2),
                "the mask is applied after the softmax: zeroing weights afterwards leaves rows that no longer sum "
                "to 1. Fill the blocked SCORES with -inf before the softmax.": partial(
                    _weights, q64, k64, mask, mask_after_softmax=True
                ),
                "the mask is inverted: here True means MAY attend (as in F.scaled_dot_product_attention), so block "
                "where the mask is False: `scores.masked_fill(~mask, float('-inf'))`.": partial(
                    _weights, q64, k64, ~mask
                ),
                "blocked scores are set to 0, not -inf: a score of 0 still gets weight after the softmax. "
                "Use `float('-inf')`.": partial(_weights, q64, k64, mask, mask_fill=0.0),
                "the mask is ignored: block the scores where the mask is False before the softmax.": partial(
                    _weights, q64, k64
                ),
                "the boolean mask is added to the scores: True and False become 1 and 0, which blocks nothing. "
                "Fill the blocked scores instead, `scores.masked_fill(~mask, float('-inf'))` (only a FLOAT mask "
                "of 0 and -inf is added).": partial(_mask_added, q64, k64, mask),
                "the scores are not scaled: divide Q Kᵀ by √d before masking and the softmax.": partial(
                    _weights, q64, k64, mask, scale=1.0
                ),
                # only computable where L = S = d; elsewhere the shapes do not fit and diagnose skips it
                "the keys are not transposed: the scores are `q @ k.transpose(-2, -1)`. With L = S = d `q @ k` "
                "runs too, but gives the wrong numbers.": partial(_weights, q64, k64, mask, transpose_keys=False),
            }
            if torch.isnan(answer).any():
                fallback = (
                    "your output has NaN: some query's softmax ran over -inf only, so every key of that query was "
                    "blocked. Here (as in F.scaled_dot_product_attention) True means MAY attend: fill the scores "
                    "where the mask is False, `scores.masked_fill(~mask, float('-inf'))`, and softmax over the "
                    "keys, `dim=-1`."
                )
            elif index == 2:
                fallback = (
                    "right for ordinary scores, wrong when a blocked key's score is huge (here about 70): a blocked "
                    "score must be -inf, `scores.masked_fill(~mask, float('-inf'))`. A finite fill such as -10 "
                    "still lets that key through."
                )
            else:
                fallback = "the shape is right but the numbers differ from softmax(mask(Q Kᵀ / √d)) @ V."
            raise diagnose(
                answer,
                {hint: partial(_times, weights, v64) for hint, weights in mistakes.items()},
                fallback,
            )
        return (
            "masked, scaled attention: the same output as F.scaled_dot_product_attention, "
            "with a causal and a padding mask."
        )

    return run_check("masked attention", body)


# ---------------------------------------------------------------------------------------------
# Exercise 3: from nn.MultiheadAttention's padding mask to F.scaled_dot_product_attention's mask
# ---------------------------------------------------------------------------------------------
def check_padding_to_attn_mask(padding_to_attn_mask: Callable[[Tensor], Tensor]) -> Verdict:
    """Check ``padding_to_attn_mask(key_padding_mask)``: (N, S) bool, True = padding -> a mask for
    ``F.scaled_dot_product_attention`` that broadcasts to (N, L, S) for any L: True = may attend
    (or a float mask, 0 to keep and -inf to block)."""

    def body() -> str:
        lengths = torch.tensor([5, 2, 4])  # N = 3 sentences padded to S = 5
        key_padding = torch.arange(5)[None, :] >= lengths[:, None]  # (N, S), True = padding
        N, S = key_padding.shape
        answer = call_learner(padding_to_attn_mask, key_padding.clone())
        if not isinstance(answer, Tensor):
            raise wrong(f"return a tensor, got {type(answer).__name__}")
        expect_plain_tensor(answer, "the mask")
        if answer.dtype == torch.bool:
            may_attend = answer
        elif answer.is_floating_point():
            if not bool(((answer == 0) | torch.isneginf(answer)).all()):
                raise wrong("a float mask should hold only 0 (keep) and -inf (block); yours has other values")
            may_attend = answer == 0
        else:
            raise wrong(f"return a boolean mask (True = may attend), got dtype {answer.dtype}")
        if tuple(answer.shape) == (N, S, 1):
            raise wrong(
                "the new dimension is in the wrong place: (N, S, 1) spreads the mask over the KEYS and repeats it "
                "for every key; the mask must be the same for every QUERY, so insert it in the middle: "
                "(N, 1, S), e.g. `mask[:, None, :]`."
            )
        if tuple(answer.shape) == (N, S):
            raise wrong(
                "an (N, S) mask broadcasts against the (N, L, S) scores as if N were the query dimension; add a "
                "query dimension of size 1 in the middle: (N, 1, S), e.g. `mask[:, None, :]` or `.unsqueeze(1)`."
            )
        expected = ~key_padding[:, None, :]  # (N, 1, S)
        for L in (4, 1, 7):  # any number of queries; 4 first, so that a message names a typical (N, L, S)
            try:
                spread = may_attend.expand(N, L, S)
            except RuntimeError:
                raise wrong(
                    f"your mask of shape {tuple(answer.shape)} does not broadcast to the scores (N, L, S) = "
                    f"{(N, L, S)}; "
                    "the usual shape is (N, 1, S)."
                ) from None
            if torch.equal(spread, expected.expand(N, L, S)):
                continue
            if torch.equal(spread, key_padding[:, None, :].expand(N, L, S)):
                raise wrong(
                    "the mask is not inverted: key_padding_mask says True = padding (blocked), but "
                    "F.scaled_dot_product_attention reads True as MAY attend. Flip it with `~`."
                )
            raise wrong("the mask has the right shape but blocks the wrong keys: block exactly the padding positions.")
        return "an (N, 1, S) mask, True = may attend: every query of a sentence skips that sentence's padding."

    return run_check("padding mask for F.scaled_dot_product_attention", body)
