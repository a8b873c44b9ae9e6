"""Lesson 17's exercise checks (LoRA): the reference answers pass and agree with ``helpers.lora`` (the module the lesson
graduates into), an untouched stub is "not attempted", every typical mistake, written as a learner would write it,
gets the hint that names it, a wrong answer that matches none gets the fallback, and the shared policy (numpy, inputs
changed in place, a generator ignored or the global stream used, errors raised) reaches these checks too."""

from __future__ import annotations

import ast
import itertools
import math
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_hint, learners_copy, not_attempted
from solution_text import MIN_CHARS, _expressions, _statements, squeeze
from test_hints_give_nothing_away import shown_strings
from torch import nn

from course.exercises import lesson17
from course.exercises.feedback import CHECK_BUG, close, mistake_results
from course.exercises.lesson17 import (
    _ADAPTER_CASES,
    _COUNT_CASES,
    _count_mistakes,
    _forward_mistakes,
    _lora_cases,
    _merge_mistakes,
    check_lora_forward,
    check_lora_parameter_count,
    check_merge_weight,
    check_new_adapter,
    reference_lora_forward,
    reference_lora_parameter_count,
    reference_merge_weight,
    reference_new_adapter,
)
from helpers.lora import LoRALinear

# The references as a learner's own code: the checks refuse an answer that calls the course's reference_* itself.
reference_new_adapter, reference_lora_forward, reference_merge_weight, reference_lora_parameter_count = (
    learners_copy(reference_new_adapter),
    learners_copy(reference_lora_forward),
    learners_copy(reference_merge_weight),
    learners_copy(reference_lora_parameter_count),
)

# Solution bodies proposed for lesson 17's notebook (each between # BEGIN and # END SOLUTION there): they pass, and
# no hint holds a line of them (test_hints_give_nothing_away holds the notebook's own once it exists).
SOLUTIONS = {
    "new_adapter": """\
def new_adapter(out_features, in_features, rank, generator):
    bound = 1 / math.sqrt(in_features)
    A = torch.empty(rank, in_features).uniform_(-bound, bound, generator=generator)
    B = torch.zeros(out_features, rank)
    return A, B
""",
    "lora_forward": """\
def lora_forward(x, W, A, B, alpha):
    r = A.shape[0]
    return x @ W.T + (alpha / r) * ((x @ A.T) @ B.T)
""",
    "merge_weight": """\
def merge_weight(W, A, B, alpha):
    r = A.shape[0]
    return W + (alpha / r) * (B @ A)
""",
    "lora_parameter_count": """\
def lora_parameter_count(shapes, rank):
    return sum(rank * (out_features + in_features) for out_features, in_features in shapes)
""",
}
CHECKS = {
    "new_adapter": check_new_adapter,
    "lora_forward": check_lora_forward,
    "merge_weight": check_merge_weight,
    "lora_parameter_count": check_lora_parameter_count,
}


def _solution(name):
    namespace = {"torch": torch, "math": math}
    exec(compile(SOLUTIONS[name], "<learner's cell>", "exec"), namespace)
    return namespace[name]


@pytest.mark.parametrize("name", list(SOLUTIONS))
def test_the_proposed_solutions_pass_and_a_stub_is_not_attempted(name):
    assert CHECKS[name](_solution(name)).passed
    assert CHECKS[name](not_attempted).status == "not attempted"


def test_the_references_pass_and_agree_with_helpers_lora():
    assert check_new_adapter(reference_new_adapter).passed
    assert check_lora_forward(reference_lora_forward).passed
    assert check_merge_weight(reference_merge_weight).passed
    assert check_lora_parameter_count(reference_lora_parameter_count).passed
    for case in _lora_cases():
        out, d_in = case.W.shape
        base = nn.Linear(d_in, out, bias=False)
        with torch.no_grad():
            base.weight.copy_(case.W)
        layer = LoRALinear(base, case.A.size(0), case.alpha)
        with torch.no_grad():
            layer.lora_A.copy_(case.A)
            layer.lora_B.copy_(case.B)
            expected = layer(case.x)
            torch.testing.assert_close(reference_lora_forward(case.x, case.W, case.A, case.B, case.alpha), expected)
            layer.merge()
        torch.testing.assert_close(reference_merge_weight(case.W, case.A, case.B, case.alpha), base.weight.detach())
    for _, shapes, rank in _COUNT_CASES[1:]:
        layers = [LoRALinear(nn.Linear(i, o), rank, 1.0) for o, i in shapes]
        trainable = sum(p.numel() for layer in layers for p in layer.parameters() if p.requires_grad)
        assert reference_lora_parameter_count(shapes, rank) == trainable
    assert reference_lora_parameter_count(_COUNT_CASES[0][1], 8) == 460_800  # benchmarks/RESULTS.md's lesson 17


def test_the_reference_adapter_draws_as_lora_linear_does():
    """The same bound as LoRALinear's (nn.init.kaiming_uniform_ with a = √5), and B zeros."""
    for case in _ADAPTER_CASES:
        layer = LoRALinear(nn.Linear(case.in_features, case.out_features), case.rank, 1.0)
        A, B = reference_new_adapter(case.out_features, case.in_features, case.rank, torch.Generator().manual_seed(0))
        assert A.shape == layer.lora_A.shape and B.shape == layer.lora_B.shape
        assert float(A.abs().max()) <= case.bound and float(layer.lora_A.detach().abs().max()) <= case.bound
        assert not B.any() and not layer.lora_B.any()


# ---------------------------------------------------------------------------------------------
# Exercise 1: a new adapter
# ---------------------------------------------------------------------------------------------
def _uniform(shape, bound, generator):
    return torch.rand(*shape, generator=generator) * (2 * bound) - bound


def _adapter(draw_A=None, make_B=None):
    """A learner's new_adapter: A from ``draw_A(out, in, r, generator)`` (the right draw by default), B from
    ``make_B(out, in, r, generator)`` (zeros by default)."""

    def new_adapter(out_features, in_features, rank, generator):
        if draw_A is None:
            A = _uniform((rank, in_features), 1 / math.sqrt(in_features), generator)
        else:
            A = draw_A(out_features, in_features, rank, generator)
        B = torch.zeros(out_features, rank) if make_B is None else make_B(out_features, in_features, rank, generator)
        return A, B

    return new_adapter


def _right_A(o, i, r, g):
    return _uniform((r, i), 1 / math.sqrt(i), g)


def _swapped_roles(o, i, r, g):
    return torch.zeros(r, i), _uniform((o, r), 1 / math.sqrt(r), g)


def _kaiming_default(o, i, r, g):
    A = torch.empty(r, i)
    nn.init.kaiming_uniform_(A, generator=g)  # a = 0: the bound is √(6 / in)
    return A


def _xavier(o, i, r, g):
    A = torch.empty(r, i)
    nn.init.xavier_uniform_(A, generator=g)  # the bound is √(6 / (in + r)), Glorot's
    return A


def _bound_by_precedence(o, i, r, g):
    bound = 1 / i**1 / 2  # meant as 1/√in: ** binds tighter, so this is 1/(2·in)
    return _uniform((r, i), bound, g)


@pytest.mark.parametrize(
    "answer, fragments",
    [
        (_adapter(make_B=lambda o, i, r, g: _uniform((o, r), 1 / math.sqrt(r), g)), ["B should start at zero",
                                                                                     "before any training step"]),
        (_adapter(make_B=lambda o, i, r, g: torch.ones(o, r)), ["B should start at zero"]),
        (_adapter(draw_A=lambda o, i, r, g: torch.zeros(r, i)), ["left at zero too", "no gradient"]),
        (lambda o, i, r, g: (torch.zeros(r, i), torch.zeros(o, r)), ["left at zero too", "whatever the generator"]),
        (lambda o, i, r, g: _swapped_roles(o, i, r, g), ["swapped roles", "peft"]),
        (lambda o, i, r, g: (_right_A(o, i, r, g).T, torch.zeros(r, o)), ["both transposed"]),
        (lambda o, i, r, g: (_uniform((i, r), 1 / math.sqrt(i), g), torch.zeros(o, r)), ["A is transposed"]),
        (lambda o, i, r, g: (_right_A(o, i, r, g), torch.zeros(r, o)), ["B is transposed"]),
        (lambda o, i, r, g: (torch.zeros(o, r), _right_A(o, i, r, g)), ["(B, A)", "A first"]),
        (lambda o, i, r, g: (_uniform((r, o), 1 / math.sqrt(o), g), torch.zeros(i, r)),
         ["in_features and out_features are swapped"]),
        (lambda o, i, r, g: (_uniform((r, o), 1 / math.sqrt(i), g), torch.zeros(o, r)), ["A's second size"]),
        (lambda o, i, r, g: (_right_A(o, i, r, g), torch.zeros(i, r)), ["B's first size"]),
        (lambda o, i, r, g: (_uniform((o, i), 1 / math.sqrt(i), g), torch.zeros(o, r)), ["full weight's shape"]),
        (lambda o, i, r, g: (_right_A(o, i, r, g), torch.zeros(o, r + 1)), ["the shapes are off",
                                                                            "(out_features, rank)"]),
        (_adapter(draw_A=lambda o, i, r, g: torch.randn(r, i, generator=g)), ["standard normal", "far too large"]),
        (_adapter(draw_A=lambda o, i, r, g: torch.rand(r, i, generator=g) * 2 - 1), ["not scaled by 1/√in_features"]),
        (_adapter(draw_A=lambda o, i, r, g: _uniform((r, i), 1 / math.sqrt(o), g)), ["comes from out_features"]),
        (_adapter(draw_A=lambda o, i, r, g: _uniform((r, i), 1 / math.sqrt(r), g)), ["comes from the rank"]),
        (_adapter(draw_A=lambda o, i, r, g: _uniform((r, i), 1 / i, g)), ["square root is missing"]),
        (_adapter(draw_A=_kaiming_default), ["kaiming_uniform_'s default", "a = √5"]),
        (_adapter(draw_A=lambda o, i, r, g: (torch.rand(r, i, generator=g) - 0.5) / math.sqrt(i)), ["half the range"]),
        (_adapter(draw_A=lambda o, i, r, g: torch.randn(r, i, generator=g) / math.sqrt(i)), ["normal distribution"]),
        (_adapter(draw_A=lambda o, i, r, g: torch.randn(r, i, generator=g) / r), ["normal distribution", "gaussian"]),
        (_adapter(draw_A=lambda o, i, r, g: torch.rand(r, i, generator=g) / math.sqrt(i)), ["all 0 or more"]),
        (_adapter(draw_A=lambda o, i, r, g: (torch.rand(r, i, generator=g) * 2 - 2) / math.sqrt(i)),
         ["all 0 or less", "centred on zero"]),
        (_adapter(draw_A=lambda o, i, r, g: torch.rand(r, i, generator=g) * 2 / math.sqrt(i)), ["all 0 or more"]),
        (_adapter(draw_A=lambda o, i, r, g: (torch.rand(r, i, generator=g) * 2 - 0.5) / math.sqrt(i)),
         ["not centred on 0", "shifted"]),
        (_adapter(draw_A=_xavier), ["xavier_uniform_", "√(6/(in_features + rank))"]),
        (_adapter(draw_A=_bound_by_precedence), ["1/(2·in_features)", "** binds tighter"]),
        (_adapter(draw_A=lambda o, i, r, g: torch.full((r, i), 0.5 / math.sqrt(i))), ["one number everywhere",
                                                                                     "whatever the generator"]),
        (_adapter(draw_A=lambda o, i, r, g: _right_A(o, i, r, g).double()), ["A is torch.float64", "float32"]),
        (_adapter(make_B=lambda o, i, r, g: torch.zeros(o, r, dtype=torch.float64)), ["B is torch.float64"]),
        (lambda o, i, r, g: _right_A(o, i, r, g), ["return two tensors, (A, B)"]),
        (lambda o, i, r, g: (_right_A(o, i, r, g), torch.zeros(o, r), None), ["return two tensors", "3 items"]),
        (lambda o, i, r, g: (_right_A(o, i, r, g), 0.0), ["B should be a tensor"]),
        # Fallbacks: within the bound, but no usual mistake
        (_adapter(draw_A=lambda o, i, r, g: torch.rand(r, i, generator=g) * 1.6 / math.sqrt(i) - 1 / math.sqrt(i)),
         ["not centred on 0"]),
        (_adapter(draw_A=lambda o, i, r, g: (torch.randint(0, 2, (r, i), generator=g) * 2 - 1) / math.sqrt(i)),
         ["repeats its numbers"]),
        (_adapter(draw_A=lambda o, i, r, g: torch.randn(r, i, generator=g).clamp(-2.5, 2.5) / (2.5 * math.sqrt(i))),
         ["spread is not a uniform draw's"]),
        (_adapter(draw_A=lambda o, i, r, g: _uniform((r, i), 1.2 / math.sqrt(i), g)), ["outside the bound"]),
        (_adapter(draw_A=lambda o, i, r, g: _uniform((r, i), 0.6 / math.sqrt(i), g)), ["reach only"]),
    ],
)  # fmt: skip
def test_each_adapter_mistake_is_named(answer, fragments):
    verdict = check_new_adapter(answer)
    assert_hint(verdict, *fragments)
    assert CHECK_BUG not in verdict.message


def test_other_right_draws_pass():
    """The learner's own way to draw (nn.init's, uniform_, a transposed draw, in float64 then converted) passes."""

    def kaiming(out_features, in_features, rank, generator):
        A = torch.empty(rank, in_features)
        nn.init.kaiming_uniform_(A, a=math.sqrt(5), generator=generator)
        return A, torch.zeros(out_features, rank)

    def transposed_draw(out_features, in_features, rank, generator):
        bound = in_features**-0.5
        A = (torch.rand(in_features, rank, generator=generator, dtype=torch.float64) * 2 - 1) * bound
        return A.T.float(), torch.zeros(out_features, rank)

    def as_parameters(out_features, in_features, rank, generator):
        A = (torch.rand(rank, in_features, generator=generator) - 0.5) * (2 / math.sqrt(in_features))
        return nn.Parameter(A), nn.Parameter(torch.zeros(out_features, rank))

    for answer in (kaiming, transposed_draw, as_parameters, _solution("new_adapter")):
        assert check_new_adapter(answer).passed, answer


def test_the_right_draw_passes_over_many_seeds():
    """A is judged by its distribution: a right draw never fails it, whatever the generator's numbers (the check's
    seeds are fixed, a learner's order of drawing is not)."""
    from course.exercises.lesson17 import _a_problem

    for seed in range(200):
        generator = torch.Generator().manual_seed(seed)
        for case in _ADAPTER_CASES:
            A = _right_A(case.out_features, case.in_features, case.rank, generator)
            assert _a_problem(A, case) is None, (seed, case, _a_problem(A, case))


def test_the_generator_rules_reach_the_adapter():
    def global_stream(out_features, in_features, rank, generator):
        return _right_A(out_features, in_features, rank, None), torch.zeros(out_features, rank)

    def own_generator(out_features, in_features, rank, generator):
        return _right_A(out_features, in_features, rank, torch.Generator().manual_seed(0)), torch.zeros(
            out_features, rank
        )

    def through_nn_linear(out_features, in_features, rank, generator):  # nn.Linear draws from the global stream
        return nn.Linear(in_features, rank).weight.detach(), torch.zeros(out_features, rank)

    def as_numpy(out_features, in_features, rank, generator):
        A, B = _right_A(out_features, in_features, rank, generator), torch.zeros(out_features, rank)
        return A.numpy(), B.numpy()

    assert_hint(check_new_adapter(global_stream), "two generators in the same state")
    assert_hint(check_new_adapter(through_nn_linear), "two generators in the same state")
    assert_hint(check_new_adapter(own_generator), "seeded differently")
    assert_hint(check_new_adapter(as_numpy), "numpy array")


GLOBAL_STREAM = "some random numbers come from torch's global random stream"


def _right_A_from_empty(o, i, r, g):
    bound = 1 / math.sqrt(i)
    return torch.empty(r, i).uniform_(-bound, bound, generator=g)


def test_a_b_from_torch_empty_is_not_blamed_on_the_global_stream():
    """torch.empty holds whatever was in memory: a B made with it is named (torch.empty, or B not zero), never the
    global random stream; where it happens to hold zeros in every case there is nothing wrong to see, and it passes."""
    for _ in range(5):
        verdict = check_new_adapter(_adapter(draw_A=_right_A_from_empty, make_B=lambda o, i, r, g: torch.empty(o, r)))
        assert CHECK_BUG not in verdict.message and GLOBAL_STREAM not in verdict.message, verdict
        assert verdict.passed or "torch.empty" in verdict.message or "B should start at zero" in verdict.message


def _memory(fill):
    """torch.empty as it behaves at times: the memory it hands out holds ``fill()`` (zeros, old numbers, others on
    each call). The real torch.empty is called, so a check that watches the calls sees it."""

    def empty(*shape):
        return torch.empty(*shape).fill_(fill())

    return empty


@pytest.mark.parametrize(
    "fill, fragments",
    [
        (itertools.count(1).__next__, ["B changes from one call to the next", "torch.empty", "whatever was in memory"]),
        (lambda: 3.0, ["B should start at zero", "torch.empty", "whatever was in memory"]),
        (lambda: float("nan"), ["torch.empty", "whatever was in memory"]),
    ],
)
def test_each_way_torch_empty_leaves_b_is_named(fill, fragments):
    empty = _memory(fill)
    verdict = check_new_adapter(_adapter(draw_A=_right_A_from_empty, make_B=lambda o, i, r, g: empty(o, r)))
    assert_hint(verdict, *fragments)
    assert GLOBAL_STREAM not in verdict.message and CHECK_BUG not in verdict.message


def test_torch_empty_zeros_now_and_other_numbers_before_is_still_named():
    """Memory that held other numbers in the generator rule's two calls, then zeros in every call after: the rule's
    refusal stands (the global stream may be the cause too), and torch.empty is named beside it."""
    fills = iter([1.0, 2.0])
    empty = _memory(lambda: next(fills, 0.0))
    verdict = check_new_adapter(_adapter(draw_A=_right_A_from_empty, make_B=lambda o, i, r, g: empty(o, r)))
    assert_hint(verdict, "two generators in the same state", "It also calls torch.empty", "not reliably zeros")


def test_a_b_made_by_a_module_is_not_blamed_on_torch_empty():
    """nn.Linear makes its weight with torch.empty and then draws it: a B taken from one is not zero, and named so,
    without a word on torch.empty (which the learner did not call)."""

    def from_a_linear(o, i, r, g):
        return _right_A(o, i, r, g), nn.Linear(r, o, bias=False).weight.detach()

    verdict = check_new_adapter(from_a_linear)
    assert_hint(verdict, "B should start at zero")
    assert "torch.empty" not in verdict.message and GLOBAL_STREAM not in verdict.message


def test_a_b_from_torch_empty_that_holds_zeros_passes():
    empty = _memory(lambda: 0.0)
    assert check_new_adapter(_adapter(draw_A=_right_A_from_empty, make_B=lambda o, i, r, g: empty(o, r))).passed


def test_an_a_left_partly_unfilled_by_torch_empty_is_named():
    empty = _memory(itertools.count(1).__next__)

    def half_drawn(o, i, r, g):
        A = empty(r, i)
        A[:, : i // 2] = _uniform((r, i // 2), 1 / math.sqrt(i), g)
        return A

    verdict = check_new_adapter(_adapter(draw_A=half_drawn))
    assert_hint(verdict, "A changes from one call to the next", "torch.empty", "every entry")
    assert GLOBAL_STREAM not in verdict.message


def test_the_adapter_mistakes_are_told_apart_on_every_case():
    """Each usual draw of A matches its own test in every case, and no test before it in the list (the order in
    which the check tries them), and the right draw matches none."""
    from course.exercises.lesson17 import _A_MISTAKES

    draws = {
        "standard normal": lambda o, i, r, g: torch.randn(r, i, generator=g),
        "uniform in (-1, 1)": lambda o, i, r, g: torch.rand(r, i, generator=g) * 2 - 1,
        "out_features": lambda o, i, r, g: _uniform((r, i), 1 / math.sqrt(o), g),
        "from the rank": lambda o, i, r, g: _uniform((r, i), 1 / math.sqrt(r), g),
        "1/in_features": lambda o, i, r, g: _uniform((r, i), 1 / i, g),
        "kaiming_uniform_": _kaiming_default,
        "half the range": lambda o, i, r, g: _uniform((r, i), 0.5 / math.sqrt(i), g),
        "normal distribution": lambda o, i, r, g: torch.randn(r, i, generator=g) / math.sqrt(i),
        "0 or more": lambda o, i, r, g: torch.rand(r, i, generator=g) / math.sqrt(i),
        "0 or less": lambda o, i, r, g: (torch.rand(r, i, generator=g) * 2 - 2) / math.sqrt(i),
        "not centred": lambda o, i, r, g: (torch.rand(r, i, generator=g) * 2 - 0.5) / math.sqrt(i),
        "xavier_uniform_": _xavier,
        "1/(2·in_features)": _bound_by_precedence,
    }
    hints = list(_A_MISTAKES)
    for seed in range(20):
        for fragment, draw in draws.items():
            generator = torch.Generator().manual_seed(seed)
            As = [draw(c.out_features, c.in_features, c.rank, generator) for c in _ADAPTER_CASES]
            matched = [h for h in hints if all(_A_MISTAKES[h](A, c) for A, c in zip(As, _ADAPTER_CASES, strict=True))]
            assert matched and fragment in matched[0], (seed, fragment, matched)
        generator = torch.Generator().manual_seed(seed)
        right = [_right_A(c.out_features, c.in_features, c.rank, generator) for c in _ADAPTER_CASES]
        assert not any(
            all(test(A, c) for A, c in zip(right, _ADAPTER_CASES, strict=True)) for test in _A_MISTAKES.values()
        )


# ---------------------------------------------------------------------------------------------
# Exercises 2 and 3: every mistake gives numbers of its own
# ---------------------------------------------------------------------------------------------
def _distinct(tables, right):
    """No two named mistakes, nor a mistake and the right answer, agree on every case where both are computed."""
    hints = dict.fromkeys(hint for table in tables for hint in table)
    rows = {"right": [[r] for r in right]} | {h: [mistake_results(t[h]) for t in tables] for h in hints}
    for (a, xs), (b, ys) in itertools.combinations(rows.items(), 2):
        pairs = [(x, y) for x, y in zip(xs, ys, strict=True) if x is not None and y is not None]
        assert pairs, (a, b)
        assert not all(any(close(p, q) for p in x for q in y) for x, y in pairs), (a, b)


def test_every_forward_and_merge_mistake_gives_a_result_of_its_own():
    cases = _lora_cases()
    _distinct(
        [_forward_mistakes(c) for c in cases], [reference_lora_forward(c.x, c.W, c.A, c.B, c.alpha) for c in cases]
    )
    _distinct([_merge_mistakes(c) for c in cases], [reference_merge_weight(c.W, c.A, c.B, c.alpha) for c in cases])
    assert cases[0].W.size(0) == cases[0].W.size(1)  # the square case comes first
    for case in cases:  # B is a trained adapter's (not zero), and the sizes differ (but out = in in the square case)
        (out, d_in), r = case.W.shape, case.A.size(0)
        assert case.B.any() and r not in (out, d_in)
        assert case is cases[0] or out != d_in


# ---------------------------------------------------------------------------------------------
# Exercise 2: the adapted layer's output
# ---------------------------------------------------------------------------------------------
def _forward(scale=lambda alpha, A, B: alpha / A.shape[0], base=lambda x, W: x @ W.T, sign=1.0):
    def lora_forward(x, W, A, B, alpha):
        return base(x, W) + sign * scale(alpha, A, B) * ((x @ A.T) @ B.T)

    return lora_forward


@pytest.mark.parametrize(
    "answer, fragments",
    [
        (_forward(scale=lambda alpha, A, B: 1.0), ["scale α / r is missing"]),
        (_forward(scale=lambda alpha, A, B: A.shape[0] / alpha), ["upside down"]),
        (_forward(scale=lambda alpha, A, B: alpha), ["α alone"]),
        (_forward(scale=lambda alpha, A, B: alpha / A.shape[1]), ["wrong size"]),
        (_forward(scale=lambda alpha, A, B: alpha / B.shape[0]), ["wrong size"]),
        (_forward(scale=lambda alpha, A, B: alpha / math.sqrt(A.shape[0])), ["rsLoRA"]),
        (_forward(base=lambda x, W: 0), ["only the update came back"]),
        (lambda x, W, A, B, alpha: x @ W.T, ["the update is missing"]),
        (lambda x, W, A, B, alpha: alpha / A.shape[0] * (x @ W.T + x @ A.T @ B.T), ["multiplies the frozen layer's"]),
        (_forward(sign=-1.0), ["subtracted"]),
        (_forward(base=lambda x, W: x @ W), ["W is not transposed", "It shows on", "your code raised RuntimeError"]),
        (lambda x, W, A, B, alpha: x @ W.T + alpha / A.shape[0] * (x @ (B @ A)), ["wrong order or not transposed"]),
        (lambda x, W, A, B, alpha: x @ W.T + alpha / A.shape[0] * (x @ B @ A), ["wrong order or not transposed"]),
        (lambda x, W, A, B, alpha: x @ W.T + alpha / A.shape[0] * (x @ A.T @ B.T) + 0.1, ["differs from the adapted"]),
        (lambda x, W, A, B, alpha: x, ["the output", "should have shape"]),
        (lambda x, W, A, B, alpha: reference_lora_forward(x, W, A, B, alpha).numpy(), ["numpy"]),
        (lambda x, W, A, B, alpha: reference_lora_forward(x.mul_(2), W, A, B, alpha), ["`x` in place"]),
        (lambda x, W, A, B, alpha: reference_lora_forward(x, W.t_(), A, B, alpha), ["`W` in place"]),
        (lambda x, W, A, B, alpha: reference_lora_forward(x, W, A, B, alpha).double(), ["dtype changed"]),
    ],
)  # fmt: skip
def test_each_forward_mistake_is_named(answer, fragments):
    verdict = check_lora_forward(answer)
    assert_hint(verdict, *fragments)
    assert CHECK_BUG not in verdict.message


@pytest.mark.parametrize(
    "answer",
    [
        lambda x, W, A, B, alpha: reference_lora_forward(x, W, A, B, alpha).tolist(),
        lambda x, W, A, B, alpha: tuple(reference_lora_forward(x, W, A, B, alpha).tolist()),
        lambda x, W, A, B, alpha: 1.5,
    ],
)
def test_a_forward_that_is_not_a_tensor_is_refused(answer):
    verdict = check_lora_forward(answer)
    assert_hint(verdict, "should be one tensor (a torch.Tensor)", "got a")
    assert CHECK_BUG not in verdict.message


@pytest.mark.parametrize(
    "answer",
    [
        lambda x, W, A, B, alpha: x @ W.T + alpha / A.shape[0] * (x @ A @ B),
        lambda x, W, A, B, alpha: x @ W.T + alpha / A.shape[0] * (x @ A.T @ B),
        lambda x, W, A, B, alpha: x @ W.T + alpha / A.shape[0] * (x @ B.T @ A.T),
    ],
)
def test_a_forward_whose_shapes_do_not_fit_is_told_the_shapes(answer):
    verdict = check_lora_forward(answer)
    assert_hint(verdict, "your code raised RuntimeError", "cannot be multiplied", "A is (r, in)", "B is (out, r)",
                "x Aᵀ is (..., r)", "(..., out)")  # fmt: skip
    assert CHECK_BUG not in verdict.message


def test_the_forward_written_otherwise_passes():
    def with_f_linear(x, W, A, B, alpha):
        return F.linear(x, W) + F.linear(F.linear(x, A), B) * (alpha / A.size(0))

    def with_einsum(x, W, A, B, alpha):
        low = torch.einsum("...i,ri->...r", x, A)
        return torch.einsum("...i,oi->...o", x, W) + alpha / B.shape[1] * torch.einsum("...r,or->...o", low, B)

    def through_the_product(x, W, A, B, alpha):  # the (out, in) product: slower, the same numbers
        return x @ (W + alpha / A.shape[0] * (B @ A)).T

    for answer in (with_f_linear, with_einsum, through_the_product):
        assert check_lora_forward(answer).passed, answer


# ---------------------------------------------------------------------------------------------
# Exercise 3: the merged weight
# ---------------------------------------------------------------------------------------------
def _merge(scale=lambda alpha, A: alpha / A.shape[0], times=1.0):
    def merge_weight(W, A, B, alpha):
        return W + times * scale(alpha, A) * (B @ A)

    return merge_weight


def _merged_in_place(W, A, B, alpha):
    W += alpha / A.shape[0] * (B @ A)
    return W


def _merged_in_place_then_copied(W, A, B, alpha):
    W.add_(alpha / A.shape[0] * (B @ A))
    return W.clone()


@pytest.mark.parametrize(
    "answer, fragments",
    [
        (_merge(times=2.0), ["added twice"]),
        (_merge(scale=lambda alpha, A: 1.0), ["scale α / r is missing"]),
        (_merge(scale=lambda alpha, A: A.shape[0] / alpha), ["upside down"]),
        (_merge(scale=lambda alpha, A: alpha), ["α alone"]),
        (_merge(scale=lambda alpha, A: alpha / A.shape[1]), ["wrong size"]),
        (_merge(scale=lambda alpha, A: alpha / math.sqrt(A.shape[0])), ["rsLoRA"]),
        (_merge(times=-1.0), ["unmerging"]),
        (lambda W, A, B, alpha: alpha / A.shape[0] * (B @ A), ["only the update came back"]),
        (lambda W, A, B, alpha: W.clone(), ["W unchanged"]),
        (lambda W, A, B, alpha: alpha / A.shape[0] * (W + B @ A), ["multiplies W too"]),
        (lambda W, A, B, alpha: W + alpha / A.shape[0] * (B @ A).T, ["transposed", "It shows on",
                                                                    "your code raised RuntimeError"]),
        (lambda W, A, B, alpha: W + alpha / A.shape[0] * (A.T @ B.T), ["transposed"]),
        (lambda W, A, B, alpha: alpha / A.shape[0] * (A @ B), ["(r, r)", "wrong way round"]),
        (lambda W, A, B, alpha: W + alpha / A.shape[0] * (B @ A) + 0.01, ["the merged weight differs"]),
        (_merged_in_place, ["changed its input `W` in place", "a NEW weight", "unmerge"]),
        (_merged_in_place_then_copied, ["changed its input `W` in place", "a NEW weight"]),
        (lambda W, A, B, alpha: reference_merge_weight(W, A, B, alpha).numpy(), ["numpy"]),
        (lambda W, A, B, alpha: reference_merge_weight(W, A, B, alpha).half(), ["dtype changed"]),
        (lambda W, A, B, alpha: W[:, :2], ["the merged weight", "should have shape (out, in)"]),
    ],
)  # fmt: skip
def test_each_merge_mistake_is_named(answer, fragments):
    verdict = check_merge_weight(answer)
    assert_hint(verdict, *fragments)
    assert CHECK_BUG not in verdict.message


@pytest.mark.parametrize(
    "answer",
    [
        lambda W, A, B, alpha: (W + (alpha / A.shape[0]) * (B @ A)).tolist(),
        lambda W, A, B, alpha: [row for row in W + (alpha / A.shape[0]) * (B @ A)],
    ],
)
def test_a_merge_that_is_not_a_tensor_is_refused(answer):
    verdict = check_merge_weight(answer)
    assert_hint(verdict, "should be one tensor (a torch.Tensor)", "got a list")
    assert CHECK_BUG not in verdict.message


@pytest.mark.parametrize(
    "answer",
    [
        lambda W, A, B, alpha: W + alpha / A.shape[0] * (A @ B),
        lambda W, A, B, alpha: W + alpha / A.shape[0] * (B.T @ A.T),
    ],
)
def test_a_merge_whose_shapes_do_not_fit_is_told_the_shapes(answer):
    verdict = check_merge_weight(answer)
    assert_hint(verdict, "your code raised RuntimeError", "must match the size", "W is (out, in)", "A is (r, in)",
                "B A is (out, in), the shape of W")  # fmt: skip
    assert CHECK_BUG not in verdict.message


def test_the_merge_written_otherwise_passes():
    def with_addmm(W, A, B, alpha):
        return torch.addmm(W, B, A, alpha=alpha / A.size(0))

    def on_a_copy(W, A, B, alpha):
        merged = W.clone()
        merged += (alpha / A.shape[0]) * B @ A
        return merged

    for answer in (with_addmm, on_a_copy):
        assert check_merge_weight(answer).passed, answer


# ---------------------------------------------------------------------------------------------
# Exercise 4: the parameters LoRA trains
# ---------------------------------------------------------------------------------------------
def test_every_count_mistake_gives_a_number_of_its_own():
    for _, shapes, rank in _COUNT_CASES:
        right = reference_lora_parameter_count(shapes, rank)
        numbers = [(hint, n) for hint, ways in _count_mistakes(shapes, rank).items() for n in ways]
        assert all(n != right for _, n in numbers), (shapes, rank)
        for (a, x), (b, y) in itertools.combinations(numbers, 2):
            assert a == b or x != y, (a, b, shapes, rank)


def _per_layer(count):
    def lora_parameter_count(shapes, rank):
        return sum(count(out_features, in_features, rank) for out_features, in_features in shapes)

    return lora_parameter_count


@pytest.mark.parametrize(
    "answer, fragments",
    [
        (_per_layer(lambda o, i, r: o * i), ["whole weight matrices", "full fine-tune"]),
        (_per_layer(lambda o, i, r: o * i + r * (o + i)), ["base weights are counted too"]),
        (_per_layer(lambda o, i, r: r * i), ["counts A alone"]),
        (_per_layer(lambda o, i, r: r * o), ["counts B alone"]),
        (_per_layer(lambda o, i, r: o + i), ["rank is missing"]),
        (_per_layer(lambda o, i, r: r * o * i), ["r · out · in"]),
        (_per_layer(lambda o, i, r: r * r * (o + i)), ["rank is squared"]),
        (_per_layer(lambda o, i, r: r * (o + i) + r * r), ["rank is squared"]),
        (_per_layer(lambda o, i, r: r * (o + i) + o), ["biases are counted"]),
        (lambda shapes, rank: rank * (shapes[0][0] + shapes[0][1]), ["only one layer"]),
        (lambda shapes, rank: rank * sum(shapes[-1]), ["only one layer"]),
        (_per_layer(lambda o, i, r: r * (o + i) + 1), ["A (r, in) and B (out, r)", "expected 460,800, got 460,860"]),
        (_per_layer(lambda o, i, r: r * (o + i) / 1), ["as an int, got a float (460800.0)", "even when it is whole"]),
        (lambda shapes, rank: torch.tensor([rank * (o + i) for o, i in shapes]).sum(), ["as an int", "got a tensor"]),
        (lambda shapes, rank: True, ["as an int", "bool"]),
    ],
)  # fmt: skip
def test_each_count_mistake_is_named(answer, fragments):
    verdict = check_lora_parameter_count(answer)
    assert_hint(verdict, *fragments)
    assert CHECK_BUG not in verdict.message


def _popping(shapes, rank):
    total = 0
    while shapes:
        out_features, in_features = shapes.pop()
        total += rank * (out_features + in_features)
    return total


def _sorting(shapes, rank):
    shapes.sort()
    return sum(rank * (o + i) for o, i in shapes)


@pytest.mark.parametrize(
    "answer, fragments",
    [
        (_popping, ["`_popping` changed the list `shapes`", "held 60 shapes and now holds 0", "must stay as it was"]),
        (_sorting, ["changed the list `shapes`", "another order", "must stay as it was"]),
        (lambda shapes, rank: shapes.clear() or 460_800, ["changed the list `shapes`", "now holds 0"]),
    ],
)
def test_a_count_that_changes_the_callers_list_is_refused(answer, fragments):
    verdict = check_lora_parameter_count(answer)
    assert_hint(verdict, *fragments)
    assert CHECK_BUG not in verdict.message


def test_a_count_from_numpy_is_told_to_be_an_int():
    np = pytest.importorskip("numpy")

    def with_numpy(shapes, rank):
        sizes = np.array(shapes)
        return (rank * sizes.sum(axis=1)).sum()

    verdict = check_lora_parameter_count(with_numpy)
    assert_hint(verdict, "numpy number", "expects an int (a number of parameters)")


def test_the_count_written_otherwise_passes():
    def with_a_loop(shapes, rank):
        total = 0
        for out_features, in_features in shapes:
            total += rank * in_features  # A
            total += out_features * rank  # B
        return total

    def from_torch_sizes(shapes, rank):
        return int(torch.tensor(shapes).sum()) * rank

    for answer in (with_a_loop, from_torch_sizes):
        assert check_lora_parameter_count(answer).passed, answer


# ---------------------------------------------------------------------------------------------
# The shared policy, the graduated helpers, and the hints against the solutions
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "check", [check_new_adapter, check_lora_forward, check_merge_weight, check_lora_parameter_count]
)
def test_errors_are_the_learners(check):
    def raises(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    verdict = check(raises)
    assert_hint(verdict, "your code raised ZeroDivisionError")
    assert CHECK_BUG not in verdict.message


def _lora_layer(W, A, B, alpha):
    base = nn.Linear(W.size(1), W.size(0), bias=False)
    layer = LoRALinear(base, A.size(0), alpha)
    with torch.no_grad():
        base.weight.copy_(W)
        layer.lora_A.copy_(A)
        layer.lora_B.copy_(B)
    return layer


def adapter_from_the_helper(out_features, in_features, rank, generator):
    layer = LoRALinear(nn.Linear(in_features, out_features), rank, 1.0, generator)
    return layer.lora_A.detach(), layer.lora_B.detach()


def forward_from_the_helper(x, W, A, B, alpha):
    with torch.no_grad():
        return _lora_layer(W, A, B, alpha)(x)


def merge_from_the_helper(W, A, B, alpha):
    layer = _lora_layer(W.clone(), A, B, alpha)
    layer.merge()
    return layer.base.weight.detach()


def count_from_the_helper(shapes, rank):
    from helpers.lora import count_trainable

    return count_trainable(nn.ModuleList(LoRALinear(nn.Linear(i, o), rank, 1.0) for o, i in shapes))


@pytest.mark.parametrize(
    "check, answer",
    [
        (check_new_adapter, adapter_from_the_helper),
        (check_lora_forward, forward_from_the_helper),
        (check_merge_weight, merge_from_the_helper),
        (check_lora_parameter_count, count_from_the_helper),
    ],
)
def test_the_graduated_helpers_are_refused_by_name(check, answer):
    verdict = check(answer)
    assert_hint(verdict, "course's own version", "`helpers.lora.")


def _solution_texts(code: str) -> set[str]:
    return {squeeze(t) for t in _statements(code) + _expressions(code) if len(squeeze(t)) >= MIN_CHARS}


def test_no_hint_writes_out_a_line_of_the_references_or_of_the_proposed_solutions():
    """The rule of tests/course/test_hints_give_nothing_away.py, held against the reference_* functions' code and
    the solutions proposed above until the lesson's notebook (and its solution regions) exists."""
    module = Path(lesson17.__file__)
    solutions = set()
    for node in ast.parse(module.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("reference_"):
            solutions |= _solution_texts("\n".join(ast.unparse(statement) for statement in node.body[1:]))
    for source in SOLUTIONS.values():
        solutions |= _solution_texts(textwrap.dedent(source.split("\n", 1)[1]))
    assert len(solutions) >= 8, solutions
    leaks = [(text, message[:80]) for message in shown_strings(module) for text in solutions
             if text in squeeze(message)]  # fmt: skip
    assert not leaks, leaks


def _b_from_changing_memory():
    empty = _memory(itertools.count(1).__next__)
    return _adapter(make_B=lambda o, i, r, g: empty(o, r))


@pytest.mark.parametrize(
    "check, answer, fragment",
    [
        (check_new_adapter, reference_new_adapter, None),
        (check_new_adapter, lambda o, i, r, g: (torch.zeros(r, i), torch.zeros(o, r)), "left at zero too"),
        (check_lora_forward, _forward(base=lambda x, W: x @ W), "W is not transposed"),
        (check_merge_weight, _merged_in_place, "a NEW weight"),
        (check_new_adapter, _b_from_changing_memory(), "B changes from one call to the next"),
        (check_lora_forward, lambda x, W, A, B, alpha: reference_lora_forward(x, W, A, B, alpha).tolist(),
         "should be one tensor"),
        (check_merge_weight, lambda W, A, B, alpha: W + alpha / A.shape[0] * (A @ B), "B A is (out, in)"),
        (check_lora_parameter_count, _per_layer(lambda o, i, r: r * (o + i) / 1), "even when it is whole"),
    ],
)  # fmt: skip
def test_the_checks_say_the_same_over_the_wire(check, answer, fragment):
    """As `check` and nbgrader run them: the learner's code in a kernel, its results sent back."""
    from test_remote_checks import remotely

    verdict = remotely(check, answer)
    local = check(answer)
    assert (verdict.status, verdict.message) == (local.status, local.message), verdict
    if fragment is None:
        assert verdict.passed, verdict
    else:
        assert_hint(verdict, fragment)
