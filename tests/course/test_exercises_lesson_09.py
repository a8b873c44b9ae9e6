"""Lesson 09's exercise checks: a right answer passes, each typical mistake gets its own hint, a learner's error is
the learner's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_hint, not_attempted

from course.exercises.lesson09 import check_layer_mapping, check_rms_norm, check_swiglu
from helpers.models.language_model import course_name


# --- exercise 1: RMSNorm ------------------------------------------------------------------------
def right_rms(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def test_rms_norm_passes_the_right_answer_and_torchs():
    assert check_rms_norm(right_rms).passed
    assert check_rms_norm(lambda x, w, eps: F.rms_norm(x, (x.size(-1),), w, eps)).passed


@pytest.mark.parametrize(
    "mistake,fragment",
    [
        (lambda x, w, eps: F.layer_norm(x, (x.size(-1),), eps=eps) * w, "that is LayerNorm"),
        (lambda x, w, eps: x / (x.pow(2).mean(-1, keepdim=True) + eps) * w, "square root is missing"),
        (lambda x, w, eps: x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * w, "eps goes inside"),
        (lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps), "weight is missing"),
        (lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(0, keepdim=True) + eps) * w, "wrong dimension"),
        (lambda x, w, eps: x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps) * w, "*mean* of the squares"),
        (lambda x, w, eps: x.mean(-1), "shape"),
        (lambda x, w, eps: x * 2, "differs"),
    ],
)
def test_rms_norm_mistakes_get_specific_hints(mistake, fragment):
    assert_hint(check_rms_norm(mistake), fragment)


# --- exercise 2: SwiGLU -------------------------------------------------------------------------
def right_swiglu(x, gate, up, down):
    return (F.silu(x @ gate.T) * (x @ up.T)) @ down.T


def test_swiglu_passes_the_right_answer():
    assert check_swiglu(right_swiglu).passed


@pytest.mark.parametrize(
    "mistake,fragment",
    [
        (lambda x, g, u, d: (F.silu(x @ u.T) * (x @ g.T)) @ d.T, "gate and up are swapped"),
        (lambda x, g, u, d: (F.gelu(x @ g.T) * (x @ u.T)) @ d.T, "this is GELU"),
        (lambda x, g, u, d: (torch.sigmoid(x @ g.T) * (x @ u.T)) @ d.T, "sigmoid"),
        (lambda x, g, u, d: F.silu(x @ g.T) @ d.T, "up projection is missing"),
        (lambda x, g, u, d: (F.silu(x @ g.T) + x @ u.T) @ d.T, "are added"),
        (lambda x, g, u, d: F.silu((x @ g.T) * (x @ u.T)) @ d.T, "after the product"),
        (lambda x, g, u, d: F.silu(x @ g.T) * (x @ u.T), "finish with the down projection"),
        (lambda x, g, u, d: x @ g @ d, "your code raised RuntimeError"),  # untransposed weights: the learner's error
    ],
)
def test_swiglu_mistakes_get_specific_hints(mistake, fragment):
    assert_hint(check_swiglu(mistake), fragment)


# --- exercise 3: the layer's tensors -> our parameters -------------------------------------------
def swapped(a: str, b: str):
    def mapping(name):
        part = name.split(".")[2]
        other = {a: b, b: a}.get(part, part)
        return course_name(name.replace(f".{part}.", f".{other}."))

    return mapping


def test_layer_mapping_passes_the_right_answer():
    assert check_layer_mapping(course_name).passed


@pytest.mark.parametrize(
    "mistake,fragment",
    [
        (swapped("attn_q", "attn_k"), "query and key projections are swapped"),
        (swapped("attn_norm", "ffn_norm"), "two norms are swapped"),
        (swapped("ffn_gate", "ffn_up"), "gate and up are swapped"),
        (swapped("attn_v", "attn_output"), "out_proj"),
        (lambda name: course_name(name).replace("blocks.4.", "blocks.3."), "keep the layer number"),
        (lambda name: 4, "a parameter name (a str)"),
        (lambda name: course_name(name).replace("norm1", "norm"), "should map to"),
    ],
)
def test_layer_mapping_mistakes_get_specific_hints(mistake, fragment):
    assert_hint(check_layer_mapping(mistake), fragment)


def test_untouched_stubs_are_not_attempted():
    for check in (check_rms_norm, check_swiglu, check_layer_mapping):
        assert check(not_attempted).status == "not attempted"
