"""Lesson 06's exercise checks: a right answer passes, each usual mistake gets its own hint."""

from __future__ import annotations

import torch

from helpers.attention import causal_mask
from helpers.exercises.translation import check_alignment_accuracy, check_teacher_forcing, reference_alignment_accuracy


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
