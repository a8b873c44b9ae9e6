"""Every check of lesson 07 passes right answers, says "not attempted" for a student copy's stub, and names
each usual mistake when fed a deliberately wrong implementation of it."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_hint, learners_copy

from course.exercises.lesson07 import (
    check_kv_cache_step,
    check_online_softmax_update,
    check_rotary_cache_step,
    check_rotate_pairs,
    check_tiled_attention_update,
)
from helpers import apply_rotary, online_softmax_update


def _not_attempted(*args, **kwargs):
    raise NotImplementedError()


# ---------------------------------------------------------------------------------------------
# Exercise 1: online softmax update
# ---------------------------------------------------------------------------------------------
def update_right(running_max, running_sum, block):
    new_max = torch.maximum(running_max, block.amax(dim=-1))
    return new_max, running_sum * torch.exp(running_max - new_max) + torch.exp(block - new_max[:, None]).sum(-1)


def _with(new_max_of, sum_of):
    def update(running_max, running_sum, block):
        new_max = new_max_of(running_max, block)
        return new_max, sum_of(running_max, running_sum, block, new_max)

    return update


right_max = lambda m, b: torch.maximum(m, b.amax(-1))  # noqa: E731 - one-line variants read best as lambdas

UPDATE_MISTAKES = {
    "not rescaled": _with(right_max, lambda m, s, b, n: s + torch.exp(b - n[:, None]).sum(-1)),
    "upside down": _with(right_max, lambda m, s, b, n: s * torch.exp(n - m) + torch.exp(b - n[:, None]).sum(-1)),
    "own maximum": _with(
        right_max, lambda m, s, b, n: s * torch.exp(m - n) + torch.exp(b - b.amax(-1, keepdim=True)).sum(-1)
    ),
    "without `exp`": _with(right_max, lambda m, s, b, n: s * torch.exp(m - n) + b.sum(-1)),
    "block's own maximum": _with(
        lambda m, b: b.amax(-1), lambda m, s, b, n: s * torch.exp(m - n) + torch.exp(b - n[:, None]).sum(-1)
    ),
    "PER ROW": _with(
        lambda m, b: torch.maximum(m, b.max()),
        lambda m, s, b, n: s * torch.exp(m - n) + torch.exp(b - n[:, None]).sum(-1),
    ),
    "the log of the sum": _with(
        right_max, lambda m, s, b, n: torch.log(s * torch.exp(m - n) + torch.exp(b - n[:, None]).sum(-1))
    ),
    "over ALL rows": _with(right_max, lambda m, s, b, n: s * torch.exp(m - n) + torch.exp(b - n[:, None]).sum()),
    "without `exp`: the factor": _with(right_max, lambda m, s, b, n: s * (m - n) + torch.exp(b - n[:, None]).sum(-1)),
    "return 2 tensors": lambda m, s, b: update_right(m, s, b)[1],
    "should have shape": lambda m, s, b: tuple(t[:, None] for t in update_right(m, s, b)),
    "new_sum differs": _with(
        right_max, lambda m, s, b, n: 2 * (s * torch.exp(m - n) + torch.exp(b - n[:, None]).sum(-1))
    ),
}


@pytest.mark.parametrize("hint,update", list(UPDATE_MISTAKES.items()), ids=list(UPDATE_MISTAKES))
def test_online_softmax_check_names_each_mistake(hint, update):
    verdict = check_online_softmax_update(update)
    assert verdict.status == "wrong" and hint in verdict.message, verdict.message


def test_online_softmax_check_passes_right_answers_and_spots_stubs():
    assert check_online_softmax_update(update_right).passed
    assert check_online_softmax_update(learners_copy(online_softmax_update)).passed  # the helper's lines: -inf rows too
    called = check_online_softmax_update(online_softmax_update)  # the graduated helper itself is refused by name
    assert called.status == "wrong" and "`helpers.flash.online_softmax_update`" in called.message, called
    in_float64 = check_online_softmax_update(lambda m, s, b: [t.double() for t in update_right(m, s, b)])
    assert_hint(in_float64, "dtype changed", "torch.float32", "torch.float64")  # right numbers, another dtype
    assert check_online_softmax_update(_not_attempted).status == "not attempted"


# ---------------------------------------------------------------------------------------------
# Exercise 2: tiled attention's update of the running output
# ---------------------------------------------------------------------------------------------
def tiled_right(m, total, out, scores, v_block):
    new_m = torch.maximum(m, scores.amax(dim=-1))
    p = torch.exp(scores - new_m[:, None])
    rescale = torch.exp(m - new_m)
    return new_m, total * rescale + p.sum(-1), out * rescale[:, None] + p @ v_block


def _tiled(out_of):
    def update(m, total, out, scores, v_block):
        new_m, new_total, _ = tiled_right(m, total, out, scores, v_block)
        return new_m, new_total, out_of(m, new_m, new_total, out, scores, v_block)

    return update


TILED_MISTAKES = {
    "output is not rescaled": _tiled(lambda m, n, t, o, s, v: o + torch.exp(s - n[:, None]) @ v),
    "rescaled upside down": _tiled(
        lambda m, n, t, o, s, v: o * torch.exp(n - m)[:, None] + torch.exp(s - n[:, None]) @ v
    ),
    "divided by the sum inside the step": _tiled(
        lambda m, n, t, o, s, v: (o * torch.exp(m - n)[:, None] + torch.exp(s - n[:, None]) @ v) / t[:, None]
    ),
    "block's own maximum": _tiled(
        lambda m, n, t, o, s, v: o * torch.exp(m - n)[:, None] + torch.exp(s - s.amax(-1, keepdim=True)) @ v
    ),
    "multiply the values without `exp`": _tiled(lambda m, n, t, o, s, v: o * torch.exp(m - n)[:, None] + s @ v),
    "block's softmax is taken inside": _tiled(
        lambda m, n, t, o, s, v: o * torch.exp(m - n)[:, None] + torch.softmax(s, dim=-1) @ v
    ),
    "exercise 1's update": lambda m, t, o, s, v: (m, t, tiled_right(m, t, o, s, v)[2]),
    "return 3 tensors": lambda m, t, o, s, v: tiled_right(m, t, o, s, v)[2],
}


@pytest.mark.parametrize("hint,update", list(TILED_MISTAKES.items()), ids=list(TILED_MISTAKES))
def test_tiled_update_check_names_each_mistake(hint, update):
    verdict = check_tiled_attention_update(update)
    assert verdict.status == "wrong" and hint in verdict.message, verdict.message


def test_tiled_update_check_passes_right_answers_and_spots_stubs():
    assert check_tiled_attention_update(tiled_right).passed
    assert check_tiled_attention_update(_not_attempted).status == "not attempted"


def test_the_tiled_update_computes_attention_over_blocks():
    """The exercise's update, run over blocks and divided at the end, is torch's attention (the lesson's claim)."""
    q, k, v = torch.randn(3, 10, 4).unbind(0)
    m, total, out = torch.full((10,), float("-inf")), torch.zeros(10), torch.zeros(10, 4)
    for k_block, v_block in zip(k.split(3), v.split(3), strict=True):
        m, total, out = tiled_right(m, total, out, q @ k_block.T / 2, v_block)
    torch.testing.assert_close(out / total[:, None], F.scaled_dot_product_attention(q, k, v))


# ---------------------------------------------------------------------------------------------
# Exercise 3: a step with the KV cache
# ---------------------------------------------------------------------------------------------
def step_right(q, k_new, v_new, k_cache, v_cache):
    k_cache, v_cache = torch.cat((k_cache, k_new), dim=2), torch.cat((v_cache, v_new), dim=2)
    return F.scaled_dot_product_attention(q, k_cache, v_cache), k_cache, v_cache


def _step(cat_dim=2, prepend=False, attend="all", update=True, scale=True):
    def step(q, k_new, v_new, k_cache, v_cache):
        pair = ((k_new, k_cache), (v_new, v_cache)) if prepend else ((k_cache, k_new), (v_cache, v_new))
        keys, values = torch.cat(pair[0], dim=cat_dim), torch.cat(pair[1], dim=cat_dim)
        if attend == "old":
            out = F.scaled_dot_product_attention(q, k_cache, v_cache)
        elif attend == "causal":
            out = F.scaled_dot_product_attention(q, keys, values, is_causal=True)
        elif not scale:
            out = torch.softmax(q @ keys.transpose(-2, -1), dim=-1) @ values
        else:
            out = F.scaled_dot_product_attention(q, keys, values)
        return (out, keys, values) if update else (out, k_cache, v_cache)

    return step


def _by_hand(q, k_new, v_new, k_cache, v_cache, scale=None, dim=-1):
    keys, values = torch.cat([k_cache, k_new], -2), torch.cat([v_cache, v_new], -2)
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    return torch.softmax(q @ keys.transpose(-2, -1) * scale, dim=dim) @ values, keys, values


def _swap_kv(out, keys, values, q):
    return F.scaled_dot_product_attention(q, values, keys), keys, values


STEP_MISTAKES = {
    "ignores the newest token": _step(attend="old"),
    "`is_causal=True` on a single new query": _step(attend="causal"),
    "FRONT of the cache": _step(prepend=True),
    "wrong dimension": _step(cat_dim=-1),
    "the returned k_cache is the old one": _step(update=False),
    "not scaled": _step(scale=False),
    "divided by d": lambda q, kn, vn, kc, vc: _by_hand(q, kn, vn, kc, vc, scale=1 / q.size(-1)),
    "keys and values are swapped": lambda q, kn, vn, kc, vc: _swap_kv(*step_right(q, kn, vn, kc, vc), q),
    "attends to the new token only": lambda q, kn, vn, kc, vc: (
        F.scaled_dot_product_attention(q, kn, vn),
        *step_right(q, kn, vn, kc, vc)[1:],
    ),
    "wrong axis": lambda q, kn, vn, kc, vc: _by_hand(q, kn, vn, kc, vc, dim=-2),
    "wrong order": lambda *args: (*step_right(*args)[1:], step_right(*args)[0]),
    "appended twice": lambda q, kn, vn, kc, vc: (
        step_right(q, kn, vn, kc, vc)[0],
        torch.cat((kc, kn, kn), dim=2),
        torch.cat((vc, vn), dim=2),
    ),
    "return 3 tensors": lambda *args: step_right(*args)[0],
    "caches are right but the output differs": lambda *args: (step_right(*args)[0] * 2, *step_right(*args)[1:]),
}


@pytest.mark.parametrize("hint,step", list(STEP_MISTAKES.items()), ids=list(STEP_MISTAKES))
def test_kv_cache_check_names_each_mistake(hint, step):
    verdict = check_kv_cache_step(step)
    assert verdict.status == "wrong" and hint in verdict.message, verdict.message


def test_kv_cache_check_passes_right_answers_and_spots_stubs():
    assert check_kv_cache_step(step_right).passed

    def by_hand(q, k_new, v_new, k_cache, v_cache):  # written out, no sdpa
        keys, values = torch.cat([k_cache, k_new], -2), torch.cat([v_cache, v_new], -2)
        weights = torch.softmax(q @ keys.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
        return weights @ values, keys, values

    assert check_kv_cache_step(by_hand).passed
    assert check_kv_cache_step(_not_attempted).status == "not attempted"


# ---------------------------------------------------------------------------------------------
# Exercise 4: the rotary rotation
# ---------------------------------------------------------------------------------------------
def rotate_right(x, angles):
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()), dim=-1).flatten(-2)


def _rotate(pairs="neighbours", sign=1.0, join="interleave", swap=False):
    def rotate(x, angles):
        cos, sin = (angles.sin(), angles.cos()) if swap else (angles.cos(), angles.sin())
        half = x.size(-1) // 2
        a, b = (x[..., :half], x[..., half:]) if pairs == "halves" else (x[..., 0::2], x[..., 1::2])
        first, second = a * cos - sign * b * sin, sign * a * sin + b * cos
        if join == "cat":
            return torch.cat((first, second), dim=-1)
        return torch.stack((first, second), dim=-1).flatten(-2)

    return rotate


def _rotate_by_hand(x, angles, first_sign=-1, read="neighbours", swap_out=False):
    half = x.size(-1) // 2
    a, b = (x[..., :half], x[..., half:]) if read == "halves" else (x[..., 0::2], x[..., 1::2])
    first = a * angles.cos() + first_sign * b * angles.sin()
    second = a * angles.sin() + b * angles.cos()
    pair = (second, first) if swap_out else (first, second)
    return torch.stack(pair, dim=-1).flatten(-2)


ROTATE_MISTAKES = {
    "clockwise": _rotate(sign=-1.0),
    "two halves": _rotate(pairs="halves", join="cat"),
    "not put back in place": _rotate(join="cat"),
    "cos and sin are swapped": _rotate(swap=True),
    "one sign is wrong": lambda x, angles: _rotate_by_hand(x, angles, first_sign=+1),
    "treated as degrees": lambda x, angles: rotate_right(x, angles * math.pi / 180),
    "multiplied by the position again": lambda x, angles: rotate_right(x, angles * torch.arange(len(angles))[:, None]),
    "put back interleaved": lambda x, angles: _rotate_by_hand(x, angles, read="halves"),
    "features swapped": lambda x, angles: _rotate_by_hand(x, angles, swap_out=True),
    "came back unchanged": lambda x, angles: x,
    "the shape of x": lambda x, angles: rotate_right(x, angles)[..., :-1],
    "numbers differ": lambda x, angles: rotate_right(x, 2 * angles),
}


@pytest.mark.parametrize("hint,rotate", list(ROTATE_MISTAKES.items()), ids=list(ROTATE_MISTAKES))
def test_rotary_check_names_each_mistake(hint, rotate):
    verdict = check_rotate_pairs(rotate)
    assert verdict.status == "wrong" and hint in verdict.message, verdict.message


def test_rotary_check_passes_right_answers_and_spots_stubs():
    assert check_rotate_pairs(rotate_right).passed

    def with_complex_numbers(x, angles):  # another correct formulation: pairs as complex numbers
        z = torch.view_as_complex(x.double().unflatten(-1, (-1, 2)).contiguous())
        return torch.view_as_real(z * torch.polar(torch.ones_like(angles.double()), angles.double())).flatten(-2)

    assert check_rotate_pairs(lambda x, angles: with_complex_numbers(x, angles).to(x.dtype)).passed
    # left in the float64 it computed in, the rotation is refused by its dtype
    assert_hint(check_rotate_pairs(with_complex_numbers), "dtype changed", "torch.float32", "torch.float64")
    assert check_rotate_pairs(_not_attempted).status == "not attempted"
    # the helper's rotation is the exercise's, with angles from positions
    x = torch.randn(5, 8)
    from helpers import rotary_angles

    torch.testing.assert_close(apply_rotary(x), rotate_right(x, rotary_angles(5, 8).float()))


# ---------------------------------------------------------------------------------------------
# Exercise 5: a cached step with rotary positions
# ---------------------------------------------------------------------------------------------
def rotary_step_right(q, k_new, v_new, k_cache, v_cache):
    position = torch.tensor([k_cache.size(-2)])  # the new token comes after the T cached ones
    q, k_new = apply_rotary(q, position), apply_rotary(k_new, position)
    return step_right(q, k_new, v_new, k_cache, v_cache)


def _rotary_step(position_of=lambda T: T, rotate_q=True, rotate_k=True, rotate_v=False, rotate_cache=False):
    def step(q, k_new, v_new, k_cache, v_cache):
        position = torch.tensor([position_of(k_cache.size(-2))])
        q = apply_rotary(q, position) if rotate_q else q
        k_new = apply_rotary(k_new, position) if rotate_k else k_new
        v_new = apply_rotary(v_new, position) if rotate_v else v_new
        k_cache = apply_rotary(k_cache) if rotate_cache else k_cache
        return step_right(q, k_new, v_new, k_cache, v_cache)

    return step


ROTARY_STEP_MISTAKES = {
    "rotated as position 0": _rotary_step(position_of=lambda T: 0),
    "one position too far": _rotary_step(position_of=lambda T: T + 1),
    "one position too early": _rotary_step(position_of=lambda T: T - 1),
    "the query is not rotated": _rotary_step(rotate_q=False),
    "the new key is not rotated": _rotary_step(rotate_k=False),
    "the values are rotated too": _rotary_step(rotate_v=True),
    "cached keys are rotated again": _rotary_step(rotate_cache=True),
    "rotate q and k_new at position T": lambda *args: (2 * rotary_step_right(*args)[0], *rotary_step_right(*args)[1:]),
    "return 3 tensors": lambda *args: rotary_step_right(*args)[0],
}


@pytest.mark.parametrize("hint,step", list(ROTARY_STEP_MISTAKES.items()), ids=list(ROTARY_STEP_MISTAKES))
def test_rotary_cache_check_names_each_mistake(hint, step):
    verdict = check_rotary_cache_step(step)
    assert verdict.status == "wrong" and hint in verdict.message, verdict.message


def test_rotary_cache_check_passes_right_answers_and_spots_stubs():
    assert check_rotary_cache_step(rotary_step_right).passed
    assert check_rotary_cache_step(_not_attempted).status == "not attempted"


def test_the_rotary_cache_step_matches_attention_over_the_whole_sequence():
    """Step by step with rotated caches gives causal attention over the rotated whole (what the lesson claims)."""
    q, k, v = torch.randn(3, 1, 2, 6, 8).unbind(0)  # (N, h, T, d)
    k_cache, v_cache, outputs = k[..., :0, :], v[..., :0, :], []
    for t in range(6):
        out, k_cache, v_cache = rotary_step_right(
            q[..., t : t + 1, :], k[..., t : t + 1, :], v[..., t : t + 1, :], k_cache, v_cache
        )
        outputs.append(out)
    whole = F.scaled_dot_product_attention(apply_rotary(q), apply_rotary(k), v, is_causal=True)
    torch.testing.assert_close(torch.cat(outputs, dim=-2), whole)


def test_every_lesson_07_mistake_table_is_tested():
    """Each hint of the check's tables is reached by one of the wrong answers above."""
    from course.exercises import lesson07

    tables = {
        "ONLINE_MAX_MISTAKES": (check_online_softmax_update, UPDATE_MISTAKES),
        "ONLINE_SUM_MISTAKES": (check_online_softmax_update, UPDATE_MISTAKES),
        "TILED_MISTAKES": (check_tiled_attention_update, TILED_MISTAKES),
        "CACHE_MISTAKES": (check_kv_cache_step, STEP_MISTAKES),
        "ROTATE_MISTAKES": (check_rotate_pairs, ROTATE_MISTAKES),
        "ROTARY_STEP_MISTAKES": (check_rotary_cache_step, ROTARY_STEP_MISTAKES),
    }
    for table, (check, answers) in tables.items():
        messages = [check(answer).message for answer in answers.values()]
        for hint in getattr(lesson07, table):
            assert any(hint in message for message in messages), f"{table}: no test reaches {hint[:60]!r}"
