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
    call_learner,
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


@learner_check
def check_stack_qkv(stack_qkv: Callable[..., tuple[Tensor, Tensor]]) -> Verdict:
    """Check ``stack_qkv(query_weight, key_weight, value_weight, query_bias, key_bias, value_bias)``.

    Expected: ``(in_proj_weight (3E, E), in_proj_bias (3E,))``, rows in the order query, key, value, as
    ``MultiHeadAttention`` (and ``nn.MultiheadAttention``) split them.
    """

    def body() -> str:
        case = _qkv_case()
        q, k, v = (case[f"{n}_weight"] for n in ("query", "key", "value"))
        bq, bk, bv = (case[f"{n}_bias"] for n in ("query", "key", "value"))
        E = q.size(0)
        answer = call_learner(stack_qkv, *(t.clone() for t in (q, k, v, bq, bk, bv)))
        if not isinstance(answer, (tuple, list)) or len(answer) != 2:
            raise wrong("return two tensors: (in_proj_weight, in_proj_bias)")
        weight, bias = as_tensor(answer[0], "in_proj_weight"), as_tensor(answer[1], "in_proj_bias")
        if tuple(weight.shape) == (3, E, E):
            raise wrong("torch.stack adds a new dimension (3, E, E): torch.cat joins the three along dim 0 -> (3E, E).")
        if tuple(weight.shape) == (E, 3 * E):
            raise wrong(
                "the weights are joined side by side (E, 3E): join them along dim 0, one block of E rows each, "
                "so that in_proj_weight.split(E) gives back W_q, W_k, W_v."
            )
        expect_shape(weight, (3 * E, E), "in_proj_weight (3E, E)")
        expect_shape(bias, (3 * E,), "in_proj_bias (3E,)")
        blocks = {"query": q, "key": k, "value": v}
        if not close(weight, torch.cat([q, k, v]).double()):
            if close(weight, torch.cat([q.T, k.T, v.T]).double()):
                raise wrong(
                    "each weight is transposed: nn.Linear and BERT both store (out features, in features), exactly "
                    "the layout in_proj_weight uses, so copy them as they are."
                )
            got = []
            for i in range(3):
                found = [n for n, w in blocks.items() if close(weight[i * E : (i + 1) * E], w.double())]
                got.append(found[0] if found else "?")
            if "?" not in got:
                raise wrong(
                    f"the blocks are in the order {', '.join(got)}: MultiHeadAttention reads rows 0..E-1 as W_q, "
                    "E..2E-1 as W_k and 2E..3E-1 as W_v."
                )
            raise wrong("in_proj_weight should be torch.cat([query_weight, key_weight, value_weight]) (dim 0).")
        if not close(bias, torch.cat([bq, bk, bv]).double()):
            if close(bias, torch.zeros(3 * E, dtype=torch.float64)):
                raise wrong("the biases are missing: BERT's projections have biases; stack them the same way.")
            raise wrong("in_proj_bias should be the three biases in the same order: query, key, value.")
        return "BERT's separate q, k, v are now one (3E, E) in_proj_weight, in the order MultiHeadAttention reads."

    return run_check("BERT's q, k, v as one in_proj", body)


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


def _previous_mistakes(weights: Tensor, mask: Tensor) -> dict[str, Tensor]:
    real = mask.bool()
    below = weights.diagonal(offset=-1, dim1=-2, dim2=-1)  # (N, h, T-1)
    above = weights.diagonal(offset=1, dim1=-2, dim2=-1)
    valid = (real[:, 1:] & real[:, :-1]).to(weights.dtype)
    rows = real.to(weights.dtype)
    per_sentence = (below * valid[:, None]).sum(-1) / valid.sum(-1)[:, None]  # (N, h)
    return {
        "that is w[t, t+1], the NEXT token: the previous token of query t is key t-1, one diagonal BELOW the main "
        "one: weights.diagonal(offset=-1, dim1=-2, dim2=-1).": (above * valid[:, None]).sum(dim=(0, 2)) / valid.sum(),
        "padded positions are counted: take only queries t (and keys t-1) that are real tokens, "
        "attention_mask[:, 1:] & attention_mask[:, :-1].": below.mean(dim=(0, 2)),
        "the first token is counted as scoring 0: it has no previous token, so leave it out of the average "
        "(divide by the number of queries that have one).": (below * valid[:, None]).sum(dim=(0, 2)) / rows.sum(),
        "each sentence is averaged first, so a short sentence's rows weigh more: add up all valid rows of the "
        "batch, then divide once by their number.": per_sentence.mean(0),
    }


@learner_check
def check_previous_token_score(previous_token_score: Callable[[Tensor, Tensor], Tensor]) -> Verdict:
    """Check ``previous_token_score(weights (N, h, T, T), attention_mask (N, T)) -> (h,)``."""

    def body() -> str:
        weights, mask = _attention_case()
        N, h = weights.shape[:2]
        answer = as_tensor(
            call_learner(previous_token_score, weights.clone(), mask.clone()), "previous_token_score(...)"
        )
        if tuple(answer.shape) == (N, h):
            raise wrong(f"one score per head, (h,) = ({h},): average over the sentences too, not only the rows.")
        if answer.dim() == 0:
            raise wrong(f"one score per head, (h,) = ({h},): keep the heads apart (do not average over dim 1).")
        expect_shape(answer, (h,), "the scores (h,)")
        expected = reference_previous_token_score(weights, mask)
        if close(answer, expected, atol=1e-6):
            return f"per-head previous-token scores {[round(x, 2) for x in expected.tolist()]} on the check's batch."
        for hint, result in _previous_mistakes(weights, mask).items():
            if close(answer, result, atol=1e-6):
                raise wrong(hint)
        raise wrong(
            "for every sentence n and real query t >= 1, take weights[n, :, t, t-1]; average those over all such "
            f"(n, t) of the batch, one number per head. Expected {[round(x, 3) for x in expected.tolist()]}."
        )

    return run_check("previous-token score of each head", body)


# ---------------------------------------------------------------------------------------------
# Exercise 3: the similarity task's two numbers
# ---------------------------------------------------------------------------------------------
def reference_similarity_scores(cosines: Tensor) -> tuple[float, float]:
    """(P, P) cosines, paraphrases on the diagonal -> (margin, accuracy), as ``head_roles.TaskScore``."""
    P = cosines.size(0)
    related = cosines.diagonal().mean()
    unrelated = (cosines.sum() - cosines.diagonal().sum()) / (P * (P - 1))
    accuracy = (cosines.argmax(dim=1) == torch.arange(P)).double().mean()
    return float(related - unrelated), float(accuracy)


def _cosine_case() -> Tensor:
    """A (4, 4) cosine matrix, not symmetric: argmax over rows and over columns give different accuracies."""
    return torch.tensor(
        [
            [0.80, 0.10, 0.85, 0.00],  # first sentence 0 is nearer to second sentence 2: a miss
            [0.20, 0.70, 0.30, 0.75],  # a miss (column 3)
            [0.10, 0.75, 0.60, 0.20],  # a miss (column 1)
            [0.00, 0.20, 0.10, 0.90],  # a hit: rows give 1/4, columns (the usual slip) 2/4
        ]
    )


@learner_check
def check_similarity_scores(similarity_scores: Callable[[Tensor], tuple[float, float]]) -> Verdict:
    """Check ``similarity_scores(cosines (P, P)) -> (margin, accuracy)``, paraphrase pairs on the diagonal."""

    def body() -> str:
        cos = _cosine_case()
        P = cos.size(0)
        answer = call_learner(similarity_scores, cos.clone())
        if not isinstance(answer, (tuple, list)) or len(answer) != 2:
            raise wrong("return two numbers: (margin, accuracy)")
        try:
            margin, accuracy = float(answer[0]), float(answer[1])
        except (TypeError, ValueError, RuntimeError):  # RuntimeError: a tensor of several numbers
            raise wrong("margin and accuracy should each be one number (a float or a 0-d tensor)") from None
        expected_margin, expected_accuracy = reference_similarity_scores(cos)
        related = float(cos.diagonal().mean())
        if abs(margin - expected_margin) > 1e-6:
            if abs(margin + expected_margin) < 1e-6:
                raise wrong("the margin has the wrong sign: paraphrase cosine MINUS unrelated cosine.")
            if abs(margin - (related - float(cos.mean()))) < 1e-6:
                raise wrong(
                    "the unrelated mean includes the diagonal (the paraphrases themselves): average only the "
                    "P (P - 1) entries off the diagonal."
                )
            if abs(margin - (related - float((cos.sum() - cos.diagonal().sum()) / P**2))) < 1e-6:
                raise wrong(
                    f"the off-diagonal sum is divided by P² = {P * P}: there are P (P - 1) = {P * (P - 1)} such pairs."
                )
            raise wrong(f"expected the margin {expected_margin:.3f}: mean of the diagonal minus mean off the diagonal.")
        if abs(accuracy - expected_accuracy) > 1e-6:
            if abs(accuracy - 100 * expected_accuracy) < 1e-4:
                raise wrong("that accuracy is a percentage: return a fraction between 0 and 1.")
            by_column = float((cos.argmax(dim=0) == torch.arange(P)).double().mean())
            if abs(accuracy - by_column) < 1e-6:
                raise wrong(
                    "the argmax runs down the columns: for each FIRST sentence (a row) find the second sentence "
                    "(column) with the highest cosine, argmax(dim=1)."
                )
            raise wrong(
                f"expected the accuracy {expected_accuracy:.2f}: the share of rows whose largest entry is on the "
                "diagonal."
            )
        return f"margin {margin:.3f}, accuracy {accuracy:.2f} on the check's 4 pairs."

    return run_check("paraphrase margin and retrieval accuracy", body)
