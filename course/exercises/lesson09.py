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
    Verdict,
    as_tensor,
    call_learner,
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
        ms = x.pow(2).mean(-1, keepdim=True)
        right = x / torch.sqrt(ms + eps) * weight
        if torch.allclose(answer.double(), right.double(), atol=1e-5):
            return "RMSNorm: each vector divided by its root mean square, then scaled by the weight."
        centred = x - x.mean(-1, keepdim=True)
        raise diagnose(
            answer,
            {
                "this subtracts the mean first: that is LayerNorm. RMSNorm only divides by sqrt(mean(x²) + eps).": (
                    centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps) * weight
                ),
                "the square root is missing: divide by sqrt(mean(x²) + eps), the root mean square.": x
                / (ms + eps)
                * weight,
                "eps goes inside the square root: sqrt(mean(x²) + eps), not sqrt(mean(x²)) + eps.": x
                / (torch.sqrt(ms) + eps)
                * weight,
                "the weight is missing: multiply the normalised x by weight (E,).": x / torch.sqrt(ms + eps),
                "the mean runs over the wrong dimension: average x² over the last dim (the E features), "
                "keepdim=True.": x / torch.sqrt(x.pow(2).mean(0, keepdim=True) + eps) * weight,
                "this divides by the vector's length (a sum of squares): RMSNorm takes the *mean* of the squares.": x
                / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps)
                * weight,
            },
            "the output differs from x / sqrt(mean(x², dim=-1, keepdim=True) + eps) * weight.",
        )

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
            raise wrong("the output has F features: finish with the down projection, (..., F) @ down_weight.T.")
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
            "the output differs from (F.silu(x @ gate_weight.T) * (x @ up_weight.T)) @ down_weight.T.",
        )

    return run_check("SwiGLU", body)


# ---------------------------------------------------------------------------------------------
# Exercise 3: one layer's tensors in the file -> our parameters
# ---------------------------------------------------------------------------------------------
LAYER = 4
FILE_NAMES = [
    f"blk.{LAYER}.{part}.weight"
    for part in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")
]
SWAPS = [
    ("attn_q", "attn_k", "the query and key projections are swapped: attn_q is q_proj, attn_k is k_proj."),
    ("attn_norm", "ffn_norm", "the two norms are swapped: attn_norm comes before attention (norm1), ffn_norm before "
     "the feed-forward (norm2)."),
    ("ffn_gate", "ffn_up", "gate and up are swapped: ffn_gate is gate_proj (the one through SiLU), ffn_up is up_proj."),
    ("attn_v", "attn_output", "attn_output is the output projection out_proj (E, E); attn_v is v_proj."),
]  # fmt: skip


@learner_check
def check_layer_mapping(layer_mapping: Callable[[str], str]) -> Verdict:
    """Check ``layer_mapping(name)``: a tensor's name in the file (blk.{i}.attn_q.weight, …) -> the name of the
    ``GPT`` parameter it loads into (blocks.{i}.attention.projections.q_proj.weight, …)."""

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
            return f"all {len(FILE_NAMES)} tensors of layer {LAYER} map onto their parameters."
        if any(f"blocks.{LAYER}." not in answers[n] for n in wrong_names):
            first = next(n for n in wrong_names if f"blocks.{LAYER}." not in answers[n])
            raise wrong(
                f"{first} belongs to block {LAYER}: keep the layer number, blocks.{LAYER}.… (got {answers[first]!r})"
            )
        for a, b, hint in SWAPS:
            na, nb = f"blk.{LAYER}.{a}.weight", f"blk.{LAYER}.{b}.weight"
            if answers[na] == right[nb] and answers[nb] == right[na]:
                raise wrong(hint)
        first = wrong_names[0]
        raise wrong(f"{first} should map to {right[first]!r}, got {answers[first]!r}")

    return run_check("layer mapping", body)
