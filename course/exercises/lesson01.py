"""Checks for lesson 01's exercises: the embedding look-up and sinusoidal positional encoding.

Each check calls the learner's function on small inputs, compares it with ``helpers.embeddings``,
and when the answer is wrong, compares it with the results of the usual mistakes to name the one
that was made.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from course.exercises.feedback import (
    LearnerError,
    Verdict,
    as_tensor,
    call_learner,
    close,
    diagnose,
    diagnose_cases,
    expect_shape,
    learner_check,
    run_check,
    wrong,
)
from course.exercises.shortcuts import FunctionRecorder, refuse_shortcuts
from helpers.embeddings import sinusoidal_positional_encoding

__all__ = ["check_one_hot_lookup", "check_positional_encoding"]


# ---------------------------------------------------------------------------------------------
# Exercise 1: an embedding look-up as one-hot vectors times the table
# ---------------------------------------------------------------------------------------------
@learner_check
def check_one_hot_lookup(one_hot_lookup: Callable[[Tensor, Tensor], Tensor]) -> Verdict:
    """Check ``one_hot_lookup(ids, weight)``: ids (N, L) int64, weight (V, E) -> (N, L, E)."""

    def body() -> str:
        generator = torch.Generator().manual_seed(1)
        # A square table (V = E) first, so that a transposed table still fits and gives wrong numbers.
        for vocab_size, dim in ((5, 5), (9, 4)):
            weight = torch.randn(vocab_size, dim, generator=generator)
            ids = torch.tensor([[0, 3, 1], [4, 4, 2]])  # (N, L) = (2, 3); id V-1 absent on purpose for V=9
            expected = weight[ids]  # (N, L, E): what nn.Embedding returns
            with FunctionRecorder(watched=weight) as recorder:
                try:
                    result = call_learner(one_hot_lookup, ids.clone(), weight.clone())
                except LearnerError as problem:
                    if isinstance(problem.error, RuntimeError):
                        raise wrong(_lookup_error_hint(str(problem.error), vocab_size, dim)) from None
                    raise
            answer = as_tensor(result, "the result")
            expect_shape(answer, expected.shape, "the embeddings", "(N, L, E)")
            refuse_shortcuts(
                recorder,
                "one-hot look-up",
                "build the one-hot vectors with `F.one_hot(ids, num_classes=V)` and multiply them by the table: that "
                "product is what an embedding layer computes.",
                watched_only=True,
            )
            if close(answer, expected):
                continue
            one_hot = torch.nn.functional.one_hot(ids, vocab_size).double()  # (N, L, V)
            raise diagnose(
                answer,
                {
                    "you multiplied by the transposed table: the one-hot rows (N, L, V) pick out rows of "
                    "`weight` (V, E) as it is, so the table needs no transpose.": one_hot @ weight.double().T,
                    "you returned the one-hot vectors themselves: multiply them by the table to pick out "
                    "its rows.": one_hot,
                },
                "the shape is right but the numbers are not the rows of `weight` picked by `ids`: "
                "build `F.one_hot(ids, num_classes=V)`, turn it into floats, then multiply by `weight`.",
            )
        return "one-hot vectors times the table give exactly the rows that nn.Embedding looks up."

    return run_check("one-hot look-up", body)


def _lookup_error_hint(message: str, vocab_size: int, dim: int) -> str:
    if "Long" in message or "dtype" in message or "scalar type" in message:
        return (
            "`F.one_hot` returns integers (int64), and a matrix product needs floats: convert with "
            "`.to(weight.dtype)` or `.float()` before multiplying."
        )
    if "shapes cannot be multiplied" in message or "size mismatch" in message or "must match" in message:
        return (
            f"the shapes do not fit ({message}). The one-hot vectors need one entry per vocabulary word: "
            f"give `F.one_hot` the vocabulary size as num_classes, the table's first dimension (here V={vocab_size}), "
            f"so that (..., V) @ (V, E={dim}) can multiply. Without num_classes, one_hot only counts up to the "
            "largest id it sees."
        )
    if "Class values must be smaller than num_classes" in message:
        return (
            f"`F.one_hot` was given too few classes ({message}). The one-hot vectors need one entry per "
            f"vocabulary word: num_classes is the table's number of rows (V={vocab_size}), not of columns "
            f"(E={dim})."
        )
    if "Expected size for first two dimensions of batch2" in message or "batch1" in message:
        return (
            f"the shapes do not fit ({message}). The one-hot vectors come first and the table second: "
            "(N, L, V) @ (V, E) = (N, L, E)."
        )
    return f"your code raised RuntimeError: {message}"


# ---------------------------------------------------------------------------------------------
# Exercise 2: sinusoidal positional encoding
# ---------------------------------------------------------------------------------------------
@learner_check
def check_positional_encoding(positional_encoding: Callable[[int, int], Tensor]) -> Verdict:
    """Check ``positional_encoding(num_positions, dim)`` -> (P, E) against the paper's formula."""

    def body() -> str:
        answers: list[Tensor]  # the learner's result on each case
        expected: list[Tensor]  # the reference's
        answers, expected, tables = [], [], []
        for num_positions, dim in ((12, 8), (50, 16)):
            try:
                with FunctionRecorder() as recorder:
                    answer = as_tensor(call_learner(positional_encoding, num_positions, dim), "the encoding")
                refuse_shortcuts(
                    recorder, "sinusoidal positional encoding", "`torch.arange`, `torch.sin`, `torch.cos`."
                )
                expect_shape(answer, (num_positions, dim), "the encoding", "(P, E)")
            except Exception:
                if any(not close(a, e) for a, e in zip(answers, expected, strict=True)):
                    break  # the first case already shows the mistake: name it from there
                raise
            answers.append(answer)
            expected.append(sinusoidal_positional_encoding(num_positions, dim, dtype=torch.float64))
            tables.append(_encoding_mistakes(num_positions, dim))
        wrong_cases = [i for i, (a, e) in enumerate(zip(answers, expected, strict=True)) if not close(a, e)]
        if not wrong_cases:
            return "every position gets the paper's sines and cosines (base 10000, interleaved sin/cos pairs)."
        first = wrong_cases[0]
        raise diagnose_cases(answers, tables, _encoding_fallback(answers[first], expected[first]))

    return run_check("sinusoidal positional encoding", body)


def _encoding_mistakes(num_positions: int, dim: int) -> dict[str, Tensor]:
    """The results of the usual mistakes, each keyed by the hint that names it."""
    position = torch.arange(num_positions, dtype=torch.float64)[:, None]  # (P, 1)
    pair = torch.arange(0, dim, 2, dtype=torch.float64)  # 2k
    feature = torch.arange(dim, dtype=torch.float64)  # i

    def interleave(first: Tensor, second: Tensor) -> Tensor:
        table = torch.empty(num_positions, dim, dtype=torch.float64)
        table[:, 0::2], table[:, 1::2] = first, second
        return table

    angles = position * 10000.0 ** (-pair / dim)  # (P, E/2)
    growing = position * 10000.0 ** (pair / dim)
    mistakes = {
        "sine and cosine are swapped: even features (0, 2, 4, ...) hold the sine, odd ones the cosine. "
        "At position 0 the row should read 0, 1, 0, 1, ...": interleave(torch.cos(angles), torch.sin(angles)),
        "the sines and cosines are in two halves [sin ... sin, cos ... cos]. Some libraries do that, but "
        "this lesson interleaves them: feature 2k holds sin, feature 2k + 1 holds cos of the same angle.": torch.cat(
            [torch.sin(angles), torch.cos(angles)], dim=1
        ),
        "the frequencies grow instead of shrink: the exponent needs a minus sign, w_k = 10000 ** (-2k / E) "
        "(or divide the position by 10000 ** (2k / E)).": interleave(torch.sin(growing), torch.cos(growing)),
        "the exponent uses the feature index i instead of the pair index: both features of pair k share "
        "one frequency, w_k = 10000 ** (-2k / E) with 2k = 0, 2, 4, ... (the same for features 2k and "
        "2k + 1).": interleave(
            torch.sin(position * 10000.0 ** (-feature[0::2] / dim)),
            torch.cos(position * 10000.0 ** (-feature[1::2] / dim)),
        ),
        "the exponent forgot to divide by E: w_k = 10000 ** (-2k / E), not 10000 ** (-2k).": interleave(
            torch.sin(position * 10000.0 ** (-pair)), torch.cos(position * 10000.0 ** (-pair))
        ),
    }
    if growing.max() > 2e4:  # sines of such angles differ in float32: not judged on this case
        del mistakes[next(hint for hint in mistakes if hint.startswith("the frequencies grow"))]
    # k / E in the exponent (k = 0, 1, 2, ... counting pairs) gives 10000 ** (-k / E) = 100 ** (-2k / E):
    # exactly base 100. Far more learners write k / E than change the base, so this hint comes first.
    half = 10000.0 ** (-(pair / 2) / dim)
    mistakes[
        "the exponent is -k / E with k = 0, 1, 2, ... counting the pairs: it must be -2k / E, where 2k = 0, 2, 4, "
        "... is the index of the pair's first feature (`torch.arange(0, E, 2)`, or twice `torch.arange(E // 2)`). "
        "(Your frequencies equal those of base 100 with -2k / E, which is the same mistake written differently.)"
    ] = interleave(torch.sin(position * half), torch.cos(position * half))
    mistakes["the exponent divides by E / 2 instead of E: w_k = 10000 ** (-2k / E), not 10000 ** (-2k / (E / 2))."] = (
        interleave(
            torch.sin(position * 10000.0 ** (-2 * pair / dim)), torch.cos(position * 10000.0 ** (-2 * pair / dim))
        )
    )
    mistakes[
        "the positions start at 1: the first row is position 0, whose encoding is 0, 1, 0, 1, ... "
        "(`torch.arange(P)` counts 0, 1, ..., P - 1)."
    ] = interleave(
        torch.sin((position + 1) * 10000.0 ** (-pair / dim)), torch.cos((position + 1) * 10000.0 ** (-pair / dim))
    )
    mistakes["the odd features hold a sine too: feature 2k + 1 is the COSINE of the pair's angle."] = interleave(
        torch.sin(angles), torch.sin(angles)
    )
    mistakes["the even features hold a cosine too: feature 2k is the SINE of the pair's angle."] = interleave(
        torch.cos(angles), torch.cos(angles)
    )
    mistakes[
        "every pair turns at the same frequency 1: the exponent was rounded to a whole number (integer "
        "division `//`, or integer tensors). Divide as floats: `torch.arange(0, E, 2, dtype=torch.float32) / E`."
    ] = interleave(torch.sin(position.expand(-1, dim // 2)), torch.cos(position.expand(-1, dim // 2)))
    # -2k // E floors every exponent but the first to -1: frequencies 1, 1/10000, 1/10000, ...
    floored = 10000.0 ** torch.where(pair == 0, 0.0, -1.0)
    mistakes[
        "the exponent was rounded down to a whole number (integer division `//`): all pairs but the first turn "
        "at 1/10000. Divide as floats: `-torch.arange(0, E, 2, dtype=torch.float32) / E`."
    ] = interleave(torch.sin(position * floored), torch.cos(position * floored))
    for base in (1000.0, 100000.0, 10.0):
        freq = base ** (-pair / dim)
        mistakes[
            f"the frequency base is wrong: your encoding matches base {base:g}, the paper (and this lesson) uses 10000."
        ] = interleave(torch.sin(position * freq), torch.cos(position * freq))
    return mistakes


def _encoding_fallback(answer: Tensor, expected: Tensor) -> str:
    wrong_rows = (~torch.isclose(answer, expected, atol=1e-4, rtol=1e-4)).any(dim=1).nonzero().flatten()
    wrong_cols = (~torch.isclose(answer, expected, atol=1e-4, rtol=1e-4)).any(dim=0).nonzero().flatten()
    return (
        f"the numbers differ from the formula at positions {wrong_rows[:5].tolist()}"
        f"{' ...' if len(wrong_rows) > 5 else ''} and features {wrong_cols[:5].tolist()}"
        f"{' ...' if len(wrong_cols) > 5 else ''}. Check PE[pos, 2k] = sin(pos * 10000 ** (-2k / E)) and "
        "PE[pos, 2k + 1] = cos(pos * 10000 ** (-2k / E))."
    )
