"""Checks for lesson 11's exercises: the cache's bytes, the absorbed matrices, and what one token caches.

Shapes: N batch, L tokens, E embedding size, h heads, d head size, d_c the latent's width, d_R the decoupled
rotary key's width, n_layers layers.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from course.exercises.feedback import (
    LearnerError,
    Verdict,
    as_int,
    as_tensor,
    call_learner,
    close,
    expect_shape,
    learner_check,
    run_check,
    wrong,
)
from helpers.latent_attention import LatentConfig, MultiHeadLatentAttention
from helpers.rotary import apply_rotary

__all__ = [
    "check_absorbed_weights",
    "check_cache_bytes",
    "check_cache_entry",
    "reference_absorbed_weights",
    "reference_cache_bytes",
    "reference_cache_entry",
]


# ---------------------------------------------------------------------------------------------
# Exercise 1: the cache's bytes per token
# ---------------------------------------------------------------------------------------------
def reference_cache_bytes(kind: str, n_layers: int, h: int, h_kv: int, d: int, d_c: int, d_R: int) -> int:
    """Bytes one token adds to the whole model's cache, 16-bit numbers (2 bytes): as
    ``helpers.kv_cache.cache_bytes_per_token``, written out (a learner's copy must not call the graduated helper,
    which the check refuses)."""
    per_layer = {"MHA": 2 * h * d, "GQA": 2 * h_kv * d, "MQA": 2 * d, "MLA": d_c + d_R}[kind]  # numbers per layer
    return n_layers * per_layer * 2


# Two configurations. The check diagnoses each kind at the first one first, and there every mistake below gives a
# different number: h_kv is not h / 2, where MHA counted with h_kv heads would read as MHA's keys without their
# values (in the second, h = 8 makes MQA counted with every query head read as bits).
_BYTES_CASES = [
    {"n_layers": 5, "h": 6, "h_kv": 2, "d": 8, "d_c": 20, "d_R": 2},
    {"n_layers": 3, "h": 8, "h_kv": 2, "d": 16, "d_c": 36, "d_R": 6},
]


def _bytes_mistakes(kind: str, n_layers: int, h: int, h_kv: int, d: int, d_c: int, d_R: int) -> dict[str, int]:
    """The usual mistakes for one kind and one configuration; those that halve every kind's count alike are named
    across the kinds, by ``_mistake_for_every_kind``."""
    right = reference_cache_bytes(kind, n_layers, h, h_kv, d, d_c, d_R)
    per_layer = right // n_layers
    mistakes = {
        "that is one layer's cache: every layer keeps its own, so multiply by n_layers.": per_layer,
        "that is in bits: a 16-bit number takes 2 bytes, not 16.": right * 8,
        "that is one layer's count of numbers: multiply by n_layers (every layer keeps its own cache) and by 2 "
        "bytes a number.": per_layer // 2,
    }
    if kind in ("MHA", "GQA", "MQA"):
        kv_heads = {"MHA": h, "GQA": h_kv, "MQA": 1}[kind]
        mistakes[
            "the queries are counted too: a query is used once, at its own step, and never cached; the cache keeps "
            "only keys and values."
        ] = n_layers * (h * d + 2 * kv_heads * d) * 2
    if kind == "MHA":
        mistakes[
            "MHA counted with h_kv heads: MHA caches every query head's key and value, h heads (h_kv is the "
            "grouped-query kinds' count, which MHA does not share)."
        ] = 2 * n_layers * h_kv * d * 2
    if kind in ("MHA", "GQA", "MQA"):
        mistakes["only the keys are counted: the cache holds keys AND values, 2 · (heads) · d per layer."] = right // 2
    if kind == "GQA":
        mistakes["that counts every query head (h); GQA caches only its h_kv key/value heads."] = (
            2 * n_layers * h * d * 2
        )
    if kind == "GQA":
        mistakes[
            "that counts g = h / h_kv, the query heads that share one key/value head; GQA caches the h_kv key/value "
            "heads themselves."
        ] = 2 * n_layers * (h // h_kv) * d * 2
    if kind == "MQA":
        mistakes["that counts every query head; multi-query attention caches ONE key and one value per layer."] = (
            2 * n_layers * h * d * 2
        )
        mistakes[
            "MQA counted with h_kv key/value heads, as GQA: multi-query attention has ONE key/value head, shared "
            "by every query head (h_kv is the grouped kind's count)."
        ] = 2 * n_layers * h_kv * d * 2
    if kind == "MLA":
        mistakes |= {
            "one byte per number: 16-bit numbers take 2 bytes each.": right // 2,
            # MLA alone at twice its count: a key and a value each, as the other kinds cache (4 bytes a number in
            # MLA's line alone gives the same count; counted that way everywhere, _EVERY_KIND names it).
            "MLA counted as a key and a value of d_c + d_R numbers each: MLA caches ONE latent of d_c numbers "
            "and ONE rotary key of d_R per token and layer, both shared by every head; nothing of it is cached "
            "twice.": right * 2,
            "the latent counted twice, as if keys and values had one each: MLA caches ONE latent c (d_c numbers), "
            "both are rebuilt from it.": n_layers * (2 * d_c + d_R) * 2,
            "the decoupled rotary key is missing: the cache keeps c AND the rotated key k^R, d_c + d_R per "
            "layer.": n_layers * d_c * 2,
            "the latent counted twice (once for keys, once for values) and the rotary key left out: MLA caches ONE "
            "latent c of d_c numbers AND one rotary key of d_R.": n_layers * 2 * d_c * 2,
            "the rotary key counted once per head: it is ONE key shared by all heads (only the queries have one "
            "per head).": n_layers * (d_c + h * d_R) * 2,
            "MLA counted per head, h latents and h rotary keys: the latent is ONE vector per token and layer, "
            "shared by every head (each head rebuilds its own key and value from it).": n_layers * h * (d_c + d_R) * 2,
            "that is the per-head keys and values the latent rebuilds: those are never cached.": 2
            * n_layers
            * h
            * d
            * 2,
        }
    return mistakes


# Mistakes that scale every kind's bytes alike, told apart by looking at all four kinds together: counting numbers
# instead of bytes halves MLA's count too, while counting only the keys leaves MLA's (one latent, no keys) right.
_EVERY_KIND = {
    0.5: "one byte per number (or numbers, not bytes): every kind came out half, MLA's latent included; a 16-bit "
    "number takes 2 bytes.",
    2.0: "4 bytes a number: that is 32-bit (float32) numbers; the exercise counts 16-bit numbers, 2 bytes each.",
    8.0: "that is in bits: a 16-bit number takes 2 bytes, not 16.",
}


def _mistake_for_every_kind(answers: dict[tuple[str, int], int]) -> str | None:
    """The hint for a factor that every kind's and every configuration's answer is off by, if there is one."""
    for factor, hint in _EVERY_KIND.items():
        if all(
            answer == factor * reference_cache_bytes(kind, **_BYTES_CASES[i]) for (kind, i), answer in answers.items()
        ):
            return hint
    return None


def _as_bytes(answer: object, kind: str) -> int:
    """The learner's number of bytes, refused unless it is a plain int (``as_int`` names what came instead)."""
    why = (
        "a count of bytes is a whole number, and the cache tables the lesson prints add such ints. Keep the "
        "arithmetic in ints (// for a division), or turn the result into a Python int before returning it."
    )
    return as_int(answer, "a number of bytes", f"for {kind}", why)


@learner_check(returns="an int (a number of bytes)")
def check_cache_bytes(cache_bytes: Callable[..., int]) -> Verdict:
    """Check ``cache_bytes(kind, n_layers, h, h_kv, d, d_c, d_R) -> int`` for the four kinds."""

    def body() -> str:
        answers = {
            (kind, i): _as_bytes(call_learner(cache_bytes, kind, **case), kind)
            for kind in ("MHA", "GQA", "MQA", "MLA")
            for i, case in enumerate(_BYTES_CASES)
        }
        every_kind = _mistake_for_every_kind(answers)
        if every_kind is not None:
            raise wrong(every_kind)
        for (kind, i), answer in answers.items():
            case = _BYTES_CASES[i]
            expected = reference_cache_bytes(kind, **case)
            if answer == expected:
                continue
            sizes = ", ".join(f"{k} = {v}" for k, v in case.items())
            for hint, result in _bytes_mistakes(kind, **case).items():
                if answer == result:
                    raise wrong(f"{kind} with {sizes}: {hint}")
            raise wrong(f"{kind} with {sizes}: expected {expected} bytes per token, got {answer}.")
        return "MHA, GQA, MQA and MLA: the bytes a token adds to the whole model's cache, all layers counted."

    return run_check("cache bytes per token", body)


# ---------------------------------------------------------------------------------------------
# Exercise 2: the absorbed matrices
# ---------------------------------------------------------------------------------------------
def reference_absorbed_weights(layer: MultiHeadLatentAttention) -> tuple[Tensor, Tensor]:
    """(W_UK,iᵀ W_Q,i per head (h, d_c, E), W_O,i W_UV,i per head (h, E, d_c)), as ``layer.absorbed_weights()``,
    written out for a layer without query compression (a learner's copy must not call the graduated method)."""
    h, d, d_c = layer.config.num_heads, layer.config.head_dim, layer.config.latent_dim
    w_q = layer.q_proj.weight.view(h, d, -1)  # (h, d, E)
    w_uk, w_uv = layer.k_up.weight.view(h, d, d_c), layer.v_up.weight.view(h, d, d_c)  # (h, d, d_c) each
    w_o = layer.out_proj.weight.view(-1, h, d).transpose(0, 1)  # (h, E, d)
    return w_uk.transpose(1, 2) @ w_q, w_o @ w_uv


def _absorb_case(sizes: dict | None = None) -> MultiHeadLatentAttention:
    torch.manual_seed(11)
    config = LatentConfig(
        **(sizes or {"embed_dim": 12, "num_heads": 3, "head_dim": 4, "latent_dim": 5, "rotary_dim": 2})
    )
    return MultiHeadLatentAttention(config).double().requires_grad_(False)


def _sizes_written_in(error: LearnerError) -> bool:
    """Whether the learner's error is a reshape that did not fit: the mark of sizes written in."""
    message = str(error.error)
    return isinstance(error.error, RuntimeError) and "invalid for input of size" in message


def _product_did_not_fit(error: LearnerError) -> bool:
    """Whether the learner's error is a matrix product whose inner sizes differ (a factor not transposed)."""
    message = str(error.error)
    return isinstance(error.error, RuntimeError) and any(
        mark in message for mark in ("cannot be multiplied", "batch2 tensor", "must match the size of tensor")
    )


# A second layer of other sizes: an answer with the first layer's h, d, d_c or E written in fails here.
OTHER_SIZES = {"embed_dim": 10, "num_heads": 2, "head_dim": 3, "latent_dim": 7, "rotary_dim": 2}


def _absorb_mistakes(layer: MultiHeadLatentAttention) -> tuple[dict, dict]:
    h, d, d_c, E = 3, 4, 5, 12
    w_q = layer.q_proj.weight.view(h, d, E)
    w_uk, w_uv = layer.k_up.weight.view(h, d, d_c), layer.v_up.weight.view(h, d, d_c)
    w_o = layer.out_proj.weight.view(E, h, d).transpose(0, 1)  # (h, E, d)
    query: dict[str, Tensor | list[Tensor]] = {
        "the queries were folded with W_UV: the score's key comes from W_UK (k_i = W_UK,i c), so the query side "
        "needs W_UK,iᵀ W_Q,i; W_UV belongs with the output.": w_uv.transpose(1, 2) @ w_q,
        "the 1/√(d + d_R) scale (or a 1/√d) is folded in: keep the matrices as they are, the scale stays in the "
        "score.": [(w_uk.transpose(1, 2) @ w_q) / width**0.5 for width in (d + 2, d)],
        "W_UK was split as (h, d_c, d): k_up.weight is (h·d, d_c), nn.Linear's (out, in), so head i's block is d "
        "ROWS of d_c numbers, weight.view(h, d, d_c); a view as (h, d_c, d) cuts the rows across heads.": (
            layer.k_up.weight.view(h, d_c, d) @ w_q
        ),
        "every head got head 0's fold: each head i has its own W_Q,i and W_UK,i, so its own product.": (
            (w_uk.transpose(1, 2) @ w_q)[:1].expand(h, d_c, E)
        ),
        "one matrix summed over the heads, copied h times: each head has its own W_Q,i and W_UK,i, and its own fold.": (
            w_uk.transpose(1, 2) @ w_q
        )
        .sum(0, keepdim=True)
        .expand(h, d_c, E),
        "the heads are read interleaved (every h-th row): head i is rows i·d .. (i + 1)·d - 1 of W_Q and W_UK, "
        "weight.view(h, d, ...).": layer.k_up.weight.view(d, h, d_c).transpose(0, 1).transpose(1, 2)
        @ layer.q_proj.weight.view(d, h, E).transpose(0, 1),
        "W_Q's heads are read interleaved (every h-th row) while W_UK's are read in blocks: both are (h·d, ...) "
        "with head i in rows i·d .. (i + 1)·d - 1, so split them the same way.": w_uk.transpose(1, 2)
        @ layer.q_proj.weight.view(d, h, E).transpose(0, 1),
        "W_Q was split as if it were stored (E, h·d): q_proj.weight is (h·d, E), nn.Linear's (out, in), so "
        "head i's block is d ROWS of E numbers; a view as (h, E, d) cuts the rows across heads.": w_uk.transpose(1, 2)
        @ layer.q_proj.weight.view(h, E, d).transpose(1, 2),
    }
    output: dict[str, Tensor | list[Tensor]] = {
        "the output was folded with W_UK: a head's output is weights · values, v_i = W_UV,i c, so the output "
        "side needs W_O,i W_UV,i.": w_o @ w_uk,
        "W_O's head blocks were taken as rows: out_proj.weight is (E, h·d) and head i's block is its COLUMNS "
        "i·d .. (i + 1)·d - 1, weight.view(E, h, d).": layer.out_proj.weight.view(h, d, E).transpose(1, 2) @ w_uv,
        "one matrix summed over the heads: each head's output has its own W_O,i W_UV,i.": (w_o @ w_uv)
        .sum(0, keepdim=True)
        .expand(h, E, d_c),
        "a scale is folded into the output: 1/√(d + d_R) scales the score alone, before the softmax; the output "
        "side is the weights times the values, with no scale.": [(w_o @ w_uv) / width**0.5 for width in (d + 2, d)],
        "W_UV was split as (h, d_c, d): v_up.weight is (h·d, d_c), nn.Linear's (out, in), so head i's block is d "
        "ROWS of d_c numbers, weight.view(h, d, d_c); a view as (h, d_c, d) cuts the rows across heads.": (
            w_o @ layer.v_up.weight.view(h, d_c, d).transpose(1, 2)
        ),
        "every head got head 0's fold: each head i has its own W_O,i and W_UV,i, so its own product.": (
            (w_o @ w_uv)[:1].expand(h, E, d_c)
        ),
    }
    query[_rolled_hint("W_UK", "W_Q")] = _rolled(w_uk.transpose(1, 2), w_q)
    output[_rolled_hint("W_O", "W_UV")] = _rolled(w_o, w_uv)
    return query, output


def _rolled_hint(left_name: str, right_name: str) -> str:
    return (
        f"the heads are rolled by one: a head's {left_name} block met another head's {right_name} block (or the "
        "folds came out one head off). Pair each head's blocks with the same head's, in the heads' own order."
    )


def _rolled(left: Tensor, right: Tensor) -> list[Tensor]:
    """The per-head product ``left[i] @ right[i]`` with the heads of one factor, or of the result, rolled by one
    (an index off by one somewhere in a loop over the heads): six answers that one hint names."""
    cases = [left.roll(k, dims=0) @ right for k in (1, -1)] + [left @ right.roll(k, dims=0) for k in (1, -1)]
    return [*cases, *((left @ right).roll(k, dims=0) for k in (1, -1))]


def _diagnose_fold(answer: Tensor, mistakes: dict[str, Tensor | list[Tensor]], fallback: str, atol: float = 1e-8):
    """``diagnose``, where a mistake may stand for several answers (a list): any of them names it."""
    for hint, results in mistakes.items():
        if any(close(answer, result, atol=atol) for result in (results if isinstance(results, list) else [results])):
            return wrong(hint)
    return wrong(fallback)


def _name_crossed_folds(query: Tensor, output: Tensor, layer: MultiHeadLatentAttention) -> None:
    """Raise the hint for two folds that each took the other's matrices: W_UK and W_UV swapped in both, or each fold
    the other one transposed (the shapes then fit, so the shape checks pass them)."""
    h, d, d_c, E = 3, 4, 5, 12
    w_q = layer.q_proj.weight.view(h, d, E)
    w_uk, w_uv = layer.k_up.weight.view(h, d, d_c), layer.v_up.weight.view(h, d, d_c)
    w_o = layer.out_proj.weight.view(E, h, d).transpose(0, 1)
    right_query, right_output = reference_absorbed_weights(layer)
    if close(query, w_uv.transpose(1, 2) @ w_q, atol=1e-8) and close(output, w_o @ w_uk, atol=1e-8):
        raise wrong(
            "W_UK and W_UV are swapped in both folds: the key k_i = W_UK,i c meets the query, so the query side is "
            "W_UK,iᵀ W_Q,i; the value v_i = W_UV,i c is what the output carries, so the output side is W_O,i W_UV,i."
        )
    if close(query, right_output.transpose(1, 2), atol=1e-8) and close(output, right_query.transpose(1, 2), atol=1e-8):
        raise wrong(
            "each fold is the other one transposed: (query_to_latent, latent_to_out) come in that order, the query's "
            "fold W_UK,iᵀ W_Q,i (h, d_c, E) first and the output's W_O,i W_UV,i (h, E, d_c) second, neither "
            "transposed."
        )


@learner_check
def check_absorbed_weights(absorb: Callable[[MultiHeadLatentAttention], tuple[Tensor, Tensor]]) -> Verdict:
    """Check ``absorb(layer) -> (query_to_latent (h, d_c, E), latent_to_out (h, E, d_c))``."""

    def body() -> str:
        layer, pristine = _absorb_case(), _absorb_case()  # the same weights; the references read the pristine one
        try:
            answer = call_learner(absorb, layer)
        except LearnerError as error:
            if _product_did_not_fit(error):
                raise wrong(
                    f"your code raised {error}: a product's shapes did not fit. The blocks are W_Q,i (d, E), "
                    "W_UK,i and W_UV,i (d, d_c), W_O,i (E, d): a query fold maps E to d_c through d, an output fold "
                    "d_c to E through d. The two factors must meet along d: check their order, and turn (transpose) "
                    "a block whose d is on the wrong side."
                ) from error
            if _sizes_written_in(error):
                raise wrong(
                    f"your code raised {error}: the sizes written into it are not this layer's (h = 3, d = 4, "
                    "d_c = 5, E = 12 here; SmolLM2's or the lesson's tiny layer's elsewhere). Read h, d, d_c and E "
                    "from the layer, its config or its weights' shapes, instead of writing numbers in."
                ) from error
            raise
        # A weight the call changed is refused by call_learner, named; the references read the pristine layer.
        if not isinstance(answer, tuple | list) or len(answer) != 2:
            raise wrong("return two tensors: (query_to_latent, latent_to_out)")
        query, output = (
            as_tensor(a, name) for a, name in zip(answer, ("query_to_latent", "latent_to_out"), strict=True)
        )
        if tuple(query.shape) == (3, 12, 5) and tuple(output.shape) == (3, 5, 12):
            want_query, want_output = reference_absorbed_weights(pristine)
            if close(query, want_output, atol=1e-8) and close(output, want_query, atol=1e-8):
                raise wrong(
                    "the two folds are right but in swapped order: return (query_to_latent, latent_to_out), the "
                    "query's fold (h, d_c, E) first and the output's (h, E, d_c) second."
                )
            raise wrong(
                "both folds are transposed: query_to_latent is (h, d_c, E), a map from x (E) into c's space, and "
                "latent_to_out (h, E, d_c), a map from c's space back to E features."
            )
        if tuple(query.shape) == (3, 12, 5):
            raise wrong(
                "query_to_latent is (h, E, d_c): transpose it, (h, d_c, E), so that it maps x (E) to c's space."
            )
        expect_shape(query, (3, 5, 12), "query_to_latent", "(h, d_c, E)")
        if tuple(output.shape) == (3, 5, 12):
            raise wrong("latent_to_out is (h, d_c, E): transpose it, (h, E, d_c), a map from c's space to E features.")
        expect_shape(output, (3, 12, 5), "latent_to_out", "(h, E, d_c)")
        expected_query, expected_output = reference_absorbed_weights(pristine)
        _name_crossed_folds(query, output, pristine)
        query_mistakes, output_mistakes = _absorb_mistakes(pristine)
        if not close(query, expected_query, atol=1e-8):
            raise _diagnose_fold(
                query, query_mistakes, "query_to_latent[i] should be W_UK,iᵀ W_Q,i, (d_c, d) @ (d, E)."
            )
        if not close(output, expected_output, atol=1e-8):
            raise _diagnose_fold(output, output_mistakes, "latent_to_out[i] should be W_O,i W_UV,i, (E, d) @ (d, d_c).")
        expected = reference_absorbed_weights(_absorb_case(OTHER_SIZES))
        sizes = (
            "right for one layer, wrong for a layer of other sizes (h = 2, d = 3, d_c = 7, E = 10): read h, d, "
            "d_c and E from the layer (its config or its weights' shapes) instead of writing numbers in"
        )
        try:
            answer = call_learner(absorb, _absorb_case(OTHER_SIZES))
        except LearnerError as error:  # e.g. a .view with the first layer's sizes
            raise wrong(f"{sizes} (on it, your code raised {error})") from error
        if (
            not isinstance(answer, tuple | list)
            or len(answer) != 2
            or not all(
                isinstance(a, Tensor) and a.shape == e.shape and close(a, e, atol=1e-8)
                for a, e in zip(answer, expected, strict=True)
            )
        ):
            raise wrong(sizes + ".")
        return "both folds per head: the absorbed layer gives the naive layer's outputs without building a key."

    return run_check("the absorbed matrices", body)


# ---------------------------------------------------------------------------------------------
# Exercise 3: what one token puts in the cache
# ---------------------------------------------------------------------------------------------
def reference_cache_entry(
    x: Tensor, positions: Tensor, w_dkv: Tensor, w_kr: Tensor, base: float
) -> tuple[Tensor, Tensor]:
    """x (N, L, E) at positions (L,) -> (c = x W_DKVᵀ (N, L, d_c), k^R = RoPE(x W_KRᵀ) (N, L, d_R))."""
    return x @ w_dkv.T, apply_rotary(x @ w_kr.T, positions, base)


def _rotate_halves(x: Tensor, positions: Tensor, base: float) -> Tensor:
    """The rotation of pairs (k, k + d/2): another library's convention, not ``helpers.rotary``'s."""
    half = x.size(-1) // 2
    paired = torch.stack((x[..., :half], x[..., half:]), dim=-1).flatten(-2)  # (a0, b0, a1, b1, ...)
    rotated = apply_rotary(paired, positions, base)
    return torch.cat((rotated[..., 0::2], rotated[..., 1::2]), dim=-1)


@learner_check
def check_cache_entry(cache_entry: Callable[..., tuple[Tensor, Tensor]]) -> Verdict:
    """Check ``cache_entry(x, positions, w_dkv, w_kr, base) -> (c, k_rope)``."""

    def body() -> str:
        generator = torch.Generator().manual_seed(12)
        N, L, E, d_c, d_R, base = 2, 4, 10, 6, 4, 100.0
        x = torch.randn(N, L, E, dtype=torch.float64, generator=generator)
        positions = torch.arange(7, 7 + L)  # a cached step: the new tokens do not start at 0
        w_dkv = torch.randn(d_c, E, dtype=torch.float64, generator=generator)
        w_kr = torch.randn(d_R, E, dtype=torch.float64, generator=generator)
        try:
            answer = call_learner(cache_entry, x.clone(), positions.clone(), w_dkv.clone(), w_kr.clone(), base)
        except LearnerError as error:
            if _product_did_not_fit(error):
                raise wrong(
                    f"your code raised {error}: a product's shapes did not fit. w_dkv (d_c, E) and w_kr (d_R, E) "
                    "are stored (out, in), as nn.Linear's weights are, and x (N, L, E) ends in E: it meets each "
                    "weight turned (transposed), so that its E features meet the weight's E."
                ) from error
            if _sizes_written_in(error):
                raise wrong(
                    f"your code raised {error}: the sizes written into it are not the inputs' (N = {N}, L = {L}, "
                    f"E = {E}, d_c = {d_c}, d_R = {d_R} here; SmolLM2's or the lesson's layer's elsewhere). Read "
                    "them from the tensors' shapes instead of writing numbers in."
                ) from error
            raise
        if not isinstance(answer, tuple | list) or len(answer) != 2:
            raise wrong("return two tensors: (c, k_rope)")
        c, k_rope = (as_tensor(a, name) for a, name in zip(answer, ("c", "k_rope"), strict=True))
        if tuple(c.shape) == (N, L, d_R) and tuple(k_rope.shape) == (N, L, d_c):
            raise wrong(
                "the two are in swapped order: return (c, k_rope), the latent (N, L, d_c) first and the rotary key "
                "(N, L, d_R) second."
            )
        if tuple(c.shape) == (N, 1, d_c):
            raise wrong(
                f"c has one token, (N, 1, d_c): every one of the L = {L} new tokens puts its own latent and rotary "
                "key in the cache, (N, L, d_c) and (N, L, d_R)."
            )
        expect_shape(c, (N, L, d_c), "c", "(N, L, d_c)")
        if k_rope.dim() == 4:
            raise wrong("k_rope has a head dimension: the decoupled key is ONE key shared by all heads, (N, L, d_R).")
        expect_shape(k_rope, (N, L, d_R), "k_rope", "(N, L, d_R)")
        want_c, want_k = reference_cache_entry(x, positions, w_dkv, w_kr, base)
        plain_c, plain_k = x @ w_dkv.T, x @ w_kr.T
        if close(c, apply_rotary(plain_c, positions, base)) and close(k_rope, plain_k):
            raise wrong(
                "the latent was rotated and the rotary key was not: rotating c would put a position between W_UK "
                "and the query (no absorption). Leave c as it is and rotate the decoupled key."
            )
        if close(c, apply_rotary(plain_c, positions, base)):
            raise wrong("the latent c is rotated: c must stay position-free, only the decoupled key is rotated.")
        if not close(c, want_c):
            raise wrong("c should be x @ w_dkv.T, (N, L, d_c): w_dkv is (d_c, E), rows = outputs, as in nn.Linear.")
        if close(k_rope, want_k):
            return "the latent as it is and the rotary key rotated by each token's own position: what MLA caches."
        raise _diagnose_fold(
            k_rope,
            {
                "the rotary key is not rotated: rotate it by each token's position (helpers.rotary.apply_rotary), "
                "once, before it is cached.": plain_k,
                "rotated by positions 0 .. L - 1: a cached step's new tokens sit at `positions` (here 7 .. 10).": (
                    apply_rotary(plain_k, torch.arange(L), base)
                ),
                "rotated with base 10000: use the model's `base` (here 100).": apply_rotary(plain_k, positions),
                "the rotation pairs features (k, k + d/2): the course rotates adjacent pairs (2k, 2k + 1), as "
                "helpers.rotary.apply_rotary does.": _rotate_halves(plain_k, positions, base),
                "rotated backwards (by minus the position): apply_rotary(x, positions) turns by +m·θ_k.": (
                    apply_rotary(plain_k, -positions, base)
                ),
                "the positions are off by one: token j of this step sits at positions[j] itself (here 7 .. 10), "
                "not one before or after it.": [apply_rotary(plain_k, positions + k, base) for k in (1, -1)],
                "every token was rotated by one position (the first's or the last's): each token turns by its OWN "
                "position, positions[j] for token j.": [
                    apply_rotary(plain_k, positions[j].expand_as(positions), base) for j in (0, -1)
                ],
                "rotated twice: the decoupled key is turned ONCE by its position before it is cached (the query is "
                "turned at its own step; the score sees the difference).": apply_rotary(
                    apply_rotary(plain_k, positions, base), positions, base
                ),
                "x was rotated before the projection: the rotation acts on the key's own d_R features, so project "
                "by w_kr first, then rotate the result.": apply_rotary(x, positions, base) @ w_kr.T,
                "the rotary key was taken from the latent (its first d_R features): it has its own projection, "
                "w_kr, straight from x.": apply_rotary(want_c[..., :d_R], positions, base),
                "the rotary key is scaled by 1/√d_R: the cache keeps the key as it is; the score's scale comes "
                "later, on the score.": want_k / d_R**0.5,
            },
            "k_rope is the decoupled rotary key: x projected by w_kr, then rotated by each token's position with "
            "the model's base, (N, L, d_R).",
            atol=1e-4,
        )

    return run_check("what one token puts in the cache", body)
