"""Checks for lesson 16's exercises, three small Triton kernels that the learner writes and launches: a row softmax
with a masked last block, attention with the online softmax (one query per program, the log-sum-exp saved) and
causal attention over query and key blocks (the loop's bound and the diagonal block's mask).

Shapes: R rows and C columns of the softmax's input; T queries, S keys, d head size (a power of two, as
``tl.arange`` wants). The learner's function launches its own kernel and returns tensors, so a check only sees
results: it never imports Triton, and it runs the same in the learner's kernel and in the grader's process. It
does require that the call launched a Triton kernel: the call runs under a ``CallRecorder`` (which a graded kernel
runs too, and reports back as names), and a call that never entered Triton's launch (the interpreter's
``GridExecutor.__call__`` or the compiled ``JITFunction.run``) is refused, since torch alone gives the same numbers.

Each check runs the learner's code on several cases whose sizes differ (a row length that is no power of two and
one that is, a key count that is no multiple of the block and one that is, a transposed input), so that a size
written into the kernel shows, and computes each usual mistake in float32, as the kernel does: a mistake that only
shows as an overflow (the block's own maximum in place of the running one) overflows here too. Kernels write into
``torch.empty``: a lane that a mistake leaves unwritten holds whatever was in memory, so a mistake that skips lanes
is recognised on the lanes it does write.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from course.exercises.feedback import (
    Verdict,
    as_tensor,
    call_learner,
    close,
    expect_shape,
    learner_check,
    run_check,
    wrong,
)

__all__ = ["check_causal_attention", "check_masked_row_softmax", "check_online_attention"]

BLOCK = 16  # the key block (and the query block of exercise 3) the exercises ask for
NEG_INF = float("-inf")


NO_KERNEL = (
    "no Triton kernel ran: `{name}` computed its result without launching a `@triton.jit` function. The numbers "
    "may agree, but the exercise is the kernel: write it with `tl.load`, `tl.store` and the block operations, "
    "and launch it over a grid, `kernel[grid](...)`."
)
_LAUNCHES = (("triton/runtime/interpreter.py", "GridExecutor.__call__"), ("triton/runtime/jit.py", "JITFunction.run"))


def _launched(entered: set[tuple[str, str]]) -> bool:
    """Whether the Python functions entered include Triton's kernel launch (interpreted or compiled)."""
    return any(
        file.replace("\\", "/").endswith(tail) and qualname == name
        for file, qualname in entered
        for tail, name in _LAUNCHES
    )


def _call_kernel(function: Callable[..., Any], *args: Tensor) -> Any:
    """``call_learner(function, *args)``, refused (``NO_KERNEL``) when the call launched no Triton kernel."""
    from course.call_recording import CallRecorder

    with CallRecorder() as recorder:  # in a graded kernel, the call is recorded there and the names sent back
        result = call_learner(function, *args)
    if not _launched(recorder.entered()):
        raise wrong(NO_KERNEL.format(name=getattr(function, "__name__", "the function")))
    return result


def _pair(answer: Any, names: tuple[str, str]) -> tuple[Tensor, Tensor]:
    """The learner's two tensors, or a hint to return exactly those."""
    if not isinstance(answer, tuple | list) or len(answer) != 2:
        raise wrong(f"return two tensors: `return {', '.join(names)}`.")
    return as_tensor(answer[0], names[0]), as_tensor(answer[1], names[1])


def _sizes_hint(first: str, later: str) -> str:
    return (
        f"right for {first} but not for {later}: is a size written into the kernel or the launch (the row length, "
        "BLOCK, the number of programs)? Read every size from the tensors, and make BLOCK the next power of two."
    )


# ---------------------------------------------------------------------------------------------
# Exercise 1: a row softmax, the last block masked
# ---------------------------------------------------------------------------------------------
SOFTMAX_HINTS = {
    "drops last": "the last column of each row is left out: the mask is off by one. Lane j holds column j, and "
    "columns 0 … C−1 exist, so a lane is kept when its offset is below C.",
    "one past": "each row's softmax takes in one element past its end (the next row's first): the mask is off by "
    "one. Lane j holds column j, and columns 0 … C−1 exist, so a lane is kept when its offset is below C.",
    "zero padding": "the lanes past the row's end count in the softmax as zeros: a masked load fills them with "
    "`other`, and a softmax must not see them, so fill them with minus infinity (exp(−inf) = 0 in the sum).",
    "strides swapped": "the row and column strides are swapped: row r starts at r · (stride of dim 0), and "
    "column j lies j · (stride of dim 1) further on.",
    "contiguous assumed": "right for a contiguous input but not for a transposed one: the row's start is "
    "computed as if rows lay C apart. Use the input's strides (`x.stride(0)`, `x.stride(1)`), which a transposed "
    "view changes.",
    "output strides": "right for a contiguous input but not for a transposed one: the output is stored as if its "
    "rows lay C apart, but a tensor made like a transposed x (`torch.empty_like(x)`) has x's strides. Store with "
    "the output's own strides, or make the output contiguous.",
    "max not subtracted": "the result overflows for large scores: subtract the row's maximum before `tl.exp` "
    "(the softmax does not change, and exp never exceeds 1).",
}


def _softmax_cases() -> list[tuple[str, Tensor]]:
    g = torch.Generator().manual_seed(160)
    wide = torch.randn(12, 5, generator=g) * 3  # its transpose is a (5, 12) view whose rows are not contiguous
    return [
        ("x of shape (8, 7), contiguous", torch.randn(8, 7, generator=g) * 3),
        ("x of shape (5, 12), a transposed view", wide.T),
        ("x of shape (3, 16), large scores", torch.randn(3, 16, generator=g) * 40 + 60),
        ("x of shape (4, 33), rows wider than 16", torch.randn(4, 33, generator=g) * 3),
    ]


def _strided(x: Tensor, strides: tuple[int, int]) -> Tensor | None:
    """x's storage read as x's shape with other strides (None if that reads outside the storage)."""
    base = x.detach().flatten() if x.is_contiguous() else x.detach().T.contiguous().flatten()
    R, C = x.shape
    if (R - 1) * strides[0] + (C - 1) * strides[1] >= base.numel():
        return None
    return base.as_strided((R, C), strides)


def _softmax_mistake(x: Tensor, how: str) -> tuple[Tensor, slice] | None:
    """The usual mistake ``how`` on x (R, C): its result, and the rows on which it is certain (None: not simulable)."""
    R, C = x.shape
    rows = slice(None)
    if how == "drops last":
        return torch.softmax(x[:, :-1], dim=-1), rows  # the last column is never stored: compare the others
    if how == "one past":
        if not x.is_contiguous():
            return None
        following = torch.cat((x.flatten()[C:], x.new_zeros(C))).view(R, C)[:, :1]  # the next row's first element
        return torch.softmax(torch.cat((x, following), dim=-1), dim=-1)[:, :C], slice(0, R - 1)
    if how == "zero padding":
        padding = 1 << (C - 1).bit_length()
        padded = torch.cat((x, x.new_zeros(R, padding - C)), dim=-1)
        return torch.softmax(padded, dim=-1)[:, :C], rows
    if how in ("strides swapped", "contiguous assumed"):
        strides = (x.stride(1), x.stride(0)) if how == "strides swapped" else (C, 1)
        if strides == x.stride():
            return None
        read = _strided(x, strides)
        return None if read is None else (torch.softmax(read, dim=-1), rows)
    if how == "output strides":
        if x.is_contiguous():
            return None
        stored = torch.softmax(x, dim=-1).flatten()  # row r written at r·C on, read back through x's strides
        return stored.as_strided(x.shape, x.stride()), rows
    if how == "max not subtracted":
        e = torch.exp(x)
        return e / e.sum(-1, keepdim=True), rows
    raise ValueError(how)


@learner_check
def check_masked_row_softmax(masked_row_softmax: Callable[[Tensor], Tensor]) -> Verdict:
    """Check ``masked_row_softmax(x)`` -> the softmax of each row of x (R, C), by a Triton kernel with one program
    a row and BLOCK the next power of two at or above C (the lanes past C masked)."""

    def body() -> str:
        passed = None
        for label, x in _softmax_cases():
            answer = as_tensor(_call_kernel(masked_row_softmax, x.clone() if x.is_contiguous() else x), "the output")
            expect_shape(answer, x.shape, "the output", "(R, C)")
            if close(answer, torch.softmax(x.double(), dim=-1)):
                passed = passed or label
                continue
            for how, hint in SOFTMAX_HINTS.items():
                simulated = _softmax_mistake(x.float(), how)
                if simulated is None:
                    continue
                result, rows = simulated
                if close(answer[rows, : result.size(-1)], result[rows]):
                    raise wrong(hint)
            if passed:
                raise wrong(_sizes_hint(passed, label))
            raise wrong(
                f"the output differs from the softmax of each row for {label}: each program loads its row "
                "(masked past C), subtracts the row's max, exponentiates, divides by the sum and stores the row."
            )
        return "one program a row, the lanes past the row's end masked to −inf and never stored."

    return run_check("masked row softmax", body)


# ---------------------------------------------------------------------------------------------
# Exercise 2: attention with the online softmax, the log-sum-exp saved
# ---------------------------------------------------------------------------------------------
ONLINE_OUT_HINTS = {
    "acc not rescaled": "the accumulator is not rescaled: it was summed against the old running max, so multiply "
    "it by exp(m_old − m_new) before adding this block's p @ v (lesson 07's update, moved into the kernel).",
    "sum not rescaled": "the running sum is not rescaled: like the accumulator, multiply it by exp(m_old − m_new) "
    "before adding this block's sum of p.",
    "block max": "the output overflows (inf or NaN) in a row whose largest score lies in an early block: the new "
    "max is the block's own max. The running max must remember earlier blocks: the larger of the running max and "
    "the block's.",
    "own block max": "this block's p is exponentiated against the block's own max: every term must use the same "
    "reference as the rescaled accumulator, the new running max.",
    "padding unmasked": "the keys past S in the last block count as scores of zero: masked loads fill them with "
    "`other`, so set their scores to −inf (a mask on the key offsets, below S) before the max and the exp.",
    "unscaled": "the scores are not scaled: multiply q · k by 1/√d (lesson 03).",
    "max starts at zero": "the output is NaN in a row whose scores are all very negative (below about −88): the "
    "running max starts at 0, so exp(s − 0) underflows to 0 for every key and l stays 0. Start it at −inf, the "
    "max of no scores yet.",
    "normalised in step": "the accumulator is divided by the running sum inside the loop: keep it unnormalised and "
    "divide once, after the last block (the sum is not final before).",
}
LSE_HINTS = {
    "lse is m": "lse holds the running max alone: the log-sum-exp is m + log(l), the max plus the log of the sum.",
    "lse is log l": "lse holds log(l) alone: the sum was taken relative to the running max, so add it back, "
    "m + log(l).",
    "lse base 2": "lse is in base 2: the backward pass recomputes P = exp(S − lse) with the natural exp, so store "
    "m + log(l) with the natural log (or convert).",
    "lse log2 of l": "lse adds the base-2 log of l to the max: the log-sum-exp is m + log(l) with the natural "
    "log, which the backward pass's exp undoes.",
    "lse unscaled max": "lse adds log(l) to a max of the unscaled scores: l was summed against the scaled max "
    "(the scale folded into the exp), so the max in lse must carry the scale too, as the scores do.",
}
LSE_WRONG = (
    "out is right and lse is stored, but it is not each row's log-sum-exp for {label}: store m + log(l) for each "
    "query after the loop, with the natural log and the max of the scaled scores."
)
LSE_UNSAVED = (
    "out is right but lse is not each row's log-sum-exp for {label}: it holds zeros or whatever was in memory, so "
    "it looks left unsaved. The backward pass needs it: store m + log(l) for each query, after the loop."
)


def _online_attention(
    q: Tensor, k: Tensor, v: Tensor, how: str = "right", first: int | None = None
) -> tuple[Tensor, Tensor]:
    """Attention of q (T, d) over k, v (S, d) by blocks of BLOCK keys in float32, as a kernel runs it: out (T, d),
    lse (T,); or one usual mistake. ``first``: causal, q's rows being the queries at first, first + 1, …"""
    T, d = q.shape
    S = k.size(0)
    scale = 1.0 if how == "unscaled" else 1 / math.sqrt(d)
    m = torch.zeros(T) if how == "max starts at zero" else torch.full((T,), NEG_INF)
    total, acc = torch.zeros(T), torch.zeros(T, v.size(1))
    for start in range(0, S, BLOCK):
        kb, vb = k[start : start + BLOCK], v[start : start + BLOCK]
        scores = q @ kb.T * scale  # (T, B)
        if first is not None:  # causal: query first + i sees the keys up to its own position
            scores = scores.masked_fill(start + torch.arange(kb.size(0)) > first + torch.arange(T)[:, None], NEG_INF)
        if how == "padding unmasked" and kb.size(0) < BLOCK:
            scores = torch.cat((scores, scores.new_zeros(T, BLOCK - kb.size(0))), dim=-1)
            vb = torch.cat((vb, vb.new_zeros(BLOCK - kb.size(0), vb.size(1))))
        block_max = scores.amax(-1)
        new = block_max if how == "block max" else torch.maximum(m, block_max)
        alpha = torch.exp(m - new)
        p = torch.exp(scores - (block_max if how == "own block max" else new)[:, None])
        keep = torch.ones_like(alpha)
        total = total * (keep if how == "sum not rescaled" else alpha) + p.sum(-1)
        acc = acc * (keep if how == "acc not rescaled" else alpha)[:, None] + p @ vb
        if how == "normalised in step":
            acc = acc / total[:, None]
        m = new
    out = acc if how == "normalised in step" else acc / total[:, None]
    lse = {
        "lse is m": m,
        "lse is log l": torch.log(total),
        "lse base 2": (m + torch.log(total)) / math.log(2),
        "lse log2 of l": m + torch.log2(total),
        "lse unscaled max": m * math.sqrt(d) + torch.log(total),
    }
    return out, lse.get(how, m + torch.log(total))


def _attention_cases(d_first: int = 16) -> list[tuple[str, tuple[Tensor, Tensor, Tensor]]]:
    g = torch.Generator().manual_seed(161)
    cases = []
    for T, S, d in ((5, 37, d_first), (3, 20, 32), (4, 16, 16)):
        q, k, v = torch.randn(T, d, generator=g), torch.randn(S, d, generator=g), torch.randn(S, d, generator=g)
        # Query 0's largest score lies in the first block and the later blocks' maxima are ~100 lower: a running
        # max replaced by the block's own makes exp(m_old − m_new) overflow float32 there, as it would on a GPU.
        q[0], k[:, 0] = 0.0, k[:, 0].clamp(-2, 2)
        q[0, 0], k[0, 0] = 10.0, 48.0 * math.sqrt(d / 16)
        # Query 1's scores all lie near −120: a running max started at 0 underflows every exp(s − 0) to 0 there.
        q[1], k[:, 1] = 0.0, k[:, 1].clamp(-2, 2) + 48.0 * math.sqrt(d / 16)
        q[1, 1] = -10.0
        cases.append((f"(T, S, d) = ({T}, {S}, {d})", (q, k, v)))
    return cases


def _looks_unsaved(lse: Tensor, right: Tensor) -> bool:
    """Whether lse holds no computed numbers: all zeros (``torch.zeros``), or what ``torch.empty`` left there (a
    non-finite number, or one far from every log-sum-exp: a tiny denormal or a huge value)."""
    lse = lse.double()
    far = (lse - right).abs() > 1e3 + right.abs().max()
    return bool((lse == 0).all() or not torch.isfinite(lse).all() or far.any())


@learner_check
def check_online_attention(online_attention: Callable[[Tensor, Tensor, Tensor], tuple]) -> Verdict:
    """Check ``online_attention(q, k, v)`` -> ``(out, lse)``: q (T, d), k and v (S, d); one program a query, the keys
    in blocks of 16 with the online softmax; out (T, d) equals softmax(q kᵀ/√d) v, lse (T,) is each row's
    log-sum-exp of the scaled scores."""

    def body() -> str:
        passed = None
        for label, (q, k, v) in _attention_cases():
            out, lse = _pair(_call_kernel(online_attention, q.clone(), k.clone(), v.clone()), ("out", "lse"))
            expect_shape(out, q.shape, "out", "(T, d)")
            expect_shape(lse, q.shape[:1], "lse", "(T,)")
            right_out, right_lse = _online_attention(q.double(), k.double(), v.double())
            if not close(out, right_out):
                for how, hint in ONLINE_OUT_HINTS.items():
                    if close(out, _online_attention(q, k, v, how)[0]):
                        raise wrong(hint)
                if passed:
                    raise wrong(_sizes_hint(passed, label))
                raise wrong(
                    f"out differs from softmax(q kᵀ/√d) v for {label}: per key block, the new running max, "
                    "p = exp(s − m_new), the sum and the accumulator rescaled by exp(m_old − m_new); at the end "
                    "out = acc / l."
                )
            if not close(lse, right_lse):
                for how, hint in LSE_HINTS.items():
                    if close(lse, _online_attention(q.double(), k.double(), v.double(), how)[1]):
                        raise wrong(hint)
                raise wrong((LSE_UNSAVED if _looks_unsaved(lse, right_lse) else LSE_WRONG).format(label=label))
            passed = passed or label
        return "the running max, sum and accumulator rescaled by exp(m_old − m_new) per block; lse = m + log(l) kept."

    return run_check("online attention", body)


# ---------------------------------------------------------------------------------------------
# Exercise 3: causal attention over blocks: the loop's bound and the diagonal block's mask
# ---------------------------------------------------------------------------------------------
REVERSED = (
    "inside the diagonal block each query sees the keys after it instead of those before: the comparison of query "
    "and key offsets is the wrong way round."
)
ONE_FUTURE_KEY = (
    "each query also sees the key right after it: the mask is off by one. A query at position i may see keys "
    "0 … i, and no later one."
)
CAUSAL_HINTS = {
    "no mask": "every query sees every key, also the later ones: the loop must stop after the query block's own "
    "(diagonal) block, and inside that block a key after the query must be masked.",
    "stops before diagonal": "the loop stops before the query block's own (diagonal) block: its bound is the end "
    "of the query block, not its start (and the first block's queries then see no key at all: NaN).",
    "diagonal excluded": "each query misses its own key: the mask is off by one. A query at position i may see "
    "keys 0 … i, itself included.",
    "one future key": ONE_FUTURE_KEY,
    "one future key, all blocks": ONE_FUTURE_KEY,
    "mask reversed": REVERSED,
    "mask reversed, every block": REVERSED,
    "block mask": "inside the diagonal block every query sees every key of the block: that block needs a mask on "
    "each query's and each key's own position (comparing block starts is not enough).",
    "unscaled": "the scores are not scaled: multiply q · k by 1/√d (lesson 03).",
}
ONLINE_CAUSAL_HINTS = {  # mistakes of the online softmax, inside the causal loop
    "block max": ONLINE_OUT_HINTS["block max"],
    "acc not rescaled": ONLINE_OUT_HINTS["acc not rescaled"],
    "sum not rescaled": ONLINE_OUT_HINTS["sum not rescaled"],
}
PAST_DIAGONAL = (
    "the loop runs past the diagonal block: in one case here the last block of keys has infinite values, and the "
    "query blocks before it came out NaN (0 · inf), so they read that block. With the mask right the numbers agree "
    "otherwise, but the key blocks after a query block's own hold only later keys: stop the loop after the diagonal "
    "block (its end is the query block's end), which halves the work."
)


def _visible(T: int, how: str = "right") -> Tensor:
    """(T, T) boolean: query i may see key j (True = keep), for the right causal mask or one usual mistake (a mask
    mistake in a kernel whose loop stops after the diagonal block, or, "all blocks", one that visits them all)."""
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    bi, bj = i // BLOCK, j // BLOCK
    return {
        "no mask": torch.ones(T, T, dtype=torch.bool),
        "stops before diagonal": bj < bi,
        "diagonal excluded": j < i,
        "one future key": (j <= i + 1) & (bj <= bi),
        "one future key, all blocks": j <= i + 1,
        "mask reversed": (bj < bi) | ((bj == bi) & (j >= i)),
        "mask reversed, every block": (bj == bi) & (j >= i),
        "block mask": bj <= bi,
    }.get(how, j <= i)


def _masked_attention(q: Tensor, k: Tensor, v: Tensor, how: str = "right") -> Tensor:
    scale = 1.0 if how == "unscaled" else 1 / math.sqrt(q.size(-1))
    scores = (q @ k.T * scale).masked_fill(~_visible(q.size(0), how), NEG_INF)
    out = torch.softmax(scores, dim=-1) @ v  # a row with no key visible: NaN, as 0/0 in a kernel
    if how == "mask reversed, every block":
        # A kernel's first key block then has no visible key for the later query blocks: exp(−inf − (−inf)) = NaN
        # enters their running sums, and stays.
        out[BLOCK:] = float("nan")
    return out


def _causal_online(q: Tensor, k: Tensor, v: Tensor, how: str) -> Tensor:
    """Causal attention of q, k, v (T, d) in float32 as the kernel runs it, a block of BLOCK queries at a time over
    the key blocks up to its own, with one usual mistake of the online softmax."""
    T = q.size(0)
    outs = []
    for first in range(0, T, BLOCK):
        end = min(first + BLOCK, T)
        outs.append(_online_attention(q[first:end], k[:end], v[:end], how, first=first)[0])
    return torch.cat(outs)


def _causal_cases() -> list[tuple[str, tuple[Tensor, Tensor, Tensor]]]:
    g = torch.Generator().manual_seed(162)
    cases = []
    for T, d in ((37, 16), (20, 32), (16, 16), (70, 16)):
        q, k, v = (torch.randn(T, d, generator=g) for _ in range(3))
        # Query 17's largest score is key 0's, ~100 above the second block's: a block max in place of the running
        # one overflows float32 in exp(m_old − m_new), as ex. 2's case does.
        if T > 17:
            q[17], k[:, 0] = 0.0, k[:, 0].clamp(-2, 2)
            q[17, 0], k[0, 0] = 10.0, 48.0 * math.sqrt(d / 16)
        cases.append((f"(T, d) = ({T}, {d})", (q, k, v)))
    return cases


def _expect_stop_at_diagonal(causal_attention: Callable[..., Any]) -> None:
    """Refuse a loop over every key block: the values of the last block's keys are infinite, which a kernel that
    stops after each query block's diagonal block reads only for the last query block (0 · inf = NaN elsewhere)."""
    g = torch.Generator().manual_seed(163)
    T, d = 3 * BLOCK, 16
    q, k, v = (torch.randn(T, d, generator=g) for _ in range(3))
    poisoned = v.clone()
    poisoned[2 * BLOCK :] = float("inf")
    with warnings.catch_warnings():
        # The last query block reads the infinite values by design, and the interpreter's numpy warns of the NaN
        # (0 · inf) there: a warning the learner's right kernel did not earn.
        warnings.simplefilter("ignore", RuntimeWarning)
        out = as_tensor(_call_kernel(causal_attention, q.clone(), k.clone(), poisoned), "out")
    expect_shape(out, q.shape, "out", "(T, d)")
    early = slice(0, 2 * BLOCK)  # the query blocks that must never read the last key block (nor need it)
    if not close(out[early], _masked_attention(q.double(), k.double(), v.double())[early]):
        raise wrong(PAST_DIAGONAL)


@learner_check
def check_causal_attention(causal_attention: Callable[[Tensor, Tensor, Tensor], Tensor]) -> Verdict:
    """Check ``causal_attention(q, k, v)`` -> out (T, d): q, k, v (T, d); one program a block of 16 queries, the
    loop over key blocks stopped after the diagonal block, the diagonal block masked; out equals
    ``F.scaled_dot_product_attention(q, k, v, is_causal=True)``."""

    def body() -> str:
        passed = None
        for label, (q, k, v) in _causal_cases():
            out = as_tensor(_call_kernel(causal_attention, q.clone(), k.clone(), v.clone()), "out")
            expect_shape(out, q.shape, "out", "(T, d)")
            if close(out, _masked_attention(q.double(), k.double(), v.double())):
                passed = passed or label
                continue
            for how, hint in CAUSAL_HINTS.items():
                if close(out, _masked_attention(q.double(), k.double(), v.double(), how)):
                    raise wrong(hint)
            for how, hint in ONLINE_CAUSAL_HINTS.items():
                if close(out, _causal_online(q, k, v, how)):
                    raise wrong(hint)
            if passed:
                raise wrong(_sizes_hint(passed, label))
            raise wrong(
                f"out differs from causal attention for {label}: each query block loops over the key blocks up to "
                "and including its own, with the online softmax, and masks the keys after each query."
            )
        _expect_stop_at_diagonal(causal_attention)
        return "the loop stops after the diagonal block, and the diagonal block keeps keys 0 … i for query i."

    return run_check("causal attention", body)
