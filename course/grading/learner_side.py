"""The graded kernel's side of a remote check: call the learner's function when the checker asks, nothing more.

``python -m course.assignments check`` runs each graded cell as::

    from course.grading.learner_side import answer_the_checker  # calls your function; holds no check

    answer_the_checker("attention_weights")

and the check itself runs in the checker's process, outside the sandbox (:mod:`course.grading.remote`). This
module holds no check and no reference answer: it sends the learner's function's signature, then, for each call
the check makes, runs the function on the arguments it was sent and sends back the result and the arguments as
they are after the call (:mod:`course.grading.wire`). Its messages travel as Jupyter ``input`` requests (the
prompt carries the data) and replies, so they need no channel of their own. Patching it only changes what the
learner's answers are: the verdict is computed from them elsewhere.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import Tensor, nn

from course.call_recording import CallRecorder
from course.grading import wire

__all__ = ["answer_the_checker"]


def answer_the_checker(function: str) -> None:
    """Serve the checker's calls of the learner's ``function`` (from the notebook's namespace) until it is done;
    then print the verdict it sends (for whoever reads the notebook: the gradebook has it already)."""
    from IPython import get_ipython

    shell = get_ipython()
    namespace = shell.user_ns if shell is not None else {}
    handles: dict[int, Any] = {}
    answer = namespace.get(function)
    reply: dict[str, Any] = {"defined": function in namespace and answer is not None}
    if reply["defined"]:
        reply["answer"] = _describe(answer, handles)
    while True:
        request = wire.unframe(input(wire.frame(reply)), trusted=True)
        if request.get("op") == "done":
            print(request.get("line", ""))
            return
        reply = _call(request, handles)


def _call(request: dict, handles: dict[int, Any]) -> dict:
    """Run one call the checker asked for; its result (or what it raised) and the arguments after it."""
    # Handles count from 0, so -1 finds none. A call of the None an unknown handle gives raises TypeError below,
    # which goes back to the checker as what the function raised.
    function: Any = handles.get(request.get("handle", -1))
    args = [_rebuild(value, handles) for value in request.get("args", ())]
    kwargs = {key: _rebuild(value, handles) for key, value in request.get("kwargs", {}).items()}
    reply: dict[str, Any] = {}
    recorders = [CallRecorder(watched) for watched in request.get("record", ())]  # the check watches the calls
    seen: list[tuple[Any, str, Any]] = []  # (argument, submodule, its positional tensors), for the check's hooks
    try:
        with contextlib.ExitStack() as recording:
            for key, paths in request.get("pre_hooks", {}).items():
                module = kwargs.get(key) if isinstance(key, str) else args[key] if key < len(args) else None
                if not isinstance(module, nn.Module):
                    continue
                for path in paths:
                    sub = module.get_submodule(path)
                    handle = sub.register_forward_pre_hook(
                        lambda _, given, key=key, path=path: seen.append((key, path, _after(tuple(given))))
                    )
                    recording.callback(handle.remove)
            for recorder in recorders:
                recording.enter_context(recorder)
            result = function(*args, **kwargs)
        reply["result"] = _describe(result, handles)
    except Exception as error:  # NotImplementedError included: the checker tells "not attempted" from its name
        reply["raised"] = (type(error).__name__, str(error)[:2000])
    if seen:
        reply["pre_hooks"] = seen
    if recorders:
        reply["record"] = [recorder.record() for recorder in recorders]
    reply["args_after"] = [_after(value) for value in args]
    reply["kwargs_after"] = {key: _after(value) for key, value in kwargs.items()}
    return reply


def _rebuild(value: Any, handles: dict[int, Any]) -> Any:
    """An argument as the checker described it: a generator from its state, a kept object from its handle."""

    def leaf(item: Any) -> Any:
        if wire.is_described(item) and item[1] == "generator":
            generator = torch.Generator(device=item[3])
            generator.set_state(item[2])
            return generator
        if wire.is_described(item) and item[1] == "handle":
            return handles.get(item[2])
        return item

    return wire.walk(value, leaf)


def _describe(value: Any, handles: dict[int, Any]) -> Any:
    """A result as data (see :mod:`course.grading.wire`): tensors and plain values as they are, a callable kept
    here and sent as a handle, a numpy value as its numbers, anything else as its type's name."""

    def leaf(item: Any) -> Any:
        if isinstance(item, Tensor):
            return _plain_tensor(item)
        if isinstance(item, (int, float, bool, str, type(None))):
            return item
        if isinstance(item, torch.Generator):
            return (wire.TAG, "generator", item.get_state(), str(item.device))
        if type(item).__module__ == "numpy":
            return _numpy(item)
        if callable(item):
            handles[len(handles)] = item
            name = getattr(item, "__name__", type(item).__name__)
            return (wire.TAG, "handle", len(handles) - 1, str(name), wire.signature_of(item))
        return (wire.TAG, "object", type(item).__name__)

    try:
        described = wire.walk(value, leaf)
        wire.frame(described)  # what torch.save cannot write is described by its type instead
    except Exception:
        return (wire.TAG, "object", type(value).__name__)
    return described


def _after(value: Any) -> Any:
    """An argument as it is after the call: tensors (also one level inside a container), a module's state, a
    generator's state; anything else is not compared."""

    def leaf(item: Any) -> Any:
        if isinstance(item, Tensor):
            return _plain_tensor(item)
        if isinstance(item, nn.Module):
            return wire.module_state(item)
        if isinstance(item, torch.Generator):
            return (wire.TAG, "generator", item.get_state(), str(item.device))
        return None

    try:
        return wire.walk(value, leaf)
    except Exception:
        return None


def _plain_tensor(tensor: Tensor) -> Any:
    """A tensor as a plain ``torch.Tensor`` (the checker loads no subclass), or its description."""
    with torch._C.DisableTorchFunctionSubclass():
        plain = tensor.detach().as_subclass(Tensor) if type(tensor) not in (Tensor, nn.Parameter) else tensor
    if plain.layout != torch.strided or plain.device.type == "meta":
        return (wire.TAG, "object", f"a {plain.layout} tensor on {plain.device.type}")
    kept = plain.detach().cpu()
    # requires_grad is part of the answer (a check may ask for a result that keeps the gradient)
    return kept.requires_grad_(plain.requires_grad) if kept.is_floating_point() or kept.is_complex() else kept


def _numpy(item: Any) -> Any:
    """A numpy array or number: its numbers, its type's name and its dtype's, so the checker can refuse numpy."""
    import numpy

    try:
        if isinstance(item, numpy.ndarray):
            return (wire.TAG, "numpy", "ndarray", str(item.dtype), torch.from_numpy(numpy.ascontiguousarray(item)))
        return (wire.TAG, "numpy", type(item).__name__, str(item.dtype), item.item())
    except (TypeError, ValueError, RuntimeError, AttributeError):
        return (wire.TAG, "numpy", type(item).__name__, "object", None)
