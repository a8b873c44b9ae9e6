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


# --- issue 35: answers that used to pass ---------------------------------------------------------
def rms_in_place(x, weight, eps):
    x /= torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)  # the caller's x is changed
    return x * weight


def test_rms_norm_refuses_numpy_in_place_edits_and_a_fixed_dimension():
    assert_hint(check_rms_norm(lambda x, w, eps: right_rms(x, w, eps).numpy()), "returned a numpy array")
    assert_hint(check_rms_norm(rms_in_place), "changed its input `x` in place")
    dim_2 = lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(dim=2, keepdim=True) + eps) * w  # noqa: E731
    assert_hint(check_rms_norm(dim_2), "of shape (5, 6)", "your code raised IndexError", "LAST dimension")
    # Counted from the front, the last dim of a 3-D x is dim 2; on a 4-D x that is a wrong answer, not an error.
    from_front = lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(dim=min(x.dim() - 1, 2), keepdim=True) + eps) * w  # noqa: E731
    assert_hint(check_rms_norm(from_front), "of shape (2, 2, 3, 6)", "other numbers")


def test_swiglu_refuses_numpy():
    assert_hint(check_swiglu(lambda *args: right_swiglu(*args).numpy()), "returned a numpy array")


def test_layer_mapping_tries_several_layers():
    first_digit = lambda name: course_name(name).replace(f"blocks.{name.split('.')[1]}.", f"blocks.{name[4]}.")  # noqa: E731
    assert_hint(check_layer_mapping(first_digit), "blk.12.attn_norm.weight belongs to block 12", "first digit")
    fixed = lambda name: course_name(f"blk.4.{name.split('.')[2]}.weight")  # noqa: E731
    assert_hint(check_layer_mapping(fixed), "maps to block 4", "take it from the tensor's name")


def _solution_lines(notebook: str) -> list[str]:
    """The code lines between # BEGIN SOLUTION and # END SOLUTION, comments stripped, trivial ones left out."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    lines, inside = [], False
    for cell in json.loads((root / "notebooks" / notebook).read_text(encoding="utf-8"))["cells"]:
        for line in "".join(cell["source"]).splitlines():
            inside = (inside or "BEGIN SOLUTION" in line) and "END SOLUTION" not in line
            code = line.split("  #")[0].strip()
            if inside and "SOLUTION" not in line and len(code) >= 10:
                lines.append(code)
    return lines


def _message_strings(module) -> list[str]:
    """Every string constant in ``module``'s source (an f-string's constant pieces, each on its own)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(module))
    return [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def test_no_hint_gives_the_solution_away():
    import course.exercises.lesson09 as checks

    lines = _solution_lines("09_language_model.ipynb")
    assert len(lines) >= 5, lines  # the three solutions were found
    for text in _message_strings(checks):
        for line in lines:
            assert line not in text, (line, text)
