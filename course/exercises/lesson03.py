"""Checks for lesson 03's exercises: attention weights (1), a padding mask (2), masked attention (3).

The masks here follow ``torch.nn.functional.scaled_dot_product_attention``: a boolean mask is
**True where a query may attend** to a key. Every check applies ``shortcuts.RULE``: the one call that
does the exercise (``F.scaled_dot_product_attention``, the helper) is refused, and a mask must be boolean.
The mistake tables are at module level; each check runs several cases and names a mistake only when it
explains the answer in all of them.
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
    diagnose_cases,
    expect_plain_tensor,
    expect_shape,
    learner_check,
    run_check,
    wrong,
)
from course.exercises.shortcuts import FunctionRecorder, expect_dtype, refuse_shortcuts
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
        "batched (N, S, d) tensor; swap only the last two dimensions (`transpose` counts them from the end "
        "too), giving (N, d, S)."
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


# The usual mistakes, each a hint and the weights it gives for (q, k, mask); float64 inputs, mask may be None.
_Mistake = Callable[[Tensor, Tensor, "Tensor | None"], Tensor]
_MaskedMistake = Callable[[Tensor, Tensor, Tensor], Tensor]  # one that needs the mask (exercise 3)

# Mistakes that only show with a batch in front: code that counts dimensions from the start. For one sentence,
# q is (L, d) and the scores (L, S): ``q.shape[1]`` is d and ``dim=1`` the keys. With a batch, q is (N, L, d) and
# the scores (N, L, S): the same code reads L and softmaxes over the queries.
_BATCH_MISTAKES: dict[str, _Mistake] = {
    "the softmax runs over dim=1: for one sentence's (L, S) scores that is the keys, but for a batch's "
    "(N, L, S) scores it is the queries. Count from the end, `softmax(scores, dim=-1)`, and your code works "
    "with or without a batch.": lambda q, k, m: _weights(q, k, m, softmax_dim=-2),
    "the scale uses `q.shape[1]`: for one sentence's (L, d) queries that is d, but for a batch's (N, L, d) "
    "it is L. Take d from the last dimension, counting from the end.": lambda q, k, m: _weights(
        q, k, m, scale=q.size(-2) ** -0.5
    ),
    # last: with a padding mask both are all NaN, and the simpler hint should win there
    "`dim=1` and `q.shape[1]` count from the front: for one sentence they are the keys and d, but with a batch "
    "in front, (N, L, S) scores and (N, L, d) queries, they are the queries and L. Count from the end, for "
    "the softmax's dimension and for d alike.": lambda q, k, m: _weights(
        q, k, m, scale=q.size(-2) ** -0.5, softmax_dim=-2
    ),
    "the softmax runs over dim=0, the batch: `softmax` without `dim=` (or with `dim=0`) picks the first "
    "dimension of a batched (N, L, S) tensor. Always give `dim=-1`, the keys.": lambda q, k, m: _weights(
        q, k, m, softmax_dim=0
    ),
}

# Exercise 1 (no mask). Mistakes whose shapes do not fit a case (untransposed keys where L != d) are skipped there.
_WEIGHT_MISTAKES: dict[str, _Mistake] = {
    "the scores are not scaled: divide Q Kᵀ by √d before the softmax.": lambda q, k, m: _weights(q, k, scale=1.0),
    "the scores are divided by d instead of √d: use `/ math.sqrt(d)` (or `* d ** -0.5`).": lambda q, k, m: _weights(
        q, k, scale=1.0 / q.size(-1)
    ),
    "the softmax runs over the wrong dimension: each QUERY's row (the last dimension, over the keys) must sum "
    "to 1, so use `softmax(scores, dim=-1)`.": lambda q, k, m: _weights(q, k, softmax_dim=-2),
    "the keys are not transposed: the scores are Q Kᵀ, each query against each key's d numbers. With L = S = d "
    "`q @ k` runs too, but multiplies queries with the wrong numbers.": lambda q, k, m: _weights(
        q, k, transpose_keys=False
    ),
    "the softmax is missing: these are the scaled scores; turn each query's row into weights that sum to "
    "1.": lambda q, k, m: _scaled_scores(q, k),
    "the keys are not transposed AND the scores are not scaled.": lambda q, k, m: _weights(
        q, k, scale=1.0, transpose_keys=False
    ),
    "the scores are multiplied by √d: divide them, `/ math.sqrt(d)`, so that large head sizes give smaller, not "
    "larger, scores.": lambda q, k, m: _weights(q, k, scale=math.sqrt(q.size(-1))),
    "the scaling comes after the softmax: divide the SCORES by √d, then take the softmax (dividing the weights "
    "leaves rows that sum to 1 / √d).": lambda q, k, m: _unscaled_then_divided(q, k),
    "the scores are divided by √S, the number of keys: the scale is the size of a query or key, d, their last "
    "dimension.": lambda q, k, m: _weights(q, k, scale=k.size(-2) ** -0.5),
    # S, L order: only computable where L = S; elsewhere the shape check has already answered
    "the scores are K Qᵀ, one row per KEY: the queries come first, Q Kᵀ, so that row i holds query i's "
    "scores.": lambda q, k, m: _keys_times_queries(q, k),
}

# Exercise 3 (a boolean mask, True = may attend); each mistake's output is its weights @ v.
_MASKED_MISTAKES: dict[str, _MaskedMistake] = {
    "the softmax runs over the wrong dimension: each query's row must sum to 1, "
    "`softmax(scores, dim=-1)`.": lambda q, k, m: _weights(q, k, m, softmax_dim=-2),
    "the mask is applied after the softmax: zeroing weights afterwards leaves rows that no longer sum to 1. "
    "Fill the blocked SCORES with -inf before the softmax.": lambda q, k, m: _weights(q, k, m, mask_after_softmax=True),
    "the mask is inverted: here True means MAY attend (as in F.scaled_dot_product_attention), so block where "
    "the mask is False.": lambda q, k, m: _weights(q, k, ~m),
    "blocked scores are set to 0, not -inf: a score of 0 still gets weight after the softmax. "
    "Use `float('-inf')`.": lambda q, k, m: _weights(q, k, m, mask_fill=0.0),
    "the mask is ignored: block the scores where the mask is False before the softmax.": lambda q, k, m: _weights(q, k),
    "the boolean mask is added to the scores: True and False become 1 and 0, which blocks nothing. Fill the "
    "blocked scores with -inf instead, `masked_fill` where the mask is False (only a FLOAT mask of 0 and -inf "
    "is added).": lambda q, k, m: _mask_added(q, k, m),
    "the scores are not scaled: divide Q Kᵀ by √d before masking and the softmax.": lambda q, k, m: _weights(
        q, k, m, scale=1.0
    ),
    # only computable where L = S = d; elsewhere the shapes do not fit and the case is not judged
    "the keys are not transposed: the scores are Q Kᵀ. With L = S = d `q @ k` runs too, but gives the wrong "
    "numbers.": lambda q, k, m: _weights(q, k, m, transpose_keys=False),
}


def _table(
    mistakes: dict[str, Callable[..., Tensor]], q: Tensor, k: Tensor, mask: Tensor | None, v: Tensor | None = None
):
    """One case's mistakes, computed lazily in float64: their weights, or their outputs when ``v`` is given."""
    q, k = q.double(), k.double()
    if v is None:
        return {hint: partial(mistake, q, k, mask) for hint, mistake in mistakes.items()}
    return {hint: partial(_times, partial(mistake, q, k, mask), v.double()) for hint, mistake in mistakes.items()}


def _run(function: Callable[..., Tensor], args: tuple[Tensor, ...], name: str, batched: bool, exercise: str):
    """The learner's result on copies of ``args``, refusing the exercise's one-call shortcuts."""
    with FunctionRecorder() as recorder:
        answer = _call_learner(function, args, name, shapes_differ=batched)
    refuse_shortcuts(recorder, exercise, _WRITE_IT_OUT)
    return answer


def _any_wrong(answers: list[Tensor], expected: list[Tensor]) -> bool:
    return any(not close(a, e) for a, e in zip(answers, expected, strict=True))


_WRITE_IT_OUT = "the scores Q Kᵀ divided by √d, then `masked_fill` (exercise 3), then a softmax over the keys."


# ---------------------------------------------------------------------------------------------
# Exercise 1: attention weights softmax(Q Kᵀ / √d)
# ---------------------------------------------------------------------------------------------
def _weight_cases() -> list[tuple[Tensor, Tensor]]:
    generator = torch.Generator().manual_seed(4)
    # Square (L = S = d), where forgetting to transpose the keys still runs; then batches with L != S, where the
    # shapes tell the dimensions apart (two of them, so that no mistake matches by chance on one example).
    return [
        (torch.randn(4, 4, generator=generator) * 2, torch.randn(4, 4, generator=generator) * 2),
        (torch.randn(2, 3, 8, generator=generator), torch.randn(2, 5, 8, generator=generator)),
        (torch.randn(3, 2, 5, generator=generator) * 1.5, torch.randn(3, 6, 5, generator=generator)),
    ]


@learner_check
def check_attention_weights(attention_weights: Callable[[Tensor, Tensor], Tensor]) -> Verdict:
    """Check ``attention_weights(q, k)``: q (..., L, d), k (..., S, d) -> weights (..., L, S)."""

    def body() -> str:
        answers: list[Tensor]  # the learner's result on each case
        expected: list[Tensor]  # the reference's
        answers, expected, tables = [], [], []
        for index, (q, k) in enumerate(_weight_cases()):
            try:
                answer = _run(attention_weights, (q, k), "the weights", index > 0, "attention weights")
                expect_shape(answer, (*q.shape[:-1], k.size(-2)), "the weights", "(..., L, S)")
            except Exception:
                if _any_wrong(answers, expected):  # an earlier case already shows the mistake: name it from there
                    break
                raise
            expected.append(_weights(q.double(), k.double()))
            answers.append(answer)
            tables.append(_table((_BATCH_MISTAKES if index else {}) | _WEIGHT_MISTAKES, q, k, None))
        wrong_cases = [i for i, (a, e) in enumerate(zip(answers, expected, strict=True)) if not close(a, e)]
        if not wrong_cases:
            return "softmax(Q Kᵀ / √d) over the keys, for one sentence and for a batch."
        answer = answers[wrong_cases[0]]
        if answer.dim() and torch.allclose(answer.sum(-1), torch.ones(()).double(), atol=1e-4):
            fallback = "each row sums to 1, but the numbers differ from softmax(Q Kᵀ / √d)."
        else:
            fallback = "the rows do not sum to 1: the weights of each query are a softmax over the keys."
        raise diagnose_cases(answers, tables, fallback)

    return run_check("attention weights", body)


# ---------------------------------------------------------------------------------------------
# Exercise 3 (check_masked_attention): masked scaled dot-product attention (output only)
# ---------------------------------------------------------------------------------------------
def _masked_cases() -> list[tuple[Tensor, Tensor, Tensor, Tensor]]:
    generator = torch.Generator().manual_seed(5)
    causal_keep = torch.ones(4, 4, dtype=torch.bool).tril()  # True = may attend (query i sees keys 0..i)
    padding_keep = torch.tensor([True, True, True, False, False]).expand(3, 5)  # the last 2 keys are padding
    per_sentence = torch.tensor([[[True, True, False, True]], [[False, True, True, True]]])  # (N, 1, S)
    return [
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
        # a mask that differs per sentence and blocks a key in the middle: batch and mask mistakes part ways
        (
            torch.randn(2, 2, 6, generator=generator) * 1.5,
            torch.randn(2, 4, 6, generator=generator),
            torch.randn(2, 4, 2, generator=generator),
            per_sentence,
        ),
        # a blocked key with a huge score (70): a finite fill such as -10 lets it through, -inf does not
        (
            torch.tensor([[10.0, 0.0]]),
            torch.tensor([[0.0, 1.0], [10.0, 0.0]]),
            torch.tensor([[1.0], [1000.0]]),
            torch.tensor([[True, False]]),
        ),
    ]


def _masked_fallback(answer: Tensor, index: int) -> str:
    if torch.isnan(answer).any():
        return (
            "your output has NaN: some query's softmax ran over -inf only, so every key of that query was blocked. "
            "Here (as in F.scaled_dot_product_attention) True means MAY attend: fill the scores where the mask is "
            "False with -inf, and softmax over the keys, `dim=-1`."
        )
    if index == 3:
        return (
            "right for ordinary scores, wrong when a blocked key's score is huge (here about 70): a blocked score "
            "must be -inf, `float('-inf')`. A finite fill such as -10 still lets that key through."
        )
    return "the shape is right but the numbers differ from softmax(mask(Q Kᵀ / √d)) @ V."


@learner_check
def check_masked_attention(masked_attention: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]) -> Verdict:
    """Check ``masked_attention(q, k, v, mask)`` -> output (..., L, dv); mask (L, S) bool, True = may attend."""

    def body() -> str:
        answers: list[Tensor]  # the learner's result on each case
        expected: list[Tensor]  # the reference's
        answers, expected, tables = [], [], []
        for index, (q, k, v, mask) in enumerate(_masked_cases()):
            output, weights = scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask)
            try:
                answer = _run(masked_attention, (q, k, v, mask), "the output", index in (1, 2), "masked attention")
                if tuple(answer.shape) == tuple(weights.shape) and answer.shape != output.shape:
                    raise wrong(
                        f"the result has the shape of the weights (..., L, S) = {tuple(weights.shape)}: return the "
                        "weighted sum of the values, `weights @ v`, of shape (..., L, dv)."
                    )
                expect_shape(answer, output.shape, "the output", "(..., L, dv)")
            except Exception:
                if _any_wrong(answers, expected):  # an earlier case already shows the mistake: name it from there
                    break
                raise
            answers.append(answer)
            expected.append(output)
            tables.append(_table((_BATCH_MISTAKES if index in (1, 2) else {}) | _MASKED_MISTAKES, q, k, mask, v))
        wrong_cases = [i for i, (a, e) in enumerate(zip(answers, expected, strict=True)) if not close(a, e)]
        if not wrong_cases:
            return (
                "masked, scaled attention: the same output as F.scaled_dot_product_attention, "
                "with a causal, a padding and a per-sentence mask."
            )
        raise diagnose_cases(answers, tables, _masked_fallback(answers[wrong_cases[0]], wrong_cases[0]))

    return run_check("masked attention", body)


# ---------------------------------------------------------------------------------------------
# Exercise 3: from nn.MultiheadAttention's padding mask to F.scaled_dot_product_attention's mask
# ---------------------------------------------------------------------------------------------
@learner_check
def check_padding_to_attn_mask(padding_to_attn_mask: Callable[[Tensor], Tensor]) -> Verdict:
    """Check ``padding_to_attn_mask(key_padding_mask)``: (N, S) bool, True = padding -> a mask for
    ``F.scaled_dot_product_attention`` that broadcasts to (N, L, S) for any L: boolean, True = may attend
    (a float or integer mask is refused, as ``shortcuts.RULE`` says)."""

    def body() -> str:
        lengths = torch.tensor([5, 2, 4])  # N = 3 sentences padded to S = 5
        key_padding = torch.arange(5)[None, :] >= lengths[:, None]  # (N, S), True = padding
        N, S = key_padding.shape
        with FunctionRecorder() as recorder:
            answer = call_learner(padding_to_attn_mask, key_padding.clone())
        refuse_shortcuts(recorder, "padding mask for F.scaled_dot_product_attention", "`~` and `[:, None, :]`.")
        if not isinstance(answer, Tensor):
            raise wrong(f"return a tensor, got {type(answer).__name__}")
        expect_plain_tensor(answer, "the mask")
        if answer.is_floating_point():
            expect_dtype(
                answer,
                torch.bool,
                "the mask",
                "F.scaled_dot_product_attention would also take a float mask of 0 "
                "and -inf, but the exercise asks for the boolean one: turn the padding mask (True = padding) "
                "into True = may attend, and give it a query dimension to broadcast over.",
            )
        expect_dtype(answer, torch.bool, "the mask", "Booleans come from `~`, `==` or `.bool()`, not `.int()`.")
        may_attend = answer
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
