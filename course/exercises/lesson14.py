"""Checks for lesson 14's exercises: a softmax with an attention sink (gpt-oss), an output gate on the heads
(Qwen3-Next's gated attention) and one step of the gated delta rule (Gated DeltaNet, Qwen3-Next's linear layers).

Shapes: N batch, T tokens, h heads, L queries, S keys, d head size, E embedding size, d_k and d_v the delta rule's
key and value sizes. Every check runs the learner's code on several small cases, chosen so that each mistake it
names gives a result of its own in at least one of them (and the reference differs from every mistake), so that no
mistake passes and none is told another one's hint. Sizes that must not be confused differ in every case (h, L and
S; h·d and E; d_k and d_v); one more case where they are all equal lets a mistake that swaps two of them run, so
that it can be named instead of reported as the error it raises elsewhere.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from course.exercises.feedback import (
    LearnerError,
    MistakeResult,
    Verdict,
    _Wrong,
    as_tensor,
    call_learner,
    close,
    learner_check,
    matches_mistake,
    named_mistake,
    run_check,
    wrong,
)

__all__ = [
    "check_delta_step",
    "check_output_gate",
    "check_sink_softmax",
    "reference_delta_step",
    "reference_gated_heads",
    "reference_sink_softmax",
]

Expected = MistakeResult  # a mistake's result in one case: one tensor, several, or a function giving either
NEG_INF = float("-inf")


@dataclass(frozen=True)
class _Case:
    """One call of the learner's code: its arguments, and what the case is, in words."""

    name: str
    args: tuple

    def cloned(self) -> tuple:
        """Fresh copies of the arguments: the learner's code may not change them, but a check never relies on it."""

        def copy(value: Any) -> Any:
            return value.clone() if isinstance(value, Tensor) else value

        return tuple(copy(a) for a in self.args)


def _run(function: Callable[..., Any], cases: Sequence[_Case], answer_of: Callable[[object, _Case], Tensor]):
    """Each case's answer (through ``answer_of``, which refuses a wrong type or shape) or the error it raised."""
    answers: dict[int, Tensor] = {}
    errors: dict[int, LearnerError] = {}
    for index, case in enumerate(cases):
        try:
            result = call_learner(function, *case.cloned())
        except LearnerError as error:
            errors[index] = error
            continue
        answers[index] = answer_of(result, case)
    return answers, errors


def _one_tensor(result: object, name: str, shape: tuple[int, ...], letters: str, case: _Case) -> Tensor:
    """The learner's result as a float64 tensor of ``shape``, or a hint about its type or shape."""
    if isinstance(result, list | tuple):
        raise wrong(f"return one tensor {letters}, got a {type(result).__name__} of {len(result)} items ({case.name}).")
    if result is None:
        raise wrong(f"{name} should be a tensor {letters}, got None ({case.name}): is a `return` missing?")
    answer = as_tensor(result, name)
    if tuple(answer.shape) != shape:
        raise wrong(f"{name} should have shape {letters} = {shape}, got {tuple(answer.shape)} ({case.name}).")
    return answer


def _square_verdict(
    function: Callable[..., Any],
    square: _Case,
    answer_of: Callable[[object, _Case], Tensor],
    mistakes: dict[str, Expected],
) -> _Wrong | None:
    """Where the learner's code raised: its answer on the case whose sizes are all equal, if that is one of the
    mistakes that swap two sizes (they raise wherever the sizes differ)."""
    try:
        result = call_learner(function, *square.cloned())
        answer = answer_of(result, square)
    except (LearnerError, _Wrong):
        return None
    for hint, expected in mistakes.items():
        if matches_mistake(answer, expected):
            return wrong(hint)
    return None


def _size_written_in(
    errors: dict[int, LearnerError],
    answers: dict[int, Tensor],
    right: Callable[[int], Tensor],
    sizes: Callable[[int], dict[str, int]],
) -> _Wrong | None:
    """Code right on every case it ran that raised on the others, where some size (h, say) is the same in every
    case that ran and different in each that raised: that size is written in. ``right(c)`` is case c's right
    answer, ``sizes(c)`` its sizes by letter."""
    if not errors or not answers or not all(close(answers[c], right(c)) for c in answers):
        return None
    ran = [sizes(c) for c in answers]
    raised = [sizes(c) for c in errors]
    suspects = [
        f"{letter} = {ran[0][letter]}"
        for letter in ran[0]
        if len({s[letter] for s in ran}) == 1 and all(s[letter] != ran[0][letter] for s in raised)
    ]
    if not suspects:
        return None
    first = next(iter(errors.values()))
    return wrong(
        f"a size is written in: your code was right wherever {' and '.join(suspects)} (as in the first case) and "
        f"raised {first} where it is not. Read every size from the tensors' shapes (or use -1 and broadcasting), "
        "which differ from call to call."
    )


# ---------------------------------------------------------------------------------------------
# Exercise 1: softmax with an attention sink
# ---------------------------------------------------------------------------------------------
def reference_sink_softmax(scores: Tensor, sink: Tensor) -> Tensor:
    """scores (..., h, L, S) (-inf where blocked), sink (h,) one logit per head -> weights (..., h, L, S): the softmax
    over the S scores and one more column holding the head's sink logit, that column then dropped (each row sums to
    less than 1; a row with nothing left, every score and the sink -inf, is zeros). As
    ``helpers.attention.masked_softmax(scores, sink=sink)``."""
    column = sink.to(scores.dtype).view(-1, 1, 1).expand(*scores.shape[:-1], 1)  # (..., h, L, 1)
    logits = torch.cat((scores, column), dim=-1)  # (..., h, L, S + 1)
    top = logits.amax(dim=-1, keepdim=True)
    top = top.masked_fill(torch.isneginf(top), 0.0)  # nothing left in the row: no -inf - -inf
    exps = (logits - top).exp()
    total = exps.sum(dim=-1, keepdim=True)
    return (exps / total.masked_fill(total == 0, 1.0))[..., :-1]


def _sink_column(scores: Tensor, sink: Tensor, view: tuple[int, ...] = (-1, 1, 1)) -> Tensor:
    return sink.view(*view).expand(*scores.shape[:-1], 1)


def _literal_softmax(logits: Tensor, dim: int = -1) -> Tensor:
    """A softmax written with exp and a sum, without the max subtracted (overflows on large logits)."""
    exps = logits.exp()
    return exps / exps.sum(dim=dim, keepdim=True)


def _zero_blocked(weights: Tensor, scores: Tensor) -> Tensor:
    """``weights`` with zeros on the rows whose every score is -inf (as masked_softmax writes them)."""
    return weights.masked_fill(torch.isneginf(scores).all(dim=-1, keepdim=True), 0.0)


def _renormalised(weights: Tensor) -> Tensor:
    return weights / weights.sum(dim=-1, keepdim=True)


def _with_sink(scores: Tensor, sink: Tensor) -> Tensor:
    return torch.cat((scores, _sink_column(scores, sink)), dim=-1)


def _sink_mistakes(scores: Tensor, sink: Tensor) -> dict[str, Expected]:
    """The usual mistakes' weights for one case, each as a learner would compute it (a list: several ways)."""
    logits = _with_sink(scores, sink)
    plain = torch.softmax(scores, dim=-1)
    top = scores.amax(dim=-1, keepdim=True)  # the max of the scores alone, not of the sink
    exps = (scores - top).exp()
    column = _sink_column(scores, sink)
    return {
        "each row sums to 1: the sink's share is gone. The weights were renormalised after the sink's column was "
        "dropped, or the sink was added to every score (softmax ignores a shift shared by the whole row), or left "
        "out. The sink takes its share in the softmax, in a column of its own, and that share then goes nowhere: "
        "a row's weights over the real keys sum to less than 1.": [
            plain,
            _zero_blocked(plain, scores),
            torch.softmax(scores + column, dim=-1),  # the same but where the sink is -inf
            _renormalised(torch.softmax(logits, dim=-1)[..., :-1]),  # NaN where the sink took everything
        ],
        "the sink was added to the scores as well as given its own column: its logit belongs in the extra column "
        "only; the scores stay as they came.": lambda: torch.softmax(_with_sink(scores + column, sink), -1)[..., :-1],
        "the sink entered as a weight, not as a logit: its column holds a logit like the scores do, so what it "
        "adds to the softmax's denominator is e to the sink, not the sink itself.": [
            scores.exp() / (scores.exp().sum(-1, keepdim=True) + column),
            exps / (exps.sum(-1, keepdim=True) + column),
        ],
        "the largest score was subtracted from the scores but not from the sink: for a stable softmax subtract "
        "one number from every logit of the row, the sink's included, or the sink's share comes out too large "
        "or too small.": lambda: exps / (exps.sum(-1, keepdim=True) + column.exp()),
        "the sink's logit has the wrong sign: its column holds the head's sink logit as it comes, not its "
        "negative.": lambda: torch.softmax(_with_sink(scores, -sink), -1)[..., :-1],
        "the rows were scaled by a sigmoid of the sink alone: the share the sink takes depends on the row's scores "
        "too (on how large they are against the sink's logit), which a softmax over the scores and the sink's "
        "column together gives.": [
            plain * torch.sigmoid(-column),
            plain * torch.sigmoid(column),
            _zero_blocked(plain * torch.sigmoid(-column), scores),
            _zero_blocked(plain * torch.sigmoid(column), scores),
        ],
        "the softmax ran over the wrong axis: the weights of one query (one row, the last axis, the keys and the "
        "sink's column) share the softmax, not one key's weights over the queries or the heads.": [
            torch.softmax(logits, dim=-2)[..., :-1],
            torch.softmax(logits, dim=-3)[..., :-1],
        ],
        "the wrong column was dropped: the sink's column is the extra one, and it is the one whose weight goes "
        "nowhere; every real key keeps its weight.": [
            torch.softmax(logits, dim=-1)[..., 1:],
            torch.softmax(torch.cat((column, scores), dim=-1), dim=-1)[..., :-1],
        ],
        "those are log-weights (a log-softmax): return the weights themselves, each between 0 and 1.": (
            lambda: torch.log_softmax(logits, dim=-1)[..., :-1]
        ),
        "the sink's logit was fixed at 0 (1 added to the softmax's denominator, the 'softmax_1' form): gpt-oss "
        "learns one sink logit per head, sink[a] for head a; its column holds that logit, not 0.": (
            lambda: torch.softmax(_with_sink(scores, torch.zeros_like(sink)), -1)[..., :-1]
        ),
        "every head got the same sink (one of the sink's logits, or their mean or sum, for all heads): sink holds "
        "h logits, one per head; head a's rows take sink[a].": [
            torch.softmax(_with_sink(scores, one.expand_as(sink)), -1)[..., :-1]
            for one in (sink[:1], sink[-1:], sink.mean(0, keepdim=True), sink.sum(0, keepdim=True))
        ],
        "the sink's column was repeated for every key (S sink columns, or e to the sink added to each key's "
        "term): a row has ONE sink column, so the denominator holds e to the sink once, beside the S keys' "
        "terms.": lambda: torch.softmax(torch.cat((scores, column.expand_as(scores)), -1), -1)[..., : scores.size(-1)],
    }


def _sink_axis_mistakes(scores: Tensor, sink: Tensor) -> dict[str, Expected]:
    """Mistakes that run only when h equals L or S (the square case)."""
    per_query = torch.cat((scores, _sink_column(scores, sink, (1, -1, 1))), dim=-1)
    return {
        "the sink went to the queries, not to the heads: sink[i] was given to query i (the sink's h logits "
        "broadcast along the query axis). It holds one logit per HEAD: every query of head a gets sink[a].": [
            torch.softmax(per_query, dim=-1)[..., :-1],
            _literal_softmax(per_query)[..., :-1],
        ],
        "the sink went to the keys, not to the heads: its h logits were broadcast along the last axis, so key j's "
        "weight was divided by a denominator holding sink[j]. It holds one logit per HEAD, the same for every "
        "query and key of that head: give it the head's axis (h, 1, 1).": [
            scores.exp() / (scores.exp().sum(-1, keepdim=True) + sink.exp()),
            (scores - scores.amax(-1, keepdim=True)).exp()
            / ((scores - scores.amax(-1, keepdim=True)).exp().sum(-1, keepdim=True) + sink.exp()),
        ],
    }


def _scores(shape: tuple[int, ...], seed: int, scale: float = 1.5) -> Tensor:
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)) * scale


def _causal(scores: Tensor, ahead: int = 0) -> Tensor:
    """``scores`` with -inf where key j lies more than ``ahead`` positions after query i."""
    L, S = scores.shape[-2:]
    future = torch.arange(S)[None, :] > torch.arange(L)[:, None] + ahead
    return scores.masked_fill(future, NEG_INF)


def _sink_cases() -> list[_Case]:
    # h, L and S differ in every case, so that a sink broadcast along the queries or keys raises (the square case
    # below names it). A general case first, then one with all-blocked rows and a padded key, one whose scores are
    # thousands (exp of them overflows float64; one head far below its sink, one sink far above), scores without a
    # batch axis (one head's sink -inf: plain attention), and scores with two leading axes.
    blocked = _causal(_scores((1, 2, 3, 6), 1), ahead=2)
    blocked[..., 5] = NEG_INF  # a padded key
    blocked[0, 0, 1] = NEG_INF  # query 1 of head 0 reads nothing
    blocked[0, 1, 2] = NEG_INF
    general, unbatched = _causal(_scores((2, 3, 4, 5), 0), ahead=1), _causal(_scores((2, 5, 3), 3))
    stacked = _scores((2, 2, 3, 2, 4), 4, scale=2.0)
    huge = _scores((2, 4, 2, 3), 2, scale=3.0) + torch.tensor([3000.0, -3000.0, 2500.0, 800.0]).view(4, 1, 1)
    sink = functools.partial(torch.tensor, dtype=torch.float64)
    return [
        _Case("scores (2, 3, 4, 5), each query reading up to 1 key ahead", (general, sink([0.5, -1.0, 2.0]))),
        _Case("scores (1, 2, 3, 6) with rows blocked everywhere", (blocked, sink([1.5, -0.5]))),
        _Case("scores (2, 4, 2, 3) of about +3000, -3000, 2500 and 800", (huge, sink([3001.0, -2.0, 2499.0, 0.0]))),
        _Case("scores (2, 5, 3) without a batch axis, head 0's sink -inf", (unbatched, sink([NEG_INF, 0.3]))),
        _Case("scores (2, 2, 3, 2, 4) with two leading axes", (stacked, sink([-0.7, 1.2, 0.0]))),
    ]


_SINK_CASES = _sink_cases()
_HUGE = 2  # the case whose scores are thousands
_SINK_SQUARE = _Case(
    "scores (2, 3, 3, 3)", (_causal(_scores((2, 3, 3, 3), 5), 1), torch.tensor([0.7, -1.2, 1.9]).double())
)


def _sink_answer(result: object, case: _Case) -> Tensor:
    scores = case.args[0]
    if isinstance(result, Tensor) and tuple(result.shape) == (*scores.shape[:-1], scores.size(-1) + 1):
        raise wrong(
            f"the weights have S + 1 = {scores.size(-1) + 1} columns ({case.name}): the sink's column is still "
            "there. It takes its share of the softmax, and then it is dropped: the weights hold one column per "
            "real key, S of them."
        )
    return _one_tensor(result, "the weights", tuple(scores.shape), "(..., h, L, S)", case)


def _blocked_rows(scores: Tensor) -> Tensor:
    return torch.isneginf(scores).all(dim=-1)  # (..., h, L)


def _sink_pattern(answers: dict[int, Tensor], right: dict[int, Tensor]) -> _Wrong | None:
    """The mistakes seen in WHERE the answer goes wrong: only on huge scores, or only on the all-blocked rows."""
    wrong_cases = [c for c in answers if not close(answers[c], right[c])]
    if wrong_cases == [_HUGE] and not torch.isfinite(answers[_HUGE]).all():
        return wrong(
            "right on ordinary scores, NaN or inf where the scores are thousands (scores of about 3000): e to "
            "the 3000 overflows, and inf / inf is NaN. Softmax gives the same weights when one number is "
            "subtracted from every logit of a row: subtract the row's largest logit, the sink's included, first."
        )
    for case in wrong_cases:
        scores = _SINK_CASES[case].args[0]
        rows = _blocked_rows(scores)
        if not rows.any() or not close(answers[case][~rows], right[case][~rows]):
            return None
    if not wrong_cases:
        return None
    found = torch.cat([answers[c][_blocked_rows(_SINK_CASES[c].args[0])] for c in wrong_cases])
    what = "NaN" if found.isnan().any() else "weights that are not zeros"
    return wrong(
        f"right on every row but those blocked everywhere, which come out as {what}: a query whose every score is "
        "-inf has only the sink's column left, which takes all of the softmax and is dropped, so its weights are "
        "zeros. A max taken over the scores alone is -inf there, and -inf - (-inf) is NaN: take the row's max "
        "with the sink's column in it (or make sure a row of nothing but -inf gives zeros)."
    )


def _sink_fallback(answers: dict[int, Tensor], right: dict[int, Tensor]) -> _Wrong:
    case = next(c for c in answers if not close(answers[c], right[c]))
    differs = (answers[case] - right[case]).abs().nan_to_num(nan=math.inf).flatten(0, -3).amax(-1)  # (..., L)
    row = divmod(int(differs.argmax()), differs.size(-1))
    got, want = answers[case].flatten(0, -3)[row], right[case].flatten(0, -3)[row]
    return wrong(
        f"{_SINK_CASES[case].name}: one row's weights should be {[round(x, 4) for x in want.tolist()]} (summing to "
        f"{want.sum():.4f}, the rest going to the sink), yours are {[round(x, 4) for x in got.tolist()]}."
    )


def _leading_axes_error(errors: dict[int, LearnerError]) -> _Wrong | None:
    """Code that raised exactly on the cases whose scores are not 4-D: written for (N, h, L, S) only."""
    dims = {c: case.args[0].dim() for c, case in enumerate(_SINK_CASES)}
    if set(errors) == {c for c, dim in dims.items() if dim != 4}:
        first = next(iter(errors.values()))
        return wrong(
            f"your code raised {first} on scores with {', '.join(str(dims[c]) for c in errors)} axes: it works for "
            "(N, h, L, S) only. The scores are (..., h, L, S), with any number of leading axes (none, or several): "
            "shape the sink from the END, as the heads' axis, third from last."
        )
    return None


@learner_check
def check_sink_softmax(sink_softmax: Callable[[Tensor, Tensor], Tensor]) -> Verdict:
    """Check ``sink_softmax(scores (..., h, L, S), sink (h,)) -> weights (..., h, L, S)``: gpt-oss's attention sink,
    equal to ``helpers.attention.masked_softmax(scores, sink=sink)``."""

    def body() -> str:
        answers, errors = _run(sink_softmax, _SINK_CASES, _sink_answer)
        if errors:
            square = _SINK_SQUARE.args
            named = _square_verdict(sink_softmax, _SINK_SQUARE, _sink_answer, _sink_axis_mistakes(*square))
            written_in = _size_written_in(
                errors,
                answers,
                lambda c: reference_sink_softmax(*_SINK_CASES[c].args),
                lambda c: dict(zip("hLS", _SINK_CASES[c].args[0].shape[-3:], strict=True)),
            )
            raise named or _leading_axes_error(errors) or written_in or next(iter(errors.values()))
        right = {c: reference_sink_softmax(*_SINK_CASES[c].args) for c in answers}
        if all(close(answers[c], right[c]) for c in answers):
            share = 1 - float(right[0].sum(-1).mean())
            return (
                "one extra column per head, its share dropped: every row sums to less than 1 (the sinks take "
                f"{share:.0%} of the first case's weights on average), rows blocked everywhere are zeros and "
                "scores in the thousands stay finite."
            )
        tables = [_sink_mistakes(*_SINK_CASES[c].args) for c in answers]
        raise (
            named_mistake(list(answers.values()), tables, uncomputable_rules_out=True)
            or _sink_pattern(answers, right)
            or _sink_fallback(answers, right)
        )

    return run_check("softmax with an attention sink", body)


# ---------------------------------------------------------------------------------------------
# Exercise 2: the output gate
# ---------------------------------------------------------------------------------------------
def reference_gated_heads(heads: Tensor, x: Tensor, gate_weight: Tensor) -> Tensor:
    """heads (N, T, h·d) the heads' outputs merged, x (N, T, E) the layer's input, gate_weight (h·d, E) an
    nn.Linear weight -> (N, T, h·d): each feature of the heads scaled by its own gate in (0, 1), the sigmoid of
    x's projection (Qwen3-Next's gated attention; ``helpers.gpt`` with ``output_gate=True``)."""
    logits = x @ gate_weight.transpose(0, 1)  # (N, T, h·d): one gate logit per feature
    return heads * torch.sigmoid(logits)


def _grouped(gates: Tensor, groups: int) -> Tensor:
    """``gates`` (..., h·d) averaged within ``groups`` runs of consecutive features (one gate per head)."""
    means = gates.unflatten(-1, (groups, -1)).mean(-1, keepdim=True)  # (..., groups, 1)
    return means.expand(*gates.shape[:-1], groups, gates.size(-1) // groups).flatten(-2)


def _gate_mistakes(heads: Tensor, x: Tensor, gate_weight: Tensor) -> dict[str, Expected]:
    logits = x @ gate_weight.T
    gate = torch.sigmoid(logits)
    width = heads.size(-1)
    divisors = [g for g in range(1, width) if width % g == 0]
    return {
        "the gate has no sigmoid: the projection's raw numbers scale the heads, unbounded and of either sign. A "
        "gate is a number between 0 and 1 (the sigmoid of that projection), so that it can only let a feature "
        "through or hold it back.": heads * logits,
        "a softmax where the gate wants a sigmoid: a softmax makes the gates of a token (or of a feature over the "
        "tokens) compete and sum to 1; each feature's gate is its own number in (0, 1), the logistic sigmoid of "
        "its own logit.": [heads * torch.softmax(logits, dim=-1), heads * torch.softmax(logits, dim=-2)],
        "tanh where the gate wants a sigmoid: tanh lies in (-1, 1), so a gate could flip a feature's sign. The "
        "gate is the sigmoid, in (0, 1).": heads * torch.tanh(logits),
        "SiLU (x · sigmoid(x), SwiGLU's activation) where the gate wants the sigmoid itself: a gate stays in "
        "(0, 1), and SiLU does not.": heads * F.silu(logits),
        "ReLU or GELU where the gate wants a sigmoid: the gate must lie in (0, 1), so that it can only hold a "
        "feature back.": [heads * torch.relu(logits), heads * F.gelu(logits)],
        "1 - sigmoid: the gate is the sigmoid of the logit itself (large logit, feature through), not what it "
        "leaves out.": heads * (1 - gate),
        "the heads were divided by the gate (1 / sigmoid, the sigmoid turned upside down): that is at least 1 and "
        "grows without bound as the logit falls; the gate multiplies, by the sigmoid itself, in (0, 1).": [
            heads / gate,
            heads * (1 + torch.exp(-logits)),
        ],
        "the gate was added to the heads: a gate multiplies, each feature scaled by its own gate.": heads + gate,
        "the sigmoid went on the heads and the gate's raw logits multiplied them: the sigmoid belongs to the "
        "gate's logits, the heads pass as they are.": torch.sigmoid(heads) * logits,
        "that is the gate alone: it scales the heads' outputs, feature by feature; return the gated heads.": gate,
        "the heads came back ungated: multiply each feature by its gate, the sigmoid of x's projection.": heads,
        "one gate per head (or per token), averaged over its features: Qwen3-Next's output gate has one gate per "
        "FEATURE, h·d of them for each token, the gate projection's whole output.": [
            heads * _grouped(gate, g) for g in divisors
        ]
        + [heads * torch.sigmoid(_grouped(logits, g)) for g in divisors],
    }


def _gate_square_mistakes(heads: Tensor, x: Tensor, gate_weight: Tensor) -> dict[str, Expected]:
    """Mistakes that run only when h·d = E (the square case)."""
    return {
        "gate_weight was used untransposed: it is an nn.Linear weight, stored (h·d, E) (out, in), so x (N, T, E) "
        "meets it the way nn.Linear applies its weight.": heads * torch.sigmoid(x @ gate_weight),
        "the gate was computed from the heads' outputs: Qwen3-Next computes it from the layer's INPUT x, "
        "the same x the queries come from.": [
            heads * torch.sigmoid(heads @ gate_weight.T),
            heads * torch.sigmoid(heads @ gate_weight),
        ],
        "the gate was applied to x: it scales the heads' outputs (N, T, h·d), before the output projection.": (
            x * torch.sigmoid(x @ gate_weight.T)
        ),
    }


def _gate_case(name: str, sizes: tuple[int, int, int, int], seed: int, x_scale: float = 1.0) -> _Case:
    generator = torch.Generator().manual_seed(seed)
    N, T, width, E = sizes
    heads = torch.randn(N, T, width, dtype=torch.float64, generator=generator)
    x = torch.randn(N, T, E, dtype=torch.float64, generator=generator) * x_scale
    weight = torch.randn(width, E, dtype=torch.float64, generator=generator) / math.sqrt(E)
    return _Case(name, (heads, x, weight))


# (N, T, h·d, E): h·d != E in every case, so that gate_weight untransposed raises (the square case names it); a
# case whose gate logits are in the hundreds (e^g overflows: a sigmoid written as e^g / (1 + e^g) is NaN there).
_GATE_CASES = [
    _gate_case("heads (2, 3, 6), x (2, 3, 4)", (2, 3, 6, 4), 0),
    _gate_case("heads (1, 4, 8), x (1, 4, 12)", (1, 4, 8, 12), 1),
    _gate_case("heads (3, 2, 10), x (3, 2, 5)", (3, 2, 10, 5), 2),
    _gate_case("heads (2, 2, 6), x (2, 2, 3) with gate logits in the hundreds", (2, 2, 6, 3), 3, x_scale=900.0),
]
_LARGE_GATES = 3
_GATE_SQUARE = _gate_case("heads (2, 3, 4), x (2, 3, 4)", (2, 3, 4, 4), 4)


def _gate_answer(result: object, case: _Case) -> Tensor:
    heads, x, _ = case.args
    if isinstance(result, Tensor) and x.shape != heads.shape and tuple(result.shape) == tuple(x.shape):
        raise wrong(
            f"the result has x's shape (N, T, E) = {tuple(x.shape)} ({case.name}): the gate scales the heads' "
            "outputs (N, T, h·d), feature by feature, and the result keeps their shape."
        )
    return _one_tensor(result, "the gated heads", tuple(heads.shape), "(N, T, h·d)", case)


def _gate_fallback(answers: dict[int, Tensor], right: dict[int, Tensor]) -> _Wrong:
    """NaN only where the gate logits are huge (a sigmoid that overflows), else the first wrong case's worst
    feature, with what it should be."""
    wrong_cases = [c for c in answers if not close(answers[c], right[c])]
    if wrong_cases == [_LARGE_GATES] and not torch.isfinite(answers[_LARGE_GATES]).all():
        return wrong(
            "right for ordinary gate logits, NaN or inf where they are in the hundreds: e to the logit overflows "
            "there (inf / inf is NaN). torch's sigmoid is written to stay finite for any logit; use it, or a form "
            "of the sigmoid that never takes e to a large positive number."
        )
    case = wrong_cases[0]
    differs = (answers[case] - right[case]).abs().nan_to_num(nan=math.inf)
    n, t, f = (int(i) for i in torch.unravel_index(differs.argmax(), differs.shape))
    head, want, got = (float(t_[n, t, f]) for t_ in (_GATE_CASES[case].args[0], right[case], answers[case]))
    return wrong(
        f"{_GATE_CASES[case].name}: feature {f} of token {t} in sequence {n} should be {want:.4f} (the head's output "
        f"{head:.4f} times its gate), yours is {got:.4f}."
    )


@learner_check
def check_output_gate(gated_heads: Callable[[Tensor, Tensor, Tensor], Tensor]) -> Verdict:
    """Check ``gated_heads(heads (N, T, h·d), x (N, T, E), gate_weight (h·d, E)) -> (N, T, h·d)``: the heads scaled
    by sigmoid(x W_g^T), one gate per feature (Qwen3-Next's gated attention)."""

    def body() -> str:
        answers, errors = _run(gated_heads, _GATE_CASES, _gate_answer)
        if errors:
            named = _square_verdict(gated_heads, _GATE_SQUARE, _gate_answer, _gate_square_mistakes(*_GATE_SQUARE.args))
            written_in = _size_written_in(
                errors,
                answers,
                lambda c: reference_gated_heads(*_GATE_CASES[c].args),
                lambda c: (
                    {"N": _GATE_CASES[c].args[0].size(0), "T": _GATE_CASES[c].args[0].size(1)}
                    | {"h·d": _GATE_CASES[c].args[0].size(2), "E": _GATE_CASES[c].args[1].size(2)}
                ),
            )
            raise named or written_in or next(iter(errors.values()))
        right = {c: reference_gated_heads(*_GATE_CASES[c].args) for c in answers}
        if all(close(answers[c], right[c]) for c in answers):
            return "each of the h·d features scaled by its own gate in (0, 1), computed from x, large logits included."
        gate_tables = [_gate_mistakes(*_GATE_CASES[c].args) for c in answers]
        named = named_mistake(list(answers.values()), gate_tables, uncomputable_rules_out=True)
        raise named or _gate_fallback(answers, right)

    return run_check("the output gate", body)


# ---------------------------------------------------------------------------------------------
# Exercise 3: one step of the gated delta rule
# ---------------------------------------------------------------------------------------------
def reference_delta_step(state: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_alpha: Tensor | None = None) -> Tensor:
    """state (N, h, d_k, d_v), k (N, h, d_k) of unit length, v (N, h, d_v), beta and log_alpha (N, h) -> the new
    state (N, h, d_k, d_v): S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T, alpha = exp(log_alpha)
    (None: no decay). As ``helpers.delta_rule.delta_rule_step``'s state."""
    if log_alpha is not None:
        state = state * log_alpha.exp()[..., None, None]  # decay first: the recall reads the decayed state
    recalled = torch.einsum("nhk,nhkv->nhv", k, state)  # S^T k: what the state holds under this key
    correction = beta[..., None] * (v - recalled)  # (N, h, d_v)
    return state + k[..., :, None] * correction[..., None, :]


def _write(state: Tensor, k: Tensor, values: Tensor) -> Tensor:
    """``state`` plus the outer product k values^T of each sequence and head: (N, h, d_k, d_v)."""
    return state + k[..., :, None] * values[..., None, :]


def _recall(state: Tensor, k: Tensor) -> Tensor:
    return torch.einsum("nhk,nhkv->nhv", k, state)


def _delta(state: Tensor, k: Tensor, v: Tensor, beta: Tensor, alpha: Tensor, recall_from_old: bool = False) -> Tensor:
    """The delta rule with ``alpha`` (N, h) given directly, the recall optionally read from the undecayed state."""
    decayed = state * alpha[..., None, None]
    recalled = _recall(state if recall_from_old else decayed, k)
    return _write(decayed, k, beta[..., None] * (v - recalled))


def _delta_mistakes(state: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_alpha: Tensor | None) -> dict[str, Expected]:
    ones = torch.ones_like(beta)
    alpha = ones if log_alpha is None else log_alpha.exp()
    a = alpha[..., None, None]
    b = beta[..., None]
    decayed = state * a
    recalled, recalled_old = _recall(decayed, k), _recall(state, k)
    mistakes: dict[str, Expected] = {
        "that is plain linear attention: k v^T added to the state, with no correction. The delta rule first reads "
        "what the state already holds under k (its recall) and writes only beta times the DIFFERENCE between v "
        "and that recall, so that the key's old value is replaced, not piled up.": [
            _write(decayed, k, v),
            _write(decayed, k, b * v),
            _write(state, k, v),
            _write(state, k, b * v),
        ],
        "beta is left out: it says how much of the correction is written (between 0 and 1, one per sequence and "
        "head); it scales both the erasing of the old value and the writing of the new.": (
            _write(decayed, k, v - recalled)
        ),
        "beta scales only the new value, not the erasing of the old one: with beta < 1 the state writes beta "
        "of v but erases all of the recalled value. Both go through beta (the correction as a whole).": (
            _write(decayed, k, b * v - recalled)
        ),
        "beta scales only the erasing, not the new value: the correction as a whole, v minus the recall, is "
        "scaled by beta.": _write(decayed, k, v - b * recalled),
        "the decay came after the write: it scales the OLD state, before the recall and the write, so that the "
        "new value goes in whole (the decay forgets the past, not the present token).": [
            _delta(state, k, v, beta, ones) * a
        ],
        "the decay went on the write only: alpha scales the old state (what was stored before this token), not "
        "what this token writes.": [
            _write(state, k, alpha[..., None] * b * (v - recalled_old)),
            _write(state, k, -b * recalled_old) + k[..., :, None] * (alpha[..., None] * b * v)[..., None, :],
        ],
        "the recall was read from the state before its decay: decay first, then read what the decayed state "
        "holds under k, since that is the state the correction is written into.": (
            _delta(state, k, v, beta, alpha, recall_from_old=True)
        ),
        "the correction is v plus the recall: the delta rule writes the ERROR, v minus what the state already "
        "recalls for k.": _write(decayed, k, b * (v + recalled)),
        "the correction has the wrong sign (the recall minus v): the state moves towards v, by beta times v "
        "minus what it recalls.": _write(decayed, k, b * (recalled - v)),
        "beta was applied twice (squared, or once more on one part of the correction): the correction is "
        "beta times (v minus the recall), beta once.": [
            _write(decayed, k, b * b * (v - recalled)),
            _write(decayed, k, b * (b * v - recalled)),
            _write(decayed, k, b * (v - b * recalled)),
        ],
        "the old state was dropped: the new state is the old one, decayed, plus the correction written under k.": [
            k[..., :, None] * (b * (v - recalled))[..., None, :],
            k[..., :, None] * (b * v)[..., None, :],
        ],
    }
    return mistakes if log_alpha is None else mistakes | _decay_mistakes(state, k, v, beta, log_alpha)


def _decay_mistakes(state: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_alpha: Tensor) -> dict[str, Expected]:
    """The mistakes of log_alpha: judged only in the cases that give one."""
    return {
        "log_alpha was used as alpha itself: it is the decay's LOGARITHM (<= 0); the decay is e to it, between 0 "
        "and 1.": _delta(state, k, v, beta, log_alpha),
        "alpha was taken as the sigmoid of log_alpha: log_alpha is alpha's logarithm, so alpha is e to it "
        "(log_alpha = 0 is no decay at all, alpha = 1).": _delta(state, k, v, beta, torch.sigmoid(log_alpha)),
        "alpha was taken as e to MINUS log_alpha: that is above 1 and would grow the state; log_alpha (<= 0) is "
        "alpha's logarithm, alpha = e to it.": _delta(state, k, v, beta, (-log_alpha).exp()),
        "the decay is ignored: log_alpha (N, h) is given, and alpha = e to it scales the old state down before the "
        "recall (Gated DeltaNet's forgetting).": _delta(state, k, v, beta, torch.ones_like(beta)),
    }


def _delta_square_mistakes(state: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_alpha: Tensor) -> dict[str, Expected]:
    """Mistakes that run only when d_k = d_v (the square case)."""
    a, b = log_alpha.exp()[..., None, None], beta[..., None]
    decayed = state * a
    right_side = decayed - b[..., None] * (decayed @ (k[..., :, None] * k[..., None, :]))
    return {
        "the recall is transposed: the state is (d_k, d_v), one row per key feature, so what it holds under k "
        "sums over its rows (its d_k axis, S^T k), a vector of d_v numbers, not over its columns (S k).": (
            _write(decayed, k, b * (v - (decayed @ k[..., None]).squeeze(-1)))
        ),
        "the write is transposed: v k^T is (d_v, d_k); the state is (d_k, d_v), one row per key feature, so "
        "the correction goes in as k times it (the key's axis first).": (
            decayed + (b * (v - _recall(decayed, k)))[..., :, None] * k[..., None, :]
        ),
        "the erasing (I - beta k k^T) was applied on the right of the state: with the state (d_k, d_v) it acts "
        "on the key's axis, the rows, from the left.": right_side + k[..., :, None] * (b * v)[..., None, :],
        "the state was read and written as (d_v, d_k), transposed (the DeltaNet paper's S v-by-k: recall S k, "
        "write v k^T): here the state is (N, h, d_k, d_v), one row per KEY feature, so the recall is S^T k and "
        "the write k v^T.": decayed + (b * (v - (decayed @ k[..., None]).squeeze(-1)))[..., :, None] * k[..., None, :],
    }


def _delta_case(name: str, sizes: tuple[int, int, int, int], seed: int, gated: bool | None) -> _Case:
    """A case of sizes (N, h, d_k, d_v); ``gated``: log_alpha given (True), passed as None (None) or left out
    (False)."""
    generator = torch.Generator().manual_seed(seed)
    N, h, d_k, d_v = sizes
    state = torch.randn(N, h, d_k, d_v, dtype=torch.float64, generator=generator)
    k = F.normalize(torch.randn(N, h, d_k, dtype=torch.float64, generator=generator), dim=-1)
    v = torch.randn(N, h, d_v, dtype=torch.float64, generator=generator)
    beta = torch.rand(N, h, dtype=torch.float64, generator=generator) * 0.8 + 0.1
    beta.view(-1)[0] = 1.0  # beta = 1: the key's value replaced entirely
    args: tuple = (state, k, v, beta)
    if gated:
        log_alpha = -torch.rand(N, h, dtype=torch.float64, generator=generator) * 1.5 - 0.05
        log_alpha.view(-1)[-1] = 0.0  # alpha = 1 for one head: no decay there
        args += (log_alpha,)
    elif gated is None:
        args += (None,)
    return _Case(name, args)


# (N, h, d_k, d_v): d_k != d_v in every case, so that a transposed recall or write raises (the square case names
# it); log_alpha given (N, h), left out, or passed as None.
_DELTA_CASES = [
    _delta_case("state (2, 3, 4, 5) with log_alpha", (2, 3, 4, 5), 0, True),
    _delta_case("state (1, 2, 3, 2) without log_alpha", (1, 2, 3, 2), 1, False),
    _delta_case("state (3, 1, 5, 3) with log_alpha", (3, 1, 5, 3), 2, True),
    _delta_case("state (2, 2, 2, 6) with log_alpha=None", (2, 2, 2, 6), 3, None),
]
_DELTA_SQUARE = _delta_case("state (2, 2, 3, 3) with log_alpha", (2, 2, 3, 3), 4, True)


def _log_alpha(case: _Case) -> Tensor | None:
    return case.args[4] if len(case.args) > 4 else None  # left out: None


def _delta_answer(result: object, case: _Case) -> Tensor:
    state = case.args[0]
    N, h, d_k, d_v = state.shape
    if isinstance(result, tuple | list) and len(result) == 2:
        raise wrong(
            f"a {type(result).__name__} of two items ({case.name}): helpers.delta_rule's step returns (output, "
            "state), but this exercise asks for the new state only, one tensor (N, h, d_k, d_v)."
        )
    if isinstance(result, Tensor) and tuple(result.shape) == (N, h, d_v):
        raise wrong(
            f"a tensor (N, h, d_v) = {(N, h, d_v)} ({case.name}), the size of one value (a recall or an output): "
            "return the whole new state (N, h, d_k, d_v)."
        )
    if isinstance(result, Tensor) and d_k != d_v and tuple(result.shape) == (N, h, d_v, d_k):
        raise wrong(
            f"the state came back (N, h, d_v, d_k) = {(N, h, d_v, d_k)} ({case.name}): it is (N, h, d_k, d_v), one "
            "row per key feature and one column per value feature; the new value goes in under the key as k v^T."
        )
    return _one_tensor(result, "the new state", tuple(state.shape), "(N, h, d_k, d_v)", case)


def _delta_table(case: _Case) -> dict[str, Expected]:
    state, k, v, beta = case.args[:4]
    return _delta_mistakes(state, k, v, beta, _log_alpha(case))


def _delta_fallback(answers: dict[int, Tensor], right: dict[int, Tensor]) -> _Wrong:
    """Where the first wrong case's state differs most: which sequence and head, with their beta and alpha."""
    case = next(c for c in answers if not close(answers[c], right[c]))
    differs = (answers[case] - right[case]).abs().nan_to_num(nan=math.inf)
    n, head = (int(i) for i in torch.unravel_index(differs.amax((2, 3)).argmax(), differs.shape[:2]))
    beta, log_alpha = _DELTA_CASES[case].args[3], _log_alpha(_DELTA_CASES[case])
    gates = f"beta = {float(beta[n, head]):.3f}"
    if log_alpha is not None:
        gates += f", alpha = {math.exp(float(log_alpha[n, head])):.3f}"
    return wrong(
        f"{_DELTA_CASES[case].name}: the new state of sequence {n}, head {head} differs from the delta rule's by up "
        f"to {float(differs[n, head].amax()):.4g} ({gates})."
    )


def _none_error(errors: dict[int, LearnerError]) -> _Wrong | None:
    """Code that raised exactly on the cases without log_alpha: None was used as a tensor."""
    without = {c for c, case in enumerate(_DELTA_CASES) if _log_alpha(case) is None}
    if errors and set(errors) == without:
        first = next(iter(errors.values()))
        return wrong(
            f"your code raised {first} when log_alpha is None (left out, or passed as None): None means no decay "
            "(alpha = 1, the plain delta rule), and it is no tensor; leave the decay out then."
        )
    return None


@learner_check
def check_delta_step(delta_step: Callable[..., Tensor]) -> Verdict:
    """Check ``delta_step(state (N, h, d_k, d_v), k (N, h, d_k), v (N, h, d_v), beta (N, h), log_alpha=None)
    -> new state (N, h, d_k, d_v)``, the gated delta rule's state as ``helpers.delta_rule.delta_rule_step``'s."""

    def body() -> str:
        answers, errors = _run(delta_step, _DELTA_CASES, _delta_answer)
        if errors:
            square = _DELTA_SQUARE.args
            named = _square_verdict(delta_step, _DELTA_SQUARE, _delta_answer, _delta_square_mistakes(*square))
            written_in = _size_written_in(
                errors,
                answers,
                lambda c: reference_delta_step(*_DELTA_CASES[c].args),
                lambda c: dict(zip(("N", "h", "d_k", "d_v"), _DELTA_CASES[c].args[0].shape, strict=True)),
            )
            raise named or _none_error(errors) or written_in or next(iter(errors.values()))
        cases = [_DELTA_CASES[c] for c in answers]
        right = {c: reference_delta_step(*case.args) for c, case in zip(answers, cases, strict=True)}
        if all(close(answers[c], right[c]) for c in answers):
            return (
                "the old state decayed, what it recalls under k corrected by beta times the error, with and "
                "without log_alpha: the rule that lets a fixed-size state overwrite a key instead of piling up."
            )
        delta_tables = [_delta_table(case) for case in cases]
        named = named_mistake(list(answers.values()), delta_tables, uncomputable_rules_out=True)
        raise named or _delta_fallback(answers, right)

    return run_check("one step of the gated delta rule", body)
