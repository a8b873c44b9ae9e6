"""Lesson 08's exercise checks: a right answer passes, each usual mistake gets its own hint."""

from __future__ import annotations

import torch

from course.exercises import check_previous_token_score as exported
from course.exercises.lesson08 import (
    check_previous_token_score,
    check_similarity_scores,
    check_stack_qkv,
    reference_previous_token_score,
    reference_similarity_scores,
)
from helpers.analysis.head_roles import role_sums, token_kinds


def hint(check, fn) -> str:
    verdict = check(fn)
    assert verdict.status == "wrong", verdict
    return verdict.message


def not_attempted(*args):
    raise NotImplementedError()


# --- exercise 1: q, k, v into in_proj ----------------------------------------------------------
def right_stack(wq, wk, wv, bq, bk, bv):
    return torch.cat([wq, wk, wv]), torch.cat([bq, bk, bv])


def test_stack_qkv_passes_the_right_answer():
    assert check_stack_qkv(right_stack).passed


def test_stack_qkv_mistakes_get_specific_hints():
    assert "in the order key, query, value" in hint(
        check_stack_qkv, lambda wq, wk, wv, bq, bk, bv: (torch.cat([wk, wq, wv]), torch.cat([bk, bq, bv]))
    )
    assert "side by side" in hint(
        check_stack_qkv, lambda wq, wk, wv, bq, bk, bv: (torch.cat([wq, wk, wv], dim=1), torch.cat([bq, bk, bv]))
    )
    assert "torch.stack" in hint(
        check_stack_qkv, lambda wq, wk, wv, bq, bk, bv: (torch.stack([wq, wk, wv]), torch.cat([bq, bk, bv]))
    )
    assert "transposed" in hint(
        check_stack_qkv, lambda wq, wk, wv, bq, bk, bv: (torch.cat([wq.T, wk.T, wv.T]), torch.cat([bq, bk, bv]))
    )
    assert "biases are missing" in hint(
        check_stack_qkv, lambda wq, wk, wv, bq, bk, bv: (torch.cat([wq, wk, wv]), torch.zeros(3 * wq.size(0)))
    )
    assert "same order" in hint(
        check_stack_qkv, lambda wq, wk, wv, bq, bk, bv: (torch.cat([wq, wk, wv]), torch.cat([bv, bk, bq]))
    )
    assert "two tensors" in hint(check_stack_qkv, lambda *args: torch.cat(args[:3]))


def test_stack_qkv_not_attempted():
    assert check_stack_qkv(not_attempted).status == "not attempted"


# --- exercise 2: previous-token score -----------------------------------------------------------
def test_previous_token_score_reference_agrees_with_head_roles():
    # The exercise's reference and helpers.analysis.head_roles compute the same score.
    generator = torch.Generator().manual_seed(1)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    weights = torch.softmax(torch.randn(2, 3, 4, 4, generator=generator), dim=-1)
    tokens = [["[CLS]", "a", "b", "[SEP]"], ["[CLS]", "[SEP]"]]
    sums, counts = role_sums(weights.unsqueeze(0), mask, token_kinds(tokens, 4))
    torch.testing.assert_close(reference_previous_token_score(weights, mask), (sums[0] / counts[0])[0])


def test_previous_token_score_passes_the_right_answer_and_is_exported():
    assert check_previous_token_score(reference_previous_token_score).passed
    assert exported is check_previous_token_score


def test_previous_token_score_mistakes_get_specific_hints():
    def next_token(w, m):
        valid = (m[:, 1:] & m[:, :-1]).float()
        return (w.diagonal(offset=1, dim1=-2, dim2=-1) * valid[:, None]).sum(dim=(0, 2)) / valid.sum()

    def with_padding(w, m):
        return w.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, 2))

    def first_row_counted(w, m):
        valid = (m[:, 1:] & m[:, :-1]).float()
        return (w.diagonal(offset=-1, dim1=-2, dim2=-1) * valid[:, None]).sum(dim=(0, 2)) / m.sum()

    def mean_of_means(w, m):
        valid = (m[:, 1:] & m[:, :-1]).float()
        per = (w.diagonal(offset=-1, dim1=-2, dim2=-1) * valid[:, None]).sum(-1) / valid.sum(-1)[:, None]
        return per.mean(0)

    assert "NEXT token" in hint(check_previous_token_score, next_token)
    assert "padded positions are counted" in hint(check_previous_token_score, with_padding)
    assert "no previous token" in hint(check_previous_token_score, first_row_counted)
    assert "averaged first" in hint(check_previous_token_score, mean_of_means)
    assert "average over the sentences" in hint(
        check_previous_token_score, lambda w, m: w.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)
    )
    assert "keep the heads apart" in hint(
        check_previous_token_score, lambda w, m: reference_previous_token_score(w, m).mean()
    )
    assert "for every sentence n" in hint(check_previous_token_score, lambda w, m: torch.zeros(w.size(1)))


def test_previous_token_score_not_attempted():
    assert check_previous_token_score(not_attempted).status == "not attempted"


# --- exercise 3: margin and accuracy --------------------------------------------------------------
def test_similarity_scores_passes_the_right_answer():
    assert check_similarity_scores(reference_similarity_scores).passed
    # Tensors are fine as well as floats.
    assert check_similarity_scores(lambda c: tuple(torch.tensor(x) for x in reference_similarity_scores(c))).passed


def test_similarity_scores_mistakes_get_specific_hints():
    def right(c):
        return reference_similarity_scores(c)

    def with_diagonal(c):
        return float(c.diagonal().mean() - c.mean()), right(c)[1]

    def over_p_squared(c):
        P = c.size(0)
        return float(c.diagonal().mean() - (c.sum() - c.diagonal().sum()) / P**2), right(c)[1]

    def by_columns(c):
        return right(c)[0], float((c.argmax(dim=0) == torch.arange(c.size(0))).float().mean())

    assert "includes the diagonal" in hint(check_similarity_scores, with_diagonal)
    assert "P (P - 1)" in hint(check_similarity_scores, over_p_squared)
    assert "wrong sign" in hint(check_similarity_scores, lambda c: (-right(c)[0], right(c)[1]))
    assert "down the columns" in hint(check_similarity_scores, by_columns)
    assert "percentage" in hint(check_similarity_scores, lambda c: (right(c)[0], 100 * right(c)[1]))
    assert "two numbers" in hint(check_similarity_scores, lambda c: right(c)[0])
    assert "each be one number" in hint(check_similarity_scores, lambda c: (c.diagonal(), right(c)[1]))
    assert "expected the margin" in hint(check_similarity_scores, lambda c: (0.123, right(c)[1]))


def test_similarity_scores_not_attempted():
    assert check_similarity_scores(not_attempted).status == "not attempted"


def test_a_crash_in_the_learners_code_is_reported_as_theirs():
    def crashes(*args):
        raise IndexError("tuple index out of range")

    for check in (check_stack_qkv, check_previous_token_score, check_similarity_scores):
        verdict = check(crashes)
        assert verdict.status == "wrong" and "your code raised IndexError" in verdict.message
