"""Lesson 14's exercise checks: the reference answers pass and agree with what defines them (gpt-oss's sink softmax
in ``transformers``, ``helpers.attention.masked_softmax(sink=)``, the gated GPT attention's gate, Qwen3-Next's gated
delta rule in ``transformers`` and ``helpers.delta_rule``), an untouched stub is "not attempted", every typical
mistake gets the hint that names it and no other, the library's own functions are refused, and the shared policy
(numpy, inputs changed in place, errors raised) reaches these checks too."""

from __future__ import annotations

import ast
import itertools
import textwrap
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_hint, learners_copy, not_attempted
from solution_text import MIN_CHARS, _expressions, _statements, squeeze
from test_hints_give_nothing_away import shown_strings

from course.exercises import lesson14
from course.exercises.feedback import CHECK_BUG, close, mistake_results
from course.exercises.lesson14 import (
    _DELTA_CASES,
    _DELTA_SQUARE,
    _GATE_CASES,
    _GATE_SQUARE,
    _SINK_CASES,
    _SINK_SQUARE,
    _delta_mistakes,
    _delta_square_mistakes,
    _gate_mistakes,
    _gate_square_mistakes,
    _log_alpha,
    _sink_axis_mistakes,
    _sink_mistakes,
    check_delta_step,
    check_output_gate,
    check_sink_softmax,
    reference_delta_step,
    reference_gated_heads,
    reference_sink_softmax,
)
from helpers.attention import masked_softmax
from helpers.delta_rule import delta_rule_chunked, delta_rule_recurrent, delta_rule_step
from helpers.gpt import CausalSelfAttention, GPTConfig

# The references as a learner's own code: the checks refuse an answer that calls the course's reference_* itself,
# and these tests use them as the right computation (and build mistakes from them).
reference_delta_step, reference_gated_heads, reference_sink_softmax = (
    learners_copy(reference_delta_step),
    learners_copy(reference_gated_heads),
    learners_copy(reference_sink_softmax),
)

# The solution bodies of notebooks/14_sinks_gates_delta_rule.ipynb (each between # BEGIN and # END SOLUTION, as the
# branch l14nb writes them): they pass, and no hint holds a line of them (test_hints_give_nothing_away holds the
# notebook's own once it is merged).
SOLUTIONS = {
    "my_sink_softmax": """\
def my_sink_softmax(scores, sink):
    column = sink.view(-1, 1, 1).expand(*scores.shape[:-1], 1)  # (..., h, L, 1): each head's own logit
    return torch.cat((scores, column), dim=-1).softmax(dim=-1)[..., :-1]  # the sink's share goes nowhere
""",
    "my_gated_heads": """\
def my_gated_heads(heads, x, gate_weight):
    return heads * torch.sigmoid(x @ gate_weight.T)  # (N, L, h·d): one gate per head and feature
""",
    "my_delta_step": """\
def my_delta_step(state, k, v, beta, log_alpha=None):
    if log_alpha is not None:
        state = state * log_alpha.exp()[..., None, None]  # decay first: alpha_t S_{t-1}
    recalled = torch.einsum("nhk,nhkv->nhv", k, state)  # S^T k: what the state holds for this key
    correction = beta[..., None] * (v - recalled)  # (N, h, d_v)
    return state + torch.einsum("nhk,nhv->nhkv", k, correction)  # write the correction under k
""",
}
CHECKS = {"my_sink_softmax": check_sink_softmax, "my_gated_heads": check_output_gate, "my_delta_step": check_delta_step}


def _solution(name):
    namespace = {"torch": torch}
    exec(compile(SOLUTIONS[name], "<learner's cell>", "exec"), namespace)
    return namespace[name]


@pytest.mark.parametrize("name", list(SOLUTIONS))
def test_the_notebooks_solutions_pass_and_a_stub_is_not_attempted(name):
    assert CHECKS[name](_solution(name)).passed
    assert CHECKS[name](not_attempted).status == "not attempted"


def test_the_references_pass():
    assert check_sink_softmax(reference_sink_softmax).passed
    assert check_output_gate(reference_gated_heads).passed
    assert check_delta_step(reference_delta_step).passed


def _distinct(tables: list[dict], right: list[torch.Tensor]) -> None:
    """No two named mistakes, nor a mistake and the right answer, agree on every case where both are listed (a
    mistake of log_alpha is not listed where there is none): each gets its own hint."""
    hints = dict.fromkeys(hint for table in tables for hint in table)
    rows = {"right": [[r] for r in right]}
    rows |= {hint: [(mistake_results(t[hint]) or []) if hint in t else None for t in tables] for hint in hints}
    for (a, xs), (b, ys) in itertools.combinations(rows.items(), 2):
        both = [(xa, yb) for xa, yb in zip(xs, ys, strict=True) if xa is not None and yb is not None]
        assert both, (a[:50], b[:50])
        assert not all(any(close(x, y) for x in xa for y in yb) for xa, yb in both), (a[:50], b[:50])


# ---------------------------------------------------------------------------------------------
# Exercise 1: the sink softmax
# ---------------------------------------------------------------------------------------------
def _gpt_oss_weights(scores, sink):
    """transformers' gpt-oss eager attention weights for these scores: queries = the finite scores, keys = the
    identity (so that q k^T is the scores), the -inf entries as its additive mask."""
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

    blocked = torch.isneginf(scores)
    S = scores.size(-1)
    key = torch.eye(S, dtype=scores.dtype).expand(*scores.shape[:-2], S, S)
    module = types.SimpleNamespace(num_key_value_groups=1, sinks=sink, training=False)
    mask = torch.zeros_like(scores).masked_fill(blocked, float("-inf"))
    _, weights = eager_attention_forward(module, scores.masked_fill(blocked, 0.0), key, key, mask, scaling=1.0)
    return weights


def test_the_reference_sink_softmax_is_the_librarys_and_gpt_oss():
    for case in [*_SINK_CASES, _SINK_SQUARE]:
        scores, sink = case.args
        ours = reference_sink_softmax(scores, sink)
        torch.testing.assert_close(ours, masked_softmax(scores, sink=sink), rtol=0, atol=1e-12)
        sums = ours.sum(-1)  # the sink takes a share (all of it on a row blocked everywhere, or far below it)
        assert (sums <= 1).all() and (sums < 1 - 1e-3).any(), case.name
        if scores.dim() == 4:
            torch.testing.assert_close(ours, _gpt_oss_weights(scores, sink), rtol=0, atol=1e-12)


def test_the_sink_cases_hold_what_the_check_says_they_hold():
    scores = [case.args[0] for case in _SINK_CASES]
    assert torch.isneginf(scores[1]).all(-1).any()  # rows blocked everywhere
    assert not torch.isfinite(scores[2].exp()).all()  # e to the scores overflows float64
    assert torch.isneginf(_SINK_CASES[3].args[1]).any() and scores[3].dim() == 3 and scores[4].dim() == 5
    for s in scores:  # h, L and S differ: a sink broadcast along the queries or keys raises
        assert len(set(s.shape[-3:])) == 3, s.shape
    assert len(set(_SINK_SQUARE.args[0].shape[-3:])) == 1


def test_every_sink_mistake_gives_weights_of_their_own():
    tables = [_sink_mistakes(*case.args) for case in _SINK_CASES]
    _distinct(tables, [reference_sink_softmax(*case.args) for case in _SINK_CASES])
    _distinct([_sink_axis_mistakes(*_SINK_SQUARE.args)], [reference_sink_softmax(*_SINK_SQUARE.args)])
    assert len(tables[0]) + len(_sink_axis_mistakes(*_SINK_SQUARE.args)) >= 8


def _column(scores, sink):
    return sink.view(-1, 1, 1).expand(*scores.shape[:-1], 1)


def _cat(scores, sink):
    return torch.cat([scores, _column(scores, sink)], dim=-1)


def _renormalised(scores, sink):
    weights = _cat(scores, sink).softmax(-1)[..., :-1]
    return weights / weights.sum(-1, keepdim=True)


def _as_weight(scores, sink):
    e = scores.exp()
    return e / (e.sum(-1, keepdim=True) + _column(scores, sink))


def _max_of_scores_only(scores, sink):
    top = scores.amax(-1, keepdim=True)
    e = (scores - top).exp()
    return e / (e.sum(-1, keepdim=True) + (_column(scores, sink) - 0).exp())


def _nan_when_blocked(scores, sink):
    logits = _cat(scores, sink)
    e = (logits - scores.amax(-1, keepdim=True)).exp()  # the max of the scores alone: -inf on a blocked row
    return (e / e.sum(-1, keepdim=True))[..., :-1]


def _no_max(scores, sink):
    e = _cat(scores, sink).exp()
    return (e / e.sum(-1, keepdim=True))[..., :-1]


def _per_query(scores, sink):
    column = sink.view(-1, 1).expand(*scores.shape[:-1], 1)  # (h, 1): lined up with (L, 1)
    return torch.cat([scores, column], dim=-1).softmax(-1)[..., :-1]


def _per_key(scores, sink):
    e = (scores - scores.amax(-1, keepdim=True)).exp()
    return e / (e.sum(-1, keepdim=True) + sink.exp())


def _four_axes_only(scores, sink):
    column = sink.view(1, -1, 1, 1).expand(scores.size(0), -1, scores.size(2), 1)
    return torch.cat([scores, column], dim=-1).softmax(-1)[..., :-1]


def _sink_at(value):
    """A learner's sink softmax whose sink column holds ``value(scores, sink)`` (a scalar or (h,) logits)."""

    def sink_softmax(scores, sink):
        column = torch.as_tensor(value(scores, sink), dtype=scores.dtype).reshape(-1, 1, 1)
        return torch.cat([scores, column.expand(*scores.shape[:-1], 1)], dim=-1).softmax(-1)[..., :-1]

    return sink_softmax


def _softmax_one(scores, sink):  # held back: the sink at 0, written as 1 added to the denominator
    e = (scores - scores.amax(-1, keepdim=True).clamp_min(0)).exp()
    top = scores.amax(-1, keepdim=True).clamp_min(0)
    return e / (e.sum(-1, keepdim=True) + (-top).exp())


def _sink_per_key(scores, sink):
    columns = sink.view(-1, 1, 1).expand(*scores.shape)  # one sink column for every key
    return torch.cat([scores, columns], dim=-1).softmax(-1)[..., : scores.size(-1)]


def _sink_per_key_by_hand(scores, sink):  # held back: e^sink added to each key's term
    top = torch.maximum(scores.amax(-1, keepdim=True), sink.view(-1, 1, 1))
    e = (scores - top).exp()
    return e / (e.sum(-1, keepdim=True) + scores.size(-1) * (sink.view(-1, 1, 1) - top).exp())


def _heads_written_in(scores, sink):
    column = sink.view(3, 1, 1).expand(*scores.shape[:-1], 1)  # h = 3 written in
    return torch.cat([scores, column], dim=-1).softmax(-1)[..., :-1]


def _heads_written_in_by_shape(scores, sink):
    column = torch.ones(*scores.shape[:-3], 3, scores.size(-2), 1, dtype=scores.dtype) * sink[:, None, None]
    return torch.cat([scores, column], dim=-1).softmax(-1)[..., :-1]


def _by_logsumexp(scores, sink):  # right, written otherwise
    return (scores - torch.logsumexp(_cat(scores, sink), dim=-1, keepdim=True)).exp()


def _scores_edited(scores, sink):
    scores[torch.isneginf(scores)] = -1e9
    return _cat(scores, sink).softmax(-1)[..., :-1]


def _raises_on_blocked(scores, sink):
    if torch.isneginf(scores).all(-1).any():
        raise ValueError("a row with no key")
    return _cat(scores, sink).softmax(-1)[..., :-1]


@pytest.mark.parametrize(
    "mistake, fragments",
    [
        (lambda s, k: _cat(s, k).softmax(-1), ["S + 1", "still there"]),
        (lambda s, k: torch.softmax(s + k.view(-1, 1, 1), -1), ["each row sums to 1", "added to every score"]),
        (_renormalised, ["each row sums to 1", "renormalised"]),
        (lambda s, k: s.softmax(-1), ["each row sums to 1"]),
        (lambda s, k: _cat(s + k.view(-1, 1, 1), k).softmax(-1)[..., :-1], ["as well as given its own column"]),
        (_as_weight, ["as a weight, not as a logit"]),
        (_max_of_scores_only, ["not from the sink"]),
        (lambda s, k: _cat(s, -k).softmax(-1)[..., :-1], ["wrong sign"]),
        (lambda s, k: s.softmax(-1) * torch.sigmoid(-k.view(-1, 1, 1)), ["sigmoid of the sink alone"]),
        (lambda s, k: _cat(s, k).softmax(-2)[..., :-1], ["wrong axis"]),
        (lambda s, k: _cat(s, k).softmax(-1)[..., 1:], ["wrong column was dropped"]),
        (lambda s, k: _cat(s, k).log_softmax(-1)[..., :-1], ["log-weights"]),
        (_per_query, ["to the queries, not to the heads"]),
        (_per_key, ["to the keys, not to the heads"]),
        (_no_max, ["thousands", "overflows"]),
        (_nan_when_blocked, ["blocked everywhere", "NaN"]),
        (lambda s, k: _cat(s, k).softmax(-1)[..., :-1].nan_to_num() + torch.isneginf(s).all(-1, keepdim=True) / 4,
         ["blocked everywhere", "not zeros"]),
        (_four_axes_only, ["leading axes", "from the END"]),
        (_by_logsumexp, None),
        (lambda s, k: masked_softmax(_cat(s, k))[..., :-1], None),  # masked_softmax without a sink: a softmax
        (lambda s, k: masked_softmax(s, sink=k), ["masked_softmax(..., sink=...)", "course's own version"]),
        (lambda s, k: lesson14.reference_sink_softmax(s, k), ["course's own answer", "reference_sink_softmax"]),
        (lambda s, k: reference_sink_softmax(s, k).numpy(), ["returned a numpy array"]),
        (lambda s, k: reference_sink_softmax(s, k).tolist(), ["return one tensor", "list"]),
        (lambda s, k: None, ["got None", "`return` missing"]),
        (lambda s, k: (reference_sink_softmax(s, k), k), ["return one tensor", "tuple of 2"]),
        (lambda s, k: reference_sink_softmax(s, k).mT, ["should have shape"]),
        (lambda s, k: (reference_sink_softmax(s, k) * 100).long(), ["one row's weights should be"]),
        (lambda s, k: reference_sink_softmax(s, k).float(), ["dtype changed", "torch.float64", "torch.float32"]),
        (_scores_edited, ["changed its input `scores` in place"]),
        (_raises_on_blocked, ["your code raised ValueError: a row with no key"]),
        (_sink_at(lambda s, k: 0.0), ["fixed at 0", "softmax_1"]),
        (_softmax_one, ["fixed at 0"]),  # held back
        (_sink_at(lambda s, k: k[0]), ["every head got the same sink"]),
        (_sink_at(lambda s, k: k.mean()), ["every head got the same sink"]),  # held back
        (_sink_per_key, ["repeated for every key", "ONE sink column"]),
        (_sink_per_key_by_hand, ["repeated for every key"]),  # held back
        (_heads_written_in, ["a size is written in", "h = 3", "RuntimeError"]),
        (_heads_written_in_by_shape, ["a size is written in", "h = 3"]),  # held back: h written in another way
    ],
)  # fmt: skip
def test_each_sink_softmax_mistake_is_named(mistake, fragments):
    verdict = check_sink_softmax(mistake)
    if fragments is None:  # right answers written otherwise
        assert verdict.passed, verdict
        return
    assert_hint(verdict, *fragments)
    assert CHECK_BUG not in verdict.message


# ---------------------------------------------------------------------------------------------
# Exercise 2: the output gate
# ---------------------------------------------------------------------------------------------
def test_the_reference_gate_is_the_gated_gpt_attentions():
    """helpers.gpt's attention with output_gate=True (itself equal to transformers' Qwen3NextAttention,
    tests/test_gated_attention.py): what reaches its output projection is reference_gated_heads of the heads (read
    with the gate's weight zeroed: sigmoid(0) = 1/2), the input and the gate's weight."""
    config = GPTConfig(
        vocab_size=11, embed_dim=10, num_heads=2, num_kv_heads=2, head_dim=6, num_layers=1, output_gate=True
    )
    attention = CausalSelfAttention(config).double().eval()
    seen = []
    attention.projections.out_proj.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    x = torch.randn(2, 4, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    weight = attention.gate_proj.weight.detach().clone()
    assert weight.shape == (12, 10)  # (h·d, E), h·d != E
    with torch.no_grad():
        attention(x, torch.arange(4))
        attention.gate_proj.weight.zero_()
        attention(x, torch.arange(4))
    gated, halved = seen
    torch.testing.assert_close(reference_gated_heads(2 * halved, x, weight), gated, rtol=0, atol=1e-12)
    linear = torch.nn.Linear(10, 12, bias=False).double()
    linear.weight.data.copy_(weight)
    torch.testing.assert_close(reference_gated_heads(2 * halved, x, weight), 2 * halved * torch.sigmoid(linear(x)))


def test_every_gate_mistake_gives_an_output_of_its_own():
    tables = [_gate_mistakes(*case.args) for case in _GATE_CASES]
    _distinct(tables, [reference_gated_heads(*case.args) for case in _GATE_CASES])
    _distinct([_gate_square_mistakes(*_GATE_SQUARE.args)], [reference_gated_heads(*_GATE_SQUARE.args)])
    for case in _GATE_CASES:
        heads, x, weight = case.args
        assert heads.size(-1) != x.size(-1) and weight.shape == (heads.size(-1), x.size(-1))
    assert not torch.isfinite((_GATE_CASES[-1].args[1] @ _GATE_CASES[-1].args[2].T).exp()).all()


def _manual_sigmoid(heads, x, w):
    g = (x @ w.T).exp()
    return heads * g / (1 + g)


def _stable_sigmoid(heads, x, w):  # right, written otherwise: e to a number <= 0 only
    logits = x @ w.T
    e = (-logits.abs()).exp()
    return heads * torch.where(logits >= 0, 1 / (1 + e), e / (1 + e))


def _per_head(num_heads):
    def gated_heads(heads, x, w):
        gate = torch.sigmoid(x @ w.T)
        return heads * gate.unflatten(-1, (num_heads, -1)).mean(-1, keepdim=True).expand(
            *gate.shape[:-1], num_heads, gate.size(-1) // num_heads).flatten(-2)  # fmt: skip

    return gated_heads


def _heads_edited(heads, x, w):
    heads.mul_(torch.sigmoid(x @ w.T))
    return heads


@pytest.mark.parametrize(
    "mistake, fragments",
    [
        (lambda h, x, w: h * (x @ w.T), ["no sigmoid"]),
        (lambda h, x, w: h * torch.softmax(x @ w.T, -1), ["softmax where the gate wants a sigmoid"]),
        (lambda h, x, w: h * torch.tanh(x @ w.T), ["tanh"]),
        (lambda h, x, w: h * F.silu(x @ w.T), ["SiLU"]),
        (lambda h, x, w: h * torch.relu(x @ w.T), ["ReLU or GELU"]),
        (lambda h, x, w: h * (1 - torch.sigmoid(x @ w.T)), ["1 - sigmoid"]),
        (lambda h, x, w: h + torch.sigmoid(x @ w.T), ["added to the heads"]),
        (lambda h, x, w: torch.sigmoid(h) * (x @ w.T), ["sigmoid went on the heads"]),
        (lambda h, x, w: torch.sigmoid(x @ w.T), ["the gate alone"]),
        (lambda h, x, w: h.clone(), ["ungated"]),
        (lambda h, x, w: h * torch.sigmoid(x @ w.T).mean(-1, keepdim=True), ["one gate per head (or per token)"]),
        (_per_head(2), ["one gate per head"]),
        (lambda h, x, w: h * torch.sigmoid(x @ w), ["untransposed"]),
        (lambda h, x, w: h * torch.sigmoid(h @ w.T), ["from the heads' outputs"]),
        (lambda h, x, w: x * torch.sigmoid(x @ w.T), ["applied to x"]),
        (_manual_sigmoid, ["in the hundreds", "overflows"]),
        (_stable_sigmoid, None),
        (lambda h, x, w: h * F.linear(x, w).sigmoid(), None),  # F.linear is a building block here
        (lambda h, x, w: lesson14.reference_gated_heads(h, x, w), ["course's own answer"]),
        (lambda h, x, w: reference_gated_heads(h, x, w).numpy(), ["returned a numpy array"]),
        (lambda h, x, w: [reference_gated_heads(h, x, w)], ["return one tensor", "list of 1"]),
        (lambda h, x, w: None, ["got None"]),
        (lambda h, x, w: reference_gated_heads(h, x, w)[..., :-1], ["should have shape (N, T, h·d) = (2, 3, 6)"]),
        (lambda h, x, w: reference_gated_heads(h, x, w).long(), ["feature", "should be"]),
        (lambda h, x, w: reference_gated_heads(h, x, w).float(), ["dtype changed", "torch.float64", "torch.float32"]),
        (_heads_edited, ["changed its input `heads` in place"]),
        (lambda h, x, w: h * torch.sigmoid(x @ w.T) * 1.01, ["feature", "times its gate"]),
        (lambda h, x, w: h / torch.sigmoid(x @ w.T), ["divided by the gate", "1 / sigmoid"]),
        (lambda h, x, w: h * (1 + torch.exp(-(x @ w.T))), ["divided by the gate"]),  # held back
        (lambda h, x, w: h * torch.sigmoid(-(x @ w.T)), ["1 - sigmoid"]),  # held back: inverted the other way
        (lambda h, x, w: h * torch.sigmoid(x @ w.T).reshape(h.size(0), h.size(1), 6), ["a size is written in"]),
    ],
)  # fmt: skip
def test_each_output_gate_mistake_is_named(mistake, fragments):
    verdict = check_output_gate(mistake)
    if fragments is None:
        assert verdict.passed, verdict
        return
    assert_hint(verdict, *fragments)
    assert CHECK_BUG not in verdict.message


# ---------------------------------------------------------------------------------------------
# Exercise 3: one step of the gated delta rule
# ---------------------------------------------------------------------------------------------
def test_the_reference_delta_step_is_the_librarys_and_qwen3_nexts():
    """Equal to helpers.delta_rule (step, recurrent and chunked over one token) and to transformers'
    torch_recurrent_gated_delta_rule (its g is log alpha; float32 inside, hence 1e-5)."""
    from transformers.models.qwen3_next.modeling_qwen3_next import torch_recurrent_gated_delta_rule

    for case in [*_DELTA_CASES, _DELTA_SQUARE]:
        state, k, v, beta = case.args[:4]
        log_alpha = _log_alpha(case)
        ours = reference_delta_step(*case.args)
        q = torch.randn(k.shape, dtype=k.dtype, generator=torch.Generator().manual_seed(1))
        _, step_state = delta_rule_step(state, q, k, v, beta, log_alpha)
        torch.testing.assert_close(ours, step_state, rtol=0, atol=1e-12)
        one = [t[:, :, None] for t in (q, k, v, beta)]  # one token: (N, h, 1, ...)
        gate = None if log_alpha is None else log_alpha[:, :, None]
        for run in (delta_rule_recurrent, delta_rule_chunked):
            _, run_state = run(*one, gate, initial_state=state)
            torch.testing.assert_close(ours, run_state, rtol=1e-10, atol=1e-10)
        theirs_args = [t.transpose(1, 2) for t in one]  # (N, 1, h, ...)
        g = torch.zeros_like(theirs_args[3]) if gate is None else gate.transpose(1, 2)
        _, their_state = torch_recurrent_gated_delta_rule(
            *theirs_args[:3], g, theirs_args[3], initial_state=state, output_final_state=True
        )
        torch.testing.assert_close(ours, their_state.double(), rtol=1e-5, atol=1e-5)


def test_every_delta_mistake_gives_a_state_of_its_own():
    tables = [_delta_mistakes(*case.args[:4], _log_alpha(case)) for case in _DELTA_CASES]
    _distinct(tables, [reference_delta_step(*case.args) for case in _DELTA_CASES])
    square = _delta_square_mistakes(*_DELTA_SQUARE.args)
    _distinct([square], [reference_delta_step(*_DELTA_SQUARE.args)])
    for case in _DELTA_CASES:
        state, k = case.args[:2]
        assert state.size(2) != state.size(3)
        torch.testing.assert_close(k.norm(dim=-1), torch.ones_like(k[..., 0]))


def _step(alpha=lambda log_alpha: log_alpha.exp(), recall_from_old=False, write=None, correction=None, beta_on=True):
    """A learner's delta step with each piece open to a mistake."""

    def delta_step(state, k, v, beta, log_alpha=None):
        old = state
        if log_alpha is not None:
            state = state * alpha(log_alpha)[..., None, None]
        recalled = (k[..., None, :] @ (old if recall_from_old else state)).squeeze(-2)
        error = correction(v, recalled) if correction else v - recalled
        scaled = beta[..., None] * error if beta_on else error
        return (write or (lambda s, k, c: s + k[..., :, None] * c[..., None, :]))(state, k, scaled)

    return delta_step


def _decay_after(state, k, v, beta, log_alpha=None):
    recalled = (k[..., None, :] @ state).squeeze(-2)
    new = state + k[..., :, None] * (beta[..., None] * (v - recalled))[..., None, :]
    return new if log_alpha is None else new * log_alpha.exp()[..., None, None]


def _decay_on_write(state, k, v, beta, log_alpha=None):
    alpha = torch.ones_like(beta) if log_alpha is None else log_alpha.exp()
    recalled = (k[..., None, :] @ state).squeeze(-2)
    return state + k[..., :, None] * (alpha[..., None] * beta[..., None] * (v - recalled))[..., None, :]


def _none_breaks(state, k, v, beta, log_alpha=None):
    return reference_delta_step(state * log_alpha.exp()[..., None, None], k, v, beta)


def _linear(state, k, v, beta, log_alpha=None):
    if log_alpha is not None:
        state = state * log_alpha.exp()[..., None, None]
    return state + k[..., :, None] * v[..., None, :]


def _state_edited(state, k, v, beta, log_alpha=None):
    new = reference_delta_step(state, k, v, beta, log_alpha)
    state.zero_()
    return new


def _right_side(state, k, v, beta, log_alpha=None):
    if log_alpha is not None:
        state = state * log_alpha.exp()[..., None, None]
    erase = beta[..., None, None] * (k[..., :, None] * k[..., None, :])
    return state - state @ erase + k[..., :, None] * (beta[..., None] * v)[..., None, :]


def _by_matrices(state, k, v, beta, log_alpha=None):  # right, written as the formula: alpha (I - b k k^T) S + b k v^T
    alpha = 1.0 if log_alpha is None else log_alpha.exp()[..., None, None]
    eye = torch.eye(k.size(-1), dtype=k.dtype)
    outer = k[..., :, None] * k[..., None, :]
    b = beta[..., None, None]
    return alpha * (eye - b * outer) @ state + b * k[..., :, None] * v[..., None, :]


def _as_step(f):
    """``f(state, k, v, beta, log_alpha)`` as a learner's delta step, with the template's parameters."""

    def delta_step(state, k, v, beta, log_alpha=None):
        return f(state, k, v, beta, log_alpha)

    return delta_step


def _decayed(s, la):
    return s if la is None else s * la.exp()[..., None, None]


def _recall_transposed(s, k, v, b, la):
    s = _decayed(s, la)
    return s + k[..., :, None] * (b[..., None] * (v - (s @ k[..., None]).squeeze(-1)))[..., None, :]


def _write_b_twice(s, k, v, b, la):
    """beta on the correction and again on the new value: b (b v - recall)."""
    s = _decayed(s, la)
    recalled = torch.einsum("nhk,nhkv->nhv", k, s)
    return s + k[..., :, None] * (b[..., None] * (b[..., None] * v - recalled))[..., None, :]


def _state_transposed(s, k, v, b, la):
    """The state taken as (d_v, d_k), the DeltaNet paper's way round: recall S k, write (v - S k) k^T."""
    s = _decayed(s, la)
    recalled = (s @ k[..., None]).squeeze(-1)
    return s + (b[..., None] * (v - recalled))[..., :, None] * k[..., None, :]


def _state_transposed_by_einsum(s, k, v, b, la):  # held back: the same, written with einsum
    s = _decayed(s, la)
    recalled = torch.einsum("nhvk,nhk->nhv", s, k)  # the state's rows taken as the value's axis
    return s + torch.einsum("nhv,nhk->nhvk", b[..., None] * (v - recalled), k)


def _beta_heads_written_in(s, k, v, b, la):
    s = _decayed(s, la)
    recalled = torch.einsum("nhk,nhkv->nhv", k, s)
    return s + k[..., :, None] * (b.reshape(v.size(0), 3, 1) * (v - recalled))[..., None, :]


def _one_token(t):
    return None if t is None else t[:, :, None]


@pytest.mark.parametrize(
    "mistake, fragments",
    [
        (_linear, ["plain linear attention"]),
        (_step(beta_on=False), ["beta is left out"]),
        (_step(correction=lambda v, r: v - r, write=lambda s, k, c: s + k[..., :, None] * c[..., None, :]), None),
        (_decay_after, ["decay came after the write"]),
        (_decay_on_write, ["decay went on the write only"]),
        (_step(recall_from_old=True), ["recall was read from the state before its decay"]),
        (_step(alpha=lambda la: la), ["log_alpha was used as alpha itself"]),
        (_step(alpha=torch.sigmoid), ["sigmoid of log_alpha"]),
        (_step(alpha=lambda la: (-la).exp()), ["MINUS log_alpha"]),
        (_step(alpha=torch.ones_like), ["decay is ignored"]),
        (_step(correction=lambda v, r: v + r), ["v plus the recall"]),
        (_step(correction=lambda v, r: r - v), ["wrong sign"]),
        (_as_step(lambda s, k, v, b, la: k[..., :, None] * (b[..., None] * v)[..., None, :]), ["old state was"]),
        (_none_breaks, ["when log_alpha is None", "no decay"]),
        (_right_side, ["on the right of the state"]),
        (_step(write=lambda s, k, c: s + c[..., :, None] * k[..., None, :]), ["write is transposed"]),
        (_as_step(_recall_transposed), ["recall is transposed", "S^T k"]),
        (_by_matrices, None),
        (_as_step(lambda s, k, v, b, la: (v, reference_delta_step(s, k, v, b, la))), ["new state only"]),
        (_as_step(lambda s, k, v, b, la: v * 2), ["the size of one value"]),
        (_as_step(lambda s, k, v, b, la: reference_delta_step(s, k, v, b, la).mT), ["(N, h, d_v, d_k)"]),
        (_as_step(lambda s, k, v, b, la: reference_delta_step(s, k, v, b, la).numpy()), ["returned a numpy array"]),
        (_as_step(lambda s, k, v, b, la: None), ["got None"]),
        (_as_step(lambda s, k, v, b, la: reference_delta_step(s, k, v, b, la).long()), ["differs from the delta"]),
        (_state_edited, ["changed its input `state` in place"]),
        (_as_step(lambda s, k, v, b, la: delta_rule_step(s, k, k, v, b, la)[1]), ["delta_rule_step", "course's own"]),
        (_as_step(lambda s, k, v, b, la: delta_rule_recurrent(*map(_one_token, (k, k, v, b, la)), initial_state=s)[1]),
         ["delta_rule_recurrent"]),
        (_as_step(lambda s, k, v, b, la: lesson14.reference_delta_step(s, k, v, b, la)), ["course's own answer"]),
        (lambda s, k, v, b: reference_delta_step(s, k, v, b), ["keep the parameters"]),
        (_step(correction=lambda v, r: v - r, write=lambda s, k, c: s + k[..., :, None] * c[..., None, :]), None),
        (_as_step(lambda s, k, v, b, la: reference_delta_step(s, k, v, b * b, la)), ["beta was applied twice"]),
        (_step(correction=lambda v, r: 0.5 * (v - r) * 2), None),
        (_as_step(lambda s, k, v, b, la: _write_b_twice(s, k, v, b, la)), ["beta was applied twice"]),  # held back
        (_as_step(_state_transposed), ["read and written as (d_v, d_k)", "S^T k"]),
        (_as_step(_state_transposed_by_einsum), ["read and written as (d_v, d_k)"]),  # held back
        (_as_step(_beta_heads_written_in), ["a size is written in", "h = 3"]),
    ],
)  # fmt: skip
def test_each_delta_step_mistake_is_named(mistake, fragments):
    verdict = check_delta_step(mistake)
    if fragments is None:
        assert verdict.passed, verdict
        return
    assert_hint(verdict, *fragments)
    assert CHECK_BUG not in verdict.message


# ---------------------------------------------------------------------------------------------
# The shared policy, and hints that give no line of the reference answers away
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("check", [check_sink_softmax, check_output_gate, check_delta_step])
def test_errors_are_the_learners(check):
    def raises(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    verdict = check(raises)
    assert_hint(verdict, "your code raised ZeroDivisionError")
    assert CHECK_BUG not in verdict.message


def _solution_texts(code: str) -> set[str]:
    return {squeeze(t) for t in _statements(code) + _expressions(code) if len(squeeze(t)) >= MIN_CHARS}


def test_no_hint_writes_out_a_line_of_the_references_or_of_the_notebooks_solutions():
    """The rule of tests/course/test_hints_give_nothing_away.py, held against the reference_* functions' code and
    the notebook's solutions above until the lesson's notebook (and its solution regions) is merged."""
    module = Path(lesson14.__file__)
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
