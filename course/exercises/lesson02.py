"""Checks for lesson 02's exercises: linear projections and the inputs of cross-attention."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
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

__all__ = ["check_cross_attention_inputs", "check_linear_projection"]


# ---------------------------------------------------------------------------------------------
# Exercise 1: what nn.Linear computes, written with a matrix product
# ---------------------------------------------------------------------------------------------
def _projection(linear_projection, x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """The learner's projection on copies of the inputs, refusing nn.Linear's one-call shortcuts."""
    with FunctionRecorder() as recorder:
        try:
            result = call_learner(linear_projection, x.clone(), weight.clone(), bias.clone())
        except LearnerError as problem:
            message = str(problem.error)
            if "cannot be multiplied" in message or "size mismatch" in message:
                raise wrong(
                    f"the shapes do not fit ({message}). nn.Linear stores its weight as (E_out, E_in) = "
                    f"{tuple(weight.shape)}, so the product is `x @ weight.T`, (N, L, E_in) @ (E_in, E_out)."
                ) from None
            if "batch2" in message or "batch1" in message:
                raise wrong(
                    f"the shapes do not fit ({message}). The tokens come first: `x @ weight.T`, "
                    "(N, L, E_in) @ (E_in, E_out), not `weight @ x` or `weight.T @ x`."
                ) from None
            raise
    answer = as_tensor(result, "the projection")
    expect_shape(answer, (*x.shape[:-1], weight.size(0)), "the projection", "(N, L, E_out)")
    refuse_shortcuts(
        recorder, "linear projection", "write the product and the sum yourself, to see what nn.Linear computes."
    )
    return answer


def _projection_mistakes(x: Tensor, w: Tensor, b: Tensor) -> dict[str, Callable[[], Tensor]]:
    """The usual mistakes for one case (float64), computed lazily; those whose shapes do not fit are skipped."""
    return {
        "the weight is used untransposed: nn.Linear stores it as (E_out, E_in), one row per output feature, so "
        "x meets its transpose. With a square weight the untransposed product runs but gives other numbers.": lambda: (
            x @ w + b
        ),
        "the weight is used untransposed AND the bias is missing: nn.Linear stores its weight as (E_out, E_in), "
        "so x meets its transpose, and then adds the bias.": lambda: x @ w,
        "the bias is missing: nn.Linear adds it after the product.": lambda: x @ w.T,
        "the bias is subtracted: nn.Linear adds it.": lambda: x @ w.T - b,
        # only where E_in = E_out: the bias (E_out,) cannot be added to x (..., E_in) otherwise
        "the bias is added to x before the product: nn.Linear adds it to the result of the product.": lambda: (
            (x + b) @ w.T
        ),
    }


@learner_check
def check_linear_projection(linear_projection: Callable[[Tensor, Tensor, Tensor], Tensor]) -> Verdict:
    """Check ``linear_projection(x, weight, bias)``: x (N, L, E_in), weight (E_out, E_in), bias (E_out,)."""

    def body() -> str:
        generator = torch.Generator().manual_seed(2)
        answers: list[Tensor]  # the learner's result on each case
        expected: list[Tensor]  # the reference's
        answers, expected, tables = [], [], []
        # Square weights first (a transposed weight still fits), then two projections to other sizes.
        for e_in, e_out in ((4, 4), (6, 3), (5, 5)):
            x = torch.randn(2, 3, e_in, generator=generator)  # (N, L, E_in)
            weight = torch.randn(e_out, e_in, generator=generator)  # (E_out, E_in), as nn.Linear stores it
            bias = torch.randn(e_out, generator=generator)  # (E_out,)
            try:
                answer = _projection(linear_projection, x, weight, bias)
            except Exception:
                if any(not close(a, e) for a, e in zip(answers, expected, strict=True)):
                    break  # an earlier case already shows the mistake: name it from there
                raise
            answers.append(answer)
            expected.append(F.linear(x, weight, bias))  # x @ weight.T + bias
            tables.append(_projection_mistakes(x.double(), weight.double(), bias.double()))
        if all(close(a, e) for a, e in zip(answers, expected, strict=True)):
            return "your projection gives the same numbers as nn.Linear."
        raise diagnose_cases(
            answers,
            tables,
            "the shape is right but the numbers differ from nn.Linear's: a product with the weight as nn.Linear "
            "stores it, then the bias.",
        )

    return run_check("linear projection", body)


# ---------------------------------------------------------------------------------------------
# Exercise 2: queries from the target, keys and values from the source
# ---------------------------------------------------------------------------------------------
@learner_check
def check_cross_attention_inputs(
    cross_attention_inputs: Callable[[Tensor, Tensor, nn.Linear, nn.Linear, nn.Linear], tuple[Tensor, Tensor, Tensor]],
) -> Verdict:
    """Check ``cross_attention_inputs(target, source, q_proj, k_proj, v_proj) -> (q, k, v)``.

    target (N, L, E) and source (N, S, E) give q (N, L, d), k (N, S, d) and v (N, S, d).
    """

    def body() -> str:
        N, L, S, E, d = 2, 3, 5, 6, 4
        with torch.random.fork_rng():  # seeded test data without disturbing the notebook's random numbers
            torch.manual_seed(3)
            target, source = torch.randn(N, L, E), torch.randn(N, S, E)
            q_proj, k_proj, v_proj = nn.Linear(E, d), nn.Linear(E, d), nn.Linear(E, d)
        with torch.no_grad():
            # Every projection of every sentence, to recognise which one was used: computed before the call, so
            # that nothing the learner's code does to the projections can reach the expected values.
            projected = {
                (name, side): as_tensor(proj(x), name)
                for name, proj in (("q_proj", q_proj), ("k_proj", k_proj), ("v_proj", v_proj))
                for side, x in (("target", target), ("source", source))
            }
            result = call_learner(cross_attention_inputs, target.clone(), source.clone(), q_proj, k_proj, v_proj)
            if not isinstance(result, (tuple, list)) or len(result) != 3:
                what = f"a {type(result).__name__} of {len(result)}" if isinstance(result, (tuple, list)) else None
                raise wrong(f"return the three tensors as a tuple `(q, k, v)`, got {what or type(result).__name__}")
            q, k, v = (as_tensor(t, name) for t, name in zip(result, ("q", "k", "v"), strict=True))
        for name, tensor, proj_name, side, x in (
            ("q", q, "q_proj", "target", target),
            ("k", k, "k_proj", "source", source),
            ("v", v, "v_proj", "source", source),
        ):
            if close(tensor, x.double()):
                raise wrong(
                    f"{name} is the {side} sentence itself, not projected: each of q, k and v is a learned projection, "
                    f"{name} = {proj_name}({side}), of shape (N, {'L' if side == 'target' else 'S'}, d)."
                )
        if tuple(q.shape) == (N, S, d) and tuple(k.shape) == (N, L, d):
            raise wrong(
                "the roles are swapped: queries come from the target sentence (what is being written, length "
                "L), keys and values from the source sentence (what is being read, length S)."
            )
        expect_shape(q, (N, L, d), "q (one query per target token)", "(N, L, d)")
        for name, tensor in (("k", k), ("v", v)):
            if tuple(tensor.shape) == (N, L, d):
                raise wrong(
                    f"{name} has the target's length L={L}: in cross-attention keys and values are projections "
                    f"of the SOURCE sentence (length S={S}), so {name} should have shape (N, S, d) = {(N, S, d)}."
                )
            expect_shape(tensor, (N, S, d), f"{name} (one per source token)", "(N, S, d)")
        checks = (("q", q, "q_proj", "target"), ("k", k, "k_proj", "source"), ("v", v, "v_proj", "source"))
        for name, tensor, proj_name, side in checks:
            if close(tensor, projected[(proj_name, side)]):
                continue
            raise diagnose(
                tensor,
                {
                    f"{name} was made with the wrong projection ({other}): use `{proj_name}` for {name}.": projected[
                        (other, side)
                    ]
                    for other in ("q_proj", "k_proj", "v_proj")
                    if other != proj_name
                },
                f"{name} has the right shape but not the numbers of `{proj_name}({side})`.",
            )
        return "queries come from the target, keys and values from the source, each with its own projection."

    return run_check("cross-attention inputs", body)
