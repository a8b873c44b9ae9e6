"""Checks for lesson 10's exercises: the induction score, a repeated batch without the positional shortcut,
and a hook that patches one head.

Shapes: N sequences, T tokens, h heads, d head size, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from course.exercises.feedback import (
    Verdict,
    as_tensor,
    call_learner,
    close,
    diagnose_cases,
    expect_shape,
    learner_check,
    run_check,
    wrong,
)

__all__ = [
    "check_induction_score",
    "check_patch_hook",
    "check_repeated_batch",
    "reference_induction_score",
    "reference_patch_hook",
    "reference_repeated_batch",
]


# ---------------------------------------------------------------------------------------------
# Exercise 1: the induction score
# ---------------------------------------------------------------------------------------------
def reference_induction_score(weights: Tensor, ids: Tensor) -> Tensor:
    """(N, h, T, T), (N, T) -> (h,): the weight on keys j < i with ids[j - 1] == ids[i], summed per query,
    averaged over the queries that have such a key (as ``helpers.analysis.circuits.induction_score``, written out:
    a learner's copy of it must not call the graduated helper, which the check refuses)."""
    targets = _targets(ids, shift=1).to(weights.dtype)  # [n, i, j] = ids[j - 1] == ids[i], j < i
    has_target = targets.sum(-1) > 0  # (N, T)
    per_query = (weights * targets[:, None]).sum(-1)  # (N, h, T)
    return (per_query * has_target[:, None]).sum(dim=(0, 2)) / has_target.sum()


def _score_cases() -> list[tuple[Tensor, Tensor]]:
    """Causal random weights (N, 3, T, T) and ids, in two cases: tokens that recur (some twice earlier, some
    never); and runs of one token (ids[i - 1] == ids[i]) under weights heavy on the diagonal, where counting the
    key j = i itself, or the keys after i, changes the score by far more than the tolerance."""
    generator = torch.Generator().manual_seed(10)
    recurring = torch.tensor([[5, 1, 2, 5, 1, 2, 5, 1], [3, 4, 3, 6, 4, 9, 3, 6]])
    runs = torch.tensor([[7, 7, 2, 7, 7, 7, 4, 2], [1, 2, 2, 3, 3, 1, 8, 3]])
    cases = []
    for ids, diagonal in ((recurring, 0.0), (runs, 3.0)):
        T = ids.size(1)
        future = torch.ones(T, T, dtype=torch.bool).triu(1)
        scores = 2 * torch.randn(ids.size(0), 3, T, T, generator=generator) + diagonal * torch.eye(T)
        cases.append((torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1), ids))
    return cases


def _targets(ids: Tensor, shift: int, keys: str = "earlier") -> Tensor:
    """[n, i, j] = ids[j - shift] == ids[i] (0 <= j - shift < T), for keys j < i ("earlier"), j <= i
    ("up to i") or any j ("all")."""
    N, T = ids.shape
    match = torch.zeros(N, T, T, dtype=torch.bool)
    for j in range(T):
        if 0 <= j - shift < T:
            match[:, :, j] = ids == ids[:, j - shift, None]
    allowed = {"earlier": -1, "up to i": 0, "all": T}[keys]
    return match & torch.ones(T, T, dtype=torch.bool).tril(allowed)


def _induction_mistakes(weights: Tensor, ids: Tensor) -> dict[str, Callable[[], Tensor]]:
    def average(targets: Tensor, over_all_queries: bool = False, per_sequence: bool = False) -> Tensor:
        t = targets.to(weights.dtype)
        has = t.sum(-1) > 0
        per_query = (weights * t[:, None]).sum(-1)  # (N, h, T)
        if over_all_queries:
            return per_query.mean(dim=(0, 2))
        if per_sequence:
            return ((per_query * has[:, None]).sum(-1) / has.sum(-1)[:, None]).mean(0)
        return (per_query * has[:, None]).sum(dim=(0, 2)) / has.sum()

    right = _targets(ids, 1)
    return {
        "that is the duplicate-token score: you took the keys j with ids[j] == ids[i], the earlier occurrence "
        "itself. The induction head looks one further, at the token AFTER it: ids[j - 1] == ids[i].": lambda: average(
            _targets(ids, 0)
        ),
        "off by one the other way: you took keys j with ids[j + 1] == ids[i], the token BEFORE the earlier "
        "occurrence. The target is the token after it: ids[j - 1] == ids[i].": lambda: average(_targets(ids, -1)),
        "the key j = i counts too (j <= i): where a token repeats the one just before it, ids[i - 1] == ids[i], "
        "the query's own position becomes a target, and a query can find a 'target' in itself. Only keys before "
        "the query count: j < i.": lambda: average(_targets(ids, 1, "up to i")),
        "the keys are not limited to j < i: a query whose token comes again LATER counts as having a target, "
        "though under the causal mask it puts no weight there, so it adds a 0 to the average. Keep only the keys "
        "before the query, j < i.": lambda: average(_targets(ids, 1, "all")),
        "queries that have no earlier occurrence are counted as scoring 0: average only over the queries that "
        "have at least one target key.": lambda: average(right, over_all_queries=True),
        "each sequence is averaged first, so a sequence with few repeats weighs as much as one with many: add "
        "up all queries with a target over the batch, then divide once by their number.": lambda: average(
            right, per_sequence=True
        ),
    }


@learner_check
def check_induction_score(score: Callable[[Tensor, Tensor], Tensor]) -> Verdict:
    """Check ``score(weights (N, h, T, T), ids (N, T)) -> (h,)``."""

    def body() -> str:
        answers = []
        for weights, ids in _score_cases():
            h = weights.size(1)
            answer = as_tensor(call_learner(score, weights.clone(), ids.clone()), "induction_score(...)")
            if answer.dim() == 0:
                raise wrong(f"one score per head, (h,) = ({h},): keep the heads apart (do not average over dim 1).")
            if tuple(answer.shape) == (weights.size(0), h):
                raise wrong(f"one score per head, (h,) = ({h},): average over the sequences too.")
            expect_shape(answer, (h,), "the scores (h,)")
            answers.append(answer)
        cases = _score_cases()
        expected = [reference_induction_score(weights, ids) for weights, ids in cases]
        if all(close(answer, right, atol=1e-6) for answer, right in zip(answers, expected, strict=True)):
            return f"per-head induction scores {[round(x, 2) for x in expected[0].tolist()]} on the check's batch."
        mistakes = [_induction_mistakes(weights, ids) for weights, ids in cases]
        rounded = [round(x, 3) for x in expected[0].tolist()]
        raise diagnose_cases(
            answers,
            mistakes,
            "for each query i, add the weights on the earlier keys whose previous token is the query's token; "
            f"average those sums over the queries that have such a key, one number per head. Expected {rounded} "
            "on the check's first batch.",
        )

    return run_check("induction score of each head", body)


# ---------------------------------------------------------------------------------------------
# Exercise 2: a repeated batch without the positional shortcut
# ---------------------------------------------------------------------------------------------
def reference_repeated_batch(
    batch_size: int, seq_len: int, vocab_size: int, low: int, high: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """(ids (N, T), predictable (N, T)): one segment of random length in [low, high] repeated right after
    itself at a random place; predictable marks the first ``length - 1`` positions of the second copy."""
    # ``helpers.analysis.circuits.repeated_batch``'s draws, written out: a learner's copy of this answer must not
    # call the graduated helper, which the check refuses.
    ids = torch.randint(vocab_size, (batch_size, seq_len), generator=generator)
    length = torch.randint(low, high + 1, (batch_size,), generator=generator)
    start = (torch.rand(batch_size, generator=generator) * (seq_len - 2 * length + 1)).long()  # in [0, T - 2L]
    positions = torch.arange(seq_len)
    offset = positions[None, :] - (start + length)[:, None]  # (N, T): position within the second copy
    second = (offset >= 0) & (offset < length[:, None])
    source = (positions[None, :] - length[:, None]).clamp(min=0)
    ids = torch.where(second, ids.gather(1, source), ids)
    return ids, second & (offset < length[:, None] - 1)


def _row_verdict(ids: Tensor, predictable: Tensor, n: int) -> tuple[int, int]:
    """(start of the first copy, segment length) of row ``n``, or a hint naming what is wrong with it."""
    marked = predictable[n].nonzero().flatten()
    if len(marked) == 0:
        raise wrong(f"row {n} has no predictable position: every row needs one repeated segment.")
    a, b = int(marked[0]), int(marked[-1])
    if len(marked) != b - a + 1:
        raise wrong(f"row {n}: the predictable positions should be one unbroken run (in the second copy).")
    row, count = ids[n], len(marked)

    def copies(first: int, last: int, distance: int) -> bool:  # row[first..last] repeats row[first-distance..]
        return (
            first - distance >= 0
            and last < len(row)
            and torch.equal(row[first : last + 1], row[first - distance : last + 1 - distance])
        )

    length = count + 1
    if copies(a, b + 1, length):
        return a - length, length
    if copies(a, b, count):
        raise wrong(
            "the mask covers the whole second copy, its last token too: the query at the copy's last token "
            "predicts the token after the copy, which is random. Mark only the first length - 1 positions."
        )
    if copies(a - 1, b, length):
        raise wrong(
            "the mask is one position late: it marks the tokens that are predicted. Mark the queries instead, "
            "the positions whose NEXT token is known: the first length - 1 positions of the second copy."
        )
    if copies(a + 1, b + 2, length):
        raise wrong(
            f"row {n}: the mask is one position early: it starts at the first copy's last token, whose next token "
            "(the second copy's first) is a repeat but which is itself not in the second copy. Mark the first "
            "length - 1 positions of the second copy."
        )
    if copies(a + length, b + length + 1, length):
        raise wrong(
            f"row {n}: the mask marks the first copy. Its next tokens cannot be known yet, nothing before them "
            "repeats them; the second copy's are. Mark the first length - 1 positions of the second copy."
        )
    if copies(a, b, length):
        raise wrong(
            f"row {n}: the second copy is one token short ({count} tokens of a {length}-token segment): copy the "
            "whole segment, all `length` tokens, then mark the first length - 1 positions of the copy."
        )
    for distance in range(length + 1, len(row)):
        if copies(a, b + 1, distance):
            gap = distance - length
            raise wrong(
                f"row {n}: there {'is' if gap == 1 else 'are'} {gap} token{'s' if gap > 1 else ''} between the "
                "first copy and the second: the second copy starts right where the first ends (no gap, no overlap)."
            )
    raise wrong(
        f"row {n}: the marked positions (and the token after each) should repeat the segment just before them: "
        "put the second copy right after the first and mark its first length - 1 positions."
    )


def _batch_answer(answer: object, N: int, T: int, V: int) -> tuple[Tensor, Tensor]:
    """(ids, predictable) from the learner's answer, or a hint naming what is wrong with its form."""
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise wrong("return two tensors: (ids, predictable)")
    ids, predictable = answer
    if not isinstance(ids, Tensor) or not isinstance(predictable, Tensor):
        raise wrong("ids and predictable should both be tensors")
    expect_shape(ids, (N, T), "ids", "(N, T)")
    expect_shape(predictable, (N, T), "predictable", "(N, T)")
    if ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.is_complex():
        raise wrong(f"ids should be integer token ids (torch.long), got dtype {ids.dtype}")
    if predictable.dtype != torch.bool:
        raise wrong(f"predictable should be a boolean mask, got dtype {predictable.dtype}")
    if ids.min() < 0 or ids.max() >= V:
        raise wrong(f"token ids must lie in [0, vocab_size) = [0, {V}), got {int(ids.min())}..{int(ids.max())}")
    return ids, predictable


@learner_check
def check_repeated_batch(make_batch: Callable[..., tuple[Tensor, Tensor]]) -> Verdict:
    """Check ``make_batch(batch_size, seq_len, vocab_size, low, high, generator) -> (ids, predictable)``."""

    def body() -> str:
        N, T, V, low, high = 128, 40, 1000, 4, 12
        answer = call_learner(make_batch, N, T, V, low, high, torch.Generator().manual_seed(10))
        ids, predictable = _batch_answer(answer, N, T, V)
        rows = [_row_verdict(ids, predictable, n) for n in range(N)]
        lengths = sorted({length for _, length in rows})
        if len(lengths) == 1:
            raise wrong(
                f"every segment has the same length ({lengths[0]}): the copy is then always the same distance "
                "back, and a model can find it by position alone. Draw each row's length from [low, high]."
            )
        if lengths[0] < low or lengths[-1] > high:
            raise wrong(f"segment lengths should lie in [{low}, {high}], got {lengths[0]}..{lengths[-1]}")
        if len({start for start, _ in rows}) == 1:
            raise wrong("every row puts its segment at the same place: draw the start at random for each row.")
        if lengths[-1] < high:
            raise wrong(
                f"over {N} rows no segment was {high} tokens long: torch.randint's upper bound is exclusive, so "
                "the largest length needs one more than high."
            )
        # A small vocabulary and short rows, where every token id and every place must show up.
        n, t, v, small_low, small_high = 300, 12, 5, 2, 5
        answer = call_learner(make_batch, n, t, v, small_low, small_high, torch.Generator().manual_seed(11))
        small_ids, small_predictable = _batch_answer(answer, n, t, v)
        places = [_row_verdict(small_ids, small_predictable, row) for row in range(n)]
        missing = sorted(set(range(v)) - set(small_ids.unique().tolist()))
        if missing:
            raise wrong(
                f"with vocab_size = {v}, token {missing[0]} never appears in {n * t} ids: every id in "
                f"[0, vocab_size) = [0, {v}) should be drawn, 0 and vocab_size - 1 included."
            )
        if not any(start == 0 for start, _ in places):
            raise wrong(
                f"over {n} rows of {t} tokens no segment starts at position 0: the first place is a possible place."
            )
        if not any(start + 2 * length == t for start, length in places):
            raise wrong(
                f"over {n} rows of {t} tokens no second copy ends at the row's last position: the last place the "
                "two copies fit, start = seq_len - 2·length, is never drawn. torch.randint's upper bound is "
                "exclusive: the largest start needs one more."
            )
        return f"{N} rows with segments of {lengths[0]}..{lengths[-1]} tokens at varying places: no shortcut."

    return run_check("a repeated batch without the positional shortcut", body)


# ---------------------------------------------------------------------------------------------
# Exercise 3: a hook that patches one head
# ---------------------------------------------------------------------------------------------
def reference_patch_hook(head: int, num_heads: int, source: Tensor) -> Callable:
    """A forward pre-hook for an output projection: head ``head``'s block of the input (N, T, h·d) is
    replaced by the same block of ``source`` (N, T, h·d), the other heads are left alone."""

    def hook(module, args):
        x = args[0].clone()
        d = x.size(-1) // num_heads
        x[..., head * d : (head + 1) * d] = source[..., head * d : (head + 1) * d]
        return (x,)

    return hook


@learner_check
def check_patch_hook(make_hook: Callable[[int, int, Tensor], Callable]) -> Verdict:
    """Check ``make_hook(head, num_heads, source)`` -> a forward pre-hook ``hook(module, args)``."""

    def body() -> str:
        generator = torch.Generator().manual_seed(11)
        N, T, h, d = 2, 3, 4, 5
        head = 1
        source, run = torch.randn(N, T, h * d, generator=generator), torch.randn(N, T, h * d, generator=generator)
        projection = torch.nn.Linear(h * d, h * d)
        hook = call_learner(make_hook, head, h, source.clone())
        if not callable(hook):
            raise wrong(f"make_hook should return a function hook(module, args), got {type(hook).__name__}")
        result = call_learner(hook, projection, (run.clone(),))  # an edit of the input in place is refused there
        if result is None:
            raise wrong(
                "the hook returned None, which tells PyTorch to keep the layer's input as it was: return the new "
                "arguments, a tuple holding the patched copy of the input."
            )
        if isinstance(result, list):
            raise wrong(
                "the hook returned a list: PyTorch takes only a tuple as the new arguments (anything else becomes "
                "the one argument, here a list the layer cannot use). Return a tuple holding the patched tensor."
            )
        if isinstance(result, tuple):
            if len(result) != 1:
                raise wrong(f"return the new arguments, a tuple of one tensor; got {len(result)} items")
            result = result[0]
        patched = as_tensor(result, "the hook's new input")
        expect_shape(patched, (N, T, h * d), "the hook's new input", "(N, T, h·d)")
        expected = reference_patch_hook(head, h, source)(projection, (run,))[0]
        if close(patched, expected):
            return "head 1's block of d numbers comes from the source run; the other heads are untouched."

        def blocks(x: Tensor, which: Tensor) -> Tensor:
            out = run.clone()
            out[..., which] = x[..., which]
            return out

        idx = torch.arange(h * d)
        mistakes = {
            "every head was replaced: copy only the chosen head's block of d columns from the source, where d, "
            "the head size, is the input's last dimension divided by the number of heads.": source,
            "the chosen head was zeroed, not patched: take its block from `source` instead.": blocks(
                torch.zeros_like(run), (idx // d) == head
            ),
            "the heads are taken as interleaved (every h-th number): head k's output is one contiguous block of d "
            "numbers, columns k·d to (k + 1)·d - 1, as x.view(N, T, h, d)[:, :, k] gives.": blocks(
                source, (idx % h) == head
            ),
            "the slice uses num_heads where the head size belongs: the head size d is the input's last dimension "
            "divided by the number of heads, and head k is columns k·d to (k + 1)·d - 1.": blocks(
                source, (idx >= head * h) & (idx < (head + 1) * h)
            ),
            "the block is off by one head: head 1 is the second block (heads count from 0).": blocks(
                source, (idx // d) == head - 1
            ),
        }
        for hint_text, result_mistake in mistakes.items():
            if close(patched, result_mistake):
                raise wrong(hint_text)
        if close(patched, run):
            raise wrong(
                "the input came back unchanged: in a copy of the input, replace the chosen head's block with the "
                "source's, and return that copy."
            )
        raise wrong("only columns head·d to (head + 1)·d - 1 of the input should change, to the source's values.")

    return run_check("a hook that patches one head", body)
