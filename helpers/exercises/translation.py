"""Checks for lesson 06's exercises: the decoder's inputs, labels and mask; a head's alignment accuracy.

Shapes: N batch, T full target length (BOS ... EOS, padded), L = T - 1 decoder length,
J English words, I German words.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from helpers.attention import causal_mask
from helpers.exercises.feedback import Verdict, as_tensor, close, expect_shape, run_check, wrong

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


def check_teacher_forcing(teacher_forcing_batch: Callable[[Tensor], tuple[Tensor, Tensor, Tensor]]) -> Verdict:
    """Check ``teacher_forcing_batch(tgt) -> (tgt_in, tgt_out, tgt_mask)`` for a padded (N, T) target batch.

    Expected: ``tgt_in`` = all but the last position (N, L), ``tgt_out`` = all but the first (N, L),
    ``tgt_mask`` (L, L) True where attention is blocked (above the diagonal), as ``nn.Transformer``
    takes it; a float mask with -inf above the diagonal and 0 elsewhere is accepted too.
    """

    def body() -> str:
        tgt = _target_batch()
        answer = teacher_forcing_batch(tgt.clone())
        if not isinstance(answer, (tuple, list)) or len(answer) != 3:
            raise wrong("return three things: (tgt_in, tgt_out, tgt_mask)")
        tgt_in, tgt_out, mask = (as_tensor(a, name) for a, name in zip(answer, ("tgt_in", "tgt_out", "tgt_mask")))
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
        given = answer[2]
        blocked = _as_blocked(given if isinstance(given, Tensor) else torch.as_tensor(given))
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
        if torch.equal(blocked, torch.ones(L, L, dtype=torch.bool).tril(-1)):
            raise wrong(
                "the mask blocks the past instead of the future: row t is the query, so block the columns "
                "j > t (above the diagonal)."
            )
        raise wrong("tgt_mask should be True (blocked) exactly above the diagonal: torch.ones(L, L).triu(1).bool().")

    return run_check("teacher forcing: inputs, labels and causal mask", body)


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


def _alignment_case() -> tuple[Tensor, list[tuple[int, int]]]:
    """A (J, I) = (4, 5) word-level attention map and gold pairs (German i, English j).

    English word 3 ("outdoors") has two gold partners (im, Freien); English word 2 has none; the
    matrix is not square-symmetric, so reading (i, j) the wrong way round or taking argmax over the
    wrong axis gives a different number.
    """
    counts = torch.tensor(
        [
            [15.0, 5, 14, 8, 13],  # English 0 -> German 0 (gold 0)      hit
            [13, 13, 9, 19, 1],  # English 1 -> German 3 (gold 1)      miss
            [16, 9, 6, 6, 1],  # English 2 -> no gold partner        not counted
            [10, 10, 4, 14, 19],  # English 3 -> German 4 (gold 3, 4)  hit
        ]
    )
    attention = counts / counts.sum(dim=1, keepdim=True)  # rows sum to 1, like attention
    gold = [(0, 0), (1, 1), (3, 3), (4, 3)]
    return attention, gold


def _mistakes(attention: Tensor, gold: list[tuple[int, int]]) -> dict[str, float]:
    """The results of the usual wrong answers on the check's case, each with its hint."""
    partners: dict[int, set[int]] = {}
    for i, j in gold:
        partners.setdefault(j, set()).add(i)
    J = attention.size(0)
    column_argmax = attention.argmax(dim=0)  # (I,) the wrong axis
    swapped: dict[int, set[int]] = {}
    for i, j in gold:
        swapped.setdefault(i, set()).add(j)
    first_partner = {j: min(ps) for j, ps in partners.items()}
    predicted = attention.argmax(dim=1)
    return {
        "the argmax runs over the wrong axis: for each English word (a ROW of the (J, I) map) take the German "
        "word (column) it attends to most, argmax(dim=1).": sum(
            int(column_argmax[j]) in ps for j, ps in partners.items() if j < len(column_argmax)
        )
        / len(partners),
        "the pairs are read the wrong way round: each gold pair is (German i, English j), as in the corpus's "
        "Pharaoh format 'i-j'.": sum(int(predicted[j]) in ps for j, ps in swapped.items() if j < J) / len(swapped),
        "every English word is counted, but a word without a gold partner cannot be right or wrong: divide by "
        "the number of English words that HAVE a gold partner.": sum(
            int(predicted[j]) in ps for j, ps in partners.items()
        )
        / J,
        "only one gold partner per English word is accepted: a word can have several ('outdoors' <- 'im Freien'); "
        "it is a hit when the most-attended German word is ANY of them.": sum(
            int(predicted[j]) == first_partner[j] for j in partners
        )
        / len(partners),
    }


def check_alignment_accuracy(alignment_accuracy: Callable[[Tensor, list[tuple[int, int]]], float]) -> Verdict:
    """Check ``alignment_accuracy(word_attention (J, I), gold [(i, j), ...]) -> float`` in [0, 1]."""

    def body() -> str:
        attention, gold = _alignment_case()
        answer = alignment_accuracy(attention.clone(), list(gold))
        try:
            value = float(answer)
        except (TypeError, ValueError):
            raise wrong(f"return one number (a float between 0 and 1), got {type(answer).__name__}") from None
        expected = reference_alignment_accuracy(attention, gold)
        if abs(value - expected) < 1e-6:
            return f"{value:.2f} of the aligned English words look hardest at a gold partner."
        if abs(value - 100 * expected) < 1e-4:
            raise wrong("that is a percentage: return a fraction between 0 and 1.")
        for hint, result in _mistakes(attention, gold).items():
            if abs(value - result) < 1e-6:
                raise wrong(hint)
        raise wrong(
            f"expected {expected:.2f} on the check's example; for each English word j with gold partners, "
            "test whether argmax over its row is one of them, then divide the hits by the number of such words."
        )

    return run_check("alignment accuracy of a head", body)
