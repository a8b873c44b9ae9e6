"""Checks for lesson 07's exercises: one step of the online softmax, one step of attention with a KV cache, and
the rotation of rotary position embeddings.

Shapes: N batch, h heads, T tokens already cached, d head size, R rows of scores, B scores in one block.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from course.exercises.feedback import (
    LearnerError,
    Verdict,
    as_tensor,
    close,
    diagnose,
    expect_shape,
    learner_check,
    run_check,
    wrong,
)
from helpers.rotary import rotary_angles

__all__ = ["check_kv_cache_step", "check_online_softmax_update", "check_rotate_pairs"]


# ---------------------------------------------------------------------------------------------
# Exercise 1: one update of the online softmax
# ---------------------------------------------------------------------------------------------
def _online_update(
    running_max: Tensor, running_sum: Tensor, block: Tensor, how: str = "right"
) -> tuple[Tensor, Tensor]:
    """The right update, or one usual mistake at a time (no row is blocked here, so no -inf maxima)."""
    new_max = torch.maximum(running_max, block.amax(-1))
    if how == "block max only":
        new_max = block.amax(-1)
    rescale = {
        "right": torch.exp(running_max - new_max),
        "block max only": torch.exp(running_max - new_max),
        "no rescale": torch.ones_like(running_max),
        "rescale inverted": torch.exp(new_max - running_max),
        "own block max": torch.exp(running_max - new_max),
        "no exp": torch.exp(running_max - new_max),
    }[how]
    reference = block.amax(-1) if how == "own block max" else new_max
    block_part = block.sum(-1) if how == "no exp" else torch.exp(block - reference[..., None]).sum(-1)
    return new_max, running_sum * rescale + block_part


@learner_check
def check_online_softmax_update(online_softmax_update: Callable[[Tensor, Tensor, Tensor], tuple]) -> Verdict:
    """Check ``online_softmax_update(running_max, running_sum, block)`` -> ``(new_max, new_sum)``:
    running_max and running_sum (R,), block (R, B)."""

    def body() -> str:
        g = torch.Generator().manual_seed(70)
        first = torch.randn(3, 4, generator=g) * 3  # the first block: running max -inf, sum 0
        later = torch.randn(3, 4, generator=g) * 3
        later[0] += 6  # row 0: the new block holds a larger score, the max must rise
        later[1] -= 6  # row 1: the old max stays
        start = (torch.full((3,), float("-inf")), torch.zeros(3))
        after_first = _online_update(*start, first.double())
        # The later block first: its maxima are finite, so every mistake shows as itself (on the first block an
        # upside-down rescale gives exp(+inf) · 0 = NaN).
        cases = [("a later block", tuple(t.float() for t in after_first), later), ("the first block", start, first)]
        for label, (running_max, running_sum), block in cases:
            answer = online_softmax_update(running_max.clone(), running_sum.clone(), block.clone())
            if not isinstance(answer, tuple | list) or len(answer) != 2:
                raise wrong("return two tensors: `return new_max, new_sum`.")
            new_max, new_sum = as_tensor(answer[0], "new_max"), as_tensor(answer[1], "new_sum")
            expect_shape(new_max, (3,), "new_max (one per row, R)")
            expect_shape(new_sum, (3,), "new_sum (one per row, R)")
            args = (running_max.double(), running_sum.double(), block.double())
            right_max, right_sum = _online_update(*args)
            if torch.isnan(new_sum).any():
                raise wrong(
                    f"new_sum has NaN for {label}: is a max taken over an empty or -inf tensor, or `-inf - -inf` "
                    "computed? Take the new max first, then subtract it."
                )
            if not close(new_max, right_max):
                if close(new_max, block.double().amax(-1)):
                    raise wrong(
                        "new_max is the block's own maximum: the running maximum must remember earlier blocks, "
                        "`torch.maximum(running_max, block.amax(dim=-1))`."
                    )
                raise wrong(
                    "new_max should be the largest score seen so far: the larger of running_max and the block's max."
                )
            if close(new_sum, right_sum):
                continue
            mistakes = {
                "the old sum is not rescaled: it was computed against the old maximum, so multiply it by "
                "`exp(running_max - new_max)` before adding the block's exponentials.": "no rescale",
                "the rescaling is upside down: the old sum must SHRINK when the max rises, so multiply by "
                "`exp(running_max - new_max)` (at most 1), not `exp(new_max - running_max)`.": "rescale inverted",
                "the block's exponentials use the block's own maximum: every term of the sum must be relative to the "
                "same reference, the new running max: `exp(block - new_max[..., None]).sum(-1)`.": "own block max",
                "the block's scores are summed without `exp`: the softmax's denominator is a sum of exponentials, "
                "`exp(block - new_max[..., None]).sum(-1)`.": "no exp",
            }
            raise diagnose(
                new_sum,
                {hint: _online_update(*args, how)[1] for hint, how in mistakes.items()},
                f"new_max is right, but new_sum differs for {label}: it should be "
                "running_sum · exp(running_max − new_max) + Σ exp(block − new_max).",
            )
        return "the running max rises, the old sum shrinks by exp(old − new), the block's exponentials are added."

    return run_check("online softmax update", body)


# ---------------------------------------------------------------------------------------------
# Exercise 2: one decoding step with a KV cache
# ---------------------------------------------------------------------------------------------
def _cache_step(q, k_new, v_new, k_cache, v_cache, how: str = "right") -> tuple[Tensor, Tensor, Tensor]:
    """Attention of the new query over the cached keys and its own; or one usual mistake."""
    if how == "prepended":
        keys, values = torch.cat((k_new, k_cache), dim=-2), torch.cat((v_new, v_cache), dim=-2)
    else:
        keys, values = torch.cat((k_cache, k_new), dim=-2), torch.cat((v_cache, v_new), dim=-2)  # (N, h, T + 1, d)
    if how == "old keys only":
        out = F.scaled_dot_product_attention(q, k_cache, v_cache)
    elif how == "is_causal":
        out = F.scaled_dot_product_attention(q, keys, values, is_causal=True)  # top-left: sees key 0 only
    elif how == "unscaled":
        out = torch.softmax(q @ keys.transpose(-2, -1), dim=-1) @ values
    else:
        out = F.scaled_dot_product_attention(q, keys, values)
    return out, keys, values


@learner_check
def check_kv_cache_step(attend_with_cache: Callable[..., tuple]) -> Verdict:
    """Check ``attend_with_cache(q, k_new, v_new, k_cache, v_cache)`` -> ``(output, k_cache, v_cache)``:
    q, k_new, v_new (N, h, 1, d) for the newest token; caches (N, h, T, d) -> output (N, h, 1, d) and the
    caches grown to (N, h, T + 1, d)."""

    def body() -> str:
        g = torch.Generator().manual_seed(71)
        N, h, T, d = 2, 3, 4, 8
        q, k_new, v_new = (torch.randn(N, h, 1, d, generator=g) * 2 for _ in range(3))
        k_cache, v_cache = torch.randn(N, h, T, d, generator=g) * 2, torch.randn(N, h, T, d, generator=g)
        args = (q, k_new, v_new, k_cache, v_cache)
        try:
            answer = attend_with_cache(*(t.clone() for t in args))
        except LearnerError as error:
            if "Sizes of tensors must match" not in str(error):
                raise
            raise wrong(
                f"torch.cat failed ({error.error}): the new token was concatenated along the wrong dimension. "
                "Tokens run "
                "along the length dimension, dim=2 (or -2): (N, h, T, d) + (N, h, 1, d) -> (N, h, T + 1, d)."
            ) from None
        if not isinstance(answer, tuple | list) or len(answer) != 3:
            raise wrong("return three tensors: `return output, k_cache, v_cache` (the caches grown by the new token).")
        out, keys, values = (
            as_tensor(t, name) for t, name in zip(answer, ("output", "k_cache", "v_cache"), strict=True)
        )
        right_out, right_keys, right_values = _cache_step(*(t.double() for t in args))
        if tuple(keys.shape) == (N, h, T, d) and close(keys, k_cache.double()):
            raise wrong(
                "the returned k_cache is the old one: append the new token's key and value, "
                "`torch.cat((k_cache, k_new), dim=2)`, and return the grown caches for the next step."
            )
        expect_shape(keys, right_keys.shape, "k_cache after the step (N, h, T + 1, d)")
        expect_shape(values, right_values.shape, "v_cache after the step (N, h, T + 1, d)")
        if close(keys, _cache_step(*(t.double() for t in args), how="prepended")[1]):
            raise wrong(
                "the new token went to the FRONT of the cache: positions must stay in order (the cache is read as "
                "tokens 0..T, and rotary positions depend on it): `torch.cat((k_cache, k_new), dim=2)`."
            )
        if not (close(keys, right_keys) and close(values, right_values)):
            raise wrong("the grown caches differ from the old caches with the new key and value appended at the end.")
        expect_shape(out, right_out.shape, "the output (N, h, 1, d)")
        if close(out, right_out):
            return "the new query attends over the T cached keys and its own; the caches grow by one token."
        mistakes = {
            "the output ignores the newest token: its query must attend to its own key and value too, so append "
            "them to the cache BEFORE attending.": "old keys only",
            "`is_causal=True` on a single new query: torch aligns the causal mask top-left, so the query (row 0) may "
            "only see key 0. The newest token may see every cached key: no mask is needed.": "is_causal",
            "the scores are not scaled by 1/√d.": "unscaled",
        }
        raise diagnose(
            out,
            {hint: _cache_step(*(t.double() for t in args), how=how)[0] for hint, how in mistakes.items()},
            "the caches are right but the output differs from attention of q over all T + 1 keys and values.",
        )

    return run_check("attention with a KV cache", body)


# ---------------------------------------------------------------------------------------------
# Exercise 3: the rotation of rotary position embeddings
# ---------------------------------------------------------------------------------------------
def _rotate(x: Tensor, angles: Tensor, how: str = "right") -> Tensor:
    """Rotate the pairs of x (..., T, d) by angles (T, d / 2); or one usual mistake."""
    cos, sin = angles.cos(), angles.sin()
    if how == "sin cos swapped":
        cos, sin = sin, cos
    if how == "halves":
        a, b = x[..., : x.size(-1) // 2], x[..., x.size(-1) // 2 :]
    else:
        a, b = x[..., 0::2], x[..., 1::2]
    sign = -1.0 if how == "clockwise" else 1.0
    first, second = a * cos - sign * b * sin, sign * a * sin + b * cos
    if how in {"halves", "concatenated"}:
        return torch.cat((first, second), dim=-1)
    return torch.stack((first, second), dim=-1).flatten(-2)


@learner_check
def check_rotate_pairs(rotate_pairs: Callable[[Tensor, Tensor], Tensor]) -> Verdict:
    """Check ``rotate_pairs(x, angles)``: x (..., T, d), angles (T, d / 2) -> (..., T, d), each pair (2m, 2m + 1)
    of position t rotated counter-clockwise by angles[t, m]."""

    def body() -> str:
        g = torch.Generator().manual_seed(72)
        x = torch.randn(2, 5, 8, generator=g)  # (N, T, d)
        angles = rotary_angles(5, 8).float()  # (T, d / 2): position t times base^(-2m/d)
        answer = as_tensor(rotate_pairs(x.clone(), angles.clone()), "the rotated x")
        expect_shape(answer, x.shape, "the rotated x (..., T, d), the shape of x")
        x64, angles64 = x.double(), angles.double()
        if close(answer, _rotate(x64, angles64)):
            return "each pair (x_2m, x_2m+1) turned by its angle, counter-clockwise, and put back in place."
        if close(answer, x64):
            raise wrong("x came back unchanged: rotate each pair (a, b) to (a cos φ − b sin φ, a sin φ + b cos φ).")
        mistakes = {
            "the pairs turn clockwise (the sign of sin is on the wrong term): rotating (a, b) by φ gives "
            "(a cos φ − b sin φ, a sin φ + b cos φ), lesson 04's rotation.": "clockwise",
            "the pairs are (m, m + d/2), the two halves of x: this lesson pairs NEIGHBOURS (2m, 2m + 1), "
            "`x[..., 0::2]` and `x[..., 1::2]`, as the sinusoidal encoding of lesson 01 does (some libraries "
            "use halves; both work, but a model must be trained with the one it runs with).": "halves",
            "the rotated pairs are not put back in place: `torch.cat` puts all first features before all second "
            "ones; interleave them again, `torch.stack((first, second), dim=-1).flatten(-2)`.": "concatenated",
            "cos and sin are swapped: at angle 0 (position 0) nothing must change, and cos 0 = 1.": "sin cos swapped",
        }
        raise diagnose(
            answer,
            {hint: _rotate(x64, angles64, how) for hint, how in mistakes.items()},
            "the shape is right, but the numbers differ from rotating each pair (x_2m, x_2m+1) by angles[t, m].",
        )

    return run_check("rotary rotation", body)
