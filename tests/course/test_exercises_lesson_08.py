"""Lesson 08's exercise checks: a right answer passes, each usual mistake gets its own hint."""

from __future__ import annotations

import pytest
import torch
from conftest import learners_copy

from course.exercises import check_previous_token_score as exported
from course.exercises.lesson08 import (
    check_previous_token_score,
    check_similarity_scores,
    check_stack_qkv,
    reference_previous_token_score,
    reference_similarity_scores,
)
from helpers.analysis.head_roles import role_sums, token_kinds

# The references as a learner's own code: the checks refuse an answer that calls the course's reference_*
# itself, and these tests use them as the right computation (and build mistakes from them).
reference_previous_token_score, reference_similarity_scores = (
    learners_copy(reference_previous_token_score),
    learners_copy(reference_similarity_scores),
)


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


# --- every row of the checks' tables, written out as a learner would -------------------------------
def _valid(m):
    return (m[:, 1:] & m[:, :-1]).float()


STACK_ANSWERS = {
    "come back swapped": lambda wq, wk, wv, bq, bk, bv: (torch.cat([bq, bk, bv]), torch.cat([wq, wk, wv])),
    "interleaved": lambda wq, wk, wv, bq, bk, bv: (
        torch.stack([wq, wk, wv], dim=1).reshape(-1, wq.size(1)),
        torch.cat([bq, bk, bv]),
    ),
    "transposed": lambda wq, wk, wv, bq, bk, bv: (torch.cat([wq.T, wk.T, wv.T]), torch.cat([bq, bk, bv])),
}
PREVIOUS_ANSWERS = {
    "NEXT token": lambda w, m: (w.diagonal(1, -2, -1) * _valid(m)[:, None]).sum((0, 2)) / _valid(m).sum(),
    "ITSELF": lambda w, m: (w.diagonal(0, -2, -1) * m[:, None]).sum((0, 2)) / m.sum(),
    "two tokens back": lambda w, m: (
        (w.diagonal(-2, -2, -1) * (m[:, 2:] & m[:, :-2])[:, None]).sum((0, 2)) / (m[:, 2:] & m[:, :-2]).sum()
    ),
    "wraps around": lambda w, m: (
        (torch.roll(w, shifts=1, dims=-1).diagonal(0, -2, -1) * m[:, None]).sum((0, 2)) / m.sum()
    ),
    "padded positions are counted": lambda w, m: w.diagonal(-1, -2, -1).mean(dim=(0, 2)),
    "no previous token": lambda w, m: (w.diagonal(-1, -2, -1) * _valid(m)[:, None]).sum((0, 2)) / m.sum(),
    "averaged first": lambda w, m: (
        (w.diagonal(-1, -2, -1) * _valid(m)[:, None]).sum(-1) / _valid(m).sum(-1)[:, None]
    ).mean(0),
    "a sum over the rows": lambda w, m: (w.diagonal(-1, -2, -1) * _valid(m)[:, None]).sum((0, 2)),
}


def _margin_answer(margin_of):
    return lambda c: (margin_of(c), reference_similarity_scores(c)[1])


def _accuracy_answer(hits_of, scale=1.0):
    return lambda c: (reference_similarity_scores(c)[0], scale * float(hits_of(c).float().mean()))


_P = lambda c: c.size(0)  # noqa: E731
_OFF = lambda c: c.sum() - c.diagonal().sum()  # noqa: E731
_ROWS = lambda c: c.argmax(1) == torch.arange(_P(c))  # noqa: E731
_COLUMNS = lambda c: c.argmax(0) == torch.arange(_P(c))  # noqa: E731
SIMILARITY_ANSWERS = {
    "wrong sign": _margin_answer(lambda c: float(_OFF(c) / (_P(c) * (_P(c) - 1)) - c.diagonal().mean())),
    "includes the diagonal": _margin_answer(lambda c: float(c.diagonal().mean() - c.mean())),
    "divided by P²": _margin_answer(lambda c: float(c.diagonal().mean() - _OFF(c) / _P(c) ** 2)),
    "a ratio": _margin_answer(lambda c: float(c.diagonal().mean() / (_OFF(c) / (_P(c) * (_P(c) - 1))))),
    "upper triangle": _margin_answer(
        lambda c: float(c.diagonal().mean() - c[torch.triu_indices(_P(c), _P(c), 1).unbind()].mean())
    ),
    "those are sums": _margin_answer(lambda c: float(c.diagonal().sum() - _OFF(c))),
    "percentage": _accuracy_answer(_ROWS, scale=100.0),
    "count of hits": lambda c: (reference_similarity_scores(c)[0], int(_ROWS(c).sum())),
    "down the columns": _accuracy_answer(_COLUMNS),
    "argmin": _accuracy_answer(lambda c: c.argmin(1) == torch.arange(_P(c))),
    "row OR the column": _accuracy_answer(lambda c: _ROWS(c) | _COLUMNS(c)),
    "row AND the column": _accuracy_answer(lambda c: _ROWS(c) & _COLUMNS(c)),
}
ANSWERS = [
    (check_stack_qkv, STACK_ANSWERS),
    (check_previous_token_score, PREVIOUS_ANSWERS),
    (check_similarity_scores, SIMILARITY_ANSWERS),
]


@pytest.mark.parametrize(
    "check,expected,answer",
    [(check, hint, answer) for check, answers in ANSWERS for hint, answer in answers.items()],
    ids=[hint for _, answers in ANSWERS for hint in answers],
)
def test_each_mistake_gets_its_own_hint(check, expected, answer):
    assert expected in hint(check, answer)


def test_every_lesson_08_mistake_table_is_tested():
    from course.exercises import lesson08

    tables = {
        "PREVIOUS_MISTAKES": (check_previous_token_score, PREVIOUS_ANSWERS),
        "MARGIN_MISTAKES": (check_similarity_scores, SIMILARITY_ANSWERS),
        "ACCURACY_MISTAKES": (check_similarity_scores, SIMILARITY_ANSWERS),
    }
    for table, (check, answers) in tables.items():
        messages = [check(answer).message for answer in answers.values()]
        for text in getattr(lesson08, table):
            assert any(text in message for message in messages), f"{table}: no test reaches {text[:60]!r}"
