"""Checks for lesson 12's exercises: the IOI logit difference, the logit lens, and one layer's heads' direct push
on the logit difference.

Shapes: N prompts, T tokens, V vocabulary, E embedding size, h heads, d head size (E = h·d, as in a GPT),
n_layers layers. Every check runs the learner's code on small random tensors from a fixed generator, sized so that
each mistake it names gives numbers of its own.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from course.exercises.feedback import (
    LearnerError,
    Verdict,
    _Wrong,
    as_tensor,
    call_learner,
    close,
    diagnose,
    expect_shape,
    learner_check,
    run_check,
    wrong,
)
from helpers.norms import RMSNorm

__all__ = [
    "check_head_attribution",
    "check_logit_difference",
    "check_logit_lens",
    "reference_head_attribution",
    "reference_logit_difference",
    "reference_logit_lens",
]

SWAPPED = (
    "the names are swapped: that is logit(S) − logit(IO). The logit difference is positive when the model prefers "
    "the indirect object (the name that appears once) to the subject."
)


def _one_tensor(result: object, name: str, shape: str) -> Tensor:
    """The learner's result as a tensor; a list or tuple of numbers (or of 0-d tensors) is refused, as numpy is:
    the lesson indexes, averages and plots these results as tensors."""
    if isinstance(result, list | tuple):
        kinds = sorted({type(item).__name__ for item in result})
        raise wrong(
            f"{name}: return one tensor {shape}, got a {type(result).__name__} of {len(result)} "
            f"{'/'.join(kinds) or 'items'}: build the numbers in one tensor operation over the prompts (or stack "
            "them into a tensor), so that the lesson can average, index and plot them."
        )
    return as_tensor(result, name)


def _sizes_hint(error: LearnerError, sizes: str) -> _Wrong | None:
    """A reshape that does not fit the check's small tensors: the mark of SmolLM2's sizes written in."""
    message = str(error.error)
    if isinstance(error.error, RuntimeError) and "invalid for input of size" in message:
        return wrong(
            f"your code raised {error}: the sizes written into it are not the inputs' ({sizes} here; SmolLM2's "
            "are others). Read them from the tensors' shapes instead of writing numbers in."
        )
    if isinstance(error.error, RuntimeError) and "cannot be multiplied" in message:
        return wrong(
            f"your code raised {error}: two shapes in a product did not fit. Either a size is written in (the "
            f"inputs' are {sizes} here; SmolLM2's are others: read them from the tensors' shapes), or a matrix is "
            "the wrong way round (nn.Linear's weights are (out, in))."
        )
    if isinstance(error.error, IndexError) and "out of bounds" in message:
        return wrong(
            f"your code raised {error}: a count written into it (a loop over SmolLM2's layers or heads, say) is not "
            f"the inputs' ({sizes} here). Read the counts from the tensors' shapes instead of writing numbers in."
        )
    return None


def _diagnose(answer: Tensor, mistakes: Mapping[str, Callable[[], Tensor | list[Tensor]]], fallback: str) -> _Wrong:
    """``feedback.diagnose``, where one mistake may stand for several answers (a list; any of them names it)."""
    for hint, result in mistakes.items():
        try:
            results = result() if callable(result) else result
        except (RuntimeError, ValueError, IndexError):
            continue
        if any(close(answer, one) for one in (results if isinstance(results, list) else [results])):
            return wrong(hint)
    return wrong(fallback)


def _paired(table: Tensor, io: Tensor, s: Tensor) -> Tensor:
    """table (N, V) -> (N,): row n read at its own io[n] minus at its own s[n]."""
    rows = torch.arange(table.size(0))
    return table[rows, io] - table[rows, s]


def _names(N: int) -> tuple[Tensor, Tensor]:
    """Token ids (N,) of each prompt's indirect object and subject: two different names in every prompt, and some
    names in the other role in another prompt, as in an IOI batch."""
    io = torch.tensor([1, 4, 7, 2, 0, 5, 3][:N])
    s = torch.tensor([3, 0, 5, 6, 8, 1, 4][:N])
    return io, s


def _random_norm(E: int, generator: torch.Generator) -> RMSNorm:
    """A final RMSNorm whose weight is not all ones (so that leaving it out shows), in float64."""
    norm = RMSNorm(E).double().requires_grad_(False)
    norm.weight.copy_(0.5 + torch.rand(E, dtype=torch.float64, generator=generator))
    return norm


def _call_with_norm(function: Callable, args: tuple, at: int):
    """Call the learner on ``args``, whose entry ``at`` is the final norm, with its own copy of that norm: the
    expected values read the check's norm, which the call cannot reach (call_learner refuses a change to the
    copy, named)."""
    return call_learner(function, *args[:at], copy.deepcopy(args[at]), *args[at + 1 :])


# ---------------------------------------------------------------------------------------------
# Exercise 1: the logit difference
# ---------------------------------------------------------------------------------------------
def reference_logit_difference(logits: Tensor, io: Tensor, s: Tensor) -> Tensor:
    """logits (N, T, V), io (N,), s (N,) -> (N,): logit(IO) − logit(S) at the last position of each prompt
    (as ``helpers.analysis.ioi.logit_difference(..., per_prompt=True)``)."""
    return _paired(logits[:, -1], io, s)


def _difference_mistakes(logits: Tensor, io: Tensor, s: Tensor) -> dict[str, Tensor]:
    right = reference_logit_difference(logits, io, s)
    return {
        SWAPPED: -right,
        "read at the first position: the name is predicted at the last position (END, the token after the "
        "prompt's last word), so read the logits there.": _paired(logits[:, 0], io, s),
        "read one position before the last: the logits at a position predict the NEXT token, so the ones that "
        "predict the name are the last position's own.": _paired(logits[:, -2], io, s),
        "averaged over the positions: only the last position predicts the name; the others predict other "
        "tokens of the prompt.": _paired(logits.mean(dim=1), io, s),
        "probabilities (a softmax) instead of logits: the difference is taken on the raw logits. A difference of "
        "probabilities is squashed and depends on every other token's logit; log-probabilities would do, their "
        "normaliser cancels in the difference.": _paired(torch.softmax(logits[:, -1], dim=-1), io, s),
        "that is logit(IO) alone: subtract the subject's logit, so that what the model gives any name at all "
        "cancels and only its preference between the two names is left.": logits[torch.arange(len(io)), -1, io],
        "every difference is 0: one token's logit was subtracted from itself. The indirect object's token is io "
        "and the subject's is s, two different names in every prompt.": torch.zeros_like(right),
    }


@learner_check
def check_logit_difference(logit_difference: Callable[[Tensor, Tensor, Tensor], Tensor]) -> Verdict:
    """Check ``logit_difference(logits (N, T, V), io (N,), s (N,)) -> (N,)``."""

    def body() -> str:
        generator = torch.Generator().manual_seed(12)
        N, T, V = 5, 4, 9
        logits = 2 * torch.randn(N, T, V, dtype=torch.float64, generator=generator)
        io, s = _names(N)
        answer = _one_tensor(
            call_learner(logit_difference, logits.clone(), io.clone(), s.clone()), "the logit differences", "(N,)"
        )
        right = reference_logit_difference(logits, io, s)
        if answer.dim() == 0:
            if close(answer, right.mean()):
                raise wrong(
                    f"a single number, the mean over the prompts: return one difference per prompt, (N,) = ({N},); "
                    "the lesson averages them where it needs one number."
                )
            raise wrong(f"one difference per prompt, (N,) = ({N},), got a single number.")
        if tuple(answer.shape) == (N, N):
            raise wrong(
                f"an (N, N) = ({N}, {N}) table: every prompt's last logits were read at every prompt's names. Prompt n "
                "has its own two names, io[n] and s[n]: pick row n's logit at its own ids (choose the rows along "
                "with the columns), one difference per prompt."
            )
        if tuple(answer.shape) == (N, T):
            raise wrong(
                f"one difference per prompt and position, (N, T) = ({N}, {T}): keep only the last position, where "
                "the name is predicted."
            )
        expect_shape(answer, (N,), "the logit differences", "(N,)")
        if close(answer, right):
            return (
                "logit(IO) − logit(S) at the last position, one per prompt (a log-softmax gives the same numbers: "
                "its normaliser is the same for both names and cancels)."
            )
        raise diagnose(
            answer,
            _difference_mistakes(logits, io, s),
            "for each prompt, the logit of its indirect object minus the logit of its subject, both read at the "
            f"last position. Expected {[round(x, 3) for x in right.tolist()]} on the check's logits.",
        )

    return run_check("the logit difference", body)


# ---------------------------------------------------------------------------------------------
# Exercise 2: the logit lens
# ---------------------------------------------------------------------------------------------
def reference_logit_lens(residuals: Tensor, norm: RMSNorm, unembedding: Tensor, io: Tensor, s: Tensor) -> Tensor:
    """residuals (n_layers + 1, N, E) at the last position, the final norm, unembedding (V, E), io, s (N,) ->
    (n_layers + 1,): the mean over prompts of logit(IO) − logit(S) read from each residual through the final norm
    and the output layer (as ``helpers.analysis.attribution.logit_lens``)."""
    direction = unembedding[io] - unembedding[s]  # (N, E): the logit difference is linear in the norm's output
    return (norm(residuals) * direction).sum(-1).mean(-1)


def _rms_scale(x: Tensor, eps: float) -> Tensor:
    return torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


# Exercise 1's (N, N) table, met again in the lens: every prompt's logits read at every prompt's names.
CROSSED = (
    "an (N, N) = ({N}, {N}) table for each residual: every prompt's logits were read at every prompt's names. Prompt "
    "n has its own two names, io[n] and s[n]: pick row n's logit at its own ids (choose the rows along with the "
    "columns), one difference per prompt, and average those N."
)


def _crossed(residuals: Tensor, norm: RMSNorm, unembedding: Tensor, io: Tensor, s: Tensor) -> Tensor:
    """(n_layers + 1, N, N): entry [l, n, m] is prompt n's logit difference read at prompt m's names."""
    logits = norm(residuals) @ unembedding.T  # (n_layers + 1, N, V)
    return logits[:, :, io] - logits[:, :, s]


def _is_crossed(answer: Tensor, residuals: Tensor, norm: RMSNorm, unembedding: Tensor, io: Tensor, s: Tensor) -> bool:
    """An (n_layers + 1, N) answer (or its transpose) that is the (N, N) tables averaged over either axis."""
    crossed = _crossed(residuals, norm, unembedding, io, s)
    return any(close(answer, table) or close(answer, table.T) for table in (crossed.mean(-1), crossed.mean(-2)))


def _lens_mistakes(
    residuals: Tensor, norm: RMSNorm, unembedding: Tensor, io: Tensor, s: Tensor
) -> dict[str, Callable[[], Tensor]]:
    direction = unembedding[io] - unembedding[s]

    def read(normed: Tensor) -> Tensor:
        return (normed * direction).sum(-1).mean(-1)

    right = reference_logit_lens(residuals, norm, unembedding, io, s)
    return {
        "read without the final norm: the output layer only ever sees the residual after the final RMSNorm, so "
        "the lens passes every residual through it first (the residual grows layer by layer; the norm takes "
        "its size out).": lambda: read(residuals),
        "the norm's scale was computed once, from the last residual, and used for every layer: the lens reads "
        "each residual as if the model stopped there, so each one is divided by its OWN root mean square.": (
            lambda: read(residuals * _rms_scale(residuals[-1], norm.eps) * norm.weight)
        ),
        "the norm's learned weight is left out (divided by the root mean square only): the final norm also "
        "multiplies by its weight (E,), and the output layer was trained on what comes out of both. Calling "
        "the norm module does both.": lambda: read(residuals * _rms_scale(residuals, norm.eps)),
        SWAPPED: lambda: -right,
        "summed over the prompts: the lens gives the MEAN over the prompts, one number per residual.": (
            lambda: right * residuals.size(1)
        ),
        "the prompts were averaged before the norm: the norm is not linear (it divides each vector by its own "
        "size), so read each prompt's residual through it, then average the differences.": (
            lambda: (norm(residuals.mean(dim=1)) * direction.mean(dim=0)).sum(-1)
        ),
        "probabilities (a softmax over the vocabulary) instead of logits: the lens reads the logit "
        "difference.": lambda: torch.stack(
            [_paired(torch.softmax(norm(r) @ unembedding.T, dim=-1), io, s).mean() for r in residuals]
        ),
        "the final norm was applied twice: the output layer reads the residual after ONE pass through the "
        "final norm; the residuals given are the norm's inputs, none of them normed yet.": (
            lambda: read(norm(norm(residuals)))
        ),
        "the norm was applied to the direction W_U[IO] − W_U[S] (alone, or as well as to the residual): the "
        "direction is a difference of two rows of the output layer, which multiplies the NORMED residual; the "
        "norm belongs to the residual alone.": lambda: [
            (residuals * norm(direction)).sum(-1).mean(-1),
            (norm(residuals) * norm(direction)).sum(-1).mean(-1),
        ],
        CROSSED.format(N=residuals.size(1)) + " Averaged over the whole table, the other prompts' names count as "
        "much as each prompt's own.": lambda: _crossed(residuals, norm, unembedding, io, s).mean((-1, -2)),
        "every entry is the same number, the last residual's: entry l is read from residual l (the residual "
        "entering block l; the last, the final norm's input).": lambda: right[-1].expand_as(right),
        "a LayerNorm (the mean subtracted, divided by the standard deviation) instead of the model's final "
        "RMSNorm: call the norm you are given, which divides by the root mean square and subtracts nothing.": (
            lambda: [
                read(torch.nn.functional.layer_norm(residuals, (residuals.size(-1),), eps=norm.eps) * norm.weight),
                read((residuals - residuals.mean(-1, keepdim=True)) / residuals.std(-1, keepdim=True) * norm.weight),
            ]
        ),
        "the root mean square was taken across the residuals or across the prompts, not over each vector's own "
        "E features: the norm divides each vector by its own size, the mean over its last dimension.": lambda: [
            read(residuals * torch.rsqrt(residuals.pow(2).mean(dim, keepdim=True) + norm.eps) * norm.weight)
            for dim in (0, 1)
        ],
        "the median over the prompts: the lens gives the MEAN over the prompts.": (
            lambda: (norm(residuals) * direction).sum(-1).median(-1).values
        ),
        "the absolute value was taken: the sign is the point, a negative entry means that residual favours the "
        "subject; average the signed differences.": lambda: (norm(residuals) * direction).sum(-1).abs().mean(-1),
        "the residuals were added up (a running sum over the layers): each residual given is already the whole "
        "stream at that depth, the embedding and every earlier block's writes included; read each as it is.": (
            lambda: read(norm(residuals.cumsum(0)))
        ),
    }


@learner_check
def check_logit_lens(logit_lens: Callable[..., Tensor]) -> Verdict:
    """Check ``logit_lens(residuals (n_layers + 1, N, E), norm, unembedding (V, E), io (N,), s (N,))
    -> (n_layers + 1,)``."""

    def body() -> str:
        generator = torch.Generator().manual_seed(12)
        n_layers, N, E, V = 3, 5, 8, 11
        # Residuals that grow with depth and differ in size from prompt to prompt, as a real model's do: a scale
        # frozen at one of them, or none at all, then gives other numbers.
        size = torch.arange(1, n_layers + 2, dtype=torch.float64)[:, None, None] * (
            0.5 + torch.rand(1, N, 1, dtype=torch.float64, generator=generator)
        )
        residuals = size * torch.randn(n_layers + 1, N, E, dtype=torch.float64, generator=generator)
        norm = _random_norm(E, generator)
        unembedding = torch.randn(V, E, dtype=torch.float64, generator=generator)
        io, s = _names(N)
        args = (residuals.clone(), norm, unembedding.clone(), io.clone(), s.clone())
        try:
            result = _call_with_norm(logit_lens, args, at=1)
        except LearnerError as error:
            raise (_sizes_hint(error, f"n_layers + 1 = {n_layers + 1}, N = {N}, E = {E}") or error) from error
        answer = _one_tensor(result, "the logit lens", "(n_layers + 1,)")
        right = reference_logit_lens(residuals, norm, unembedding, io, s)
        entries = n_layers + 1
        if answer.dim() == 0:
            if close(answer, right[-1]):
                raise wrong(
                    "a single number, the last residual's: the lens reads EVERY residual, one number for each of "
                    f"the n_layers + 1 = {entries} entries."
                )
            raise wrong(f"one number per residual, (n_layers + 1,) = ({entries},), got a single number.")
        if tuple(answer.shape) in ((entries, N), (N, entries)):
            if _is_crossed(answer, residuals, norm, unembedding, io, s):
                raise wrong(
                    CROSSED.format(N=N)
                    + " Averaged over one axis of the table it came out one number per residual and prompt."
                )
            raise wrong(
                f"one number per residual and prompt, {tuple(answer.shape)}: average over the prompts, one number "
                f"per residual, (n_layers + 1,) = ({entries},)."
            )
        if close(answer, right[1:]):
            raise wrong(
                f"the first entry is missing: the lens has n_layers + 1 = {entries} entries, the first read from the "
                "residual entering block 0 (the embedding alone)."
            )
        if close(answer, right[:-1]):
            raise wrong(
                f"the last entry is missing: the lens has n_layers + 1 = {entries} entries, the last read from the "
                "residual after the last block (the final norm's input)."
            )
        expect_shape(answer, (entries,), "the logit lens", "(n_layers + 1,)")
        if close(answer, right):
            return (
                "each residual read through the final norm (its own scale) and the output layer: "
                f"{[round(x, 2) for x in right.tolist()]} on the check's residuals."
            )
        raise _diagnose(
            answer,
            _lens_mistakes(residuals, norm, unembedding, io, s),
            "for each residual: the final norm, then the output layer's logits, then logit(IO) − logit(S) per "
            f"prompt, averaged over the prompts. Expected {[round(x, 3) for x in right.tolist()]}.",
        )

    return run_check("the logit lens", body)


# ---------------------------------------------------------------------------------------------
# Exercise 3: each head's direct push on the logit difference
# ---------------------------------------------------------------------------------------------
def reference_head_attribution(
    head_outputs: Tensor, out_weight: Tensor, final_residual: Tensor, norm: RMSNorm, direction: Tensor
) -> Tensor:
    """head_outputs (N, h, d), out_weight (E, h·d), final_residual (N, E), the final RMSNorm, direction (N, E)
    -> (h,): each head's write through its own d columns of out_weight, scaled by the full residual's 1/RMS
    (frozen) and the norm's weight, read along the direction, averaged over prompts (as
    ``helpers.analysis.attribution.direct_logit_attribution(...).heads[layer]``)."""
    h, d = head_outputs.shape[1:]
    blocks = out_weight.unflatten(1, (h, d))  # (E, h, d): head k's columns k·d .. (k + 1)·d - 1
    writes = torch.einsum("nhd,ehd->hne", head_outputs, blocks)  # (h, N, E)
    scale = _rms_scale(final_residual, norm.eps)  # (N, 1): the whole residual's, frozen, so the parts add up
    return (writes * scale * norm.weight * direction).sum(-1).mean(-1)


def _head_mistakes(
    head_outputs: Tensor, out_weight: Tensor, final_residual: Tensor, norm: RMSNorm, direction: Tensor
) -> dict[str, Callable[[], Tensor | list[Tensor]]]:
    h, d = head_outputs.shape[1:]
    E = out_weight.size(0)
    writes = torch.einsum("nhd,ehd->hne", head_outputs, out_weight.unflatten(1, (h, d)))
    scale = _rms_scale(final_residual, norm.eps)

    def read(written: Tensor) -> Tensor:
        return (written * direction).sum(-1).mean(-1)

    def rolled_writes(k: int) -> Tensor:
        return torch.einsum("nhd,ehd->hne", head_outputs.roll(k, dims=1), out_weight.unflatten(1, (h, d)))

    right = reference_head_attribution(head_outputs, out_weight, final_residual, norm, direction)
    return {
        "the norm's scale was recomputed from each head's own write: the final norm divides the WHOLE residual by "
        "its root mean square, so freeze that one scale (the full residual's) for every part; with a scale per "
        "part the parts no longer add up to the logit difference.": (
            lambda: read(writes * _rms_scale(writes, norm.eps) * norm.weight)
        ),
        "no final norm: a head's write reaches the output layer through the final RMSNorm, so scale it by the "
        "full residual's 1/RMS and by the norm's weight before reading it along the direction.": lambda: read(writes),
        "the norm's weight is left out: after dividing by the full residual's RMS the final norm multiplies by its "
        "learned weight (E,); the output layer reads what comes out of both.": lambda: read(writes * scale),
        "head k's block was taken from the ROWS of out_weight: the output projection is (E, h·d), its rows are the "
        "E output features, and head k's output meets its COLUMNS k·d .. (k + 1)·d − 1.": (
            lambda: read(torch.einsum("nhd,hde->hne", head_outputs, out_weight.reshape(h, d, E)) * scale * norm.weight)
        ),
        "the heads were read interleaved (every h-th column): head k owns one contiguous block of d columns of "
        "out_weight, k·d .. (k + 1)·d − 1, in the order the heads were merged.": (
            lambda: read(
                torch.einsum("nhd,edh->hne", head_outputs, out_weight.unflatten(1, (d, h))) * scale * norm.weight
            )
        ),
        "the heads are rolled by one: head k's output met head k ± 1's block of columns (or the results came out "
        "one head off). Head k's output goes through its own columns k·d .. (k + 1)·d − 1.": lambda: [
            *(read(rolled_writes(k) * scale * norm.weight).roll(j) for k in (1, -1) for j in (0, 1, -1)),
            *(right.roll(k) for k in (1, -1)),
        ],
        "the final norm was applied again after the frozen scale (or the norm module called on a head's write): "
        "each part is scaled ONCE, by the full residual's 1/RMS and by the norm's weight.": lambda: [
            read(norm(writes * scale * norm.weight)),
            read(norm(writes) * scale * norm.weight),
        ],
        "the norm was applied to the direction: the direction W_U[IO] − W_U[S] is two rows of the output layer, "
        "which reads the NORMED residual; the frozen scale and the norm's weight go on the heads' writes.": lambda: [
            (writes * norm(direction)).sum(-1).mean(-1),
            (writes * scale * norm.weight * norm(direction)).sum(-1).mean(-1),
        ],
        "the sign is flipped, as if the names were swapped: read the push along the direction as given "
        "(the IO row of the unembedding minus the S row), so that a positive number helps the right name.": (
            lambda: -right
        ),
        "summed over the prompts: each head's push is the MEAN over the prompts.": lambda: right * direction.size(0),
        "the residual's root mean square multiplied instead of divided by: the final norm DIVIDES the residual by "
        "its root mean square (multiplies by 1/RMS), then multiplies by its weight.": (
            lambda: read(writes / scale * norm.weight)
        ),
        "one scale averaged over the prompts: each prompt's residual has its own size, so each prompt's parts are "
        "divided by its OWN residual's root mean square.": lambda: read(writes * scale.mean() * norm.weight),
        "the layer's writes were added to final_residual before the scale: final_residual is the final norm's "
        "input, every head's write already in it; take its root mean square as it is.": (
            lambda: read(writes * _rms_scale(final_residual + writes.sum(0), norm.eps) * norm.weight)
        ),
        "divided by the standard deviation (a LayerNorm's scale): the final norm is an RMSNorm, it divides by "
        "the root mean square and subtracts no mean.": lambda: read(
            writes / final_residual.std(-1, keepdim=True) * norm.weight
        ),
        "the norm's weight was divided by: the final norm multiplies by its weight after the 1/RMS.": (
            lambda: read(writes * scale / norm.weight)
        ),
        "the scale came from the layer's attention output (the heads' writes added up): the final norm sees the "
        "full residual, the embedding and every layer's writes included, which is final_residual.": (
            lambda: read(writes * _rms_scale(writes.sum(0), norm.eps) * norm.weight)
        ),
    }


@learner_check
def check_head_attribution(head_attribution: Callable[..., Tensor]) -> Verdict:
    """Check ``head_attribution(head_outputs (N, h, d), out_weight (E, h·d), final_residual (N, E), norm,
    direction (N, E)) -> (h,)``."""

    def body() -> str:
        generator = torch.Generator().manual_seed(12)
        N, h, d = 5, 3, 4
        E = h * d  # a GPT's output projection is square: rows and columns both number h·d
        head_outputs = torch.randn(N, h, d, dtype=torch.float64, generator=generator)
        out_weight = torch.randn(E, h * d, dtype=torch.float64, generator=generator) / E**0.5
        size = 0.5 + 2 * torch.rand(N, 1, dtype=torch.float64, generator=generator)  # residuals of varied sizes
        final_residual = size * torch.randn(N, E, dtype=torch.float64, generator=generator)
        norm = _random_norm(E, generator)
        direction = torch.randn(N, E, dtype=torch.float64, generator=generator)
        args = (head_outputs.clone(), out_weight.clone(), final_residual.clone(), norm, direction.clone())
        try:
            result = _call_with_norm(head_attribution, args, at=3)
        except LearnerError as error:
            raise (_sizes_hint(error, f"N = {N}, h = {h}, d = {d}, E = {E}") or error) from error
        answer = _one_tensor(result, "the heads' pushes", "(h,)")
        right = reference_head_attribution(head_outputs, out_weight, final_residual, norm, direction)
        if answer.dim() == 0:
            if close(answer, right.sum()):
                raise wrong(f"a single number, the heads' pushes added up: keep one number per head, (h,) = ({h},).")
            raise wrong(f"one number per head, (h,) = ({h},), got a single number.")
        if tuple(answer.shape) in ((h, N), (N, h)):
            raise wrong(
                f"one number per head and prompt, {tuple(answer.shape)}: average each head's push over the prompts, "
                f"(h,) = ({h},)."
            )
        expect_shape(answer, (h,), "the heads' pushes", "(h,)")
        if close(answer, right):
            return (
                "each head's write through its own columns, under the full residual's frozen norm scale: "
                f"{[round(x, 3) for x in right.tolist()]} on the check's layer; with the embedding's and every "
                "MLP's, such parts add up to the logit difference."
            )
        raise _diagnose(
            answer,
            _head_mistakes(head_outputs, out_weight, final_residual, norm, direction),
            "for each head: its output through its own d columns of out_weight, divided by the full residual's "
            "root mean square, times the norm's weight, read along the direction, averaged over the prompts. "
            f"Expected {[round(x, 3) for x in right.tolist()]}.",
        )

    return run_check("each head's direct push on the logit difference", body)
