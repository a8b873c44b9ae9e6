"""Lesson 06's exercise checks: a right answer passes, each usual mistake gets its own hint."""

from __future__ import annotations

import torch
from conftest import learners_copy

from course.exercises.lesson06 import check_alignment_accuracy, check_teacher_forcing, reference_alignment_accuracy
from helpers.attention import causal_mask

# The references as a learner's own code: the checks refuse an answer that calls the course's reference_*
# itself, and these tests use them as the right computation (and build mistakes from them).
(reference_alignment_accuracy,) = (learners_copy(reference_alignment_accuracy),)


# --- exercise 1: teacher forcing --------------------------------------------------------------
def right_teacher_forcing(tgt):
    return tgt[:, :-1], tgt[:, 1:], causal_mask(tgt.size(1) - 1)


def test_teacher_forcing_passes_bool_and_float_masks():
    assert check_teacher_forcing(right_teacher_forcing).passed

    def float_mask(tgt):
        L = tgt.size(1) - 1
        return tgt[:, :-1], tgt[:, 1:], torch.zeros(L, L).masked_fill(causal_mask(L), float("-inf"))

    assert check_teacher_forcing(float_mask).passed


def hint_for(fn) -> str:
    verdict = check_teacher_forcing(fn)
    assert verdict.status == "wrong"
    return verdict.message


def test_teacher_forcing_mistakes_get_specific_hints():
    assert "whole target" in hint_for(lambda t: (t, t[:, 1:], causal_mask(t.size(1) - 1)))
    assert "swapped" in hint_for(lambda t: (t[:, 1:], t[:, :-1], causal_mask(t.size(1) - 1)))
    assert "inverted" in hint_for(lambda t: (t[:, :-1], t[:, 1:], ~causal_mask(t.size(1) - 1)))
    assert "diagonal is blocked" in hint_for(
        lambda t: (t[:, :-1], t[:, 1:], torch.ones(t.size(1) - 1, t.size(1) - 1, dtype=torch.bool).triu(0))
    )
    assert "past instead of the future" in hint_for(lambda t: (t[:, :-1], t[:, 1:], causal_mask(t.size(1) - 1).T))
    assert "(L, L)" in hint_for(lambda t: (t[:, :-1], t[:, 1:], causal_mask(t.size(1))))
    assert "three things" in hint_for(lambda t: (t[:, :-1], t[:, 1:]))
    assert "forget the `return`" in hint_for(lambda t: None)


def test_teacher_forcing_not_attempted():
    def student(tgt):
        raise NotImplementedError()

    assert check_teacher_forcing(student).status == "not attempted"


# --- exercise 2: alignment accuracy ----------------------------------------------------------
def hint2(fn) -> str:
    verdict = check_alignment_accuracy(fn)
    assert verdict.status == "wrong"
    return verdict.message


def partners_of(gold):
    partners = {}
    for i, j in gold:
        partners.setdefault(j, set()).add(i)
    return partners


def test_alignment_accuracy_passes_the_reference_and_another_correct_answer():
    assert check_alignment_accuracy(reference_alignment_accuracy).passed

    def loop_version(attention, gold):
        hits = total = 0
        for j in range(attention.shape[0]):
            partners = [i for i, jj in gold if jj == j]
            if partners:
                total += 1
                hits += int(torch.argmax(attention[j])) in partners
        return hits / total

    assert check_alignment_accuracy(loop_version).passed


def test_alignment_accuracy_mistakes_get_specific_hints():
    def wrong_axis(attention, gold):
        predicted = attention.argmax(dim=0)
        return sum(int(predicted[j]) in ps for j, ps in partners_of(gold).items()) / len(partners_of(gold))

    def swapped(attention, gold):
        return sum(
            int(attention.argmax(1)[i]) in ps
            for i, ps in partners_of([(j, i) for i, j in gold]).items()
            if i < attention.size(0)
        ) / len(partners_of([(j, i) for i, j in gold]))

    def all_words(attention, gold):
        predicted = attention.argmax(dim=1)
        return sum(int(predicted[j]) in ps for j, ps in partners_of(gold).items()) / attention.size(0)

    def first_partner(attention, gold):
        predicted = attention.argmax(dim=1)
        partners = partners_of(gold)
        return sum(int(predicted[j]) == min(ps) for j, ps in partners.items()) / len(partners)

    assert "wrong axis" in hint2(wrong_axis)
    assert "wrong way round" in hint2(swapped)
    assert "HAVE a gold partner" in hint2(all_words)
    assert "several" in hint2(first_partner)
    assert "percentage" in hint2(lambda a, g: 100 * reference_alignment_accuracy(a, g))
    assert "one number" in hint2(lambda a, g: "high")


def test_alignment_accuracy_not_attempted():
    def student(attention, gold):
        raise NotImplementedError()

    assert check_alignment_accuracy(student).status == "not attempted"


def test_alignment_accuracy_counted_per_gold_link_is_told_so():
    """The natural mistake: looping over the gold links instead of over the English words."""

    def per_link(attention, gold):  # a word with two partners counts twice, and can hit only one of them
        predicted = attention.argmax(dim=1)
        return sum(int(predicted[j]) == i for i, j in gold) / len(gold)

    def per_link_any_partner(attention, gold):  # a word with two partners still counts twice
        predicted, partners = attention.argmax(dim=1), partners_of(gold)
        return sum(int(predicted[j]) in partners[j] for _, j in gold) / len(gold)

    for mistake in (per_link, per_link_any_partner):
        hint = hint2(mistake)
        assert "LINKS, not English words" in hint, hint
        assert "every English word is counted" not in hint


def test_alignment_accuracy_more_mistakes_get_their_own_hints():
    def per_german_word(attention, gold):
        predicted = attention.argmax(dim=1)
        return sum(int(predicted[j]) in ps for j, ps in partners_of(gold).items()) / attention.size(1)

    def hit_count(attention, gold):
        predicted = attention.argmax(dim=1)
        return sum(int(predicted[j]) in ps for j, ps in partners_of(gold).items())

    def swapped_unguarded(attention, gold):  # (j, i) read as (i, j): an English index past the last row
        predicted = attention.argmax(dim=1)
        return sum(int(predicted[i]) == j for i, j in gold) / len(gold)

    def no_return(attention, gold):
        partners_of(gold)

    assert "number of German words" in hint2(per_german_word)
    assert "NUMBER of English words" in hint2(hit_count)
    assert "wrong way round" in hint2(swapped_unguarded)
    assert "forget the `return`" in hint2(no_return)
    assert "NaN" in hint2(lambda a, g: float("nan"))
    assert "one number, not a tensor" in hint2(lambda a, g: a.argmax(dim=1).float())
    # a one-element tensor or a numpy float is a number
    assert check_alignment_accuracy(lambda a, g: torch.tensor(reference_alignment_accuracy(a, g))).passed


def test_every_hint_of_the_alignment_cases_is_reachable():
    """Over the check's cases each listed mistake gives its own numbers, distinct from the right answer's."""
    from course.exercises.lesson06 import ALIGNMENT_MISTAKES, _alignment_cases

    cases = _alignment_cases()
    right = [reference_alignment_accuracy(attention, gold) for attention, gold in cases]
    rows = [right, [100 * r for r in right]]
    rows += [[mistake(attention, gold) for attention, gold in cases] for mistake in ALIGNMENT_MISTAKES.values()]
    keys = [tuple(round(v, 6) for v in row) for row in rows]
    assert len(set(keys)) == len(keys), keys
    assert len(ALIGNMENT_MISTAKES) >= 5
    for attention, gold in cases:  # a tie in a row only where every tie-break gives the same verdict
        partners = {}
        for i, j in gold:
            partners.setdefault(j, set()).add(i)
        for j, row in enumerate(attention):
            tied = {int(i) for i in (row == row.max()).nonzero()}
            assert len(tied) == 1 or tied <= partners.get(j, set()) or not tied & partners.get(j, set()), (j, tied)


def test_alignment_accuracy_with_a_plain_dict_is_not_a_false_pass():
    def last_partner(attention, gold):  # {j: i} keeps only the last gold partner of each English word
        partners = {j: i for i, j in gold}
        predicted = attention.argmax(dim=1)
        return sum(int(predicted[j]) == i for j, i in partners.items()) / len(partners)

    hint = hint2(last_partner)
    assert "LAST gold partner" in hint and "set" in hint


def test_alignment_accuracy_threshold_and_argmin_get_their_own_hints():
    def threshold(attention, gold):  # weight > 0.5 instead of the argmax
        partners = partners_of(gold)
        return sum(bool((attention[j, sorted(ps)] > 0.5).any()) for j, ps in partners.items()) / len(partners)

    def argmin(attention, gold):
        predicted, partners = attention.argmin(dim=1), partners_of(gold)
        return sum(int(predicted[j]) in ps for j, ps in partners.items()) / len(partners)

    hint = hint2(threshold)
    assert "passes 0.5" in hint and "wrong axis" not in hint
    assert "LEAST" in hint2(argmin)


def test_alignment_accuracy_right_on_one_case_only_names_the_case():
    from course.exercises.lesson06 import _alignment_cases

    first = _alignment_cases()[0][0]

    def only_first_case(attention, gold):
        if attention.shape == first.shape:
            return reference_alignment_accuracy(attention, gold)
        return 0.123

    assert "on case 2 of 3" in hint2(only_first_case)


def test_teacher_forcing_integer_mask_is_told_its_dtype():
    for dtype in (torch.int64, torch.int32, torch.uint8):

        def integer_mask(tgt, dtype=dtype):
            L = tgt.size(1) - 1
            return tgt[:, :-1], tgt[:, 1:], torch.ones(L, L, dtype=dtype).triu(1)

        hint = hint_for(integer_mask)
        assert f"dtype is {dtype}" in hint and "torch.bool" in hint, hint


def test_teacher_forcing_float_mask_of_ones_is_told_it_is_added():
    def ones_mask(tgt):
        L = tgt.size(1) - 1
        return tgt[:, :-1], tgt[:, 1:], torch.ones(L, L).triu(1)

    assert "ADDED to the scores" in hint_for(ones_mask)
    assert check_teacher_forcing(lambda t: (t[:, :-1], t[:, 1:], causal_mask(t.size(1) - 1).tolist())).passed


STRANGE_ANSWERS = [
    None,
    "tgt",
    3,
    2.5,
    [],
    (),
    {"a": 1},
    (None, None, None),
    ("a", "b", "c"),
    (torch.zeros(0), torch.zeros(0), torch.zeros(0)),
    (torch.zeros(2, 5), torch.zeros(2, 5), torch.zeros(3)),
    (torch.zeros(2, 5), torch.zeros(2, 5), torch.full((5, 5), float("nan"))),
    (torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, 5), torch.zeros(5, 5, dtype=torch.int64)),
    (torch.zeros(2, 5), torch.zeros(2, 5), "mask"),
    (torch.zeros(2, 5), torch.zeros(2, 5), [[True] * 5] * 5),
    (torch.zeros(2, 5), torch.zeros(2, 5), torch.zeros(5, 5, dtype=torch.complex64)),
    torch.zeros(3, 2, 5),
    [torch.zeros(2, 5)] * 4,
    float("nan"),
    torch.tensor(float("nan")),
    torch.zeros(3),
    torch.zeros(()),
    True,
    -1,
    10**400,
    object(),
]


def test_checks_survive_any_answer_and_never_blame_code_that_did_not_raise():
    for answer in STRANGE_ANSWERS:
        for check in (check_teacher_forcing, check_alignment_accuracy):
            verdict = check(lambda *args, answer=answer: answer)
            assert verdict.status == "wrong", (answer, verdict)
            assert not verdict.message.startswith("your code raised"), (answer, verdict.message)


def test_learners_exceptions_are_reported_not_raised():
    def crashes(*args):
        raise KeyError("oops")

    for check in (check_teacher_forcing, check_alignment_accuracy):
        verdict = check(crashes)
        assert verdict.status == "wrong" and "KeyError" in verdict.message


def test_checks_leave_the_notebooks_random_stream_alone():
    def draws(*args):
        torch.rand(1000)  # a learner's answer that uses the random generator
        raise NotImplementedError()

    for check in (check_teacher_forcing, check_alignment_accuracy):
        torch.manual_seed(123)
        check(draws)
        after_check = torch.rand(3)
        torch.manual_seed(123)
        assert torch.equal(after_check, torch.rand(3))


def test_a_check_prints_its_verdict_once(capsys):
    verdict = check_alignment_accuracy(reference_alignment_accuracy)
    printed = capsys.readouterr().out
    assert printed.count(str(verdict)) <= 1  # printed once (or, once a verdict displays itself, not at all)
