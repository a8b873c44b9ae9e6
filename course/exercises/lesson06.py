"""Checks for lesson 06's exercises: the decoder's inputs, labels and mask; a head's alignment accuracy.

Shapes: N batch, T full target length (BOS ... EOS, padded), L = T - 1 decoder length,
J English words, I German words.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from course.exercises.feedback import (
    LearnerError,
    Verdict,
    as_tensor,
    close,
    expect_shape,
    learner_check,
    run_check,
    wrong,
)
from helpers.attention import causal_mask

__all__ = ["check_alignment_accuracy", "check_teacher_forcing", "reference_alignment_accuracy"]


# ---------------------------------------------------------------------------------------------
# Exercise 1: what the decoder reads, what it must predict, and what it may not look at
# ---------------------------------------------------------------------------------------------
def _target_batch() -> Tensor:
    """(N, T) = (2, 6): BOS=1, EOS=2, padding 0, distinct word ids so every mix-up shows."""
    return torch.tensor([[1, 11, 12, 13, 14, 2], [1, 21, 22, 2, 0, 0]])


def _as_blocked(mask: Tensor) -> Tensor:
    """Boolean True=blocked from either convention that means "blocked": bool, or float with -inf."""
    if mask.dtype == torch.bool:
        return mask
    return torch.isinf(mask) & (mask < 0)


@learner_check
def check_teacher_forcing(teacher_forcing_batch: Callable[[Tensor], tuple[Tensor, Tensor, Tensor]]) -> Verdict:
    """Check ``teacher_forcing_batch(tgt) -> (tgt_in, tgt_out, tgt_mask)`` for a padded (N, T) target batch.

    Expected: ``tgt_in`` = all but the last position (N, L), ``tgt_out`` = all but the first (N, L),
    ``tgt_mask`` (L, L) True where attention is blocked (above the diagonal), as ``nn.Transformer``
    takes it; a float mask with -inf above the diagonal and 0 elsewhere is accepted too.
    """

    def body() -> str:
        tgt = _target_batch()
        answer = teacher_forcing_batch(tgt.clone())
        return _reading_answer(lambda: judge(tgt, answer), "return (tgt_in, tgt_out, tgt_mask) as three tensors")

    def judge(tgt: Tensor, answer: object) -> str:
        if answer is None:
            raise wrong("your function returned None: did you forget the `return`?")
        if not isinstance(answer, (tuple, list)) or len(answer) != 3:
            raise wrong("return three things: (tgt_in, tgt_out, tgt_mask)")
        names = ("tgt_in", "tgt_out", "tgt_mask")
        tgt_in, tgt_out, mask = (as_tensor(a, name) for a, name in zip(answer, names, strict=True))
        N, T = tgt.shape
        L = T - 1
        if tuple(tgt_in.shape) == (N, T) and close(tgt_in, tgt.double()):
            raise wrong(
                "tgt_in is the whole target: the decoder must not read the token it is asked to predict. "
                "Drop the last position: tgt[:, :-1]."
            )
        if close(tgt_in, tgt[:, 1:].double()) and close(tgt_out, tgt[:, :-1].double()):
            raise wrong(
                "tgt_in and tgt_out are swapped: the decoder READS <bos> y1 ... (tgt[:, :-1]) and must "
                "PREDICT y1 ... <eos> (tgt[:, 1:])."
            )
        expect_shape(tgt_in, (N, L), "tgt_in (N, L)")
        expect_shape(tgt_out, (N, L), "tgt_out (N, L)")
        if not close(tgt_in, tgt[:, :-1].double()):
            raise wrong("tgt_in should be the target without its last position, tgt[:, :-1] (it starts with <bos>).")
        if not close(tgt_out, tgt[:, 1:].double()):
            raise wrong("tgt_out should be the target without its first position, tgt[:, 1:] (it ends with <eos>).")
        if tuple(mask.shape) == (T, T):
            raise wrong(
                f"tgt_mask has shape {(T, T)}: it masks the decoder's input tgt_in, so it is (L, L) = {(L, L)}."
            )
        expect_shape(mask, (L, L), "tgt_mask (L, L)")
        given = answer[2] if isinstance(answer[2], Tensor) else torch.as_tensor(answer[2])
        given_float = given.is_floating_point()
        blocked = _as_blocked(given)
        expected = causal_mask(L)
        if torch.equal(blocked, expected):
            return (
                f"the decoder reads {L} tokens per sentence and predicts the next one at each, never seeing the future."
            )
        if torch.equal(blocked, ~expected):
            raise wrong(
                "the mask is inverted: for nn.Transformer True means BLOCKED, so True goes above the "
                "diagonal (the future), as helpers.causal_mask(L) does."
            )
        if torch.equal(blocked, torch.ones(L, L, dtype=torch.bool).triu(0)):
            raise wrong(
                "the diagonal is blocked too: position t may look at itself (the token it reads); block "
                "only the positions after it, triu(diagonal=1)."
            )
        if given_float and torch.equal(torch.as_tensor(given, dtype=torch.float64) != 0, expected):
            raise wrong(
                "a float mask is ADDED to the scores, so 1.0 above the diagonal does not block anything: use a "
                "bool mask (True = blocked), or float('-inf') above the diagonal and 0 elsewhere."
            )
        if not given_float and given.dtype != torch.bool and torch.equal(given != 0, expected):
            raise wrong(
                f"the right positions, but the mask's dtype is {given.dtype}: nn.Transformer takes a bool mask "
                "(True = blocked) or a float one that is ADDED to the scores, and an integer mask is neither. "
                "Give it dtype torch.bool (`.bool()`, or torch.ones(L, L, dtype=torch.bool).triu(1))."
            )
        if torch.equal(blocked, torch.ones(L, L, dtype=torch.bool).tril(-1)):
            raise wrong(
                "the mask blocks the past instead of the future: row t is the query, so block the columns "
                "j > t (above the diagonal)."
            )
        raise wrong(
            "tgt_mask should be True (blocked) exactly above the diagonal, with dtype torch.bool: "
            f"torch.ones(L, L).triu(1).bool() (yours has dtype {given.dtype})."
        )

    return _checked("teacher forcing: inputs, labels and causal mask", body)


# ---------------------------------------------------------------------------------------------
# Exercise 2: how often a head's strongest link is a gold alignment
# ---------------------------------------------------------------------------------------------
def reference_alignment_accuracy(word_attention: Tensor, gold: Sequence[tuple[int, int]]) -> float:
    """The reference answer: share of gold-aligned English words whose most-attended German word is a partner."""
    partners: dict[int, set[int]] = {}
    for i, j in gold:
        partners.setdefault(j, set()).add(i)
    predicted = word_attention.argmax(dim=1)  # (J,) the German word each English word looks at most
    hits = sum(int(predicted[j]) in ps for j, ps in partners.items())
    return hits / len(partners)


def _alignment_cases() -> list[tuple[Tensor, list[tuple[int, int]]]]:
    """Three (J, I) word-level attention maps with gold pairs (German i, English j), rows summing to 1.

    Together they tell every listed mistake apart (``tests/course`` holds it): English words with several
    gold partners that look hardest at the first listed partner in one case and at the last in another;
    words with no partner; J, I, the number of gold links and of aligned English words all different; row
    maxima below 0.5 and one above; and ties, only where every tie-break gives the same verdict (both tied
    German words partners, or neither).
    """
    first = torch.tensor(
        [
            [17.0, 14, 8, 16, 7, 6, 8, 7],  # English 0 -> German 0 (gold 0)        hit
            [17, 11, 10, 16, 20, 19, 17, 8],  # English 1 -> German 4 (gold 1)        miss
            [7, 10, 4, 19, 1, 2, 20, 11],  # English 2: no gold partner           not counted
            [3, 17, 6, 18, 15, 3, 14, 5],  # English 3 -> German 3 (gold 3, 4)     hit (the first partner listed)
            [18, 2, 5, 11, 12, 15, 7, 13],  # English 4 -> German 0 (gold 2)        miss
            [15, 3, 13, 12, 1, 10, 7, 19],  # English 5 -> German 7 (gold 6)        miss
            [12, 12, 1, 4, 15, 13, 10, 6],  # English 6: no gold partner           not counted
        ]
    )
    second = torch.tensor(
        [
            [2.0, 3, 30, 1, 2, 2],  # English 0 -> German 2 (gold 1, 2)     hit (the last partner listed)
            [1, 20, 2, 3, 1, 3],  # English 1 -> German 1 (gold 1)        hit, weight above 0.5
            [4, 3, 2, 9, 8, 5],  # English 2 -> German 3 (gold 4)        miss
            [6, 5, 4, 3, 7, 2],  # English 3 -> German 4 (gold 0, 4)     hit (the last partner listed)
        ]
    )
    ties = torch.tensor(
        [
            [5.0, 5, 1, 1, 1],  # English 0 -> German 0 or 1 (gold 0, 1)  hit whichever is taken
            [1, 2, 6, 6, 1],  # English 1 -> German 2 or 3 (gold 0)     miss whichever is taken
            [1, 1, 1, 2, 9],  # English 2 -> German 4 (gold 4)          hit
        ]
    )
    cases = [
        (first, [(0, 0), (1, 1), (4, 3), (3, 3), (2, 4), (6, 5)]),
        (second, [(1, 0), (2, 0), (1, 1), (0, 3), (4, 3), (4, 2)]),
        (ties, [(0, 0), (1, 0), (0, 1), (4, 2)]),
    ]
    return [(counts / counts.sum(dim=1, keepdim=True), gold) for counts, gold in cases]


def _partners(gold: Sequence[tuple[int, int]]) -> dict[int, set[int]]:
    partners: dict[int, set[int]] = {}
    for i, j in gold:
        partners.setdefault(j, set()).add(i)
    return partners


def _share(hits: int, words: int) -> float:
    return hits / words


def _wrong_axis(attention: Tensor, gold: list[tuple[int, int]]) -> float:
    column_argmax, partners = attention.argmax(dim=0), _partners(gold)  # (I,): the wrong axis
    return _share(
        sum(int(column_argmax[j]) in ps for j, ps in partners.items() if j < attention.size(1)), len(partners)
    )


def _pairs_swapped(attention: Tensor, gold: list[tuple[int, int]]) -> float:
    swapped = _partners([(j, i) for i, j in gold])
    predicted = attention.argmax(dim=1)
    return _share(sum(int(predicted[j]) in ps for j, ps in swapped.items() if j < attention.size(0)), len(swapped))


def _hits(attention: Tensor, gold: list[tuple[int, int]]) -> int:
    predicted = attention.argmax(dim=1)  # (J,) the right axis
    return sum(int(predicted[j]) in ps for j, ps in _partners(gold).items())


def _last_partner_only(attention: Tensor, gold: list[tuple[int, int]]) -> float:
    last = {j: i for i, j in gold}  # a plain dict: each English word keeps the last partner listed
    predicted = attention.argmax(dim=1)
    return _share(sum(int(predicted[j]) == i for j, i in last.items()), len(last))


def _smallest_partner_only(attention: Tensor, gold: list[tuple[int, int]]) -> float:
    predicted, partners = attention.argmax(dim=1), _partners(gold)
    return _share(sum(int(predicted[j]) == min(ps) for j, ps in partners.items()), len(partners))


def _threshold(attention: Tensor, gold: list[tuple[int, int]]) -> float:
    partners = _partners(gold)
    return _share(sum(any(float(attention[j, i]) > 0.5 for i in ps) for j, ps in partners.items()), len(partners))


def _argmin(attention: Tensor, gold: list[tuple[int, int]]) -> float:
    predicted, partners = attention.argmin(dim=1), _partners(gold)
    return _share(sum(int(predicted[j]) in ps for j, ps in partners.items()), len(partners))


def _per_link(attention: Tensor, gold: list[tuple[int, int]]) -> float:
    predicted = attention.argmax(dim=1)
    return _share(sum(int(predicted[j]) == i for i, j in gold), len(gold))


def _per_link_any_partner(attention: Tensor, gold: list[tuple[int, int]]) -> float:
    predicted, partners = attention.argmax(dim=1), _partners(gold)
    return _share(sum(int(predicted[j]) in partners[j] for _, j in gold), len(gold))


#: The usual wrong answers of exercise 2, each with its hint: a learner's numbers that equal a mistake's on
#: every case of ``_alignment_cases`` get that mistake's hint.
ALIGNMENT_MISTAKES: dict[str, Callable[[Tensor, list[tuple[int, int]]], float]] = {
    "the argmax runs over the wrong axis: for each English word (a ROW of the (J, I) map) take the German "
    "word (column) it attends to most, argmax(dim=1).": _wrong_axis,
    "the pairs are read the wrong way round: each gold pair is (German i, English j), as in the corpus's "
    "Pharaoh format 'i-j'.": _pairs_swapped,
    "every English word is counted, but a word without a gold partner cannot be right or wrong: divide by "
    "the number of English words that HAVE a gold partner.": lambda a, g: _hits(a, g) / a.size(0),
    "you divided by the number of German words: the score is per English word (each row asks 'did this "
    "word look at its partner?'), so divide by the number of English words that have a gold partner.": lambda a, g: (
        _hits(a, g) / a.size(1)
    ),
    "only the LAST gold partner of each English word is kept (a plain dict, partners[j] = i, overwrites the "
    "earlier ones): a word can have several ('outdoors' <- 'im Freien'), so keep a set of partners per word; "
    "it is a hit when the most-attended German word is ANY of them.": (_last_partner_only),
    "only one gold partner per English word is accepted: a word can have several ('outdoors' <- 'im Freien'); "
    "it is a hit when the most-attended German word is ANY of them.": _smallest_partner_only,
    "a hit is when the German word the English word attends to MOST (the argmax of its row) is a partner, "
    "not when a partner's weight passes 0.5: a head can look hardest at its partner with 0.3 of its weight.": (
        _threshold
    ),
    "that takes the German word each English word attends to LEAST (argmin): take the argmax of its row.": _argmin,
    "you counted gold LINKS, not English words: a word with two partners (outdoors <- im, Freien) then "
    "counts twice and can hit at most one of them. Group the links by English word first (j -> its set of "
    "German partners) and score each English word once.": _per_link,
    "you counted gold LINKS, not English words: a word with two partners then counts twice. Group the links "
    "by English word first (j -> its set of German partners) and score each English word once.": (
        _per_link_any_partner
    ),
    "that is the NUMBER of English words that look hardest at a partner: return the share, dividing by the "
    "number of English words that have a gold partner.": lambda a, g: float(_hits(a, g)),
}


@learner_check
def check_alignment_accuracy(alignment_accuracy: Callable[[Tensor, list[tuple[int, int]]], float]) -> Verdict:
    """Check ``alignment_accuracy(word_attention (J, I), gold [(i, j), ...]) -> float`` in [0, 1] on three cases."""

    def body() -> str:
        cases = _alignment_cases()
        answers = []
        for attention, gold in cases:
            try:
                answer = alignment_accuracy(attention.clone(), list(gold))
            except LearnerError as error:
                if isinstance(error.error, IndexError):
                    raise wrong(
                        f"your code raised IndexError: {error.error}. An index past the end usually means the pairs "
                        "are read the wrong way round: each gold pair is (German i, English j), and English word j "
                        "is ROW j of the (J, I) map."
                    ) from None
                raise
            answers.append(answer)
        return _reading_answer(lambda: judge(cases, answers), "return one number between 0 and 1")

    def judge(cases: list, answers: list) -> str:
        values = [_as_number(answer) for answer in answers]
        expected = [reference_alignment_accuracy(attention, gold) for attention, gold in cases]
        if _same(values, expected):
            return f"{values[0]:.2f}, {values[1]:.2f} and {values[2]:.2f} on the check's three cases, as expected."
        if _same(values, [100 * e for e in expected], 1e-4):
            raise wrong("that is a percentage: return a fraction between 0 and 1.")
        for hint, mistake in ALIGNMENT_MISTAKES.items():
            if _same(values, [mistake(attention, gold) for attention, gold in cases]):
                raise wrong(hint)
        off = next(n for n, (v, e) in enumerate(zip(values, expected, strict=True)) if abs(v - e) >= 1e-6)
        raise wrong(
            f"on case {off + 1} of 3 ({_CASE_NAMES[off]}) expected {expected[off]:.2f}, got {values[off]:.2f}; "
            "for each English word j with gold partners, test whether the argmax over its row is one of them, "
            "then divide the hits by the number of such words."
        )

    return _checked("alignment accuracy of a head", body)


_CASE_NAMES = (
    "a word with two partners, two words with none",
    "words with two partners, looking at the last one listed",
    "ties in a row",
)


def _same(values: Sequence[float], expected: Sequence[float], tolerance: float = 1e-6) -> bool:
    return all(abs(v - e) < tolerance for v, e in zip(values, expected, strict=True))


def _as_number(answer: Any) -> float:
    """The learner's answer as one float, or a hint saying what was returned instead."""
    if answer is None:
        raise wrong("your function returned None: did you forget the `return`?")
    if isinstance(answer, Tensor):
        if answer.numel() != 1:
            raise wrong(f"return one number, not a tensor of shape {tuple(answer.shape)}")
        answer = answer.item()
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        try:
            answer = float(answer)  # numpy scalars, Fractions, ...
        except (TypeError, ValueError, OverflowError):
            raise wrong(f"return one number (a float between 0 and 1), got {type(answer).__name__}") from None
    value = float(answer)
    if value != value:  # NaN
        raise wrong("your function returned NaN: did it divide 0 by 0?")
    return value


def _reading_answer(judge: Callable[[], str], expected: str) -> str:
    """Run ``judge`` on an answer the learner's code returned without raising: whatever that answer is, a
    failure to read it is reported as such, never as "your code raised" (the learner's code did not)."""
    try:
        return judge()
    except (TypeError, ValueError, RuntimeError, IndexError, AttributeError, OverflowError) as error:
        raise wrong(f"the check could not read your answer ({type(error).__name__}: {error}); {expected}.") from None


def _checked(exercise: str, body: Callable[[], str]) -> Verdict:
    """``run_check`` with the global random state forked: a check never shifts the notebook's random stream."""
    with torch.random.fork_rng():
        return run_check(exercise, body)
