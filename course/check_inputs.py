"""Objects the exercise checks hand to the learner's code, kept apart from the checks.

Under ``python -m course.assignments check`` the checks run outside the graded kernel and send their inputs into
it (:mod:`course.grading.wire`); a module among them must be rebuilt there, where ``course.exercises`` (the checks
and their reference answers) is not. So a class a check builds its inputs from lives here: no check, no answer.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

__all__ = ["MatrixThenActivation", "StandInDropout"]


class StandInDropout(nn.Module):
    """Multiplies by a fixed factor: stands in for a dropout so a check can see where it was applied."""

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: Tensor) -> Tensor:
        if isinstance(x, tuple):  # the usual slip: an attention's (output, weights) passed on whole
            raise TypeError(f"{type(self).__name__} got a tuple, not a tensor")
        return x * self.factor

    def extra_repr(self) -> str:
        return f"factor={self.factor}"


class MatrixThenActivation(nn.Module):
    """A sublayer (N, L, E) -> (N, L, E): ``activation(t @ weight)``, for a check that needs any sublayer at all."""

    weight: Tensor  # (E, E), the buffer registered in __init__

    def __init__(self, weight: Tensor, activation: Callable[[Tensor], Tensor]) -> None:
        super().__init__()
        self.register_buffer("weight", weight)
        self.activation = activation

    def forward(self, t: Tensor) -> Tensor:
        return self.activation(t @ self.weight)
