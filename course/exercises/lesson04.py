"""Checks for lesson 04's exercises: splitting into heads and merging back; the multi-head forward pass.

Shapes (batch first, as in the lesson): N batch, T length, L target length, S source length,
E embedding size, h heads, d = E / h head size.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

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

__all__ = ["check_merge_heads", "check_multi_head_attention", "check_split_heads"]


# ---------------------------------------------------------------------------------------------
# Reference steps, with switches that reproduce the usual mistakes one at a time
# ---------------------------------------------------------------------------------------------
def _split(x: Tensor, h: int, how: str = "right") -> Tensor:
    """(N, T, E) -> (N, h, T, d), or one of the usual wrong ways."""
    N, T, E = x.shape
    d = E // h
    if how == "right":
        return x.view(N, T, h, d).transpose(1, 2)  # (N, T, h, d) -> (N, h, T, d)
    if how == "no transpose":
        return x.reshape(N, h, T, d)  # same shape, but the numbers of tokens and heads get mixed
    if how == "interleaved":
        return x.view(N, T, d, h).permute(0, 3, 1, 2)  # head i gets features i, i+h, i+2h, ...
    raise ValueError(how)


def _merge(x: Tensor, how: str = "right") -> Tensor:
    """(N, h, T, d) -> (N, T, E), or one of the usual wrong ways."""
    N, h, T, d = x.shape
    if how == "right":
        return x.transpose(1, 2).reshape(N, T, h * d)  # (N, T, h, d) -> (N, T, E)
    if how == "no transpose":
        return x.reshape(N, T, h * d)
    if how == "reversed":
        return x.flip(1).transpose(1, 2).reshape(N, T, h * d)
    if how == "interleaved":
        return x.permute(0, 2, 3, 1).reshape(N, T, h * d)  # (N, T, d, h): features of the heads interleaved
    raise ValueError(how)


def _reference_mha(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    projections: dict[str, nn.Linear],
    h: int,
    *,
    split: str = "right",
    merge: str = "right",
    out_proj: bool = True,
    scale_by: str = "d",
    softmax_dim: int = -1,
    swap_kv: bool = False,
    kv_from_query: bool = False,
    one_head: bool = False,
    v_from_key: bool = False,
    k_with: str = "k",
    v_with: str = "v",
    softmax: bool = True,
    transposed: str = "",
) -> Tensor:
    """Multi-head attention (no masks, no dropout) in float64: (N, L, E), (N, S, E), (N, S, E) -> (N, L, E).

    ``transposed`` names the projections used as ``x @ weight + bias`` instead of ``x @ weight.T + bias``.
    """
    p = {
        name: (lin.weight.double().T if name in transposed else lin.weight.double(), lin.bias.double())
        for name, lin in projections.items()
    }
    lin = lambda x, name: torch.nn.functional.linear(x.double(), *p[name])  # noqa: E731
    q, k, v = lin(query, "q"), lin(key, k_with), lin(value, v_with)  # (N, L, E), (N, S, E), (N, S, E)
    if v_from_key:
        v = lin(key, v_with)
    if swap_kv:
        k, v = lin(value, "k"), lin(key, "v")
    if kv_from_query:
        k, v = lin(query, "k"), lin(query, "v")
    heads = 1 if one_head else h
    q, k, v = (_split(x, heads, split) for x in (q, k, v))  # (N, h, T, d)
    d = q.size(-1)
    scale = {
        "d": math.sqrt(d),
        "E": math.sqrt(query.size(-1)),
        "none": 1.0,
        "d_per_head": math.sqrt(query.size(-1) // h),
        "h": math.sqrt(h),
    }[scale_by]
    scores = q @ k.transpose(-2, -1) / scale  # (N, h, L, S)
    weights = torch.softmax(scores, dim=softmax_dim) if softmax else scores
    out = _merge(weights @ v, merge)  # (N, h, L, d) -> (N, L, E)
    return lin(out, "o") if out_proj else out


# ---------------------------------------------------------------------------------------------
# Exercise 1a: split the embedding into heads
# ---------------------------------------------------------------------------------------------
def _split_cases() -> list[tuple[Tensor, int]]:
    generator = torch.Generator().manual_seed(40)
    # N, T, E, h chosen so that N, T, h and d all differ: a swapped dimension shows in the shape.
    return [(torch.randn(2, 3, 8, generator=generator), 4), (torch.randn(3, 5, 12, generator=generator), 2)]


def _split_shape_hints(N: int, T: int, h: int, d: int) -> dict[tuple[int, ...], str]:
    """Wrong shapes that name their mistake (the cases keep N, T, h and d apart, so no two coincide)."""
    return {
        (N, h, d, T): f"the shape is (N, h, d, T) = {(N, h, d, T)}: the last two dimensions are swapped. Each head "
        "needs one row per token, (N, h, T, d): `view(N, T, h, d).transpose(1, 2)`.",
        (N, d, T, h): f"the shape is (N, d, T, h) = {(N, d, T, h)}: you made d = {d} heads of size h = {h}. The "
        f"features split into h = {h} heads of d = E / h = {d} each: `view(N, T, h, d)`, not `view(N, T, d, h)`.",
        (T, N, h, d): f"the shape is (T, N, h, d) = {(T, N, h, d)}: `transpose(0, 1)` swapped the batch and the "
        "tokens. Swap the tokens and the heads: `.transpose(1, 2)`.",
    }


@learner_check
def check_split_heads(split_heads: Callable[[Tensor, int], Tensor]) -> Verdict:
    """Check ``split_heads(x, num_heads)``: (N, T, E) -> (N, h, T, d) with head i holding features i*d..(i+1)*d-1."""

    def body() -> str:
        for x, h in _split_cases():
            N, T, E = x.shape
            d = E // h
            answer = as_tensor(call_learner(split_heads, x.clone(), h), f"split_heads(x, {h})")
            if tuple(answer.shape) == (N, T, h, d):
                raise wrong(
                    f"the shape is (N, T, h, d) = {(N, T, h, d)}: you split the features but the heads are still "
                    "dim 2. "
                    "Swap the token and head dimensions with `.transpose(1, 2)` to get (N, h, T, d)."
                )
            if tuple(answer.shape) in _split_shape_hints(N, T, h, d):
                raise wrong(_split_shape_hints(N, T, h, d)[tuple(answer.shape)])
            expect_shape(
                answer, (N, h, T, d), f"for x of shape (N, T, E) = {(N, T, E)}, split_heads(x, {h})", "(N, h, T, d)"
            )
            if close(answer, _split(x.double(), h)):
                continue
            raise diagnose(
                answer,
                {
                    "reshape without transpose: `x.reshape(N, h, T, d)` has the right shape, but it cuts the "
                    "flat list of "
                    "numbers in the wrong places, so one 'head' gets features of several tokens. First `view(N, "
                    "T, h, d)` "
                    "(each token's E features -> h groups of d), then `.transpose(1, 2)`.": _split(
                        x.double(), h, "no transpose"
                    ),
                    "the heads get interleaved features (head 0 gets features 0, h, 2h, ...): view the last "
                    "dimension as "
                    "(h, d), not (d, h), so that head i gets the contiguous block of features i*d to (i+1)*d - 1, "
                    "as nn.MultiheadAttention does.": _split(x.double(), h, "interleaved"),
                },
                "the shape is right but the numbers are not in place: head i of token t should be x[:, t, "
                "i*d:(i+1)*d].",
            )
        return "(N, T, E) -> view (N, T, h, d) -> transpose (N, h, T, d): each head gets its own block of d features."

    return run_check("split into heads", body)


# ---------------------------------------------------------------------------------------------
# Exercise 1b: merge the heads back (concatenate)
# ---------------------------------------------------------------------------------------------
@learner_check
def check_merge_heads(merge_heads: Callable[[Tensor], Tensor]) -> Verdict:
    """Check ``merge_heads(x)``: (N, h, T, d) -> (N, T, E), heads side by side in order 0..h-1."""

    def body() -> str:
        for x, h in _split_cases():
            heads = _split(x, h).contiguous()  # (N, h, T, d), as the attention step produces it
            N, _, T, d = heads.shape
            try:
                answer = as_tensor(call_learner(merge_heads, heads.clone()), "merge_heads(x)")
            except LearnerError as problem:
                if isinstance(problem.error, RuntimeError) and "view" in str(problem.error):
                    raise wrong(
                        "`.view` fails after `.transpose`: transposing does not move the numbers in memory, so "
                        "the tensor "
                        "is no longer contiguous. Use `.reshape(N, T, E)` (or `.contiguous().view(N, T, E)`)."
                    ) from None
                raise
            if tuple(answer.shape) == (N, T, h, d):
                raise wrong(
                    f"the shape is (N, T, h, d) = {(N, T, h, d)}: the heads are in place but not yet concatenated. "
                    "Flatten the last two dimensions: `.reshape(N, T, h * d)`."
                )
            expect_shape(
                answer, (N, T, h * d), f"for x of shape (N, h, T, d) = {(N, h, T, d)}, merge_heads(x)", "(N, T, E)"
            )
            if close(answer, x.double()):
                continue
            raise diagnose(
                answer,
                {
                    "merge without transpose: `x.reshape(N, T, E)` (or `.view`) straight from (N, h, T, d) glues "
                    "numbers "
                    "of different tokens together. First `.transpose(1, 2)` to (N, T, h, d), then reshape to (N, "
                    "T, E).": _merge(heads.double(), "no transpose"),
                    "the heads are concatenated in the wrong order (last head first): keep heads 0, 1, ..., h-1 "
                    "in order, "
                    "as the output projection's columns expect.": _merge(heads.double(), "reversed"),
                    "the heads' features are interleaved (permuted to (N, T, d, h)): concatenate whole heads "
                    "side by side, "
                    "transpose to (N, T, h, d) and then flatten.": _merge(heads.double(), "interleaved"),
                },
                "the shape is right but the numbers are not in place: merging should undo the split exactly, "
                "merge_heads(split_heads(x)) == x.",
            )
        return "(N, h, T, d) -> transpose (N, T, h, d) -> reshape (N, T, E): merge undoes split exactly."

    return run_check("merge the heads", body)


# ---------------------------------------------------------------------------------------------
# Exercise 2: the multi-head attention forward pass
# ---------------------------------------------------------------------------------------------
def _projections(E: int, generator: torch.Generator) -> dict[str, nn.Linear]:
    projections = {}
    for name in "qkvo":
        linear = nn.Linear(E, E)
        with torch.no_grad():
            linear.weight.copy_(torch.randn(E, E, generator=generator) / math.sqrt(E))
            linear.bias.copy_(0.1 * torch.randn(E, generator=generator))
        projections[name] = linear
    return projections


def _mha_cases() -> list[tuple[Tensor, Tensor, Tensor, dict[str, nn.Linear], int]]:
    generator = torch.Generator().manual_seed(41)
    cases = []
    # Self-attention (L = S), then cross-attention with L != S and distinct key and value inputs.
    for N, L, S, E, h, self_attention in [(2, 4, 4, 8, 2, True), (2, 3, 5, 12, 3, False)]:
        query = 2 * torch.randn(N, L, E, generator=generator)
        key = query if self_attention else 2 * torch.randn(N, S, E, generator=generator)
        value = query if self_attention else 2 * torch.randn(N, S, E, generator=generator)
        cases.append((query, key, value, _projections(E, generator), h))
    return cases


def reference_multi_head_attention(query, key, value, q_proj, k_proj, v_proj, out_proj, num_heads) -> Tensor:
    """The exercise's answer computed by ``torch.nn.MultiheadAttention`` (batch first, no masks)."""
    E = query.size(-1)
    mha = nn.MultiheadAttention(E, num_heads, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([q_proj.weight, k_proj.weight, v_proj.weight]))
        mha.in_proj_bias.copy_(torch.cat([q_proj.bias, k_proj.bias, v_proj.bias]))
        mha.out_proj.weight.copy_(out_proj.weight)
        mha.out_proj.bias.copy_(out_proj.bias)
        return mha(query.double(), key.double(), value.double(), need_weights=False)[0]


# The usual mistakes: hint (formatted with E, h, d) -> the switches of ``_reference_mha`` that reproduce it.
_MHA_MISTAKES: dict[str, dict[str, Any]] = {
    "the output projection is missing: after merging the heads, apply `out_proj` so the heads' results are mixed "
    "into one (N, L, E) output.": dict(out_proj=False),
    "the projections use the weight untransposed, `x @ W.weight + W.bias`: nn.Linear stores its weight as "
    "(E_out, E_in) and computes `x @ W.weight.T + W.bias` (lesson 02, exercise 1). With square E x E weights "
    "both run, but only the transposed one is the projection; or call the layer, `q_proj(query)`.": dict(
        transposed="qkvo"
    ),
    "Q, K and V use their weights untransposed, `x @ W.weight + W.bias`: nn.Linear computes "
    "`x @ W.weight.T + W.bias` (lesson 02, exercise 1); or call the layers, `q_proj(query)`.": dict(transposed="qkv"),
    "the heads are split with reshape but no transpose, which mixes tokens and heads: "
    "`view(N, T, h, d).transpose(1, 2)`.": dict(split="no transpose"),
    "the heads are split AND merged with reshape but no transpose: `reshape(N, h, T, d)` and back `reshape(N, L, E)` "
    "have the right shapes, but each 'head' gets features of several tokens, so the heads attend over mixed-up rows. "
    "Split with `view(N, T, h, d).transpose(1, 2)` and merge with `.transpose(1, 2).reshape(N, L, E)`.": dict(
        split="no transpose", merge="no transpose"
    ),
    "the heads are merged by reshaping (N, h, L, d) straight to (N, L, E), which mixes tokens and heads: "
    "`.transpose(1, 2)` first, then reshape.": dict(merge="no transpose"),
    "the heads are concatenated in the wrong order: keep heads 0..h-1 in order before `out_proj`.": dict(
        merge="reversed"
    ),
    "the heads get interleaved features: split the last dimension as (h, d) so head i gets features "
    "i*d..(i+1)*d-1.": dict(split="interleaved", merge="interleaved"),
    "the scores are divided by √E (√{E}) instead of √d, the size of one head (√{d}).": dict(scale_by="E"),
    "the scores are not scaled: divide Q Kᵀ by √d, d = E / h.": dict(scale_by="none"),
    "the softmax runs over the queries: it must run over the keys, `dim=-1`.": dict(softmax_dim=-2),
    "this is one wide head over all E features: split Q, K and V into h heads of d = E / h first.": dict(
        one_head=True, scale_by="d_per_head"
    ),
    "this is one wide head scaled by √E: split Q, K and V into h heads of d = E / h first.": dict(one_head=True),
    "the softmax runs over dim=1, the heads: with (N, h, L, S) scores each query's row over the keys is the LAST "
    "dimension, `softmax(scores, dim=-1)`.": dict(softmax_dim=1),
    "the scores are divided by √h (√{h}, the number of heads) instead of √d, the size of one head (√{d}).": dict(
        scale_by="h"
    ),
    "the softmax is missing: turn each head's scaled scores into weights with `torch.softmax(scores, dim=-1)` "
    "before multiplying by V.": dict(softmax=False),
}
_MHA_MISTAKES |= {
    f"{name.upper()} is computed with `{other}_proj`: each of Q, K and V has its own projection, use `{name}_proj` "
    f"for {name.upper()}.": {f"{name}_with": other}
    for name, other in (("k", "q"), ("k", "v"), ("v", "q"), ("v", "k"))
}

# Mistakes that only cross-attention shows (with self-attention, query = key = value hides them).
_CROSS_MISTAKES: dict[str, dict] = {
    "V is computed from `key`: the values come from `value`, V = v_proj(value).": dict(v_from_key=True),
    "keys and values are swapped: K = k_proj(key), V = v_proj(value).": dict(swap_kv=True),
    "K and V are computed from `query`: that is self-attention. In cross-attention the queries come from `query`, "
    "the keys and values from `key` and `value`: K = k_proj(key), V = v_proj(value).": dict(kv_from_query=True),
}


def _mha_table(query, key, value, proj, h: int, cross: bool) -> dict[str, Callable[[], Tensor]]:
    """One case's mistakes, computed lazily, with their hints filled in for this case's sizes."""
    E = query.size(-1)
    mistakes = _MHA_MISTAKES | (_CROSS_MISTAKES if cross else {})
    return {
        hint.format(E=E, h=h, d=E // h): partial(_reference_mha, query, key, value, proj, h, **knobs)
        for hint, knobs in mistakes.items()
    }


def _call_mha(multi_head_attention, query, key, value, proj, h: int, cross: bool) -> Tensor:
    """The learner's output on copies of the inputs, refusing nn.MultiheadAttention and a tuple."""
    with FunctionRecorder() as recorder:
        try:
            result = call_learner(multi_head_attention, query.clone(), key.clone(), value.clone(), *proj.values(), h)
        except LearnerError as problem:
            if cross and isinstance(problem.error, RuntimeError):
                raise wrong(
                    f"your code works for self-attention but not for cross-attention, where the queries (length "
                    f"L = {query.size(1)}) and the keys/values (length S = {key.size(1)}) differ ({problem.error}). "
                    "Use `key`/`value` for K and V and split each with its own length."
                ) from None
            raise
    refuse_shortcuts(recorder, "multi-head attention", "project, split, attend per head, merge, `out_proj`.")
    if isinstance(result, tuple):
        raise wrong("return only the output tensor (N, L, E), not a tuple.")
    answer = as_tensor(result, "the output")
    expect_shape(answer, query.shape, "the output", "(N, L, E)")
    return answer


@learner_check
def check_multi_head_attention(multi_head_attention: Callable[..., Tensor]) -> Verdict:
    """Check ``multi_head_attention(query, key, value, q_proj, k_proj, v_proj, out_proj, num_heads)``.

    query (N, L, E), key and value (N, S, E), four ``nn.Linear(E, E)`` projections -> output (N, L, E),
    compared with ``torch.nn.MultiheadAttention`` holding the same weights; a mistake is named only when
    it explains the answer for self-attention and for cross-attention alike.
    """

    def body() -> str:
        answers: list[Tensor]  # the learner's result on each case
        expected: list[Tensor]  # the reference's
        answers, expected, tables = [], [], []
        for index, (query, key, value, given, h) in enumerate(_mha_cases()):
            proj = copy.deepcopy(given)  # the expected values' own projections: beyond the reach of the call
            try:
                answer = _call_mha(multi_head_attention, query, key, value, given, h, cross=index == 1)
            except Exception:
                if any(not close(a, e) for a, e in zip(answers, expected, strict=True)):
                    break  # the self-attention case already shows the mistake: name it from there
                raise
            answers.append(answer)
            expected.append(
                reference_multi_head_attention(query, key, value, proj["q"], proj["k"], proj["v"], proj["o"], h)
            )
            tables.append(_mha_table(query, key, value, proj, h, cross=index == 1))
        if all(close(a, e) for a, e in zip(answers, expected, strict=True)):
            return "the same output as nn.MultiheadAttention, for self-attention and for cross-attention with L != S."
        raise diagnose_cases(answers, tables, "the shape is right but the numbers differ from nn.MultiheadAttention's.")

    return run_check("multi-head attention", body)
