"""Checks for lesson 08's exercises: BERT's q, k, v into ``in_proj``; a previous-token score; the similarity task.

Shapes: N batch, T tokens, E embedding size, h heads, P paraphrase pairs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from course.exercises.feedback import (
    Verdict,
    as_tensor,
    close,
    expect_shape,
    learner_check,
    run_check,
    wrong,
)

__all__ = [
    "check_previous_token_score",
    "check_similarity_scores",
    "check_stack_qkv",
    "reference_previous_token_score",
    "reference_similarity_scores",
]


# ---------------------------------------------------------------------------------------------
# Exercise 1: BERT's three projections as MultiHeadAttention's one in_proj
# ---------------------------------------------------------------------------------------------
def _qkv_case(E: int = 4) -> dict[str, Tensor]:
    """Distinct (E, E) weights and (E,) biases for query, key and value, none symmetric."""
    generator = torch.Generator().manual_seed(8)
    case = {}
    for name in ("query", "key", "value"):
        case[f"{name}_weight"] = torch.randn(E, E, generator=generator)
        case[f"{name}_bias"] = torch.randn(E, generator=generator)
    return case


def _stacked_mistakes(q: Tensor, k: Tensor, v: Tensor) -> dict[str, Tensor]:
    """Hint -> the (3E, E) weight a usual mistake produces."""
    E = q.size(0)
    return {
        "each weight is transposed: nn.Linear and BERT both store (out features, in features), exactly the layout "
        "in_proj_weight uses, so copy them as they are.": torch.cat([q.T, k.T, v.T]),
        "the rows of the three weights are interleaved (q row 0, k row 0, v row 0, ...): put whole blocks one "
        "after the other, all of W_q's rows, then W_k's, then W_v's.": torch.stack([q, k, v], 1).reshape(3 * E, E),
    }


@learner_check
def check_stack_qkv(stack_qkv: Callable[..., tuple[Tensor, Tensor]]) -> Verdict:
    """Check ``stack_qkv(query_weight, key_weight, value_weight, query_bias, key_bias, value_bias)``.

    Expected: ``(in_proj_weight (3E, E), in_proj_bias (3E,))``, rows in the order query, key, value, as
    ``MultiHeadAttention`` (and ``nn.MultiheadAttention``) split them.
    """

    def body() -> str:
        case = {name: t.double() for name, t in _qkv_case().items()}
        q, k, v = (case[f"{n}_weight"] for n in ("query", "key", "value"))
        bq, bk, bv = (case[f"{n}_bias"] for n in ("query", "key", "value"))
        E = q.size(0)
        answer = stack_qkv(*(t.float().clone() for t in (q, k, v, bq, bk, bv)))
        if not isinstance(answer, (tuple, list)) or len(answer) != 2:
            raise wrong("return two tensors: (in_proj_weight, in_proj_bias)")
        weight, bias = as_tensor(answer[0], "in_proj_weight"), as_tensor(answer[1], "in_proj_bias")
        if tuple(weight.shape) == (3 * E,) and tuple(bias.shape) == (3 * E, E):
            raise wrong("weight and bias come back swapped: `return in_proj_weight, in_proj_bias`.")
        if tuple(weight.shape) in STACK_SHAPE_MISTAKES(E):
            raise wrong(STACK_SHAPE_MISTAKES(E)[tuple(weight.shape)])
        expect_shape(weight, (3 * E, E), "in_proj_weight (3E, E)")
        expect_shape(bias, (3 * E,), "in_proj_bias (3E,)")
        if not close(weight, torch.cat([q, k, v])):
            for hint, result in _stacked_mistakes(q, k, v).items():
                if close(weight, result):
                    raise wrong(hint)
            blocks = {"query": q, "key": k, "value": v}
            got = [next((n for n, w in blocks.items() if close(weight[i * E : (i + 1) * E], w)), "?") for i in range(3)]
            if "?" not in got:
                raise wrong(
                    f"the blocks are in the order {', '.join(got)}: MultiHeadAttention reads rows 0..E-1 as W_q, "
                    "E..2E-1 as W_k and 2E..3E-1 as W_v."
                )
            raise wrong("in_proj_weight should be the three weights stacked along the rows: W_q, then W_k, then W_v.")
        if not close(bias, torch.cat([bq, bk, bv])):
            if close(bias, torch.zeros(3 * E, dtype=torch.float64)):
                raise wrong("the biases are missing: BERT's projections have biases; stack them the same way.")
            raise wrong("in_proj_bias should be the three biases in the same order: query, key, value.")
        return "BERT's separate q, k, v are now one (3E, E) in_proj_weight, in the order MultiHeadAttention reads."

    return run_check("BERT's q, k, v as one in_proj", body)


def STACK_SHAPE_MISTAKES(E: int) -> dict[tuple[int, ...], str]:
    """Wrong shapes of in_proj_weight -> the hint that names how they arise."""
    return {
        (3, E, E): "torch.stack adds a new dimension (3, E, E): torch.cat joins the three along dim 0 -> (3E, E).",
        (E, 3 * E): "the weights are joined side by side (E, 3E): join them along dim 0, one block of E rows each, "
        "so that in_proj_weight.split(E) gives back W_q, W_k, W_v.",
    }


# ---------------------------------------------------------------------------------------------
# Exercise 2: how much a head looks at the previous token
# ---------------------------------------------------------------------------------------------
def reference_previous_token_score(weights: Tensor, attention_mask: Tensor) -> Tensor:
    """Mean of w[t, t-1] over every real query t >= 1 of the batch, per head: (N, h, T, T), (N, T) -> (h,)."""
    real = attention_mask.bool()
    valid = (real[:, 1:] & real[:, :-1]).to(weights.dtype)  # (N, T-1)
    previous = weights.diagonal(offset=-1, dim1=-2, dim2=-1)  # (N, h, T-1): w[t+1, t]
    return (previous * valid[:, None, :]).sum(dim=(0, 2)) / valid.sum()


def _attention_case() -> tuple[Tensor, Tensor]:
    """Random attention (N, h, T, T) = (2, 3, 5, 5) rows summing to 1, and a mask with one padded sentence."""
    generator = torch.Generator().manual_seed(80)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    scores = 2 * torch.randn(2, 3, 5, 5, generator=generator)
    scores = scores.masked_fill(mask[:, None, None, :] == 0, float("-inf"))  # padding keys get weight 0
    return torch.softmax(scores, dim=-1), mask


PREVIOUS_MISTAKES = {
    "that is w[t, t+1], the NEXT token: the previous token of query t is key t-1, one diagonal BELOW the main "
    "one (a negative offset).": "next token",
    "that is w[t, t], each token's attention to ITSELF (the main diagonal): the previous token is key t-1, "
    "diagonal(offset=-1).": "main diagonal",
    "that is w[t, t-2], two tokens back: the previous token is one diagonal below the main one, "
    "diagonal(offset=-1).": "two back",
    "the first token's 'previous' wraps around to the last key (roll, or index t - 1 = -1): the first token has "
    "no previous one, so use diagonal(offset=-1), which leaves it out.": "wrap-around",
    "padded positions are counted: take only queries t (and keys t-1) that are real tokens, "
    "attention_mask[:, 1:] & attention_mask[:, :-1].": "padding counted",
    "the first token is counted as scoring 0: it has no previous token, so leave it out of the average "
    "(divide by the number of queries that have one).": "first row counted",
    "each sentence is averaged first, so a short sentence's rows weigh more: add up all valid rows of the "
    "batch, then divide once by their number.": "mean of means",
    "that is a sum over the rows, not a mean: divide by the number of valid (n, t) pairs, so that heads can be "
    "compared across batches of any size.": "sum",
}


def _previous(weights: Tensor, mask: Tensor, how: str = "right") -> Tensor:
    """The per-head score (h,), or one usual mistake."""
    real = mask.bool()
    offset = {"next token": 1, "main diagonal": 0, "two back": -2}.get(how, -1)
    diagonal = weights.diagonal(offset=offset, dim1=-2, dim2=-1)  # (N, h, T - |offset|)
    gap = abs(offset)
    valid = (real[:, gap:] & real[:, : real.size(1) - gap]).to(weights.dtype)  # (N, T - |offset|)
    if how == "wrap-around":
        T = weights.size(-1)
        diagonal = weights[..., torch.arange(T), torch.arange(T) - 1]  # (N, h, T): t = 0 reads key T - 1
        valid = real.to(weights.dtype)
    if how == "padding counted":
        return diagonal.mean(dim=(0, 2))
    total = (diagonal * valid[:, None]).sum(dim=(0, 2))
    if how == "mean of means":
        return ((diagonal * valid[:, None]).sum(-1) / valid.sum(-1)[:, None]).mean(0)
    count = {"first row counted": real.sum(), "sum": torch.tensor(1.0)}.get(how, valid.sum())
    return total / count


@learner_check
def check_previous_token_score(previous_token_score: Callable[[Tensor, Tensor], Tensor]) -> Verdict:
    """Check ``previous_token_score(weights (N, h, T, T), attention_mask (N, T)) -> (h,)``."""

    def body() -> str:
        weights, mask = _attention_case()
        N, h = weights.shape[:2]
        answer = as_tensor(previous_token_score(weights.clone(), mask.clone()), "previous_token_score(...)")
        if tuple(answer.shape) == (N, h):
            raise wrong(f"one score per head, (h,) = ({h},): average over the sentences too, not only the rows.")
        if answer.dim() == 0:
            raise wrong(f"one score per head, (h,) = ({h},): keep the heads apart (do not average over dim 1).")
        expect_shape(answer, (h,), "the scores (h,)")
        expected = _previous(weights, mask)
        if close(answer, expected, atol=1e-6):
            return f"per-head previous-token scores {[round(x, 2) for x in expected.tolist()]} on the check's batch."
        for hint, how in PREVIOUS_MISTAKES.items():
            if close(answer, _previous(weights, mask, how), atol=1e-6):
                raise wrong(hint)
        raise wrong(
            "for every sentence n and real query t >= 1, take weights[n, :, t, t-1]; average those over all such "
            f"(n, t) of the batch, one number per head. Expected {[round(x, 3) for x in expected.tolist()]}."
        )

    return run_check("previous-token score of each head", body)


# ---------------------------------------------------------------------------------------------
# Exercise 3: the similarity task's two numbers
# ---------------------------------------------------------------------------------------------
def _cosine_case() -> Tensor:
    """A (5, 5) cosine matrix, not symmetric, that tells the usual slips apart: rows hit 2 of 5 (accuracy 0.4),
    columns 3 (0.6), rows or columns 4 (0.8), both 1 (0.2), argmin 0; upper and lower triangles differ."""
    return torch.tensor(
        [
            [0.60, 0.10, 0.20, 0.10, 0.00],  # a hit
            [0.10, 0.90, 0.30, 0.20, 0.10],  # a hit (and column 1's best)
            [0.10, 0.20, 0.70, 0.00, 0.80],  # a miss (column 4), though column 2's best
            [0.00, 0.85, 0.10, 0.50, 0.20],  # a miss (column 1), though column 3's best
            [0.90, 0.00, 0.10, 0.30, 0.40],  # a miss (column 0)
        ]
    )


MARGIN_MISTAKES = {
    "the margin has the wrong sign: paraphrase cosine MINUS unrelated cosine.": "sign",
    "the unrelated mean includes the diagonal (the paraphrases themselves): average only the P (P - 1) entries "
    "off the diagonal.": "with diagonal",
    "the off-diagonal sum is divided by P²: there are P (P - 1) such pairs.": "over P squared",
    "that is a ratio (paraphrase / unrelated): the margin is a DIFFERENCE, paraphrase minus unrelated.": "ratio",
    "only the upper triangle is averaged: cosines are not symmetric here (sentence i against second sentence j "
    "is not j against i), so average every off-diagonal entry, above and below.": "upper triangle",
    "those are sums, not means: average the diagonal and the off-diagonal entries.": "sums",
}
ACCURACY_MISTAKES = {
    "that accuracy is a percentage: return a fraction between 0 and 1.": "percentage",
    "that accuracy is a count of hits: divide by the number of pairs P to get a fraction.": "count",
    "the argmax runs down the columns: for each FIRST sentence (a row) find the second sentence (column) with the "
    "highest cosine, argmax(dim=1).": "columns",
    "that is argmin: the retrieved sentence is the one with the HIGHEST cosine, argmax(dim=1).": "argmin",
    "a hit is counted when the row OR the column is right: a hit is a row whose largest entry is on the "
    "diagonal, argmax(dim=1) only.": "row or column",
    "a hit is counted only when the row AND the column are right: use the rows alone, argmax(dim=1).": "row and column",
}


def _similarity(cosines: Tensor, how: str = "right") -> tuple[float, float]:
    """(margin, accuracy), or one usual mistake of either."""
    P = cosines.size(0)
    diagonal = cosines.diagonal()
    off = cosines.sum() - diagonal.sum()
    related, unrelated = diagonal.mean(), off / (P * (P - 1))
    margin = {
        "sign": lambda: unrelated - related,
        "with diagonal": lambda: related - cosines.mean(),
        "over P squared": lambda: related - off / P**2,
        "ratio": lambda: related / unrelated,
        "upper triangle": lambda: related - cosines.triu(1).sum() / (P * (P - 1) / 2),
        "sums": lambda: diagonal.sum() - off,
    }.get(how, lambda: related - unrelated)()
    by_row, by_column = cosines.argmax(dim=1) == torch.arange(P), cosines.argmax(dim=0) == torch.arange(P)
    hits = {
        "columns": by_column,
        "argmin": cosines.argmin(dim=1) == torch.arange(P),
        "row or column": by_row | by_column,
        "row and column": by_row & by_column,
    }.get(how, by_row)
    accuracy = hits.double().mean() * {"percentage": 100, "count": P}.get(how, 1)
    return float(margin), float(accuracy)


def reference_similarity_scores(cosines: Tensor) -> tuple[float, float]:
    """(P, P) cosines, paraphrases on the diagonal -> (margin, accuracy), as ``head_roles.TaskScore``."""
    return _similarity(cosines)


@learner_check
def check_similarity_scores(similarity_scores: Callable[[Tensor], tuple[float, float]]) -> Verdict:
    """Check ``similarity_scores(cosines (P, P)) -> (margin, accuracy)``, paraphrase pairs on the diagonal."""

    def body() -> str:
        cos = _cosine_case()
        answer = similarity_scores(cos.clone())
        if not isinstance(answer, (tuple, list)) or len(answer) != 2:
            raise wrong("return two numbers: (margin, accuracy)")
        try:
            margin, accuracy = float(answer[0]), float(answer[1])
        except (TypeError, ValueError, RuntimeError):  # RuntimeError: a tensor of several numbers
            raise wrong("margin and accuracy should each be one number (a float or a 0-d tensor)") from None
        expected_margin, expected_accuracy = _similarity(cos)
        if abs(margin - expected_margin) > 1e-6:
            for hint, how in MARGIN_MISTAKES.items():
                if abs(margin - _similarity(cos, how)[0]) < 1e-5:
                    raise wrong(hint)
            raise wrong(f"expected the margin {expected_margin:.3f}: mean of the diagonal minus mean off the diagonal.")
        if abs(accuracy - expected_accuracy) > 1e-6:
            for hint, how in ACCURACY_MISTAKES.items():
                if abs(accuracy - _similarity(cos, how)[1]) < 1e-5:
                    raise wrong(hint)
            raise wrong(
                f"expected the accuracy {expected_accuracy:.2f}: the share of rows whose largest entry is on the "
                "diagonal."
            )
        return f"margin {margin:.3f}, accuracy {accuracy:.2f} on the check's {cos.size(0)} pairs."

    return run_check("paraphrase margin and retrieval accuracy", body)
