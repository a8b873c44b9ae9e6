"""Lesson 15's exercise checks: the reference answers pass and agree with what defines them (``helpers.selection``'s
``causal_topk`` and ``summed_attention``, the lightning indexer's score), an untouched stub is "not attempted", every
typical mistake gets the hint that names it and no other, the course's own answers are refused, and the shared policy
(numpy, inputs changed in place, errors raised) reaches these checks too."""

from __future__ import annotations

import itertools

import pytest
import torch
from conftest import assert_hint, learners_copy, not_attempted

from course.exercises.feedback import CHECK_BUG, close, mistake_results
from course.exercises.lesson15 import (
    _index_cases,
    _index_mistakes,
    _target_cases,
    _target_mistakes,
    _topk_cases,
    _topk_mistakes,
    check_index_scores,
    check_indexer_target,
    check_top_k_keys,
    reference_index_scores,
    reference_indexer_target,
    reference_top_k_keys,
)
from helpers.selection import causal_topk, summed_attention

reference_top_k_keys, reference_index_scores, reference_indexer_target = (
    learners_copy(reference_top_k_keys),
    learners_copy(reference_index_scores),
    learners_copy(reference_indexer_target),
)

# The solution bodies of notebooks/15_attention_that_selects.ipynb: they pass.
SOLUTIONS = {
    "top_k_keys": """\
def top_k_keys(scores, k):
    L = scores.size(-1)
    future = torch.ones(L, L, dtype=torch.bool).triu(1)
    kept = min(k, L)
    values, indices = scores.masked_fill(future, float("-inf")).topk(kept, dim=-1)
    indices = torch.where(values == float("-inf"), -1, indices)
    padding = indices.new_full((*indices.shape[:-1], k - kept), -1)
    return torch.cat([indices, padding], dim=-1)
""",
    "index_scores": """\
def index_scores(q, keys, weights):
    per_head = torch.relu(torch.einsum("lhd,sd->lhs", q, keys))
    return torch.einsum("lh,lhs->ls", weights, per_head)
""",
    "indexer_target": """\
def indexer_target(weights):
    total = weights.sum(dim=0)
    return total / total.sum(dim=-1, keepdim=True)
""",
}
CHECKS = {"top_k_keys": check_top_k_keys, "index_scores": check_index_scores, "indexer_target": check_indexer_target}


def _solution(name):
    namespace = {"torch": torch}
    exec(compile(SOLUTIONS[name], "<learner's cell>", "exec"), namespace)
    return namespace[name]


@pytest.mark.parametrize("name", list(SOLUTIONS))
def test_the_notebooks_solutions_pass_and_a_stub_is_not_attempted(name):
    assert CHECKS[name](_solution(name)).passed
    assert CHECKS[name](not_attempted).status == "not attempted"


def test_the_references_pass_and_equal_the_librarys():
    assert check_top_k_keys(reference_top_k_keys).passed
    assert check_index_scores(reference_index_scores).passed
    assert check_indexer_target(reference_indexer_target).passed
    for case in _topk_cases():
        assert torch.equal(reference_top_k_keys(case.scores, case.k), causal_topk(case.scores, case.k))
    for _, weights in _target_cases():
        torch.testing.assert_close(reference_indexer_target(weights), summed_attention(weights[None])[0])


def _distinct(tables, right):
    """No two named mistakes, nor a mistake and the right answer, agree on every case: each gets its own hint."""
    hints = dict.fromkeys(hint for table in tables for hint in table)
    rows = {"right": [[r] for r in right]} | {h: [mistake_results(t[h]) or [] for t in tables] for h in hints}
    for (a, xs), (b, ys) in itertools.combinations(rows.items(), 2):
        assert not all(any(close(x, y) for x in xa for y in yb) for xa, yb in zip(xs, ys, strict=True)), (a, b)


def test_every_index_and_target_mistake_gives_a_result_of_its_own():
    _distinct(
        [_index_mistakes(*args) for _, args in _index_cases()], [reference_index_scores(*a) for _, a in _index_cases()]
    )
    _distinct(
        [_target_mistakes(w) for _, w in _target_cases()], [reference_indexer_target(w) for _, w in _target_cases()]
    )


def test_the_topk_mistakes_differ_from_the_right_keys_and_each_other():
    case = _topk_cases()[0]
    right = reference_top_k_keys(case.scores, case.k).sort(-1).values
    ways = {hint: [w.sort(-1).values for w in ws] for hint, ws in _topk_mistakes(case.scores, case.k).items()}
    for hint, results in ways.items():
        assert not any(torch.equal(r, right) for r in results), hint
    for (a, xs), (b, ys) in itertools.combinations(ways.items(), 2):
        assert not any(torch.equal(x, y) for x in xs for y in ys), (a, b)


# ---------------------------------------------------------------------------------------------
# Exercise 1: each mistake named
# ---------------------------------------------------------------------------------------------
def _masked(scores, diagonal=1, fill=float("-inf")):
    L = scores.size(-1)
    return scores.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(diagonal), fill)


def _padded(indices, k):
    return torch.cat([indices, indices.new_full((*indices.shape[:-1], k - indices.size(-1)), -1)], dim=-1)


def _top(scores, k, largest=True, diagonal=1):
    fill = float("-inf") if largest else float("inf")
    values, indices = _masked(scores, diagonal, fill).topk(min(k, scores.size(-1)), dim=-1, largest=largest)
    return _padded(torch.where(values.isinf(), -1, indices), k)


def _top_unclipped_k(scores, k):  # topk(k) raises when k > L
    values, indices = _masked(scores).topk(k, dim=-1)
    return torch.where(values.isinf(), -1, indices)


def _before_the_mask(scores, k):
    indices = scores.topk(min(k, scores.size(-1)), dim=-1).indices
    return _padded(indices, k)


def _before_the_mask_then_dropped(scores, k):
    indices = scores.topk(min(k, scores.size(-1)), dim=-1).indices
    return _padded(torch.where(indices > torch.arange(scores.size(-1))[:, None], -1, indices), k)


def _not_clipped(scores, k):
    return _padded(_masked(scores).topk(min(k, scores.size(-1)), dim=-1).indices, k)


def _zero_padded(scores, k):
    return _top(scores, k).clamp(min=0)


def _float_indices(scores, k):
    return _top(scores, k).float()


def _a_mask(scores, k):
    return _masked(scores).isfinite()


def _as_numpy(scores, k):
    return _top(scores, k).numpy()


def _in_place(scores, k):
    return _top(scores.masked_fill_(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf")), k)


def _wrong_axis(scores, k):
    return _top(scores.mT, k)


def _short_rows(scores, k):
    return _top(scores, k)[..., : min(k, scores.size(-1))]


@pytest.mark.parametrize(
    "mistake, fragments",
    [
        (_before_the_mask, ["before the causal mask"]),
        (_before_the_mask_then_dropped, ["before the causal mask"]),
        (_not_clipped, ["must be clipped", "-1"]),
        (lambda s, k: _top(s, k, diagonal=0), ["own key", "diagonal"]),
        (lambda s, k: _top(s, k, diagonal=2), ["one key late"]),
        (lambda s, k: _top_unclipped_k(s, k), ["k may be larger than the number of keys", "RuntimeError"]),
        (lambda s, k: _top(s, k, largest=False), ["LOWEST"]),
        (_wrong_axis, ["wrong axis"]),
        (_zero_padded, ["-1, not 0"]),
        (_float_indices, ["integers"]),
        (_a_mask, ["returns a mask"]),
        (_as_numpy, ["numpy"]),
        (_in_place, ["in place"]),
        (_short_rows, ["(..., L, k)"]),
        (lambda s, k: _top(s, k).flip(-1), None),  # another order within a row: right
    ],
)  # fmt: skip
def test_each_top_k_mistake_is_named(mistake, fragments):
    verdict = check_top_k_keys(mistake)
    if fragments is None:
        assert verdict.passed, verdict
        return
    assert_hint(verdict, *fragments)
    assert CHECK_BUG not in verdict.message


def test_either_choice_between_equal_scores_passes():
    def later_on_ties(scores, k):  # ranks equal scores by the LATER key first
        L = scores.size(-1)
        nudged = scores + torch.arange(L, dtype=scores.dtype) * 1e-9  # a tie goes to the later key
        return _top(scores.where(scores.isinf(), nudged), k)

    assert check_top_k_keys(later_on_ties).passed
    case = next(c for c in _topk_cases() if c.ties)
    assert not torch.equal(later_on_ties(case.scores, case.k), reference_top_k_keys(case.scores, case.k))


# ---------------------------------------------------------------------------------------------
# Exercises 2 and 3: each mistake named
# ---------------------------------------------------------------------------------------------
E = torch.einsum


@pytest.mark.parametrize(
    "mistake, fragments",
    [
        (lambda q, k, w: E("lh,lhs->ls", w, E("lhd,sd->lhs", q, k)), ["ReLU is left out"]),
        (lambda q, k, w: torch.relu(E("lh,lhs->ls", w, E("lhd,sd->lhs", q, k))), ["ReLU comes after"]),
        (lambda q, k, w: torch.relu(E("lhd,sd->lhs", q, k)).sum(1), ["weights are left out"]),
        (lambda q, k, w: E("lh,lhs->ls", torch.relu(w), E("lhd,sd->lhs", q, k)), ["applied to the weights"]),
        (lambda q, k, w: E("lh,lhs->ls", w.softmax(-1), torch.relu(E("lhd,sd->lhs", q, k))), ["over the heads"]),
        (lambda q, k, w: E("lh,lhs->ls", w, torch.relu(E("lhd,sd->lhs", q, k))).softmax(-1), ["softmax over the keys"]),
        (lambda q, k, w: E("lh,lhs->ls", w, torch.relu(E("lhd,sd->lhs", q, k))) / q.size(-1) ** 0.5, ["scaled"]),
        (lambda q, k, w: (w[..., None] * torch.relu(E("lhd,sd->lhs", q, k))).mean(1), ["heads are averaged"]),
        (lambda q, k, w: E("lh,lhs->ls", w, torch.relu(E("lhd,sd->lhs", q, k))).T, ["(L, S)"]),
        (lambda q, k, w: E("lh,lhs->ls", w, torch.relu(E("lhd,sd->lhs", q, k))).numpy(), ["numpy"]),
        (lambda q, k, w: E("lh,lhs->ls", w.relu_(), torch.relu(E("lhd,sd->lhs", q, k))), ["in place"]),
        (lambda q, k, w: E("lh,lhs->ls", w, torch.abs(E("lhd,sd->lhs", q, k))), ["through a ReLU"]),  # the fallback
        (lambda q, k, w: E("lhs,lh->ls", torch.relu(E("sd,lhd->lhs", k, q)), w), None),  # written otherwise
    ],
)  # fmt: skip
def test_each_index_score_mistake_is_named(mistake, fragments):
    verdict = check_index_scores(mistake)
    if fragments is None:
        assert verdict.passed, verdict
        return
    assert_hint(verdict, *fragments)
    assert CHECK_BUG not in verdict.message


@pytest.mark.parametrize(
    "mistake, fragments",
    [
        (lambda w: w.mean(0), ["averaged"]),
        (lambda w: w.sum(0), ["not normalised"]),
        (lambda w: w.sum(0) / w.sum(0).sum(0, keepdim=True), ["wrong axis"]),
        (lambda w: w.sum(0).softmax(-1), ["softmax"]),
        (lambda w: (w / w.sum(-1, keepdim=True)).mean(0), ["normalised first"]),
        (lambda w: w.amax(0) / w.amax(0).sum(-1, keepdim=True), ["largest head"]),
        (lambda w: w.sum(1) / w.sum(1).sum(-1, keepdim=True), ["(L, S)"]),
        (lambda w: (w.sum(0) / w.sum(0).sum(-1, keepdim=True)).numpy(), ["numpy"]),
        (lambda w: w.div_(w.sum(-1, keepdim=True)).mean(0), ["in place"]),
        (lambda w: w.sum(0) / w.sum(), ["divide each query's row by its total"]),  # the fallback
        (lambda w: torch.nn.functional.normalize(w.sum(0), p=1, dim=-1), None),  # written otherwise
    ],
)  # fmt: skip
def test_each_target_mistake_is_named(mistake, fragments):
    verdict = check_indexer_target(mistake)
    if fragments is None:
        assert verdict.passed, verdict
        return
    assert_hint(verdict, *fragments)
    assert CHECK_BUG not in verdict.message


@pytest.mark.parametrize("check", [check_top_k_keys, check_index_scores, check_indexer_target])
def test_errors_are_the_learners(check):
    def raises(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    verdict = check(raises)
    assert_hint(verdict, "your code raised ZeroDivisionError")
    assert CHECK_BUG not in verdict.message
