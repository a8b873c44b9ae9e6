"""Checks for lesson 07's exercises: one step of the online softmax, the same step for tiled attention's running
output, one decoding step with a KV cache, the rotation of rotary embeddings, and a cached step with rotary positions.

Shapes: N batch, h heads, T tokens already cached, d head size, R rows of scores, B scores in one block.
Each exercise has a table of usual mistakes at module level: hint → the name of the mistake, which the
exercise's simulator (``_online_update``, ``_tiled_update``, ``_cache_step``, ``_rotate``, ``_rotary_step``)
computes; a check names the first mistake whose result matches the learner's.
"""

from __future__ import annotations

import math
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
from helpers.rotary import apply_rotary, rotary_angles

__all__ = [
    "check_kv_cache_step",
    "check_online_softmax_update",
    "check_rotary_cache_step",
    "check_rotate_pairs",
    "check_tiled_attention_update",
]


def _tensors(answer, names: tuple[str, ...]) -> tuple[Tensor, ...]:
    """The learner's tuple of len(names) tensors, or a hint to return exactly those."""
    if not isinstance(answer, tuple | list) or len(answer) != len(names):
        raise wrong(f"return {len(names)} tensors: `return {', '.join(names)}`.")
    return tuple(as_tensor(t, name) for t, name in zip(answer, names, strict=True))


# ---------------------------------------------------------------------------------------------
# Exercise 1: one update of the online softmax
# ---------------------------------------------------------------------------------------------
ONLINE_MAX_MISTAKES = {
    "new_max is the block's own maximum: the running maximum must remember earlier blocks, so take the larger "
    "of the running maximum and the block's.": "block max only",
    "new_max is one maximum over the whole block: every row keeps its own running maximum, so take the block's "
    "maximum PER ROW, `block.amax(dim=-1)`.": "whole-block max",
}
ONLINE_SUM_MISTAKES = {
    "the old sum is not rescaled: it was computed against the old maximum, so multiply it by "
    "`exp(running_max - new_max)` before adding the block's exponentials.": "no rescale",
    "the rescaling is upside down: the old sum must SHRINK when the max rises, so multiply by "
    "`exp(running_max - new_max)` (at most 1), not `exp(new_max - running_max)`.": "rescale inverted",
    "the old sum is multiplied by `running_max - new_max` without `exp`: the factor that moves a sum of "
    "exponentials from one reference to another is `exp(running_max - new_max)`.": "rescale without exp",
    "the block's exponentials use the block's own maximum: every term of the sum must be relative to the "
    "same reference, the new running max: `exp(block - new_max[..., None]).sum(-1)`.": "own block max",
    "the block's scores are summed without `exp`: the softmax's denominator is a sum of exponentials, "
    "`exp(block - new_max[..., None]).sum(-1)`.": "no exp",
    "the block's exponentials are summed over ALL rows: each row has its own sum, `.sum(dim=-1)`.": "all rows",
    "new_sum is the log of the sum: keep the sum itself (the log-sum-exp, new_max + log(new_sum), is only "
    "needed at the end, for a backward pass).": "log of sum",
}


def _online_update(running_max: Tensor, running_sum: Tensor, block: Tensor, how: str = "right"):
    """The right update (R,), (R,), (R, B) -> (R,), (R,), or one usual mistake (no row is blocked here)."""
    new_max = {"block max only": block.amax(-1), "whole-block max": torch.maximum(running_max, block.max())}.get(
        how, torch.maximum(running_max, block.amax(-1))
    )
    rescale = {
        "no rescale": torch.ones_like(running_max),
        "rescale inverted": torch.exp(new_max - running_max),
        "rescale without exp": running_max - new_max,
    }.get(how, torch.exp(running_max - new_max))
    reference = block.amax(-1) if how == "own block max" else new_max
    terms = block if how == "no exp" else torch.exp(block - reference[..., None])
    block_part = terms.sum() if how == "all rows" else terms.sum(-1)
    new_sum = running_sum * rescale + block_part
    return new_max, torch.log(new_sum) if how == "log of sum" else new_sum


def _online_cases() -> list[tuple[str, tuple[Tensor, Tensor], Tensor]]:
    g = torch.Generator().manual_seed(70)
    first = torch.randn(3, 4, generator=g) * 3  # the first block: running max -inf, sum 0
    later = torch.randn(3, 4, generator=g) * 3
    later[0] += 6  # row 0: the new block holds a larger score, the max must rise
    later[1] -= 6  # row 1: the old max stays
    start = (torch.full((3,), float("-inf")), torch.zeros(3))
    after_first = tuple(t.float() for t in _online_update(*start, first.double()))
    # The later block first: its maxima are finite, so every mistake shows as itself (on the first block an
    # upside-down rescale gives exp(+inf) · 0 = NaN).
    return [("a later block", after_first, later), ("the first block", start, first)]


@learner_check
def check_online_softmax_update(online_softmax_update: Callable[[Tensor, Tensor, Tensor], tuple]) -> Verdict:
    """Check ``online_softmax_update(running_max, running_sum, block)`` -> ``(new_max, new_sum)``:
    running_max and running_sum (R,), block (R, B)."""

    def body() -> str:
        for label, (running_max, running_sum), block in _online_cases():
            answer = online_softmax_update(running_max.clone(), running_sum.clone(), block.clone())
            new_max, new_sum = _tensors(answer, ("new_max", "new_sum"))
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
                raise diagnose(
                    new_max,
                    {hint: _online_update(*args, how)[0] for hint, how in ONLINE_MAX_MISTAKES.items()},
                    "new_max should be the largest score seen so far: the larger of running_max and the block's max.",
                )
            if not close(new_sum, right_sum):
                raise diagnose(
                    new_sum,
                    {hint: _online_update(*args, how)[1] for hint, how in ONLINE_SUM_MISTAKES.items()},
                    f"new_max is right, but new_sum differs for {label}: it should be "
                    "running_sum · exp(running_max − new_max) + Σ exp(block − new_max).",
                )
        return "the running max rises, the old sum shrinks by exp(old − new), the block's exponentials are added."

    return run_check("online softmax update", body)


# ---------------------------------------------------------------------------------------------
# Exercise 2: the same update for tiled attention's running output
# ---------------------------------------------------------------------------------------------
TILED_MISTAKES = {
    "the running output is not rescaled: like the sum, it was accumulated against the old maximum, so multiply "
    "it by `exp(running_max - new_max)[:, None]` before adding the block's `p @ v_block`.": "out not rescaled",
    "the running output is rescaled upside down: multiply by `exp(running_max - new_max)` (at most 1).": "out inverted",
    "the output is divided by the sum inside the step: keep the UNnormalised weighted sum, and divide once, "
    "after the last block (the sum is not final yet).": "normalised in the step",
    "the block's weights p use the block's own maximum: exponentiate the scores less new_max, the same "
    "reference as the rescaled output.": "own block max",
    "the block's scores multiply the values without `exp`: p are the exponentials of the scores less new_max.": (
        "no exp"
    ),
    "the block's softmax is taken inside the step: p are the exponentials of the scores less new_max, not "
    "divided by their own row sum, or blocks with a small sum weigh as much as blocks with a large one.": (
        "block softmax"
    ),
}


def _tiled_update(m: Tensor, total: Tensor, out: Tensor, scores: Tensor, v_block: Tensor, *, how: str = "right"):
    """(R,), (R,), (R, dv), (R, B), (B, dv) -> new max, sum, output; or one usual mistake."""
    new_max = torch.maximum(m, scores.amax(-1))
    rescale = torch.exp(m - new_max)
    p = torch.exp(scores - (scores.amax(-1) if how == "own block max" else new_max)[:, None])
    if how == "no exp":
        p = scores
    if how == "block softmax":
        p = torch.softmax(scores, dim=-1)
    new_total = total * rescale + torch.exp(scores - new_max[:, None]).sum(-1)
    out_rescale = {"out not rescaled": torch.ones_like(m), "out inverted": 1 / rescale}.get(how, rescale)
    new_out = out * out_rescale[:, None] + p @ v_block
    return new_max, new_total, new_out / new_total[:, None] if how == "normalised in the step" else new_out


@learner_check
def check_tiled_attention_update(tiled_attention_update: Callable[..., tuple]) -> Verdict:
    """Check ``tiled_attention_update(running_max, running_sum, running_out, scores, v_block)`` ->
    ``(new_max, new_sum, new_out)``: running_max, running_sum (R,), running_out (R, dv), scores (R, B) of one
    key block, v_block (B, dv); the output stays unnormalised."""

    def body() -> str:
        g = torch.Generator().manual_seed(73)
        m, total = torch.tensor([0.5, 2.0, -1.0]), torch.tensor([1.5, 0.7, 2.2])
        out, v_block = torch.randn(3, 5, generator=g), torch.randn(4, 5, generator=g)
        scores = torch.randn(3, 4, generator=g) * 2 + torch.tensor([[3.0], [-2.0], [0.0]])  # max rises in rows 0, 2
        args = (m, total, out, scores, v_block)
        answer = tiled_attention_update(*(t.clone() for t in args))
        new_max, new_sum, new_out = _tensors(answer, ("new_max", "new_sum", "new_out"))
        expect_shape(new_out, out.shape, "new_out (R, dv)")
        right = _tiled_update(*(t.double() for t in args))
        if not (close(new_max, right[0]) and close(new_sum, right[1])):
            raise wrong("new_max and new_sum should be exercise 1's update of the running max and sum.")
        if close(new_out, right[2]):
            return "the running output shrinks by the same exp(old − new) as the sum, then gains p @ v_block."
        raise diagnose(
            new_out,
            {hint: _tiled_update(*(t.double() for t in args), how=how)[2] for hint, how in TILED_MISTAKES.items()},
            "new_max and new_sum are right, but new_out should be "
            "running_out · exp(running_max − new_max) + exp(scores − new_max) @ v_block.",
        )

    return run_check("tiled attention update", body)


# ---------------------------------------------------------------------------------------------
# Exercise 3: one decoding step with a KV cache
# ---------------------------------------------------------------------------------------------
CACHE_MISTAKES = {
    "the output ignores the newest token: its query must attend to its own key and value too, so append "
    "them to the cache BEFORE attending.": "old keys only",
    "the output attends to the new token only: the new query must see every cached key as well as its own, "
    "the grown caches.": "new token only",
    "`is_causal=True` on a single new query: torch aligns the causal mask top-left, so the query (row 0) may "
    "only see key 0. The newest token may see every cached key: no mask is needed.": "is_causal",
    "the scores are not scaled by 1/√d.": "unscaled",
    "the scores are divided by d: scale by 1/√d (lesson 03).": "scaled by 1/d",
    "keys and values are swapped: `F.scaled_dot_product_attention(q, keys, values)`, scores from the keys, the "
    "output a mix of the values.": "keys values swapped",
    "the softmax runs over the wrong axis (over the one query, so every weight is 1): the weights of a query "
    "must sum to 1 over the keys, `dim=-1`.": "softmax over queries",
}


def _cache_step(q, k_new, v_new, k_cache, v_cache, *, how: str = "right") -> tuple[Tensor, Tensor, Tensor]:
    """Attention of the new query over the cached keys and its own; or one usual mistake."""
    if how == "prepended":
        keys, values = torch.cat((k_new, k_cache), dim=-2), torch.cat((v_new, v_cache), dim=-2)
    else:
        keys, values = torch.cat((k_cache, k_new), dim=-2), torch.cat((v_cache, v_new), dim=-2)  # (N, h, T + 1, d)
    scores = q @ keys.transpose(-2, -1)  # (N, h, 1, T + 1)
    out = {
        "old keys only": lambda: F.scaled_dot_product_attention(q, k_cache, v_cache),
        "new token only": lambda: v_new,
        "is_causal": lambda: F.scaled_dot_product_attention(q, keys, values, is_causal=True),  # sees key 0 only
        "unscaled": lambda: torch.softmax(scores, dim=-1) @ values,
        "scaled by 1/d": lambda: torch.softmax(scores / q.size(-1), dim=-1) @ values,
        "keys values swapped": lambda: F.scaled_dot_product_attention(q, values, keys),
        "softmax over queries": lambda: torch.softmax(scores / math.sqrt(q.size(-1)), dim=-2) @ values,
    }.get(how, lambda: F.scaled_dot_product_attention(q, keys, values))()
    return out, keys, values


def _cache_case(seed: int = 71) -> tuple[Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    N, h, T, d = 2, 3, 4, 8
    q, k_new, v_new = (torch.randn(N, h, 1, d, generator=g) * 2 for _ in range(3))
    return q, k_new, v_new, torch.randn(N, h, T, d, generator=g) * 2, torch.randn(N, h, T, d, generator=g)


def _grown_caches(answer, args: tuple[Tensor, ...], right_keys: Tensor, right_values: Tensor, new_keys: Tensor):
    """Complain about the order of the returned tensors or about the caches; return (output, keys, values)."""
    returned = isinstance(answer, tuple | list) and len(answer) == 3 and all(isinstance(t, Tensor) for t in answer)
    if returned and answer[0].shape == right_keys.shape and answer[2].shape == args[0].shape:
        raise wrong("the three tensors come back in the wrong order: `return output, k_cache, v_cache`.")
    out, keys, values = _tensors(answer, ("output", "k_cache", "v_cache"))
    T = args[3].size(-2)
    if tuple(keys.shape) == tuple(args[3].shape) and close(keys, args[3].double()):
        raise wrong(
            "the returned k_cache is the old one: append the new token's key and value along the positions' "
            "dimension, and return the grown caches for the next step."
        )
    if keys.dim() == 4 and keys.size(-2) == T + 2:
        raise wrong(f"k_cache grew by two tokens (T = {T} -> {T + 2}): the new key is appended twice.")
    expect_shape(keys, right_keys.shape, "k_cache after the step (N, h, T + 1, d)")
    expect_shape(values, right_values.shape, "v_cache after the step (N, h, T + 1, d)")
    if close(keys, new_keys):
        raise wrong(
            "the new token went to the FRONT of the cache: positions must stay in order (the cache is read as "
            "tokens 0..T, and rotary positions depend on it): append the new token after the cached ones."
        )
    if not (close(keys, right_keys) and close(values, right_values)):
        raise wrong("the grown caches differ from the old caches with the new key and value appended at the end.")
    return out, keys, values


@learner_check
def check_kv_cache_step(attend_with_cache: Callable[..., tuple]) -> Verdict:
    """Check ``attend_with_cache(q, k_new, v_new, k_cache, v_cache)`` -> ``(output, k_cache, v_cache)``:
    q, k_new, v_new (N, h, 1, d) for the newest token; caches (N, h, T, d) -> output (N, h, 1, d) and the
    caches grown to (N, h, T + 1, d)."""

    def body() -> str:
        args = _cache_case()
        try:
            answer = attend_with_cache(*(t.clone() for t in args))
        except LearnerError as error:
            if "Sizes of tensors must match" not in str(error):
                raise
            raise wrong(
                f"torch.cat failed ({error.error}): the new token was concatenated along the wrong dimension. "
                "Tokens run along the length dimension, dim=2 (or -2): (N, h, T, d) + (N, h, 1, d) -> (N, h, T + 1, d)."
            ) from None
        args64 = tuple(t.double() for t in args)
        right_out, right_keys, right_values = _cache_step(*args64)
        prepended = _cache_step(*args64, how="prepended")[1]
        out, _, _ = _grown_caches(answer, args64, right_keys, right_values, prepended)
        expect_shape(out, right_out.shape, "the output (N, h, 1, d)")
        if close(out, right_out):
            return "the new query attends over the T cached keys and its own; the caches grow by one token."
        raise diagnose(
            out,
            {hint: _cache_step(*args64, how=how)[0] for hint, how in CACHE_MISTAKES.items()},
            "the caches are right but the output differs from attention of q over all T + 1 keys and values.",
        )

    return run_check("attention with a KV cache", body)


# ---------------------------------------------------------------------------------------------
# Exercise 4: the rotation of rotary position embeddings
# ---------------------------------------------------------------------------------------------
ROTATE_MISTAKES = {
    "the pairs turn clockwise (the sign of sin is on the wrong term): rotating (a, b) by φ gives "
    "(a cos φ − b sin φ, a sin φ + b cos φ), lesson 04's rotation.": "clockwise",
    "one sign is wrong: (a cos φ + b sin φ, a sin φ + b cos φ) is no rotation (it changes lengths); "
    "the first feature is a cos φ − b sin φ.": "one sign",
    "the pairs are (k, k + d/2), the two halves of x: this lesson pairs NEIGHBOURS (2k, 2k + 1), "
    "`x[..., 0::2]` and `x[..., 1::2]`, as the sinusoidal encoding of lesson 01 does (some libraries "
    "use halves; both work, but a model must be trained with the one it runs with).": "halves",
    "the rotated pairs are not put back in place: `torch.cat` puts all first features before all second "
    "ones; interleave them again, `torch.stack((first, second), dim=-1).flatten(-2)`.": "concatenated",
    "the pairs are taken from the two halves but put back interleaved: read and write with the same "
    "layout, neighbours (2k, 2k + 1) both ways.": "halves in, interleaved out",
    "each pair comes back with its features swapped: stack (first, second), first = a cos φ − b sin φ.": "swapped out",
    "cos and sin are swapped: at angle 0 (position 0) nothing must change, and cos 0 = 1.": "sin cos swapped",
    "the angles are treated as degrees: `angles` is already in radians, pass it to cos and sin as it is.": "degrees",
    "the angles are multiplied by the position again: `angles[t, k]` already is t · θ_k.": "position twice",
}


def _rotate(x: Tensor, angles: Tensor, how: str = "right") -> Tensor:
    """Rotate the pairs of x (..., T, d) by angles (T, d / 2); or one usual mistake."""
    if how == "degrees":
        angles = torch.deg2rad(angles)
    if how == "position twice":
        angles = angles * torch.arange(angles.size(0), dtype=angles.dtype)[:, None]
    cos, sin = (angles.sin(), angles.cos()) if how == "sin cos swapped" else (angles.cos(), angles.sin())
    if how in {"halves", "halves in, interleaved out"}:
        a, b = x[..., : x.size(-1) // 2], x[..., x.size(-1) // 2 :]
    else:
        a, b = x[..., 0::2], x[..., 1::2]
    sign = -1.0 if how == "clockwise" else 1.0
    first = a * cos + b * sin if how == "one sign" else a * cos - sign * b * sin
    second = sign * a * sin + b * cos
    if how == "swapped out":
        first, second = second, first
    if how in {"halves", "concatenated"}:
        return torch.cat((first, second), dim=-1)
    return torch.stack((first, second), dim=-1).flatten(-2)


@learner_check
def check_rotate_pairs(rotate_pairs: Callable[[Tensor, Tensor], Tensor]) -> Verdict:
    """Check ``rotate_pairs(x, angles)``: x (..., T, d), angles (T, d / 2) -> (..., T, d), each pair (2k, 2k + 1)
    of position t rotated counter-clockwise by angles[t, k]."""

    def body() -> str:
        g = torch.Generator().manual_seed(72)
        x = torch.randn(2, 5, 8, generator=g)  # (N, T, d)
        angles = rotary_angles(5, 8).float()  # (T, d / 2): position t times base^(-2k/d)
        answer = as_tensor(rotate_pairs(x.clone(), angles.clone()), "the rotated x")
        expect_shape(answer, x.shape, "the rotated x (..., T, d), the shape of x")
        x64, angles64 = x.double(), angles.double()
        if close(answer, _rotate(x64, angles64)):
            return "each pair (x_2k, x_2k+1) turned by its angle, counter-clockwise, and put back in place."
        if close(answer, x64):
            raise wrong("x came back unchanged: rotate each pair (a, b) to (a cos φ − b sin φ, a sin φ + b cos φ).")
        raise diagnose(
            answer,
            {hint: _rotate(x64, angles64, how) for hint, how in ROTATE_MISTAKES.items()},
            "the shape is right, but the numbers differ from rotating each pair (x_2k, x_2k+1) by angles[t, k].",
        )

    return run_check("rotary rotation", body)


# ---------------------------------------------------------------------------------------------
# Exercise 5: a cached step with rotary positions
# ---------------------------------------------------------------------------------------------
ROTARY_STEP_MISTAKES = {
    "the new token is rotated as position 0: with a cache of T tokens the new token sits at position T, the "
    "cache's length. (At position 0 every new key looks like the first token's, the classic cache bug.)": (
        "position 0"
    ),
    "the new token is rotated one position too far: the cache holds positions 0 .. T-1, so the new one is "
    "T = k_cache.size(-2), not T + 1.": "position T + 1",
    "the new token is rotated one position too early: positions start at 0, so after T cached tokens the "
    "new one is at T, not T - 1.": "position T - 1",
    "the query is not rotated: rotate the query AND the key, both at the new token's position.": "query unrotated",
    "the new key is not rotated: the cache holds rotated keys, so rotate the new key before appending "
    "it.": "key unrotated",
    "the values are rotated too: positions enter the scores only, through queries and keys.": "values rotated",
    "the cached keys are rotated again: they were rotated when they entered the cache; rotate only the new "
    "token's query and key.": "cache rotated again",
}


def _rotary_step(q, k_new, v_new, k_cache, v_cache, *, how: str = "right") -> tuple[Tensor, Tensor, Tensor]:
    """The new token at position T: rotate its q and k, append k and v, attend; or one usual mistake."""
    T = k_cache.size(-2)
    position = {"position 0": 0, "position T + 1": T + 1, "position T - 1": T - 1}.get(how, T)
    positions = torch.tensor([position])
    q_rot = q if how == "query unrotated" else apply_rotary(q, positions)
    k_rot = k_new if how == "key unrotated" else apply_rotary(k_new, positions)
    v = apply_rotary(v_new, positions) if how == "values rotated" else v_new
    cached = apply_rotary(k_cache) if how == "cache rotated again" else k_cache
    keys, values = torch.cat((cached, k_rot), dim=-2), torch.cat((v_cache, v), dim=-2)
    return F.scaled_dot_product_attention(q_rot, keys, values), keys, values


@learner_check
def check_rotary_cache_step(rotary_cache_step: Callable[..., tuple]) -> Verdict:
    """Check ``rotary_cache_step(q, k_new, v_new, k_cache, v_cache)`` -> ``(output, k_cache, v_cache)``: as
    ``attend_with_cache``, but q and k_new (N, h, 1, d) are not rotated yet and the cache (N, h, T, d) holds keys
    already rotated at positions 0 .. T-1."""

    def body() -> str:
        q, k_new, v_new, k_cache, v_cache = _cache_case(seed=74)
        k_cache = apply_rotary(k_cache)  # cached keys were rotated at their own positions 0 .. T-1
        args = (q, k_new, v_new, k_cache, v_cache)
        answer = rotary_cache_step(*(t.clone() for t in args))
        args64 = tuple(t.double() for t in args)
        right_out, right_keys, right_values = _rotary_step(*args64)
        out, keys, values = _tensors(answer, ("output", "k_cache", "v_cache"))
        expect_shape(keys, right_keys.shape, "k_cache after the step (N, h, T + 1, d)")
        expect_shape(out, right_out.shape, "the output (N, h, 1, d)")
        if close(out, right_out) and close(keys, right_keys) and close(values, right_values):
            return "the new token's query and key turned to position T, the cache grown, the output attends to all."
        for hint, how in ROTARY_STEP_MISTAKES.items():
            result = _rotary_step(*args64, how=how)
            if close(out, result[0]) and close(keys, result[1]):
                raise wrong(hint)
        raise wrong(
            "rotate q and k_new at position T = k_cache.size(-2) with `helpers.apply_rotary(x, positions)`, append "
            "the rotated key and the value to the caches, then attend as in exercise 3."
        )

    return run_check("a cached step with rotary positions", body)
