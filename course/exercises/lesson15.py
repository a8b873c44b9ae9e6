"""Checks for lesson 15's exercises: each query's top-k keys under the causal mask, one lightning-indexer score, and
the indexer's training target (a layer's attention summed over its heads, then normalised).

Shapes: h heads, L queries, S keys (L = S in a prefill), k keys kept per query, H the indexer's heads, d its width.
The top-k check judges the answer by what it means (which keys, and their scores), not by one tensor: any order
within a row and any choice among equal scores pass, as torch.topk may make it. The two others compare numbers, over
cases whose sizes differ (h, L, S; H, d) so that a transposed or misplaced axis gives a result of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from course.exercises.feedback import (
    LearnerError,
    Mistakes,
    Verdict,
    as_tensor,
    call_learner,
    close,
    expect_shape,
    learner_check,
    named_mistake,
    run_check,
    wrong,
)

__all__ = [
    "check_index_scores",
    "check_indexer_target",
    "check_top_k_keys",
    "reference_index_scores",
    "reference_indexer_target",
    "reference_top_k_keys",
]


def reference_top_k_keys(scores: Tensor, k: int) -> Tensor:
    """scores (..., L, L) of a prefill -> (..., L, k) int64: each query's k best keys among itself and the earlier
    ones, -1 where it has fewer than k."""
    L = scores.size(-1)
    future = torch.ones(L, L, dtype=torch.bool).triu(1)
    best = scores.masked_fill(future, float("-inf")).sort(dim=-1, descending=True, stable=True).indices[..., :k]
    readable = torch.arange(1, L + 1)[:, None]  # query t reads t + 1 keys
    best = torch.where(torch.arange(best.size(-1))[None, :] < readable, best, -1)
    pad = best.new_full((*best.shape[:-1], k - best.size(-1)), -1)
    return torch.cat([best, pad], dim=-1)


def reference_index_scores(q: Tensor, keys: Tensor, weights: Tensor) -> Tensor:
    """q (L, H, d), keys (S, d), weights (L, H) -> (L, S): the sum over the heads j of
    weights[t, j] · ReLU(q[t, j] · keys[s])."""
    return torch.einsum("lh,lhs->ls", weights, torch.relu(torch.einsum("lhd,sd->lhs", q, keys)))


def reference_indexer_target(weights: Tensor) -> Tensor:
    """weights (h, L, S) -> (L, S): summed over the heads, then each row divided by its total."""
    total = weights.sum(0)
    return total / total.sum(-1, keepdim=True)


# ---------------------------------------------------------------------------------------------
# Exercise 1: each query's top-k keys, after the causal mask
# ---------------------------------------------------------------------------------------------
TOPK_FALLBACK = (
    "some row does not hold its query's best keys: mask the keys after the query (a query reads itself and the keys "
    "before it), then keep the k highest scores of each row (over the last dimension, the keys), and fill the slots "
    "of a query with fewer than k keys with -1."
)


@dataclass(frozen=True)
class _TopKCase:
    name: str
    scores: Tensor  # (..., L, L)
    k: int
    ties: bool = False  # equal scores: a usual mistake's keys are not one answer, so none is simulated


def _topk_cases() -> list[_TopKCase]:
    generator = torch.Generator().manual_seed(15)
    planted = torch.randn(6, 6, generator=generator)
    planted += torch.ones(6, 6).triu(1) * 5.0  # the future scores highest: top-k before the mask takes them
    heads = torch.randn(2, 7, 7, generator=generator)
    ties = torch.tensor([[1.0, 2, 2, 0, 3], [2, 2, 2, 1, 0], [1, 3, 1, 1, 5], [0, 0, 0, 0, 9], [4, 1, 4, 1, 4]])
    return [
        _TopKCase("scores (6, 6) whose future keys score highest, k = 3", planted, 3),
        _TopKCase("scores of 2 heads (2, 7, 7), k = 4", heads, 4),
        _TopKCase("scores (5, 5) with equal scores, k = 2", ties, 2, ties=True),
        _TopKCase("scores (4, 4), k = 6: more than any query has", torch.randn(4, 4, generator=generator), 6),
    ]


def _rows(answer: Tensor) -> Tensor:
    """(..., L, k) -> (R, L, k): the leading dimensions flattened."""
    return answer.reshape(-1, *answer.shape[-2:])


def _row_problem(row: Tensor, scores: Tensor, t: int, k: int) -> str | None:
    """What is wrong with query t's row (k,) of indices, given its scores (S,); None if it is right."""
    chosen = [int(i) for i in row if int(i) != -1]
    if any(i < -1 for i in row.tolist()) or any(i >= scores.numel() for i in chosen):
        return "range"
    if len(set(chosen)) != len(chosen):
        return "repeat"
    if any(i > t for i in chosen):
        return "future"
    wanted = min(k, t + 1)
    if len(chosen) != wanted:
        return "count"
    best = scores[: t + 1].sort(descending=True).values[:wanted]
    if not torch.equal(scores[chosen].sort(descending=True).values, best):
        return "not best"
    return None


def _same_rows(answer: Tensor, simulated: Tensor) -> bool:
    """Whether every row of ``answer`` names the same keys as ``simulated``'s, in any order ((..., L, k) each)."""
    return answer.shape == simulated.shape and torch.equal(answer.sort(-1).values, simulated.sort(-1).values)


def _topk_mistakes(scores: Tensor, k: int) -> dict[str, list[Tensor]]:
    """The usual mistakes' indices on ``scores`` (..., L, L) with no equal scores: hint -> the ways to it."""
    L = scores.size(-1)
    n = min(k, L)
    pad = torch.full((*scores.shape[:-1], k - n), -1, dtype=torch.long)

    def padded(indices: Tensor) -> Tensor:
        return torch.cat([indices, pad], dim=-1)

    def chosen(masked: Tensor, largest: bool = True) -> Tensor:
        values, indices = masked.topk(n, dim=-1, largest=largest)
        return padded(torch.where(values.isinf(), -1, indices))

    after = torch.arange(L)[None, :] > torch.arange(L)[:, None]  # (L, L), True = a key after its query
    unmasked = scores.topk(n, dim=-1).indices
    return {
        "some rows name keys after their query: the top-k was taken before the causal mask, so high scores on future "
        "keys took slots. Mask first (-inf after the query), then choose.": [
            padded(unmasked),
            padded(torch.where(unmasked > torch.arange(L)[:, None], -1, unmasked)),
        ],
        "no query reads its own key: the causal mask keeps the diagonal (query t reads keys 0 .. t).": [
            chosen(scores.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(0), float("-inf")))
        ],
        "the causal mask starts one key late: query t also reads key t + 1. Block every key after the query "
        "(query t reads keys 0 .. t).": [
            chosen(scores.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(2), float("-inf")))
        ],
        "each query keeps its LOWEST scores: top-k keeps the largest.": [
            chosen(scores.masked_fill(after, float("inf")), largest=False)
        ],
        "the keys are chosen along the wrong axis: each query's row runs over the LAST dimension (the keys); the "
        "answer ranks a key's column of queries.": [chosen(scores.mT.masked_fill(after, float("-inf")))],
    }


def _topk_hint(answer: Tensor, case: _TopKCase) -> str | None:
    """The named mistake of an answer on one case (None: every row is right): a usual mistake simulated on the
    case, else what its first wrong row holds."""
    problems = []
    for head, row_scores in zip(_rows(answer), _rows(case.scores), strict=True):
        for t in range(row_scores.size(0)):
            problem = _row_problem(head[t], row_scores[t], t, case.k)
            if problem:
                problems.append((t, head[t], problem))
    if not problems:
        return None
    if not case.ties:
        for hint, ways in _topk_mistakes(case.scores, case.k).items():
            if any(_same_rows(answer, way) for way in ways):
                return f"{hint} ({case.name})"
    t, row, problem = problems[0]
    chosen = [int(i) for i in row if int(i) != -1]
    if problem == "range":
        return (
            f"row {t} holds {row.tolist()}: an index is a key's position, 0 .. S - 1, or -1 for no key ({case.name})."
        )
    if problem == "repeat" and 0 in chosen and t + 1 < case.k:
        return (
            f"query {t} reads only {t + 1} key{'s' if t else ''}, but its row {row.tolist()} repeats key 0: fill the "
            f"slots it cannot use with -1, not 0 (key 0 is a real key) ({case.name})."
        )
    if problem == "repeat":
        return f"row {t} names a key twice, {row.tolist()}: each of the k slots is a different key ({case.name})."
    if problem == "future" and t + 1 < case.k and set(range(t + 1)) <= set(chosen):
        return (
            f"query {t} has only {t + 1} key{'s' if t else ''} and k = {case.k}: its row {row.tolist()} fills the "
            f"other slots with keys after it (masked scores that top-k still returns). k larger than the prefix must "
            f"be clipped: those slots are -1 ({case.name})."
        )
    if problem == "count":
        return (
            f"query {t} should keep min(k, t + 1) = {min(case.k, t + 1)} keys and pad the rest with -1, its row is "
            f"{row.tolist()} ({case.name})."
        )
    return f"{TOPK_FALLBACK} Query {t}'s row is {row.tolist()} ({case.name})."


@learner_check
def check_top_k_keys(top_k_keys: Callable[[Tensor, int], Tensor]) -> Verdict:
    """Check ``top_k_keys(scores, k)``: scores (..., L, L) of a prefill -> (..., L, k) integer indices, each query's
    k highest-scoring keys among itself and the keys before it, -1 where it has fewer than k."""

    def body() -> str:
        for case in _topk_cases():
            try:
                result = call_learner(top_k_keys, case.scores.clone(), case.k)
            except LearnerError as error:
                if case.k <= case.scores.size(-1):
                    raise
                raise wrong(
                    f"your code raised {error} on {case.name}: k may be larger than the number of keys L. Choose "
                    f"min(k, L) keys, then pad each row to k with -1."
                ) from None
            if isinstance(result, Tensor) and result.dtype == torch.bool and result.shape == case.scores.shape:
                raise wrong(
                    f"this returns a mask (..., L, S) = {tuple(result.shape)}: return the indices of the keys, "
                    f"(..., L, k), as topk's .indices gives them ({case.name})."
                )
            if isinstance(result, Tensor) and result.is_floating_point():
                raise wrong(f"the indices should be integers (torch.long), got {result.dtype} ({case.name}).")
            answer = as_tensor(result, "the indices")
            expect_shape(answer, (*case.scores.shape[:-1], case.k), f"the indices ({case.name})", "(..., L, k)")
            hint = _topk_hint(answer.long(), case)
            if hint is None and not torch.equal(answer, answer.round()):
                hint = "the indices should be whole numbers"
            if hint:
                raise wrong(hint)
        return (
            "each query keeps its k best keys among itself and the earlier ones; a short prefix pads with -1, and "
            "ties may go either way."
        )

    return run_check("top-k keys after the causal mask", body)


# ---------------------------------------------------------------------------------------------
# Exercise 2: one lightning-indexer score
# ---------------------------------------------------------------------------------------------
INDEX_FALLBACK = (
    "the scores differ from the lightning indexer's: for query t and key s, each indexer head j scores the dot "
    "product q[t, j] · keys[s], puts it through a ReLU, and the heads' scores are added, each times the query's own "
    "weight weights[t, j]. Shape (L, S)."
)


def _index_cases() -> list[tuple[str, tuple[Tensor, Tensor, Tensor]]]:
    generator = torch.Generator().manual_seed(16)
    cases = []
    for L, S, H, d in ((5, 7, 3, 4), (4, 6, 2, 5)):
        q = torch.randn(L, H, d, generator=generator)
        keys = torch.randn(S, d, generator=generator)
        weights = torch.randn(L, H, generator=generator)  # DeepSeek's weights may be negative: a head may vote against
        cases.append((f"q ({L}, {H}, {d}), keys ({S}, {d}), weights ({L}, {H})", (q, keys, weights)))
    return cases


def _index_mistakes(q: Tensor, keys: Tensor, weights: Tensor) -> Mistakes:
    dots = torch.einsum("lhd,sd->lhs", q, keys)  # (L, H, S)
    right = reference_index_scores(q, keys, weights)
    H, d = q.shape[-2:]
    return {
        "the heads are averaged: the heads' weighted ReLU scores are added, not averaged (the formula is a sum over "
        "j).": right / H,
        "the ReLU is left out: each head's dot product goes through a ReLU before the weighted sum (a head scores a "
        "key 0 or more, never below).": torch.einsum("lh,lhs->ls", weights, dots),
        "the ReLU comes after the heads' weighted sum: apply it to each head's dot product, then weigh and add.": (
            torch.relu(torch.einsum("lh,lhs->ls", weights, dots))
        ),
        "the query's weights are left out: each head's ReLU score is multiplied by weights[t, j] before the heads "
        "are added.": torch.relu(dots).sum(1),
        "the ReLU is applied to the weights, not to the dot products.": torch.einsum(
            "lh,lhs->ls", torch.relu(weights), dots
        ),
        "the weights are normalised (a softmax over the heads): the indexer uses them as they come, and a weight may "
        "be negative.": torch.einsum("lh,lhs->ls", weights.softmax(-1), torch.relu(dots)),
        "this is a softmax over the keys: the indexer's scores are not normalised (only their order matters for the "
        "top-k).": [right.softmax(-1), right.softmax(0)],
        "the scores are scaled: this exercise's formula has no scale (DeepSeek multiplies by 1/sqrt(d) and "
        "1/sqrt(H), constants that never change which keys win).": [right / d**0.5, right / H**0.5],
    }


@learner_check
def check_index_scores(index_scores: Callable[[Tensor, Tensor, Tensor], Tensor]) -> Verdict:
    """Check ``index_scores(q, keys, weights)``: q (L, H, d), keys (S, d), weights (L, H) -> (L, S), the sum over the
    indexer heads j of weights[t, j] · ReLU(q[t, j] · keys[s])."""

    def body() -> str:
        answers, mistakes = [], []
        for name, (q, keys, weights) in _index_cases():
            answer = as_tensor(call_learner(index_scores, q.clone(), keys.clone(), weights.clone()), "the scores")
            expect_shape(answer, (q.size(0), keys.size(0)), f"the scores ({name})", "(L, S)")
            answers.append(answer)
            mistakes.append(_index_mistakes(q, keys, weights))
            if not close(answer, reference_index_scores(q, keys, weights)):
                raise named_mistake(answers[-1:], mistakes[-1:]) or wrong(f"{INDEX_FALLBACK} ({name})")
        return "the indexer's score: each head's ReLU of q · k, weighted by the query's own weights, summed."

    return run_check("one lightning-indexer score", body)


# ---------------------------------------------------------------------------------------------
# Exercise 3: the indexer's target, the heads' attention summed and normalised
# ---------------------------------------------------------------------------------------------
TARGET_FALLBACK = (
    "the target differs: add the heads' attention weights (over the first dimension, h), then divide each query's "
    "row by its total, so that each row over the S keys sums to 1. Shape (L, S)."
)


def _target_cases() -> list[tuple[str, Tensor]]:
    generator = torch.Generator().manual_seed(17)
    cases = []
    for h, L, S in ((3, 4, 6), (2, 5, 3)):
        weights = torch.randn(h, L, S, generator=generator).softmax(-1)
        kept = torch.rand(h, L, 1, generator=generator) * 0.8 + 0.1  # heads with a sink keep only part of their mass
        cases.append((f"weights ({h}, {L}, {S}) whose rows sum to less than 1 (heads with a sink)", weights * kept))
    return cases


def _target_mistakes(weights: Tensor) -> Mistakes:
    total = weights.sum(0)
    return {
        "the heads are averaged: their rows sum to less than 1 here (heads with a sink), so sum them and then divide "
        "each row by its own total, which is not the number of heads.": weights.mean(0),
        "the rows are not normalised: after summing over the heads, divide each query's row by its total (the KL "
        "loss compares distributions).": total,
        "the rows are normalised over the wrong axis: each QUERY's row (over the S keys, the last dimension) must sum "
        "to 1, not each key's column.": total / total.sum(0, keepdim=True),
        "this is a softmax of the summed weights: they are already probabilities; divide by the row's total instead "
        "(a softmax would exponentiate them again).": total.softmax(-1),
        "each head is normalised first, then averaged: this gives a head that reads little as much say as one that "
        "reads a lot. Sum first, then normalise.": (weights / weights.sum(-1, keepdim=True)).mean(0),
        "this takes the largest head's weight per key: the target sums the heads' weights.": (
            weights.amax(0) / weights.amax(0).sum(-1, keepdim=True)
        ),
    }


@learner_check
def check_indexer_target(indexer_target: Callable[[Tensor], Tensor]) -> Verdict:
    """Check ``indexer_target(weights)``: weights (h, L, S) -> (L, S), summed over the heads and each row normalised
    to sum to 1 (DSA's target for its indexer's KL loss)."""

    def body() -> str:
        answers, mistakes = [], []
        for name, weights in _target_cases():
            answer = as_tensor(call_learner(indexer_target, weights.clone()), "the target")
            expect_shape(answer, weights.shape[1:], f"the target ({name})", "(L, S)")
            answers.append(answer)
            mistakes.append(_target_mistakes(weights))
            if not close(answer, reference_indexer_target(weights)):
                raise named_mistake(answers[-1:], mistakes[-1:]) or wrong(f"{TARGET_FALLBACK} ({name})")
        return "the target: the heads' attention summed, each query's row then divided by its total."

    return run_check("the indexer's target", body)
