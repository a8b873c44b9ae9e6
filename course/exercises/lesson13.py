"""Checks for lesson 13's exercises: a sliding-window mask, one write into a local layer's rolling buffer, and the
bytes a hybrid model's cache holds after T tokens.

Shapes: N batch, T tokens, h heads (h_kv key/value heads), w the window (a local layer's buffer holds w slots),
d head size, E embedding size. Masks follow the library's convention (``helpers.masks``): **True = blocked**.
Every check runs the learner's code on several small cases, chosen so that each mistake it names gives a result of
its own in at least one of them (and the same wrong result in all), so that no mistake passes and none is told
another one's hint.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from course.exercises.feedback import (
    LearnerError,
    Verdict,
    _Wrong,
    as_int,
    as_tensor,
    call_learner,
    close,
    expect_plain_tensor,
    expect_shape,
    learner_check,
    run_check,
    wrong,
)
from course.exercises.shortcuts import FunctionRecorder, refuse_shortcuts
from helpers.gpt import GPTConfig

__all__ = [
    "check_hybrid_cache_bytes",
    "check_rolling_write",
    "check_window_mask",
    "reference_hybrid_cache_bytes",
    "reference_rolling_write",
    "reference_window_mask",
]


# ---------------------------------------------------------------------------------------------
# Exercise 1: the sliding-window mask
# ---------------------------------------------------------------------------------------------
def reference_window_mask(T: int, window: int) -> Tensor:
    """(T, T) bool, True = blocked: query i may read keys j with i - window < j <= i (itself and the window - 1
    tokens before it), as ``helpers.masks.sliding_window_mask(T, window)``."""
    distance = torch.arange(T)[:, None] - torch.arange(T)[None, :]  # i - j: how far back key j lies
    return (distance < 0) | (distance >= window)


def _distance(T: int) -> Tensor:
    return torch.arange(T)[:, None] - torch.arange(T)[None, :]


def _wrapped_rows(T: int, window: int) -> Tensor:
    """A loop over the queries that opens row i's keys from i - window + 1 to i by slicing: for the first queries
    that start is below 0, and a negative start counts from the end of the row (nothing opens, or too little)."""
    blocked = torch.ones(T, T, dtype=torch.bool)
    for i in range(T):
        blocked[i, i - window + 1 : i + 1] = False
    return blocked


# Each mistake as the mask it gives for (T, window). The cases below tell every one apart from the others.
_MASK_MISTAKES: dict[str, Callable[[int, int], Tensor]] = {
    "the mask is flipped: True marks the keys a query MAY read. In the library's convention (helpers.masks, and "
    "nn.MultiheadAttention's attn_mask) True = blocked: mark the keys a query may NOT read.": (
        lambda T, w: ~reference_window_mask(T, w)
    ),
    "the window is one key too wide: query i also reads the key exactly `window` positions back, so it sees "
    "window + 1 keys. Itself and the window - 1 keys before it make `window` keys; the key at distance `window` "
    "is the first one blocked (a strict inequality where there is a non-strict one, or the other way round).": (
        lambda T, w: reference_window_mask(T, w + 1)
    ),
    "the window is one key too narrow: query i sees only window - 1 keys. It reads itself and the window - 1 keys "
    "before it, `window` keys in all; only a key `window` or more positions back is blocked.": (
        lambda T, w: reference_window_mask(T, w - 1)
    ),
    "the query's own key is blocked: a query always reads itself (distance 0), and the window - 1 keys before it.": (
        lambda T, w: reference_window_mask(T, w) | torch.eye(T, dtype=torch.bool)
    ),
    "the future is visible: only the distant past is blocked. A sliding window is a CAUSAL mask with a window: "
    "keys after the query stay blocked as well.": lambda T, w: _distance(T) >= w,
    "a band on both sides: keys up to window - 1 positions AFTER the query are open too. A decoder's window looks "
    "back only; every key after the query is blocked, as in the causal mask.": (lambda T, w: _distance(T).abs() >= w),
    "that is the plain causal mask: the window is ignored, so a query reads its whole past. Block the keys that "
    "lie `window` or more positions back as well.": lambda T, w: _distance(T) < 0,
    "the mask is transposed: rows are queries and columns keys, so row i must block the keys AFTER i (its "
    "future) and those far BEFORE it; yours does that for columns.": lambda T, w: reference_window_mask(T, w).T,
    "the first queries read too little: a loop over the queries sliced each row from i - window + 1, and for "
    "i < window - 1 that start is below 0, which a slice counts from the END of the row. Start the window at key 0 "
    "at the earliest (or compare positions instead of slicing).": _wrapped_rows,
    "a window wider than 4 was cut to 4 (here window = 6 with T = 12 reads only 4 keys): read `window` as it "
    "comes; every query reads itself and the window - 1 keys before it, however wide the window.": (
        lambda T, w: reference_window_mask(T, min(w, 4))
    ),
    "the window was taken modulo T: a window longer than T is the causal mask (every earlier key lies within "
    "it), not a window of window mod T; only a key `window` or more positions back is blocked.": (
        lambda T, w: reference_window_mask(T, w % T or T)
    ),
}

# (T, window): a general case first (the one a fallback names), a window of 1, a window equal to T and one
# longer than T (the causal mask then; not a multiple of T, so that window mod T is no window of T), a longer
# sequence where the window slides a long way, and a window wider than 4 but shorter than T.
_MASK_CASES = [(7, 3), (6, 1), (5, 2), (4, 4), (3, 8), (9, 4), (12, 6)]


def _mask_answer(result: object, T: int, window: int) -> Tensor:
    """The learner's mask for (T, window) as a (T, T) bool tensor, or a hint about its type, shape or dtype."""
    case = f"for T = {T}, window = {window}"
    if isinstance(result, list | tuple):
        raise wrong(
            f"return one tensor (T, T), got a {type(result).__name__} of {len(result)} items {case}: build the mask "
            "as one boolean tensor (T, T), one row per query and one column per key."
        )
    if not isinstance(result, Tensor):
        raise wrong(f"the mask should be a tensor (T, T) of dtype torch.bool, got {type(result).__name__} {case}")
    expect_plain_tensor(result, "the mask")
    right = reference_window_mask(T, window)
    if result.dim() > 2 and result.numel() == T * T and tuple(result.shape[-2:]) == (T, T):
        raise wrong(
            f"one (T, T) mask, got shape {tuple(result.shape)} {case}: leave the batch and head dimensions out; "
            "the mask is the same for every sequence and head, and broadcasts over them where it is used."
        )
    if window < T and tuple(result.shape) == (T, window):
        raise wrong(
            f"a (T, window) = ({T}, {window}) table {case}: the mask has one column per KEY, all T of them, "
            "(T, T); a query's window is the part of its row left open."
        )
    expect_shape(result, (T, T), f"the mask {case}", "(T, T)")
    if result.dtype != torch.bool:
        values = as_tensor(result, "the mask")
        if result.is_floating_point() and torch.isinf(values).any():
            raise wrong(
                f"a float mask of 0 and -inf (dtype {result.dtype}): that kind is added to the scores, but the "
                "exercise asks for a boolean mask, dtype torch.bool, True = blocked (helpers.masks' convention)."
            )
        if torch.equal(values, right.double()) or torch.equal(values, (~right).double()):
            raise wrong(
                f"the mask holds 0 and 1 of dtype {result.dtype}: return dtype torch.bool (True = blocked), as "
                "helpers.masks' masks and nn.MultiheadAttention's attn_mask are; comparisons give booleans."
            )
        raise wrong(f"the mask should have dtype torch.bool (True = blocked), got dtype {result.dtype} {case}.")
    return result


def _keys(row: Tensor) -> str:
    """The keys a row of a True = blocked mask leaves open, in words."""
    open_keys = (~row).nonzero().flatten().tolist()
    if not open_keys:
        return "no key"
    if open_keys == list(range(open_keys[0], open_keys[-1] + 1)):
        return f"keys {open_keys[0]}..{open_keys[-1]}" if len(open_keys) > 1 else f"key {open_keys[0]}"
    return f"keys {open_keys}"


def _mask_fallback(answers: dict[tuple[int, int], Tensor]) -> str:
    """The first wrong row of the first wrong case: what that query should read and what it reads."""
    for (T, window), answer in answers.items():
        right = reference_window_mask(T, window)
        if torch.equal(answer, right):
            continue
        i = next(i for i in range(T) if not torch.equal(answer[i], right[i]))
        return (
            f"with T = {T}, window = {window}, query {i} should read {_keys(right[i])} (itself and the window - 1 "
            f"keys before it, none after it), but your mask lets it read {_keys(answer[i])}."
        )
    return "the mask differs from the sliding-window mask."


def _diagnose_mask(answers: dict[tuple[int, int], Tensor]) -> _Wrong:
    """The hint of the mistake that gives every answer, or of the one edge case the answer misses."""
    for hint, mistake in _MASK_MISTAKES.items():
        if all(torch.equal(answer, mistake(T, w)) for (T, w), answer in answers.items()):
            return wrong(hint)
    wrong_cases = [(T, w) for (T, w), answer in answers.items() if not torch.equal(answer, reference_window_mask(T, w))]
    if all(w >= T for T, w in wrong_cases):
        return wrong(
            "right while the window is shorter than the sequence, wrong when it is as long or longer (window >= T, "
            f"here {', '.join(f'T = {T}, window = {w}' for T, w in wrong_cases)}): then no key lies `window` "
            "positions back, and the mask is the plain causal mask; nothing but the future is blocked."
        )
    if all(w == 1 for _, w in wrong_cases):
        return wrong(
            "right for wider windows, wrong for a window of 1: then each query reads its own key only, every "
            "other key is blocked (the mask is True everywhere but the diagonal)."
        )
    return wrong(_mask_fallback(answers))


@learner_check
def check_window_mask(window_mask: Callable[[int, int], Tensor]) -> Verdict:
    """Check ``window_mask(T, window) -> (T, T)`` bool, True = blocked: query i may read keys i - window < j <= i."""

    def body() -> str:
        answers = {}
        for T, window in _MASK_CASES:
            with FunctionRecorder() as recorder:
                result = call_learner(window_mask, T, window)
            refuse_shortcuts(recorder, "sliding-window mask", "compare each query's position with each key's, (T, T).")
            answers[(T, window)] = _mask_answer(result, T, window)
        if all(torch.equal(answer, reference_window_mask(T, w)) for (T, w), answer in answers.items()):
            return (
                "True = blocked for the future and for every key `window` or more positions back, a window of 1 "
                "and windows as long as the sequence included."
            )
        raise _diagnose_mask(answers)

    return run_check("the sliding-window mask", body)


# ---------------------------------------------------------------------------------------------
# Exercise 2: one write into a local layer's rolling buffer
# ---------------------------------------------------------------------------------------------
def reference_rolling_write(buffer: Tensor, new: Tensor, position: int) -> Tensor:
    """buffer (N, h, w, d), a local layer's last w keys; new (N, h, d), the key of absolute position ``position``
    -> a new (N, h, w, d) with ``new`` in slot position mod w and every other slot as it was (buffer untouched)."""
    written = buffer.clone()
    written[:, :, position % buffer.size(2)] = new
    return written


def _at_slot(buffer: Tensor, new: Tensor, slot: int) -> Tensor:
    written = buffer.clone()
    written[:, :, slot] = new
    return written


def _along(buffer: Tensor, new: Tensor, slot: int, dim: int) -> Tensor:
    """``new`` written at index ``slot`` of another axis than the slots' (possible only when the sizes let it
    broadcast: the square case)."""
    written = buffer.clone()
    written.select(dim, slot).copy_(new)
    return written


def _first_row_only(buffer: Tensor, new: Tensor, slot: int) -> Tensor:
    written = buffer.clone()
    written[0, :, slot] = new[0]
    return written


SHIFTED = (
    "the buffer was shifted: the oldest key dropped and the new one put at one end, so every key moved one slot. "
    "That keeps the last w keys too (the course's KVCache keeps its rolling cache in order that way), but it moves "
    "w keys at every step; this exercise's ring buffer moves none: it overwrites one slot, position mod w, and "
    "leaves the other w - 1 where they are."
)


SLOT_DIVIDED = (
    "the slot is position // w, how many times the ring has gone round, not where it is on the ring: the slot is "
    "the REMAINDER, position mod w (position 9 with w = 4 goes into slot 1, not 2)."
)
SLOT_MOD_W_PLUS_ONE = (
    "the slot is position mod (w + 1): the ring has w slots, numbered 0 .. w - 1, so the slot is position mod w; "
    "mod (w + 1) gives slot w, one past the last, which raised {error} for position {position} with w = {w}."
)


def _write_mistakes(buffer: Tensor, new: Tensor, position: int) -> dict[str, Callable[[], Tensor]]:
    w = buffer.size(2)
    slot = position % w
    return {
        "the buffer came back unchanged: the new key must be in it, at slot position mod w.": lambda: buffer,
        "the slot is one too far: position mod w is the slot of the key of `position` itself, not of the next "
        "token.": lambda: _at_slot(buffer, new, (position + 1) % w),
        "the slot is one short: position mod w is the slot, counted from 0 (the key of position 0 goes into "
        "slot 0, that of position w into slot 0 again).": lambda: _at_slot(buffer, new, (position - 1) % w),
        "the position was clamped to the last slot: once position >= w every new key lands in slot w - 1, "
        "overwriting the newest key and keeping the oldest. A ring wraps round: slot position mod w.": (
            lambda: _at_slot(buffer, new, min(position, w - 1))
        ),
        SHIFTED: lambda: torch.cat((buffer[:, :, 1:], new[:, :, None]), dim=2),
        SHIFTED + " (Here the new key went in at the front.)": (
            lambda: torch.cat((new[:, :, None], buffer[:, :, :-1]), dim=2)
        ),
        "every sequence got the first sequence's key: new holds one key per sequence and head, (N, h, d); write "
        "each row's own key into that row's slot.": lambda: _at_slot(buffer, new[:1].expand_as(new), slot),
        "only the first sequence's slot was written: every one of the N sequences has its own key at this "
        "position; write them all at once.": lambda: _first_row_only(buffer, new, slot),
        "the window's size was written in as 4: w is the buffer's third size (dim 2, its slots), and it is not 4 "
        "here; the slot is position mod that size.": lambda: _at_slot(buffer, new, position % 4),
        "the slot was taken mod d, the buffer's last size (the head size): w is its third size (dim 2, the "
        "slots); the slot is position mod w.": lambda: _at_slot(buffer, new, position % buffer.size(3)),
        SLOT_DIVIDED: lambda: _at_slot(buffer, new, position // w),
        "the other slots were zeroed: the new buffer started from zeros and got only the new key. The ring keeps "
        "the w - 1 older keys the layer can still read; copy the buffer as it came, then overwrite one slot.": (
            lambda: _at_slot(torch.zeros_like(buffer), new, slot)
        ),
    }


def _axis_mistakes(buffer: Tensor, new: Tensor, position: int) -> dict[str, Callable[[], Tensor]]:
    """Writes along another axis than the slots' (dim 2): they run only where the sizes happen to agree."""
    slot = position % buffer.size(2)
    names = {0: "the batch axis (dim 0)", 1: "the heads' axis (dim 1)", 3: "the features' axis (dim 3)"}
    mistakes: dict[str, Callable[[], Tensor]] = {}
    for dim, name in names.items():
        hint = (
            f"the key was written along {name}: buffer is (N, h, w, d) and its slots are dim 2; the new key "
            "(N, h, d) fills slot position mod w of that axis, for every sequence and head."
        )
        mistakes[hint] = functools.partial(_along, buffer, new, slot, dim)
    return mistakes


# ((N, h, w, d), position) each: all four sizes differ, so that a write along another axis raises; windows of 4, 3
# and 5 slots, so that a w written in fails; d < w, so that a slot taken mod d is a slot of its own, not an
# IndexError. Positions within the first w (the buffer not yet full), ones past it that wrap round, one that lands
# in slot 0; for w = 3 and 5 one where position mod 4 is a slot too (4 written in gives an answer, not an error).
_WRITE_CASES = (
    ((2, 5, 4, 3), 9),
    ((2, 5, 4, 3), 2),
    ((2, 5, 4, 3), 4),
    ((2, 5, 4, 3), 7),
    ((5, 4, 3, 2), 5),
    ((2, 3, 5, 4), 7),
)
# Sizes all alike, where a write along the wrong axis runs and can be named.
_SQUARE_SIZES, _SQUARE_POSITION = (3, 3, 3, 3), 7


def _write_case(sizes: tuple[int, int, int, int], seed: int) -> tuple[Tensor, Tensor]:
    generator = torch.Generator().manual_seed(seed)
    N, h, w, d = sizes
    return (
        torch.randn(N, h, w, d, dtype=torch.float64, generator=generator),
        torch.randn(N, h, d, dtype=torch.float64, generator=generator),
    )


def _write_answer(result: object, buffer: Tensor, new: Tensor, position: int) -> Tensor:
    """The learner's buffer as a float64 tensor of the buffer's shape, or a hint about its shape."""
    if isinstance(result, list | tuple):
        raise wrong(
            f"return one tensor, the written buffer (N, h, w, d), got a {type(result).__name__} of {len(result)} items."
        )
    answer = as_tensor(result, "the written buffer")
    N, h, w, d = buffer.shape
    if tuple(answer.shape) == (N, h, w + 1, d):
        raise wrong(
            f"the buffer grew to w + 1 = {w + 1} slots: the new key was appended. A rolling buffer keeps w slots "
            "however many tokens come: the new key replaces the oldest one, in slot position mod w."
        )
    if tuple(answer.shape) == (N, h, d):
        raise wrong(
            "a tensor (N, h, d), the size of one key: return the whole buffer (N, h, w, d) with the new key "
            "written into it."
        )
    expect_shape(answer, buffer.shape, "the written buffer", "(N, h, w, d)")
    if isinstance(result, Tensor) and (result.dtype, result.device) != (buffer.dtype, buffer.device):
        raise wrong(
            f"the buffer's dtype changed: it came as {buffer.dtype} on {buffer.device} and went out as "
            f"{result.dtype} on {result.device}. A cache keeps its keys as they came: copy the buffer with its own "
            "dtype and device (a clone does; torch.zeros(shape) without dtype= makes float32, .float() and .half() "
            "convert)."
        )
    return answer


def _raises_without_modulo(errors: dict[int, LearnerError], answers: dict[int, Tensor]) -> bool:
    """Whether the code raised exactly where position >= w (an index past the buffer) and was right elsewhere
    (both keyed by the case's index in ``_WRITE_CASES``)."""

    def past(case: int) -> bool:
        (_, _, w, _), position = _WRITE_CASES[case]
        return position >= w

    return bool(errors) and all(past(c) for c in errors) and not any(past(c) for c in answers)


def _mod_w_plus_one(
    errors: dict[int, LearnerError], answers: dict[int, Tensor], cases: dict[int, tuple[Tensor, Tensor]]
) -> bool:
    """Whether the code raised exactly where position mod (w + 1) is w (one past the last slot) and wrote slot
    position mod (w + 1) everywhere else."""

    def past(case: int) -> bool:
        (_, _, w, _), position = _WRITE_CASES[case]
        return position % (w + 1) == w

    return (
        bool(errors)
        and all(past(c) for c in errors)
        and not any(past(c) for c in answers)
        and all(
            close(answers[c], _at_slot(*cases[c], _WRITE_CASES[c][1] % (_WRITE_CASES[c][0][2] + 1))) for c in answers
        )
    )


def _size_written_in(
    errors: dict[int, LearnerError], answers: dict[int, Tensor], cases: dict[int, tuple[Tensor, Tensor]]
) -> _Wrong | None:
    """Code right on every buffer of one shape that raised on the others: one of that shape's sizes (N, h, w or
    d) is written in. Named by the sizes that are the same in every case it got right and differ in every case
    it raised on."""
    if not answers or not all(
        close(answers[c], reference_rolling_write(*cases[c], _WRITE_CASES[c][1])) for c in answers
    ):
        return None
    ran = [_WRITE_CASES[c][0] for c in answers]
    raised = [_WRITE_CASES[c][0] for c in errors]
    suspects = [
        f"{letter} = {ran[0][axis]}"
        for axis, letter in enumerate("Nhwd")
        if len({sizes[axis] for sizes in ran}) == 1 and all(sizes[axis] != ran[0][axis] for sizes in raised)
    ]
    if not suspects:
        return None
    first = next(iter(errors.values()))
    return wrong(
        f"a size is written in: your code was right on every buffer of shape {ran[0]} and raised {first} on "
        f"{', '.join(str(s) for s in raised)}; {' or '.join(suspects)} holds only in the first. Read N, h, w and d "
        "from the tensors' shapes (buffer.shape, new.shape), which differ from call to call."
    )


@learner_check
def check_rolling_write(rolling_write: Callable[[Tensor, Tensor, int], Tensor]) -> Verdict:
    """Check ``rolling_write(buffer (N, h, w, d), new (N, h, d), position) -> (N, h, w, d)``: ``new`` in slot
    position mod w of a new tensor, the buffer left as it came."""

    def body() -> str:
        answers: dict[int, Tensor] = {}  # by the case's index in _WRITE_CASES
        errors: dict[int, LearnerError] = {}
        cases = {}
        for seed, (sizes, position) in enumerate(_WRITE_CASES):
            buffer, new = cases[seed] = _write_case(sizes, seed)
            try:
                result = call_learner(rolling_write, buffer.clone(), new.clone(), position)
            except LearnerError as error:
                errors[seed] = error
                continue
            answers[seed] = _write_answer(result, buffer, new, position)
        if errors:
            square_buffer, square_new = _write_case(_SQUARE_SIZES, 7)
            try:
                square = call_learner(rolling_write, square_buffer.clone(), square_new.clone(), _SQUARE_POSITION)
            except LearnerError:
                square = None
            if isinstance(square, Tensor) and square.shape == square_buffer.shape:
                for hint, mistake in _axis_mistakes(square_buffer, square_new, _SQUARE_POSITION).items():
                    if close(as_tensor(square, "the written buffer"), mistake()):
                        raise wrong(hint)
            first_case, first = next(iter(errors.items()))
            (_, _, w, _), first_position = _WRITE_CASES[first_case]
            if _mod_w_plus_one(errors, answers, cases):
                raise wrong(SLOT_MOD_W_PLUS_ONE.format(error=first, position=first_position, w=w))
            written_in = _size_written_in(errors, answers, cases)
            if written_in:
                raise written_in
            if _raises_without_modulo(errors, answers) and all(
                close(answers[c], reference_rolling_write(*cases[c], _WRITE_CASES[c][1])) for c in answers
            ):
                raise wrong(
                    f"your code raised {first} for position {first_position}, with w = {w} slots: the position was "
                    "used as the slot. It counts every token seen so far and soon passes w; the slot is position "
                    "mod w, so that the ring wraps round."
                )
            raise first
        positions = {c: position for c, (_, position) in enumerate(_WRITE_CASES)}
        right = {c: reference_rolling_write(*cases[c], positions[c]) for c in answers}
        if all(close(answers[c], right[c]) for c in answers):
            windows = sorted({sizes[2] for sizes, _ in _WRITE_CASES})
            return (
                f"the new key in slot position mod w, the other w - 1 slots untouched, for positions "
                f"{', '.join(str(p) for _, p in _WRITE_CASES)} with w = {', '.join(map(str, windows))}: a buffer "
                "that never grows."
            )
        for hint in _write_mistakes(*cases[0], positions[0]):
            if all(close(answers[c], _write_mistakes(*cases[c], positions[c])[hint]()) for c in answers):
                raise wrong(hint)
        case = next(c for c in answers if not close(answers[c], right[c]))
        position, w = positions[case], _WRITE_CASES[case][0][2]
        differ = sorted({int(s) for s in (answers[case] - right[case]).abs().amax((0, 1, 3)).nonzero()})
        raise wrong(
            f"with position = {position} and w = {w}, slots {differ} differ from what they should hold: slot "
            f"{position % w} (position mod w) should hold the new key of every sequence and head, and every other "
            "slot what the buffer held."
        )

    return run_check("the rolling buffer's write", body)


# ---------------------------------------------------------------------------------------------
# Exercise 3: a hybrid model's cache bytes
# ---------------------------------------------------------------------------------------------
def reference_hybrid_cache_bytes(config: GPTConfig, T: int, bytes_per_number: int = 2) -> int:
    """Bytes of the keys and values a model with ``config.layer_kinds`` caches after T tokens, with a rolling cache
    for its local layers: each local layer keeps min(T, window) tokens, each global layer T; per token and layer
    2 (a key and a value) · h_kv · d numbers. As ``helpers.kv_cache.rolling_kv_cache_bytes``."""
    kinds, window = _kinds_and_window(config)
    tokens = 0
    for kind in kinds:
        tokens += min(T, window) if kind == "local" else T
    return tokens * 2 * config.num_kv_heads * config.head_dim * bytes_per_number


def _kinds_and_window(config: GPTConfig) -> tuple[tuple[str, ...], int]:
    """The config's layer kinds and window: a hybrid model's config has both (a check's own configs always do)."""
    if config.layer_kinds is None or config.window is None:
        raise ValueError("a hybrid model's config names each layer's kind (layer_kinds) and the local window")
    return config.layer_kinds, config.window


def _count(kinds, window: int, h_kv: int, d: int, T: int, bytes_per_number: int, local_keeps=min) -> int:
    """The count ``reference_hybrid_cache_bytes`` makes, with each of its pieces open to a mistake."""
    kept = sum(local_keeps(T, window) if kind == "local" else T for kind in kinds)
    return kept * 2 * h_kv * d * bytes_per_number


def _config(num_layers: int, kinds: str, **sizes) -> GPTConfig:
    """A small config with the layer kinds ``kinds`` ("LGL": local, global, local)."""
    layer_kinds = tuple({"L": "local", "G": "global"}[k] for k in kinds)
    return GPTConfig(vocab_size=16, num_layers=num_layers, layer_kinds=layer_kinds, **sizes)


# Gemma 3 270M's sizes (its file: 18 layers, 5 local to 1 global, window 512, 1 key/value head of d = 256, E = 640,
# 4 query heads), then configs of other sizes and other patterns: an answer with Gemma's numbers written in, or its
# 5:1 pattern, fails those. Every config has h_kv < h and d != E / h.
GEMMA = _config(18, "LLLLLG" * 3, embed_dim=640, num_heads=4, num_kv_heads=1, head_dim=256, window=512, ff_dim=2048)
_CONFIGS = {
    "Gemma 3 270M's": GEMMA,
    "a 5-layer (local, global, local, local, global)": _config(
        5, "LGLLG", embed_dim=24, num_heads=6, num_kv_heads=2, head_dim=10, window=6
    ),
    "a 3-layer all-global": _config(3, "GGG", embed_dim=16, num_heads=4, num_kv_heads=1, head_dim=6, window=5),
    "a 4-layer all-local": _config(4, "LLLL", embed_dim=12, num_heads=4, num_kv_heads=2, head_dim=8, window=3),
}
# (config, T, bytes_per_number or None: the default left to the function). Lengths below, at and past each
# window; 16-bit numbers mostly, 1 and 4 bytes once each (so that bytes_per_number is read, not written in).
_BYTES_CASES = [
    ("Gemma 3 270M's", 300, None),
    ("Gemma 3 270M's", 8192, None),
    ("Gemma 3 270M's", 32768, 4),
    ("a 5-layer (local, global, local, local, global)", 4, None),
    ("a 5-layer (local, global, local, local, global)", 6, None),
    ("a 5-layer (local, global, local, local, global)", 30, None),
    ("a 5-layer (local, global, local, local, global)", 30, 1),
    ("a 5-layer (local, global, local, local, global)", 9, 4),
    ("a 3-layer all-global", 3, None),
    ("a 3-layer all-global", 20, None),
    ("a 4-layer all-local", 2, None),
    ("a 4-layer all-local", 10, 2),
]


def _bytes_mistakes(config: GPTConfig, T: int, bytes_per_number: int) -> dict[str, int | list[int]]:
    """The usual mistakes' counts for one case (a list: several ways to one mistake)."""
    (kinds, window), h_kv, d = _kinds_and_window(config), config.num_kv_heads, config.head_dim
    right = _count(kinds, window, h_kv, d, T, bytes_per_number)
    n = len(kinds)

    def count(**changes) -> int:
        pieces: dict[str, Any] = {
            "kinds": kinds,
            "window": window,
            "h_kv": h_kv,
            "d": d,
            "T": T,
            "bytes_per_number": bytes_per_number,
        }
        return _count(**(pieces | changes))

    return {
        "the global layers were counted as local (min(T, window) for every layer): a global layer attends to "
        "every earlier token, so its cache keeps all T of them; only the local layers stop at the window.": (
            count(kinds=("local",) * n)
        ),
        "the local layers were counted as global (all T tokens for every layer): with a rolling cache a local "
        "layer keeps only its last `window` tokens (fewer while T is shorter), all its queries can still read.": (
            count(kinds=("global",) * n)
        ),
        "a local layer was counted at its whole window before it has seen that many tokens: the rolling cache "
        "holds the tokens seen, at most `window` of them (T < window: T), it reserves no slots ahead.": (
            [count(local_keeps=lambda T, window: window), count(local_keeps=max)]
        ),
        "the window is one token too long: a local layer keeps its last `window` tokens (itself and the window - "
        "1 before it are all its newest query reads), not window + 1.": count(window=window + 1),
        "the window is one token too short: a local layer keeps its last `window` tokens, since its newest query "
        "reads itself and the window - 1 before it.": count(window=window - 1),
        "only the local layers were counted: the global layers cache their keys and values too, all T tokens "
        "each.": count(kinds=tuple(k for k in kinds if k == "local")),
        "only the global layers were counted: the local layers cache too, min(T, window) tokens each.": count(
            kinds=tuple(k for k in kinds if k == "global")
        ),
        "one layer of each kind was counted: every layer keeps its own cache; count each of the n_layers "
        "layers, by its kind (config.layer_kinds has one entry per layer).": count(kinds=tuple(sorted(set(kinds)))),
        "the layers' kinds were taken from Gemma's pattern (a global layer after every five local ones) instead "
        "of from config.layer_kinds: other models mix the kinds otherwise; read each layer's kind.": count(
            kinds=tuple("global" if (i + 1) % 6 == 0 else "local" for i in range(n))
        ),
        "keys and values were counted once: the cache keeps a key AND a value for each token, head and layer, "
        "2 · h_kv · d numbers.": right // 2,
        "the query heads were counted: the cache keeps the key/value heads only, config.num_kv_heads of them "
        "(each serves a group of query heads).": count(h_kv=config.num_heads),
        "the embedding size E was used where the cache stores h_kv · d numbers a token (a key, and a value): "
        "the keys and values are the key/value heads' outputs, config.num_kv_heads heads of config.head_dim "
        "numbers each, not the E numbers of the residual stream.": count(h_kv=1, d=config.embed_dim),
        "a local layer was counted as keeping T - window tokens, what it has DROPPED: a rolling cache keeps the "
        "last min(T, window) tokens, the ones its queries can still read.": [
            count(local_keeps=lambda T, window: T - window),
            count(local_keeps=lambda T, window: max(T - window, 0)),
        ],
        "the head size was taken as E / h (config.embed_dim // config.num_heads): this model's heads are not "
        "E / h wide; read d from config.head_dim.": count(d=config.embed_dim // config.num_heads),
        "that is a number of numbers, not of bytes: multiply by bytes_per_number, the bytes each number takes.": (
            count(bytes_per_number=1)
        ),
        "that is in bits: a byte is 8 bits; count bytes_per_number bytes a number.": right * 8,
        "bytes_per_number was written in as 2: use the argument (here it is not 2; 2 is only its default).": count(
            bytes_per_number=2
        ),
        "Gemma 3 270M's sizes are written in (its window 512, its 1 key/value head or its head size 256): read "
        "them from `config`, which here describes another model.": [
            count(window=GEMMA.window),
            count(h_kv=GEMMA.num_kv_heads),
            count(d=GEMMA.head_dim),
            _count(*_kinds_and_window(GEMMA), GEMMA.num_kv_heads, GEMMA.head_dim, T, bytes_per_number),
        ],
    }


def _as_bytes(answer: object, where: str) -> int:
    """The learner's number of bytes, refused unless it is a plain int (``as_int`` names what came instead)."""
    why = (
        "a count of bytes is a whole number, and the lesson's memory table adds such ints. Keep the arithmetic in "
        "ints (min, sums and products of the config's ints), or turn the result into a Python int before returning it."
    )
    return as_int(answer, "a number of bytes", where, why)


def _where(name: str, T: int, bytes_per_number: int | None) -> str:
    config = _CONFIGS[name]
    kinds, window = _kinds_and_window(config)
    sizes = (
        f"{kinds.count('local')} local and {kinds.count('global')} global layers, window {window}, "
        f"num_kv_heads {config.num_kv_heads}, head_dim {config.head_dim}"
    )
    given = (
        "bytes_per_number left to its default" if bytes_per_number is None else f"bytes_per_number={bytes_per_number}"
    )
    return f"for {name} config ({sizes}), T = {T}, {given}"


def _matches(answer: int, expected: int | list[int]) -> bool:
    return answer in expected if isinstance(expected, list) else answer == expected


@learner_check(returns="an int (a number of bytes)")
def check_hybrid_cache_bytes(hybrid_cache_bytes: Callable[..., int]) -> Verdict:
    """Check ``hybrid_cache_bytes(config, T, bytes_per_number=2) -> int`` on Gemma 3 270M's config and on configs of
    other sizes and other patterns of local and global layers."""

    def body() -> str:
        answers, expected, mistakes = [], [], []
        for name, T, given in _BYTES_CASES:
            config = _CONFIGS[name]
            extra = () if given is None else (given,)
            with FunctionRecorder() as recorder:
                result = call_learner(hybrid_cache_bytes, copy.deepcopy(config), T, *extra)
            refuse_shortcuts(
                recorder, "hybrid cache bytes", "count each layer's tokens by its kind, then the bytes they take."
            )
            answers.append(_as_bytes(result, _where(name, T, given)))
            bytes_per_number = 2 if given is None else given
            expected.append(reference_hybrid_cache_bytes(config, T, bytes_per_number))
            mistakes.append(_bytes_mistakes(config, T, bytes_per_number))
        if answers == expected:
            return (
                "each local layer's min(T, window) tokens and each global layer's T, 2 · h_kv · d numbers a token: "
                f"Gemma 3 270M keeps {expected[1]:,} bytes after 8,192 tokens and {expected[2] // 2:,} after "
                "32,768 in 16-bit numbers."
            )
        for hint in mistakes[0]:
            if all(_matches(answer, table[hint]) for answer, table in zip(answers, mistakes, strict=True)):
                raise wrong(hint)
        gemma = [i for i, (name, _, _) in enumerate(_BYTES_CASES) if _CONFIGS[name] is GEMMA]
        if all(answers[i] == expected[i] for i in gemma):
            raise wrong(
                "right for Gemma 3 270M's config, wrong for configs of other sizes: some of Gemma's numbers are "
                "written in (its window, key/value heads, head size, number of layers or its pattern of kinds). "
                "Read every size and each layer's kind from `config`."
            )
        i = next(i for i, (answer, right) in enumerate(zip(answers, expected, strict=True)) if answer != right)
        name, T, given = _BYTES_CASES[i]
        raise wrong(f"{_where(name, T, given)}: expected {expected[i]:,} bytes, got {answers[i]:,}.")

    return run_check("a hybrid model's cache bytes", body)
