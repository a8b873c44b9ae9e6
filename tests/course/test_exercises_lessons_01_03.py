"""The exercise checks of lessons 01-03: each usual mistake gets its own hint.

Every check is fed a correct answer (pass, in float32 and float64), an answer that still raises
NotImplementedError (not attempted), and one deliberately wrong answer per known mistake (the
hint that names it).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_hint, not_attempted

import helpers.attention
from course.exercises.lesson01 import check_one_hot_lookup, check_positional_encoding
from course.exercises.lesson02 import check_cross_attention_inputs, check_linear_projection
from course.exercises.lesson03 import check_attention_weights, check_masked_attention, check_padding_to_attn_mask
from course.exercises.shortcuts import MASK_TYPE, RULE


# ---------------------------------------------------------------------------------------------
# Lesson 01: one-hot look-up
# ---------------------------------------------------------------------------------------------
def test_one_hot_lookup_correct_passes(capsys):
    def lookup(ids, weight):
        return F.one_hot(ids, num_classes=weight.shape[0]).to(weight.dtype) @ weight

    verdict = check_one_hot_lookup(lookup)
    assert verdict.passed, verdict
    assert "[PASS]" in capsys.readouterr().out


def test_one_hot_lookup_extra_kwargs_pass_and_another_dtype_is_named():
    def lookup(ids, weight, *, dtype=None):
        dtype = weight.dtype if dtype is None else dtype
        return F.one_hot(ids, weight.shape[0]).to(dtype) @ weight.to(dtype)

    assert check_one_hot_lookup(lookup).passed
    # The table is float32: a float64 result is another dtype than the one asked for (#59 item 6).
    verdict = check_one_hot_lookup(lambda ids, weight: lookup(ids, weight, dtype=torch.float64))
    assert_hint(verdict, "dtype changed", "torch.float32", "torch.float64")


def test_one_hot_lookup_not_attempted(capsys):
    verdict = check_one_hot_lookup(not_attempted)
    assert verdict.status == "not attempted"
    assert "[NOT YET] one-hot look-up: not attempted yet: write your code" in capsys.readouterr().out


def test_one_hot_lookup_transposed_table():
    verdict = check_one_hot_lookup(lambda ids, w: F.one_hot(ids, w.shape[0]).float() @ w.T)
    assert_hint(verdict, "transposed table")


def test_one_hot_lookup_integer_one_hot():
    verdict = check_one_hot_lookup(lambda ids, w: F.one_hot(ids, w.shape[0]) @ w)
    assert_hint(verdict, "integers", ".float()")


def test_one_hot_lookup_missing_num_classes():
    verdict = check_one_hot_lookup(lambda ids, w: F.one_hot(ids).float() @ w)
    assert_hint(verdict, "num_classes", "the table's first dimension")


def test_one_hot_lookup_returns_one_hot_only():
    verdict = check_one_hot_lookup(lambda ids, w: F.one_hot(ids, w.shape[0]).float())
    assert_hint(verdict, "one-hot vectors themselves")


# ---------------------------------------------------------------------------------------------
# Lesson 01: positional encoding
# ---------------------------------------------------------------------------------------------
def make_encoding(
    base=10000.0, swap=False, halves=False, sign=-1.0, index="pair", divide_by_dim=True, dtype=torch.float32
):
    def positional_encoding(num_positions, dim):
        position = torch.arange(num_positions, dtype=dtype)[:, None]
        exponent_index = torch.arange(0, dim, 2, dtype=dtype)
        if index == "feature":  # i instead of 2k: odd features get the next frequency
            even = torch.arange(0, dim, 2, dtype=dtype)
            odd = torch.arange(1, dim, 2, dtype=dtype)
        else:
            even = odd = exponent_index
        scale = dim if divide_by_dim else 1.0
        first = torch.sin(position * base ** (sign * even / scale))
        second = torch.cos(position * base ** (sign * odd / scale))
        if swap:
            first, second = (
                torch.cos(position * base ** (sign * even / scale)),
                torch.sin(position * base ** (sign * odd / scale)),
            )
        if halves:
            return torch.cat([first, second], dim=1)
        table = torch.zeros(num_positions, dim, dtype=dtype)
        table[:, 0::2], table[:, 1::2] = first, second
        return table

    return positional_encoding


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_positional_encoding_correct_passes(dtype):
    assert check_positional_encoding(make_encoding(dtype=dtype)).passed


def test_positional_encoding_with_extra_kwargs_passes():
    correct = make_encoding()

    def positional_encoding(num_positions, dim, base=10000.0):
        return correct(num_positions, dim)

    assert check_positional_encoding(positional_encoding).passed


def test_positional_encoding_not_attempted():
    assert check_positional_encoding(not_attempted).status == "not attempted"


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"swap": True}, "sine and cosine are swapped"),
        ({"halves": True}, "two halves"),
        ({"sign": 1.0}, "minus sign"),
        ({"index": "feature"}, "pair index"),
        ({"divide_by_dim": False}, "divide by E"),
        ({"base": 1000.0}, "base 1000,"),
        ({"base": 100.0}, "-2k / E"),  # base 100 is k / E in disguise: the hint names the likelier cause
        ({"base": 100000.0}, "base 100000,"),
    ],
)
def test_positional_encoding_usual_mistakes(kwargs, fragment):
    assert_hint(check_positional_encoding(make_encoding(**kwargs)), fragment)


def test_positional_encoding_wrong_shape_and_unknown_error():
    assert_hint(
        check_positional_encoding(lambda p, e: torch.zeros(e, p)),
        "the encoding should have shape (P, E) = (12, 8), got (8, 12)",
    )
    assert_hint(check_positional_encoding(lambda p, e: make_encoding()(p, e) + 0.5), "differ from the formula")


# ---------------------------------------------------------------------------------------------
# Lesson 02: linear projection
# ---------------------------------------------------------------------------------------------
def test_linear_projection_correct_passes():
    assert check_linear_projection(lambda x, w, b: x @ w.T + b).passed
    verdict = check_linear_projection(lambda x, w, b: x.double() @ w.double().T + b.double())
    assert_hint(verdict, "dtype changed", "torch.float32", "torch.float64")  # the numbers agree, the dtype not


def test_linear_projection_not_attempted():
    assert check_linear_projection(not_attempted).status == "not attempted"


@pytest.mark.parametrize(
    "wrong_answer, fragment",
    [
        (lambda x, w, b: x @ w + b, "untransposed: nn.Linear"),
        (lambda x, w, b: x @ w, "untransposed AND the bias is missing"),
        (lambda x, w, b: x @ w.T, "the bias is missing"),
        (lambda x, w, b: x @ w.T - b, "subtracted"),
        (lambda x, w, b: x @ w.T + 2 * b, "differ from nn.Linear"),
    ],
)
def test_linear_projection_usual_mistakes(wrong_answer, fragment):
    assert_hint(check_linear_projection(wrong_answer), fragment)


def test_linear_projection_non_square_untransposed_names_the_shapes():
    # only fails on the non-square case: pretend the square case is right
    def answer(x, w, b):
        return x @ w.T + b if w.shape[0] == w.shape[1] else x @ w + b

    assert_hint(check_linear_projection(answer), "shapes do not fit", "x @ weight.T")


# ---------------------------------------------------------------------------------------------
# Lesson 02: cross-attention inputs
# ---------------------------------------------------------------------------------------------
def test_cross_attention_inputs_correct_passes():
    def inputs(target, source, q_proj, k_proj, v_proj):
        return q_proj(target), k_proj(source), v_proj(source)

    assert check_cross_attention_inputs(inputs).passed


def test_cross_attention_inputs_not_attempted():
    assert check_cross_attention_inputs(not_attempted).status == "not attempted"


@pytest.mark.parametrize(
    "wrong_answer, fragment",
    [
        (lambda t, s, q, k, v: (q(t), k(t), v(t)), "k has the target's length"),
        (lambda t, s, q, k, v: (q(t), k(s), v(t)), "v has the target's length"),
        (lambda t, s, q, k, v: (q(s), k(t), v(t)), "roles are swapped"),
        (lambda t, s, q, k, v: (q(t), v(s), k(s)), "k was made with the wrong projection (v_proj)"),
        (lambda t, s, q, k, v: (k(t), k(s), v(s)), "q was made with the wrong projection (k_proj)"),
        (lambda t, s, q, k, v: [q(t), k(s)], "as a tuple"),
        (lambda t, s, q, k, v: (q(t), k(s), s), "v is the source sentence itself, not projected"),
        (lambda t, s, q, k, v: (t, k(s), v(s)), "q is the target sentence itself, not projected"),
        (lambda t, s, q, k, v: (q(t), k(s) * 2, v(s)), "not the numbers of `k_proj(source)`"),
    ],
)
def test_cross_attention_inputs_usual_mistakes(wrong_answer, fragment):
    assert_hint(check_cross_attention_inputs(wrong_answer), fragment)


# ---------------------------------------------------------------------------------------------
# Lesson 03: attention weights
# ---------------------------------------------------------------------------------------------
def weights_answer(scale="sqrt", dim=-1, transpose=True, softmax=True, batched_t=False):
    def attention_weights(q, k):
        d = q.shape[-1]
        keys = (k.T if batched_t else k.transpose(-2, -1)) if transpose else k
        scores = q @ keys
        scores = scores / {"sqrt": math.sqrt(d), "none": 1.0, "d": d}[scale]
        return torch.softmax(scores, dim=dim) if softmax else scores

    return attention_weights


def test_attention_weights_correct_passes():
    assert check_attention_weights(weights_answer()).passed
    verdict = check_attention_weights(lambda q, k: F.softmax(q.double() @ k.double().mT * q.shape[-1] ** -0.5, -1))
    assert_hint(verdict, "dtype changed", "torch.float32", "torch.float64")


def test_attention_weights_not_attempted():
    assert check_attention_weights(not_attempted).status == "not attempted"


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"scale": "none"}, "not scaled"),
        ({"scale": "d"}, "divided by d instead of √d"),
        ({"dim": -2}, "wrong dimension"),
        ({"transpose": False}, "keys are not transposed"),
        ({"softmax": False}, "softmax is missing"),
        ({"batched_t": True}, "swap only the last two dimensions"),
    ],
)
@pytest.mark.filterwarnings("ignore:The use of `x.T`:UserWarning")
def test_attention_weights_usual_mistakes(kwargs, fragment):
    assert_hint(check_attention_weights(weights_answer(**kwargs)), fragment)


def test_attention_weights_unknown_mistake_falls_back():
    assert_hint(check_attention_weights(lambda q, k: weights_answer()(q, k) ** 2), "do not sum to 1")


# ---------------------------------------------------------------------------------------------
# Lesson 03: masked attention
# ---------------------------------------------------------------------------------------------
def masked_answer(
    scale=True,
    dim=-1,
    transpose=True,
    after_softmax=False,
    invert=False,
    fill=float("-inf"),
    ignore_mask=False,
    return_weights=False,
):
    def masked_attention(q, k, v, mask):
        keys = k.transpose(-2, -1) if transpose else k
        scores = q @ keys / (math.sqrt(q.shape[-1]) if scale else 1.0)
        blocked = mask if invert else ~mask
        if not (after_softmax or ignore_mask):
            scores = scores.masked_fill(blocked, fill)
        weights = torch.softmax(scores, dim=dim)
        if after_softmax:
            weights = weights.masked_fill(blocked, 0.0)
        return weights if return_weights else weights @ v

    return masked_attention


def test_masked_attention_correct_passes():
    assert check_masked_attention(masked_answer()).passed


@pytest.mark.parametrize(
    "shortcut, named",
    [
        (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), "F.scaled_dot_product_attention"),
        (lambda q, k, v, m: helpers.attention.scaled_dot_product_attention(q, k, v, attn_mask=m)[0], "helpers."),
    ],
)
def test_masked_attention_one_call_shortcut_is_refused_by_the_rule(shortcut, named):
    assert_hint(check_masked_attention(shortcut), named, RULE, MASK_TYPE)  # a mask exercise: what a mask's type is


def test_attention_weights_helper_shortcut_is_refused_by_the_rule():
    verdict = check_attention_weights(lambda q, k: helpers.attention.scaled_dot_product_attention(q, k, k)[1])
    assert_hint(verdict, "helpers.scaled_dot_product_attention", RULE)


def test_masked_attention_not_attempted():
    assert check_masked_attention(not_attempted).status == "not attempted"


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"after_softmax": True}, "after the softmax"),
        ({"invert": True}, "mask is inverted"),
        ({"fill": 0.0}, "set to 0, not -inf"),
        ({"ignore_mask": True}, "mask is ignored"),
        ({"scale": False}, "not scaled"),
        ({"dim": -2}, "wrong dimension"),
        ({"transpose": False}, "keys are not transposed"),
        ({"return_weights": True}, "shape of the weights"),
    ],
)
def test_masked_attention_usual_mistakes(kwargs, fragment):
    assert_hint(check_masked_attention(masked_answer(**kwargs)), fragment)


def test_masked_attention_inverted_mask_without_nan_still_named():
    # a learner who inverts the mask but guards against NaN rows (nan_to_num) is still told why
    def answer(q, k, v, mask):
        return torch.nan_to_num(masked_answer(invert=True)(q, k, v, mask))

    verdict = check_masked_attention(answer)
    assert verdict.status == "wrong"


def test_checks_leave_the_global_random_state_alone():
    def inputs(target, source, q_proj, k_proj, v_proj):
        return q_proj(target), k_proj(source), v_proj(source)

    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check_cross_attention_inputs(inputs)
    check_attention_weights(weights_answer())
    check_masked_attention(masked_answer())
    check_positional_encoding(make_encoding())
    check_one_hot_lookup(lambda ids, w: w[ids])
    check_linear_projection(lambda x, w, b: x @ w.T + b)
    assert torch.equal(torch.rand(3), expected)


# ---------------------------------------------------------------------------------------------
# Lesson 03: converting a padding mask between the two conventions
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "answer",
    [
        lambda m: ~m[:, None, :],
        lambda m: (~m).unsqueeze(1),
        lambda m: ~m[:, None, None, :][:, 0],
    ],
)
def test_padding_to_attn_mask_correct_passes(answer):
    assert check_padding_to_attn_mask(answer).passed


def test_padding_to_attn_mask_not_attempted():
    assert check_padding_to_attn_mask(not_attempted).status == "not attempted"


@pytest.mark.parametrize(
    "wrong_answer, fragment",
    [
        (lambda m: m[:, None, :], "not inverted"),
        (lambda m: ~m[:, :, None], "wrong place"),
        (lambda m: ~m, "as if N were the query dimension"),
        (lambda m: (~m).int()[:, None, :], "dtype torch.int32"),
        (lambda m: (~m).float()[:, None, :], "dtype torch.float32"),
        # a float mask of 0 and -inf means the same to F.scaled_dot_product_attention, but a boolean was asked for
        (lambda m: torch.zeros(m.shape).masked_fill(m, float("-inf"))[:, None, :], "float mask of 0 and -inf"),
        (lambda m: helpers.attention.sdpa_mask_from_padding(m), "helpers.sdpa_mask_from_padding"),
        (lambda m: ~m[:, None, :].roll(1, dims=-1), "blocks the wrong keys"),
        (lambda m: ~m[None, :, :], "does not broadcast"),
        (lambda m: [1, 2], "return a tensor"),
    ],
)
def test_padding_to_attn_mask_usual_mistakes(wrong_answer, fragment):
    assert_hint(check_padding_to_attn_mask(wrong_answer), fragment)


# ---------------------------------------------------------------------------------------------
# Misdiagnoses, each a row (wrong answer -> the hint that names the real mistake)
# ---------------------------------------------------------------------------------------------
def test_positional_encoding_k_over_e_is_named_not_sent_to_the_base():
    """k / E (k counting pairs) equals base 100 exactly; the hint must name the exponent first."""

    def half_exponent(num_positions, dim):
        angles = torch.arange(num_positions)[:, None] * 10000.0 ** (-torch.arange(dim // 2) / dim)
        table = torch.zeros(num_positions, dim)
        table[:, 0::2], table[:, 1::2] = torch.sin(angles), torch.cos(angles)
        return table

    verdict = check_positional_encoding(half_exponent)
    assert_hint(verdict, "-k / E", "it must be -2k / E")
    assert not verdict.message.startswith("the frequency base is wrong")


def test_positional_encoding_divided_by_half_of_e():
    def over_half(num_positions, dim):
        angles = torch.arange(num_positions)[:, None] * 10000.0 ** (-torch.arange(0, dim, 2) / (dim / 2))
        table = torch.zeros(num_positions, dim)
        table[:, 0::2], table[:, 1::2] = torch.sin(angles), torch.cos(angles)
        return table

    assert_hint(check_positional_encoding(over_half), "divides by E / 2")


@pytest.mark.parametrize(
    "shortcut, named",
    [
        (lambda ids, w: w[ids], "indexing"),
        (lambda ids, w: w.float()[ids.flatten()].view(*ids.shape, -1), "indexing"),
        (lambda ids, w: F.embedding(ids, w), "F.embedding"),
        (lambda ids, w: torch.index_select(w, 0, ids.flatten()).view(*ids.shape, -1), "index_select"),
    ],
)
def test_one_hot_lookup_forbidden_shortcut_is_named(shortcut, named):
    assert_hint(check_one_hot_lookup(shortcut), RULE, named, "F.one_hot")


def test_one_hot_lookup_built_from_an_identity_matrix_is_no_shortcut():
    # torch.eye(V)[ids] indexes an identity matrix, not the table: a fair way to build one-hot vectors
    assert check_one_hot_lookup(lambda ids, w: torch.eye(w.shape[0])[ids] @ w).passed
    assert check_one_hot_lookup(
        lambda ids, w: torch.einsum("nlv,ve->nle", F.one_hot(ids, w.shape[0]).float(), w)
    ).passed


def _with_linear_module(x, w, b):
    linear = torch.nn.Linear(w.shape[1], w.shape[0])
    with torch.no_grad():
        linear.weight.copy_(w)
        linear.bias.copy_(b)
    return linear(x)


@pytest.mark.parametrize("shortcut", [lambda x, w, b: F.linear(x, w, b), _with_linear_module])
def test_linear_projection_forbidden_shortcut_is_named(shortcut):
    verdict = check_linear_projection(shortcut)
    assert_hint(verdict, RULE, "F.linear", "write the product and the sum yourself")
    assert "mask" not in verdict.message  # a projection has no mask: the rule's sentence about masks stays out


def test_positional_encoding_helper_shortcut_is_refused_by_the_rule():
    from helpers.embeddings import sinusoidal_positional_encoding

    verdict = check_positional_encoding(lambda p, e: sinusoidal_positional_encoding(p, e))
    assert_hint(verdict, RULE, "sinusoidal_positional_encoding")


def test_linear_projection_with_addmm_or_matmul_is_fine():
    assert check_linear_projection(lambda x, w, b: torch.matmul(x, w.t()) + b).passed
    assert check_linear_projection(lambda x, w, b: torch.addmm(b, x.flatten(0, 1), w.T).view(*x.shape[:2], -1)).passed


def _counting_from_the_front(softmax_dim_1=False, d_from_shape_1=False):
    """Code that works for one (L, d) sentence but counts dimensions from the front."""

    def attention_weights(q, k):
        d = q.shape[1] if d_from_shape_1 else q.shape[-1]
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=1 if softmax_dim_1 else -1)

    return attention_weights


@pytest.mark.parametrize(
    "kwargs, fragments",
    [
        ({"softmax_dim_1": True}, ("softmax runs over dim=1", "dim=-1")),
        ({"d_from_shape_1": True}, ("q.shape[1]", "the last dimension")),
        ({"softmax_dim_1": True, "d_from_shape_1": True}, ("`dim=1` and `q.shape[1]`", "Count from the end")),
    ],
)
def test_attention_weights_batch_only_mistakes_are_named(kwargs, fragments):
    """#11: these were reported as "your code raised RuntimeError" by the check's own simulation."""
    verdict = check_attention_weights(_counting_from_the_front(**kwargs))
    assert_hint(verdict, *fragments)
    assert "raised" not in verdict.message


@pytest.mark.parametrize(
    "softmax_dim, fragment",
    [(1, "softmax runs over dim=1"), (-2, "wrong dimension"), (0, "")],
)
def test_masked_attention_softmax_over_the_wrong_axis_is_not_called_an_inverted_mask(softmax_dim, fragment):
    """#11: the padding case gives NaN with the softmax over the queries; that is no inverted mask."""
    verdict = check_masked_attention(masked_answer(dim=softmax_dim))
    assert verdict.status == "wrong"
    assert "inverted" not in verdict.message, verdict.message
    assert fragment in verdict.message


def test_masked_attention_scale_from_shape_1_is_named():
    def answer(q, k, v, mask):
        scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[1])).masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    assert_hint(check_masked_attention(answer), "q.shape[1]")


# ---------------------------------------------------------------------------------------------
# More learner mistakes, each with the hint that names it
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "wrong_answer, fragments",
    [
        (lambda ids, w: F.one_hot(ids, w.shape[1]).to(w.dtype) @ w, ("too few classes", "number of rows (V=")),
        (lambda ids, w: w.T @ F.one_hot(ids, w.shape[0]).to(w.dtype), ("one-hot vectors come first",)),
    ],
)
def test_one_hot_lookup_more_mistakes(wrong_answer, fragments):
    verdict = check_one_hot_lookup(wrong_answer)
    assert_hint(verdict, *fragments)
    assert "your code raised" not in verdict.message


def _encoding_with(angle_of, first=torch.sin, second=torch.cos):
    def positional_encoding(num_positions, dim):
        angles = angle_of(torch.arange(num_positions, dtype=torch.float32)[:, None], torch.arange(0, dim, 2), dim)
        table = torch.zeros(num_positions, dim)
        table[:, 0::2], table[:, 1::2] = first(angles), second(angles)
        return table

    return positional_encoding


def _paper_angles(position, pair, dim):
    return position * 10000.0 ** (-pair / dim)


@pytest.mark.parametrize(
    "answer, fragment",
    [
        (_encoding_with(lambda p, k, e: _paper_angles(p + 1, k, e)), "positions start at 1"),
        (_encoding_with(_paper_angles, second=torch.sin), "odd features hold a sine too"),
        (_encoding_with(_paper_angles, first=torch.cos), "even features hold a cosine too"),
        (_encoding_with(lambda p, k, e: p * 10000.0 ** (-(k // e))), "same frequency 1"),
        (_encoding_with(lambda p, k, e: p * 10000.0 ** (-k // e)), "integer division"),
    ],
)
def test_positional_encoding_more_mistakes(answer, fragment):
    assert_hint(check_positional_encoding(answer), fragment)


@pytest.mark.parametrize(
    "wrong_answer, fragment",
    [
        (lambda q, k: torch.softmax(q @ k.mT, -1) / math.sqrt(q.shape[-1]), "scaling comes after the softmax"),
        (lambda q, k: torch.softmax(q @ k.mT * math.sqrt(q.shape[-1]), -1), "multiplied by √d"),
        (lambda q, k: torch.softmax(q @ k.mT / math.sqrt(k.shape[-2]), -1), "divided by √S"),
        (lambda q, k: torch.softmax(k @ q.mT / math.sqrt(q.shape[-1]), -1), "K Qᵀ, one row per KEY"),
        # softmax without dim=: right for one sentence, dim=0 (the batch) for a batch
        (lambda q, k: F.softmax(q @ k.mT / math.sqrt(q.shape[-1])), "runs over dim=0, the batch"),
    ],
)
@pytest.mark.filterwarnings("ignore:Implicit dimension choice:UserWarning")
def test_attention_weights_more_mistakes(wrong_answer, fragment):
    assert_hint(check_attention_weights(wrong_answer), fragment)


@pytest.mark.parametrize(
    "wrong_answer, fragment",
    [
        (lambda x, w, b: (x + b) @ w.T, "added to x before the product"),
        (lambda x, w, b: w.T @ x + b, "The tokens come first"),
    ],
)
def test_linear_projection_more_mistakes(wrong_answer, fragment):
    assert_hint(check_linear_projection(wrong_answer), fragment)


def _masked_with(block):
    def masked_attention(q, k, v, mask):
        return torch.softmax(block(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), mask), dim=-1) @ v

    return masked_attention


@pytest.mark.parametrize(
    "wrong_answer, fragment",
    [
        (_masked_with(lambda scores, mask: scores + mask), "boolean mask is added to the scores"),
        (_masked_with(lambda scores, mask: scores.masked_fill(~mask, -10.0)), "A finite fill such as -10"),
    ],
)
def test_masked_attention_more_mistakes(wrong_answer, fragment):
    assert_hint(check_masked_attention(wrong_answer), fragment)


@pytest.mark.parametrize("fill", [-1e4, -1e9, torch.finfo(torch.float32).min])
def test_masked_attention_large_finite_fills_pass(fill):
    # -1e4 and -1e9 are common in other code bases and block as well as -inf does here
    assert check_masked_attention(_masked_with(lambda scores, mask: scores.masked_fill(~mask, fill))).passed


def test_padding_to_attn_mask_broadcast_message_names_a_typical_length():
    # (1, N, S) puts the sentences where the queries go; the message shows scores with several queries, not L = 1
    assert_hint(check_padding_to_attn_mask(lambda m: (~m)[None]), "does not broadcast", "(N, L, S) = (3, 4, 5)")


@pytest.mark.parametrize(
    "wrong_answer, fragment",
    [
        (lambda t, s, q, k, v: (q(s), k(s), v(s)), "q (one query per target token) should have shape"),
        (lambda t, s, q, k, v: (q(t), k(s)), "got a tuple of 2"),
        (lambda t, s, q, k, v: (q(t), q(s), q(s)), "k was made with the wrong projection (q_proj)"),
        (lambda t, s, q, k, v: (q(t), k(s), k(s)), "v was made with the wrong projection (k_proj)"),
    ],
)
def test_cross_attention_inputs_more_mistakes(wrong_answer, fragment):
    assert_hint(check_cross_attention_inputs(wrong_answer), fragment)


@pytest.mark.parametrize(
    "wrong_answer, fragment",
    [
        # a float mask, whatever its polarity: the dtype is named first (the rule: the asked type)
        (lambda m: torch.zeros(m.shape).masked_fill(~m, float("-inf"))[:, None, :], "dtype torch.float32"),
        (lambda m: (m == 1)[:, None, :], "not inverted"),
        (lambda m: (~m)[:, None, :].numpy(), "return a tensor"),
    ],
)
def test_padding_to_attn_mask_more_mistakes(wrong_answer, fragment):
    assert_hint(check_padding_to_attn_mask(wrong_answer), fragment)


# ---------------------------------------------------------------------------------------------
# Lessons 01-05: one rule for shortcuts and types, stated in every exercise
# ---------------------------------------------------------------------------------------------
_LESSONS_01_05 = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("0[1-5]_*.ipynb"))


@pytest.mark.parametrize("lesson", _LESSONS_01_05, ids=lambda path: path.stem)
def test_every_exercise_of_lessons_01_05_states_the_rule(lesson):
    cells = json.loads(lesson.read_text(encoding="utf-8"))["cells"]
    statements = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    statements = [text.split("### Exercise", 1)[1] for text in statements if "### Exercise" in text]
    assert statements, f"{lesson.name} has no exercise"
    core = RULE.split(": ", 1)[1].split(". ", 1)[0]  # "write the step yourself with the operations it names"
    for text in statements:
        assert "*The rule of every exercise:* " + core in " ".join(text.split()), text[:200]
