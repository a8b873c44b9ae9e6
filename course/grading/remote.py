"""A check run outside the graded kernel: the verdict is computed where the learner's code never runs.

Under ``python -m course.assignments check``, each graded cell runs :func:`course.grading.learner_side.
answer_the_checker` in the sandboxed kernel, and the supervisor (outside the sandbox) runs the course's check
here, unchanged, on a :class:`RemoteLearner` in place of the learner's function. Every check reaches the learner's
code one way only, through ``call_learner``; each call of a ``RemoteLearner`` sends its arguments to the kernel
and gets back the result and the arguments as they are after the call (:mod:`course.grading.wire`: data only,
read with ``torch.load(weights_only=True)``). Those arguments are written back into the check's own tensors,
modules and generators, so ``call_learner``'s rules (inputs and modules untouched, the dtype asked for, torch not
numpy, randomness from the generator) judge the remote call as they judge a local one: a module the kernel's copy
of which the learner's code changed is refused by name, and put back as it was, before the check computes anything
from it. The references and the comparison stay in this process: nothing the learner's code prints, patches or
hooks in the kernel can reach the verdict.

A kernel that stops answering, or answers with something that is not data, gives the verdict ``error``.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import pickle
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from course.grading import wire

__all__ = ["ChannelBroken", "RemoteLearner", "grade"]


class ChannelBroken(BaseException):
    """The kernel stopped answering, or answered with something no honest kernel sends: the check cannot finish."""


class _Unreadable:
    """What the kernel described only by its type's name (an object that is not data): ``type(x).__name__`` says it."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} from the graded kernel>"


def _unreadable(name: Any) -> _Unreadable:
    name = str(name) if isinstance(name, str) and name.isidentifier() else "object"
    return type(name, (_Unreadable,), {})()


def _raised(name: Any, message: Any) -> Exception:
    """The exception the learner's code raised in the kernel, rebuilt here by its name (a builtin one as itself)."""
    name = name if isinstance(name, str) and name.isidentifier() else "Exception"
    message = str(message)
    builtin = getattr(builtins, name, None)
    if isinstance(builtin, type) and issubclass(builtin, Exception):
        with contextlib.suppress(Exception):
            return builtin(message)
    base = RuntimeError if name.endswith(("Error", "Exception")) else Exception
    return type(name, (base,), {"__module__": "learner"})(message)


class RemoteLearner:
    """The learner's callable, living in the graded kernel: a call here is a call there (see the module's text)."""

    def __init__(self, channel: Any, handle: int, name: str, signature: Any) -> None:
        self._channel, self._handle = channel, handle
        self.__name__ = self.__qualname__ = name if isinstance(name, str) else "function"
        rebuilt = wire.rebuilt_signature(signature)
        if rebuilt is not None:
            self.__signature__ = rebuilt

    def __repr__(self) -> str:
        return f"<{self.__name__} in the graded kernel>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        request = {
            "op": "call",
            "handle": self._handle,
            "args": [_to_kernel(value) for value in args],
            "kwargs": {key: _to_kernel(value) for key, value in kwargs.items()},
        }
        from course.call_recording import CallRecorder

        recorders = list(CallRecorder.active)  # a check recording the learner's calls: record them in the kernel
        if recorders:
            request["record"] = [recorder.watched for recorder in recorders]
        watched = _hooked_modules(args, kwargs)  # the check's forward pre-hooks on a module it passes
        if watched:
            request["pre_hooks"] = {key: paths for key, (_, paths) in watched.items()}
        try:
            reply = self._channel.ask(request)
        except (TypeError, AttributeError, pickle.PicklingError) as error:  # the check's arguments: the course's bug
            raise ChannelBroken(f"the check's arguments could not be sent to the kernel ({error})") from None
        if not isinstance(reply, dict):
            raise ChannelBroken("the kernel's reply is not a call's reply")
        records = reply.get("record")
        for recorder, record in zip(recorders, records if isinstance(records, list) else [], strict=False):
            recorder.add_remote(record)
        _replay_pre_hooks(watched, reply.get("pre_hooks"), self._channel)
        with torch._C.DisableTorchFunction():  # writing back is not the learner's tensor work
            return self._finish(args, kwargs, reply)

    def _finish(self, args: tuple, kwargs: dict, reply: dict) -> Any:
        """Write the arguments after the call back into the check's own; the result, or what the call raised."""
        after = reply.get("args_after")
        for value, changed in zip(args, after if isinstance(after, list) else [], strict=False):
            _write_back(value, self._from_kernel(changed))
        kwargs_after = reply.get("kwargs_after")
        for key, changed in (kwargs_after if isinstance(kwargs_after, dict) else {}).items():
            if key in kwargs:
                _write_back(kwargs[key], self._from_kernel(changed))
        if "raised" in reply:
            raised = reply["raised"]
            name, message = raised if isinstance(raised, tuple) and len(raised) == 2 else ("Exception", raised)
            raise _raised(name, message)
        return self._from_kernel(reply.get("result"))

    def _from_kernel(self, value: Any) -> Any:
        return from_kernel(value, self._channel)


def _hooked_modules(args: tuple, kwargs: dict) -> dict[Any, tuple[nn.Module, list[str]]]:
    """The module arguments on which the check set forward pre-hooks: argument -> (module, hooked submodules)."""
    found = {}
    for key, value in (*enumerate(args), *kwargs.items()):
        if isinstance(value, nn.Module):
            paths = [path for path, sub in value.named_modules() if sub._forward_pre_hooks]
            if paths:
                found[key] = (value, paths)
    return found


def _replay_pre_hooks(watched: dict, calls: Any, channel: Any) -> None:
    """Run the check's forward pre-hooks on what the kernel's copies of its modules were called with, in order
    (so a check that watches which parts the learner's code runs sees the remote run)."""
    for entry in calls if watched and isinstance(calls, list) else []:
        if not (isinstance(entry, tuple) and len(entry) == 3 and entry[0] in watched and isinstance(entry[1], str)):
            continue
        module, paths = watched[entry[0]]
        if entry[1] not in paths:
            continue
        sub = module.get_submodule(entry[1])
        given = from_kernel(entry[2], channel)
        for hook in list(sub._forward_pre_hooks.values()):
            hook(sub, tuple(given) if isinstance(given, (tuple, list)) else ())


def _to_kernel(value: Any) -> Any:
    """An argument for the kernel: generators as their state, learner objects as their handles."""

    def leaf(item: Any) -> Any:
        if isinstance(item, torch.Generator):
            return (wire.TAG, "generator", item.get_state(), str(item.device))
        if isinstance(item, RemoteLearner):
            return (wire.TAG, "handle", item._handle)
        learner = getattr(type(item), "__name__", "") == "LearnerCode" and object.__getattribute__(item, "_function")
        if isinstance(learner, RemoteLearner):
            return (wire.TAG, "handle", learner._handle)
        return item

    return wire.walk(value, leaf)


def from_kernel(value: Any, channel: Any) -> Any:
    """A value the kernel described, as the check expects it: tensors (plain ones only), numbers, strings,
    containers; a numpy value as numpy (so the numpy rule sees it), a callable as a ``RemoteLearner``, a module's
    or generator's state as a ``_State``; any other object as a stand-in named after its type."""

    def leaf(item: Any) -> Any:
        if isinstance(item, Tensor):
            if type(item) not in (Tensor, nn.Parameter):
                raise ChannelBroken(f"the kernel sent a {type(item).__name__}, not a tensor")
            return item
        if isinstance(item, (int, float, bool, str, type(None))):
            return item
        if not wire.is_described(item):
            raise ChannelBroken(f"the kernel sent a {type(item).__name__}, which is not data")
        kind = item[1]
        if kind == "handle" and len(item) == 5 and isinstance(item[2], int):
            return RemoteLearner(channel, item[2], item[3], item[4])
        if kind == "numpy" and len(item) == 5:
            return _as_numpy(item[2], item[3], item[4])
        if kind in ("module", "generator"):
            return _State(item)
        if kind == "object" and len(item) == 3:
            return _unreadable(item[2])
        raise ChannelBroken(f"the kernel sent an unknown description ({kind!r})")

    return wire.walk(value, leaf)


class _State:
    """A module's or generator's state as the kernel sent it after a call (written back by ``_write_back``)."""

    def __init__(self, described: tuple) -> None:
        self.described = described


def _as_numpy(type_name: Any, dtype: Any, numbers: Any) -> Any:
    import numpy

    try:
        if type_name == "ndarray" and isinstance(numbers, Tensor):
            return numbers.numpy().astype(str(dtype)) if str(dtype) != "object" else numbers.numpy()
        return numpy.dtype(str(dtype)).type(numbers)
    except (TypeError, ValueError, RuntimeError):
        return numpy.zeros(0)  # still numpy: the numpy rule refuses it


def _write_back(sent: Any, after: Any) -> None:
    """Make the check's argument ``sent`` hold what the kernel's copy held after the call (``after``): a tensor's
    numbers (shape and dtype too), those of the tensors one level inside a tuple, list or dict, a module's state,
    a generator's state."""
    if isinstance(sent, Tensor) and isinstance(after, Tensor):
        if sent.shape != after.shape or sent.dtype != after.dtype or not _equal(sent, after):
            with torch.no_grad():
                sent.data = after.detach().clone()
    elif isinstance(sent, (tuple, list)) and isinstance(after, (tuple, list)):
        for item, changed in zip(sent, after, strict=False):
            if isinstance(item, (Tensor, nn.Module, torch.Generator)):
                _write_back(item, changed)
    elif isinstance(sent, dict) and isinstance(after, dict):
        for key, item in sent.items():
            if key in after and isinstance(item, (Tensor, nn.Module, torch.Generator)):
                _write_back(item, after[key])
    elif isinstance(after, _State):
        described = after.described
        if isinstance(sent, nn.Module) and described[1] == "module" and len(described) == 4:
            wire.apply_module_state(sent, described[2], described[3])
        elif isinstance(sent, torch.Generator) and described[1] == "generator" and isinstance(described[2], Tensor):
            with contextlib.suppress(RuntimeError, TypeError):
                sent.set_state(described[2])


def _equal(a: Tensor, b: Tensor) -> bool:
    if a.dtype.is_floating_point or a.dtype.is_complex:
        return bool(((a.detach() == b) | (a.detach().isnan() & b.isnan())).all())
    return torch.equal(a.detach(), b)


def grade(check: Callable[..., Any], function: str, channel: Any, hello: Any) -> dict[str, str]:
    """Run the course's ``check`` on the learner's ``function`` in the graded kernel; the gradebook's entry
    (function, status, message; and, for a verdict, ``text``: its line as the check prints it in the lesson).
    ``hello`` is the kernel's first message: whether the function is defined, and it (a handle) or the value the
    notebook gave that name."""
    if not isinstance(hello, dict) or not hello.get("defined"):
        message = f"{function} is not defined: the cell that defines it did not run, or raised"
        return {"function": function, "status": "error", "message": message}
    from course.exercises.feedback import Verdict

    try:
        answer = from_kernel(hello.get("answer"), channel)
        with contextlib.redirect_stdout(io.StringIO()):  # run_check prints the verdict: the kernel shows it
            verdict = check(answer)
    except ChannelBroken as broken:
        return {"function": function, "status": "error", "message": f"not graded: {broken}"}
    if type(verdict) is not Verdict or verdict.status not in ("pass", "wrong", "not attempted"):
        return {"function": function, "status": "error", "message": "the check did not return a verdict"}
    return {"function": function, "status": verdict.status, "message": verdict.message, "text": str(verdict)}
