"""Every check of lesson 07 passes right answers, says "not attempted" for a student copy's stub, and names
each usual mistake when fed a deliberately wrong implementation of it."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course.exercises.lesson07 import check_kv_cache_step, check_online_softmax_update, check_rotate_pairs
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
    "return two tensors": lambda m, s, b: update_right(m, s, b)[1],
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
    assert check_online_softmax_update(online_softmax_update).passed  # the helper handles -inf rows too
    assert check_online_softmax_update(lambda m, s, b: [t.double() for t in update_right(m, s, b)]).passed
    assert check_online_softmax_update(_not_attempted).status == "not attempted"


# ---------------------------------------------------------------------------------------------
# Exercise 2: a step with the KV cache
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


STEP_MISTAKES = {
    "ignores the newest token": _step(attend="old"),
    "`is_causal=True` on a single new query": _step(attend="causal"),
    "FRONT of the cache": _step(prepend=True),
    "wrong dimension": _step(cat_dim=-1),
    "the returned k_cache is the old one": _step(update=False),
    "not scaled": _step(scale=False),
    "return three tensors": lambda *args: step_right(*args)[0],
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
# Exercise 3: the rotary rotation
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


ROTATE_MISTAKES = {
    "clockwise": _rotate(sign=-1.0),
    "two halves": _rotate(pairs="halves", join="cat"),
    "not put back in place": _rotate(join="cat"),
    "cos and sin are swapped": _rotate(swap=True),
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

    assert check_rotate_pairs(with_complex_numbers).passed
    assert check_rotate_pairs(_not_attempted).status == "not attempted"
    # the helper's rotation is the exercise's, with angles from positions
    x = torch.randn(5, 8)
    from helpers import rotary_angles

    torch.testing.assert_close(apply_rotary(x), rotate_right(x, rotary_angles(5, 8).float()))
