"""A module argument as it was before the learner's call, to say what the call changed in it.

A check hands the learner's code modules of its own (``q_proj``, a ``LayerNorm``, a whole decoder layer) and compares
the answer with what those modules compute. An answer that changes them (zeroes their weights, sets ``eps``, swaps a
part for another, hooks one) would change the check's expected value with it, so ``call_learner`` refuses any change,
named: ``ModuleSnapshot(module)`` before the call, ``snapshot.change(module, "layer")`` after it.

What counts as the module's state: every parameter and buffer (their numbers, shapes and dtypes, by name), each
submodule's plain attributes (numbers, strings, booleans, None and tuples of them: ``eps``, ``training``,
``num_heads``) and the callables set on an instance (a ``forward`` of its own), which submodule sits where, and the
hooks on each. Tensors the module keeps as plain attributes (a recorded attention map) are its own business.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["ModuleSnapshot"]

_PLAIN = (int, float, bool, str, type(None))
_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def _tensors(module: nn.Module) -> dict[str, Tensor]:
    """Every parameter and buffer by its dotted name (a tied one under each of its names)."""
    return {
        **dict(module.named_parameters(remove_duplicate=False)),
        **dict(module.named_buffers(remove_duplicate=False)),
    }


def _is_plain(value: Any, depth: int = 0) -> bool:
    if isinstance(value, _PLAIN):
        return True
    return depth < 2 and isinstance(value, tuple) and all(_is_plain(item, depth + 1) for item in value)


def _settings(sub: nn.Module) -> dict[str, Any]:
    """A submodule's public plain attributes (values) and the callables set on the instance (kept as themselves)."""
    return {
        key: value
        for key, value in vars(sub).items()
        if not key.startswith("_") and (_is_plain(value) or (callable(value) and not isinstance(value, nn.Module)))
    }


def _same_setting(a: Any, b: Any) -> bool:
    if callable(a) or callable(b):
        return a is b
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def _same_numbers(tensor: Tensor, copy: Tensor) -> bool:
    """Whether ``tensor`` holds what ``copy`` recorded: shape, dtype and numbers (NaN equal to NaN)."""
    if tensor.shape != copy.shape or tensor.dtype != copy.dtype or tensor.device != copy.device:
        return False
    now = tensor.detach()
    if now.dtype.is_floating_point or now.dtype.is_complex:
        return bool(((now == copy) | (now.isnan() & copy.isnan())).all())
    return torch.equal(now, copy)


class ModuleSnapshot:
    """What ``module`` holds now: its tensors' numbers, its parts, their settings and hooks (see the module's text)."""

    def __init__(self, module: nn.Module) -> None:
        with torch._C.DisableTorchFunction():  # copying is the check's work, not the learner's: no recorder sees it
            self.tensors = {
                name: tensor.detach().clone()
                for name, tensor in _tensors(module).items()
                if tensor.layout == torch.strided and tensor.device.type != "meta"
            }
        self.parts = {path: sub for path, sub in module.named_modules(remove_duplicate=False)}
        self.settings = {path: _settings(sub) for path, sub in self.parts.items()}
        self.hooks = {path: tuple(tuple(getattr(sub, name, {})) for name in _HOOKS) for path, sub in self.parts.items()}

    def change(self, module: nn.Module, name: str) -> str:
        """The first change the call made to ``module`` (the argument ``name``), in words; "" if none."""
        with torch._C.DisableTorchFunction():
            return self._part_change(module, name) or self._tensor_change(module, name) or self._setting_change(name)

    def _part_change(self, module: nn.Module, name: str) -> str:
        now = dict(module.named_modules(remove_duplicate=False))
        for path, sub in self.parts.items():
            where = f"`{name}{'.' if path else ''}{path}`"
            if path not in now:
                return f"{where} was removed"
            if now[path] is not sub:
                return f"{where} was replaced by another module"
        for path in now:
            if path not in self.parts:
                return f"`{name}.{path}` was added"
        for path, sub in self.parts.items():
            if tuple(tuple(getattr(sub, hooks, {})) for hooks in _HOOKS) != self.hooks[path]:
                return f"the hooks on `{name}{'.' if path else ''}{path}` were changed"
        return ""

    def _tensor_change(self, module: nn.Module, name: str) -> str:
        now = _tensors(module)
        for key, copy in self.tensors.items():
            if key not in now:
                return f"`{name}.{key}` was removed"
            if now[key].shape != copy.shape or now[key].dtype != copy.dtype:
                return (
                    f"`{name}.{key}` changed from {copy.dtype} of shape {tuple(copy.shape)} to {now[key].dtype} of "
                    f"shape {tuple(now[key].shape)}"
                )
            if not _same_numbers(now[key], copy):
                return f"`{name}.{key}` holds other numbers"
        for key in now:
            if key not in self.tensors:
                return f"`{name}.{key}` was added"
        return ""

    def _setting_change(self, name: str) -> str:
        for path, sub in self.parts.items():
            prefix = f"{name}{'.' if path else ''}{path}"
            before, after = self.settings[path], _settings(sub)
            for key, value in before.items():
                if key not in after:
                    return f"`{prefix}.{key}` was removed"
                if not _same_setting(value, after[key]):
                    shown = "another function" if callable(after[key]) else repr(after[key])
                    return f"`{prefix}.{key}` is now {shown}, not {value!r}"
            for key in after:
                if key not in before:
                    return f"`{prefix}.{key}` was set"
        return ""

    def restore(self, module: nn.Module) -> None:
        """Put back the numbers and plain settings the call changed (a changed part or hook stays: the check
        stops at the refusal, and its module is not used again)."""
        now = _tensors(module)
        with torch.no_grad(), torch._C.DisableTorchFunction():
            for key, copy in self.tensors.items():
                if key in now and now[key].shape == copy.shape and now[key].dtype == copy.dtype:
                    now[key].copy_(copy)
                elif key in now:
                    now[key].data = copy.clone()
        for path, sub in self.parts.items():
            for key, value in self.settings[path].items():
                if not callable(value):
                    setattr(sub, key, value)
