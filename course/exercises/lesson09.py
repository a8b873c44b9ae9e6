"""Checks for lesson 09's exercises: RMSNorm, the SwiGLU block, and one layer's tensors of the GGUF file mapped
onto ``helpers.gpt.GPT``'s parameters.

Shapes: x (..., E), weight (E,), F the feed-forward width; Linear weights (out features, in features).
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
    call_learner,
    close,
    diagnose,
    expect_shape,
    learner_check,
    run_check,
    wrong,
)
from helpers.models.language_model import course_name

__all__ = ["check_layer_mapping", "check_rms_norm", "check_swiglu"]


# ---------------------------------------------------------------------------------------------
# Exercise 1: RMSNorm
# ---------------------------------------------------------------------------------------------
RMS_FALLBACK = (
    "the output differs from RMSNorm: each vector of E features is divided by the square root of (the mean of its "
    "squared features, plus eps), then multiplied feature by feature by the weight."
)
_RMS_ANY_SHAPE = (
    "right for an x of shape (3, 4, 6), not for one of shape {shape} ({got}): x is (..., E), with any number of "
    "leading dimensions, so the mean must run over the LAST dimension, counted from the end, not over a fixed "
    "dimension number."
)


def _rms(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _rms_mistakes(x: Tensor, weight: Tensor, eps: float) -> dict[str, Tensor]:
    ms = x.pow(2).mean(-1, keepdim=True)
    centred = x - x.mean(-1, keepdim=True)
    return {
        "this subtracts the mean first: that is LayerNorm. RMSNorm only divides by the root mean square.": (
            centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps) * weight
        ),
        "the square root is missing: divide by the ROOT of (mean of the squares + eps).": x / (ms + eps) * weight,
        "eps goes inside the square root: add it to the mean of the squares, then take the root.": (
            x / (torch.sqrt(ms) + eps) * weight
        ),
        "the weight is missing: multiply the normalised x by weight (E,), feature by feature.": (
            x / torch.sqrt(ms + eps)
        ),
        "the mean runs over the wrong dimension: average the squares over the last dim (the E features), keeping "
        "that dim so the division broadcasts.": x / torch.sqrt(x.pow(2).mean(0, keepdim=True) + eps) * weight,
        "this divides by the vector's length (a sum of squares): RMSNorm takes the *mean* of the squares.": x
        / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps)
        * weight,
    }


@learner_check
def check_rms_norm(rms_norm: Callable[[Tensor, Tensor, float], Tensor]) -> Verdict:
    """Check ``rms_norm(x, weight, eps)``: x (..., E) / sqrt(mean(x², last dim) + eps) * weight (E,)."""

    def body() -> str:
        generator = torch.Generator().manual_seed(9)
        x = torch.randn(3, 4, 6, generator=generator) + 0.7  # a mean far from 0, so LayerNorm differs
        weight = torch.rand(6, generator=generator) + 0.5
        eps = 0.3  # large, so where eps goes shows
        answer = as_tensor(call_learner(rms_norm, x.clone(), weight.clone(), eps), "the normalised x")
        expect_shape(answer, x.shape, "rms_norm's output (..., E)")
        if not close(answer, _rms(x, weight, eps), atol=1e-5):
            raise diagnose(answer, _rms_mistakes(x, weight, eps), RMS_FALLBACK)
        # The same E features behind other numbers of leading dimensions: (..., E) is any shape ending in E.
        for shape in ((5, 6), (2, 2, 3, 6)):
            other = torch.randn(*shape, generator=generator) + 0.7
            try:
                result = as_tensor(call_learner(rms_norm, other.clone(), weight.clone(), eps), "the normalised x")
            except LearnerError as error:
                raise wrong(_RMS_ANY_SHAPE.format(shape=shape, got=f"your code raised {error}")) from None
            if tuple(result.shape) != shape or not close(result, _rms(other, weight, eps), atol=1e-5):
                raise wrong(_RMS_ANY_SHAPE.format(shape=shape, got=f"got shape {tuple(result.shape)} or other numbers"))
        return "RMSNorm: each vector divided by its root mean square, then scaled by the weight."

    return run_check("RMSNorm", body)


# ---------------------------------------------------------------------------------------------
# Exercise 2: the SwiGLU feed-forward
# ---------------------------------------------------------------------------------------------
@learner_check
def check_swiglu(swiglu: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]) -> Verdict:
    """Check ``swiglu(x, gate_weight, up_weight, down_weight)``: down(silu(gate(x)) * up(x)), with weights
    (F, E), (F, E), (E, F) as nn.Linear stores them (out features, in features)."""

    def body() -> str:
        generator = torch.Generator().manual_seed(10)
        E, F_dim = 4, 6
        x = torch.randn(2, 3, E, generator=generator)
        gate, up = torch.randn(F_dim, E, generator=generator), torch.randn(F_dim, E, generator=generator)
        down = torch.randn(E, F_dim, generator=generator)
        answer = as_tensor(call_learner(swiglu, x.clone(), gate.clone(), up.clone(), down.clone()), "the output")
        if tuple(answer.shape) == (2, 3, F_dim):
            raise wrong(
                "the output has F features: finish with the down projection, back to E features with down_weight."
            )
        expect_shape(answer, x.shape, "swiglu's output (..., E)")
        g, u = x @ gate.T, x @ up.T
        right = (F.silu(g) * u) @ down.T
        if torch.allclose(answer.double(), right.double(), atol=1e-4):
            return "SwiGLU: the SiLU of the gate projection, times the up projection, projected back down."
        raise diagnose(
            answer,
            {
                "gate and up are swapped: SiLU acts on gate_weight's projection, the up projection is not activated.": (
                    F.silu(u) * g
                )
                @ down.T,
                "this is GELU: SwiGLU uses SiLU, z · sigmoid(z) (F.silu).": (F.gelu(g) * u) @ down.T,
                "this uses sigmoid(z): SiLU is z · sigmoid(z) (F.silu).": (torch.sigmoid(g) * u) @ down.T,
                "the up projection is missing: multiply silu(gate(x)) by up(x), feature by feature.": F.silu(g)
                @ down.T,
                "the gate and the up projection are added: SwiGLU multiplies them (the gate scales each feature).": (
                    F.silu(g) + u
                )
                @ down.T,
                "SiLU is applied after the product: silu(gate(x)) * up(x), the activation on the gate alone.": F.silu(
                    g * u
                )
                @ down.T,
            },
            "the output differs from SwiGLU: project x with gate_weight and with up_weight, put the gate's "
            "projection through SiLU, multiply the two feature by feature, and project the product back down "
            "with down_weight (each weight is (out features, in features), as nn.Linear stores it).",
        )

    return run_check("SwiGLU", body)


# ---------------------------------------------------------------------------------------------
# Exercise 3: one layer's tensors in the file -> our parameters
# ---------------------------------------------------------------------------------------------
PARTS = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")
LAYERS = (4, 0, 12, 29)  # the one the lesson shows first, then the first, a two-digit one, SmolLM2's last
FILE_NAMES = [f"blk.{layer}.{part}.weight" for layer in LAYERS for part in PARTS]
SWAPS = [
    ("attn_q", "attn_k", "the query and key projections are swapped: attn_q is q_proj, attn_k is k_proj."),
    ("attn_norm", "ffn_norm", "the two norms are swapped: attn_norm comes before attention (norm1), ffn_norm before "
     "the feed-forward (norm2)."),
    ("ffn_gate", "ffn_up", "gate and up are swapped: ffn_gate is gate_proj (the one through SiLU), ffn_up is up_proj."),
    ("attn_v", "attn_output", "attn_output is the output projection out_proj (E, E); attn_v is v_proj."),
]  # fmt: skip


def _block_of(parameter: str) -> str | None:
    """The block number a parameter name starts with ("blocks.12.norm1.weight" -> "12"), or None."""
    pieces = parameter.split(".")
    return pieces[1] if len(pieces) > 2 and pieces[0] == "blocks" else None


def _layer_hint(answers: dict[str, str], right: dict[str, str]) -> str | None:
    """What is wrong with the block numbers of the answers, or None if every one is right."""
    blocks = {name: _block_of(answers[name]) for name in FILE_NAMES}
    if all(blocks[name] == _block_of(right[name]) for name in FILE_NAMES):
        return None
    if len(set(blocks.values())) == 1 and None not in blocks.values():
        return (
            f"every tensor, from layers {', '.join(map(str, LAYERS))}, maps to block {blocks[FILE_NAMES[0]]}: "
            "the block number is not fixed, take it from the tensor's name (blk.<layer>.…)."
        )
    first = next(name for name in FILE_NAMES if blocks[name] != _block_of(right[name]))
    layer = first.split(".")[1]
    if len(layer) > 1 and blocks[first] == layer[0]:
        return (
            f"{first} belongs to block {layer}, but the answer says block {layer[0]}: only the first digit was "
            "read. A layer number can have two digits: take everything between the first two dots."
        )
    return f"{first} belongs to block {layer}: keep the layer number, blocks.{layer}.… (got {answers[first]!r})"


@learner_check
def check_layer_mapping(layer_mapping: Callable[[str], str]) -> Verdict:
    """Check ``layer_mapping(name)``: a tensor's name in the file (blk.{i}.attn_q.weight, …) -> the name of the
    ``GPT`` parameter it loads into (blocks.{i}.attention.projections.q_proj.weight, …), for several layers."""

    def body() -> str:
        answers = {name: call_learner(layer_mapping, name) for name in FILE_NAMES}
        for name, answer in answers.items():
            if not isinstance(answer, str):
                raise wrong(
                    f"layer_mapping({name!r}) should return a parameter name (a str), got {type(answer).__name__}"
                )
        right = {name: course_name(name) for name in FILE_NAMES}
        wrong_names = [name for name in FILE_NAMES if answers[name] != right[name]]
        if not wrong_names:
            return f"all {len(PARTS)} tensors of layers {', '.join(map(str, LAYERS))} map onto their parameters."
        hint = _layer_hint(answers, right)
        if hint:
            raise wrong(hint)
        for a, b, hint in SWAPS:
            na, nb = f"blk.{LAYERS[0]}.{a}.weight", f"blk.{LAYERS[0]}.{b}.weight"
            if answers[na] == right[nb] and answers[nb] == right[na]:
                raise wrong(hint)
        first = wrong_names[0]
        raise wrong(f"{first} should map to {right[first]!r}, got {answers[first]!r}")

    return run_check("layer mapping", body)
