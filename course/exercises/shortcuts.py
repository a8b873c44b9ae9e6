"""Seeing which torch functions the learner's code called, so a check can spot a forbidden shortcut.

Some exercises ask for a computation written out by hand (one-hot vectors times a table instead of
indexing; ``x @ weight.T + bias`` instead of ``F.linear``). A shortcut gives the right numbers, so
comparing numbers cannot tell; recording the calls can. ``FunctionRecorder`` is a
``TorchFunctionMode``: while it is active, every torch function called from Python passes through it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import TorchFunctionMode

# Ways to pick rows out of a table without a matrix product, each with the name a hint shows.
_ROW_LOOK_UPS = {
    Tensor.__getitem__: "indexing, `weight[ids]`",
    F.embedding: "`F.embedding`",
    torch.embedding: "`torch.embedding`",
    torch.index_select: "`index_select`",
    Tensor.index_select: "`index_select`",
    torch.take: "`torch.take`",
    Tensor.take: "`take`",
    torch.gather: "`gather`",
    Tensor.gather: "`gather`",
}

# nn.Linear's computation in one call: nn.Linear.forward, F.linear and torch's own linear all end up here.
_LINEAR = {F.linear: "`F.linear` (or `nn.Linear`)", torch._C._nn.linear: "`F.linear` (or `nn.Linear`)"}


class FunctionRecorder(TorchFunctionMode):
    """Records the torch functions called while active; ``watched`` is the tensor whose use matters.

    A call counts as using ``watched`` when one of its tensor arguments has the same shape and the
    same numbers (the learner may have made a copy, say with ``.float()``).
    """

    def __init__(self, watched: Tensor | None = None) -> None:
        super().__init__()
        self.watched = None if watched is None else watched.detach().clone()
        self.calls: list[tuple[Any, bool]] = []  # (function, whether it used the watched tensor)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.calls.append((func, self._uses_watched(args, kwargs)))
        return func(*args, **kwargs)

    def _uses_watched(self, args: tuple, kwargs: dict) -> bool:
        if self.watched is None:
            return False
        for value in (*args, *kwargs.values()):
            if (
                isinstance(value, Tensor)
                and value.shape == self.watched.shape
                and value.dtype.is_floating_point
                and torch.equal(value.detach().to(self.watched.dtype), self.watched)
            ):
                return True
        return False

    def looked_up_rows(self) -> str:
        """How the watched table's rows were picked without a product ("" if they were not)."""
        for func, used_watched in self.calls:
            if used_watched and func in _ROW_LOOK_UPS:
                return _ROW_LOOK_UPS[func]
        return ""

    def called_linear(self) -> str:
        """The name of the one-call linear layer the code used ("" if none)."""
        for func, _ in self.calls:
            if func in _LINEAR:
                return _LINEAR[func]
        return ""
