"""What crosses between a graded kernel and the checker's process: values as data, never code.

When ``check`` grades, the check runs in the checker's process (:mod:`course.grading.remote`) and the learner's
function in the sandboxed kernel (:mod:`course.grading.learner_side`). Each call crosses twice:

- **to the kernel**, the check's arguments: ``torch.save`` of tensors, numbers, strings, containers of them and the
  course's modules (the kernel, which trusts the checker, loads them in full); a ``torch.Generator`` goes as its
  state, a handle to an object the kernel keeps (the hook a learner's function returned) as its number;
- **back from the kernel**, the result and the arguments as they are after the call: ``torch.save`` of tensors,
  numbers, strings and containers only, read with ``torch.load(weights_only=True)``, so that nothing the kernel
  sends can run code here. What is not data comes back described: a module as its state (its tensors and its plain
  attributes), a numpy value as its numbers and type name, a callable as a handle, anything else as its type's name.

A framed message is the base64 text of those bytes (it travels in a Jupyter ``input`` request or reply).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import inspect
import io
import re
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["MAX_BYTES", "TAG", "Unreadable", "frame", "unframe"]

#: Marks a described value: (TAG, kind, ...). A learner who sends one only describes a value of their own.
TAG = "\x00course-wire"
#: The most a framed message may hold (base64 text): an answer of more is refused, not read.
MAX_BYTES = 256 * 2**20
_PLAIN = (int, float, bool, str, type(None))
_DEPTH = 24


class Unreadable(ValueError):
    """A message that is not a framed value the other side could have sent."""


def frame(value: Any, trusted: bool = False) -> str:
    """``value`` (already described: see the encoders of each side) as base64 text."""
    buffer = io.BytesIO()
    with _hooks_set_aside(value) if trusted else contextlib.nullcontext():
        torch.save(value, buffer)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def unframe(text: Any, trusted: bool = False) -> Any:
    """The value in a framed message. ``trusted`` (the kernel reading the checker's requests) loads in full;
    otherwise only data loads (``weights_only=True``) and anything else raises ``Unreadable``."""
    if not isinstance(text, str):
        raise Unreadable(f"expected a framed message (text), not {type(text).__name__}")
    if len(text) > MAX_BYTES:  # base64 holds 3 bytes in 4 characters
        raise Unreadable(
            f"too large: {len(text) * 3 // 4 / 2**20:,.0f} MiB, over the limit of {MAX_BYTES * 3 // 4 / 2**20:,.0f} "
            "MiB for one answer (a check's results are small: return what the exercise asks for)"
        )
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
        return torch.load(io.BytesIO(data), weights_only=not trusted, map_location="cpu")
    except (binascii.Error, UnicodeEncodeError, ValueError, RuntimeError, EOFError, AttributeError) as error:
        raise Unreadable(f"not a framed value ({type(error).__name__}: {_plain_text(error)})") from None
    except Exception as error:  # weights_only's refusal is an UnpicklingError; anything else alike
        found = _REFUSED_GLOBAL.search(str(error))
        if found is None:
            raise Unreadable(f"not data ({type(error).__name__}: {_plain_text(error)})") from None
        raise Unreadable(
            f"it holds a {found.group(1)}, which is not data: only tensors, numbers, strings, None, and tuples, lists "
            "and dicts of them (their keys too) can be graded"
        ) from None


# torch.load(weights_only=True)'s refusal names the class it would not build ("GLOBAL __main__.Key was not an
# allowed global"), amid advice on loading checkpoints that means nothing to a learner.
_REFUSED_GLOBAL = re.compile(r"GLOBAL ([\w.]{1,200}) was not an allowed global")


def _plain_text(error: BaseException, limit: int = 200) -> str:
    """An error's message on one line, without terminal escapes (torch's are bold), at most ``limit`` characters."""
    text = " ".join(re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", str(error)).split())
    return "".join(c if c.isprintable() else "?" for c in text)[:limit]


@contextlib.contextmanager
def _hooks_set_aside(value: Any) -> Iterator[None]:
    """Modules inside ``value`` pickled without their hooks (the check's own recorders, lambdas, stay here)."""
    saved = []
    for module in _modules_in(value):
        for sub in module.modules():
            for name in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"):
                hooks = getattr(sub, name, None)
                if hooks:
                    saved.append((sub, name, hooks))
                    setattr(sub, name, type(hooks)())
    try:
        yield
    finally:
        for sub, name, hooks in saved:
            setattr(sub, name, hooks)


def _modules_in(value: Any, depth: int = 0) -> list[nn.Module]:
    if isinstance(value, nn.Module):
        return [value]
    if depth < _DEPTH and isinstance(value, (tuple, list)):
        return [m for item in value for m in _modules_in(item, depth + 1)]
    if depth < _DEPTH and isinstance(value, dict):
        return [m for item in value.values() for m in _modules_in(item, depth + 1)]
    return []


def signature_of(function: Any) -> list[tuple[str, int, bool]] | None:
    """(name, kind, has a default) of each parameter of ``function``; None where it has no readable signature."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    return [(p.name, int(p.kind), p.default is not inspect.Parameter.empty) for p in parameters]


def rebuilt_signature(described: Any) -> inspect.Signature | None:
    """The signature ``signature_of`` described (defaults stand in as ``...``); None for a malformed one."""
    if not isinstance(described, list):
        return None
    try:
        return inspect.Signature(
            [
                inspect.Parameter(name, inspect._ParameterKind(kind), default=... if has_default else inspect._empty)
                for name, kind, has_default in described
            ]
        )
    except (TypeError, ValueError):
        return None


def module_state(module: nn.Module) -> tuple:
    """A module as data: (TAG, "module", its tensors by name, each submodule's plain attributes by path)."""
    tensors = {name: value.detach() for name, value in module.state_dict(keep_vars=True).items()}
    attributes = {}
    for path, sub in module.named_modules():
        attributes[path] = {
            key: value for key, value in vars(sub).items() if not key.startswith("_") and _is_plain(value)
        }
    return (TAG, "module", tensors, attributes)


def _is_plain(value: Any, depth: int = 0) -> bool:
    if isinstance(value, _PLAIN):
        return True
    return depth < 2 and isinstance(value, tuple) and all(_is_plain(item, depth + 1) for item in value)


def apply_module_state(module: nn.Module, tensors: Any, attributes: Any) -> None:
    """Make ``module`` hold what ``module_state`` described (its tensors and plain attributes, a new one too), in
    place: what the learner's code did to its copy in the kernel shows on the check's module, so that
    ``call_learner`` refuses it there as in a lesson, naming the module, and puts the module back as it was (the
    check's expected values never see it)."""
    if isinstance(tensors, dict):
        own = module.state_dict(keep_vars=True)
        with torch.no_grad():
            for name, value in tensors.items():
                if name in own and isinstance(value, Tensor) and type(value) in (Tensor, nn.Parameter):
                    own[name].data = value.detach().clone()
    if isinstance(attributes, dict):
        subs = dict(module.named_modules())
        for path, values in attributes.items():
            if path in subs and isinstance(values, dict):
                for key, value in values.items():
                    if isinstance(key, str) and _settable(subs[path], key) and _is_plain(value):
                        setattr(subs[path], key, value)


def _settable(module: nn.Module, key: str) -> bool:
    """Whether ``key`` names a plain attribute ``module`` holds, or may hold (a new public one: not a parameter,
    buffer, submodule, method or property of its class)."""
    if key in vars(module):
        return True
    own = (module._parameters, module._buffers, module._modules)
    return (
        key.isidentifier()
        and not key.startswith("_")
        and not any(key in d for d in own)
        and not hasattr(type(module), key)
    )


def is_described(value: Any) -> bool:
    """Whether ``value`` is a described value, (TAG, kind, ...)."""
    return isinstance(value, tuple) and len(value) >= 2 and isinstance(value[0], str) and value[0] == TAG


def walk(value: Any, leaf: Callable[[Any], Any], depth: int = 0) -> Any:
    """``value`` with ``leaf`` applied to everything that is not a tuple, list or dict (those rebuilt as plain
    tuples, lists and dicts); a described value (a tuple starting with TAG) is a leaf."""
    if depth > _DEPTH:
        raise Unreadable(f"nested more than {_DEPTH} levels deep")
    if isinstance(value, tuple) and not is_described(value):
        return tuple(walk(item, leaf, depth + 1) for item in value)
    if isinstance(value, list):
        return [walk(item, leaf, depth + 1) for item in value]
    if isinstance(value, dict):
        return {key: walk(item, leaf, depth + 1) for key, item in value.items()}
    return leaf(value)
