"""Which functions the learner's code called: the record behind the rule "no shortcut" (``course.exercises.shortcuts``).

``CallRecorder`` is a ``TorchFunctionMode`` (every torch function called from Python passes through it) that also
watches Python calls (``sys.setprofile``), so it sees ``nn.MultiheadAttention.forward`` or a helper function too.
It holds no check and no answer, so a graded kernel has it as well: there (``course.grading.learner_side``) it
records the learner's call and sends the record as names (``call_key``), which the check's own recorder, in the
checker's process, takes in with ``add_remote``, so that ``called`` answers for a remote call as for a local one.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

__all__ = ["CallRecorder", "call_key"]


def call_key(function: Any) -> str:
    """A name for ``function`` (or a code object) that is the same in every process of the same installation:
    its code's file, first line and name, or its module and qualified name."""
    code = function if hasattr(function, "co_filename") else getattr(function, "__code__", None)
    if code is not None and hasattr(code, "co_filename"):
        return f"code:{code.co_filename}:{code.co_firstlineno}:{getattr(code, 'co_qualname', code.co_name)}"
    name = getattr(function, "__qualname__", None) or getattr(function, "__name__", None) or repr(function)
    return f"{getattr(function, '__module__', None)}.{name}"


class CallRecorder(TorchFunctionMode):
    """Records the torch functions and Python functions called while active; ``watched`` is a tensor whose use matters.

    A torch call counts as using ``watched`` when one of its tensor arguments has the same shape and the
    same numbers (the learner may have made a copy, say with ``.float()``).
    """

    #: The recorders active now, innermost last (a remote call of the learner's code records for them).
    active: ClassVar[list[CallRecorder]] = []

    def __init__(self, watched: Tensor | None = None) -> None:
        super().__init__()
        self.watched = None if watched is None else watched.detach().clone()
        self.calls: list[tuple[Any, bool]] = []  # (function, whether it used the watched tensor)
        self.python_calls: set[Any] = set()  # code objects of the Python functions entered
        self.remote_calls: list[tuple[str, bool]] = []  # (call_key, used watched) of a call made in another process
        self.remote_python_calls: set[str] = set()  # call_key of the Python functions entered there
        self._previous_profile: Any = None

    def __enter__(self):
        self._previous_profile = sys.getprofile()
        sys.setprofile(self._profile)
        CallRecorder.active.append(self)
        return super().__enter__()

    def __exit__(self, *exc_info):
        sys.setprofile(self._previous_profile)
        if self in CallRecorder.active:
            CallRecorder.active.remove(self)
        return super().__exit__(*exc_info)

    def _profile(self, frame, event, arg) -> None:
        if event == "call":
            self.python_calls.add(frame.f_code)
        if self._previous_profile is not None:  # an outer recorder (a check's own) keeps seeing the calls too
            self._previous_profile(frame, event, arg)

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

    def record(self) -> dict[str, Any]:
        """What this recorder saw, as names (for another process's recorder: ``add_remote``)."""
        return {
            "calls": [(call_key(func), used) for func, used in self.calls],
            "python_calls": sorted(call_key(code) for code in self.python_calls),
        }

    def add_remote(self, record: Any) -> None:
        """Take in what a recorder in another process saw (``record``'s output; anything malformed is skipped)."""
        if not isinstance(record, dict):
            return
        calls, python = record.get("calls"), record.get("python_calls")
        for entry in calls if isinstance(calls, list) else []:
            if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str):
                self.remote_calls.append((entry[0], bool(entry[1])))
        self.remote_python_calls.update(
            key for key in (python if isinstance(python, list) else []) if isinstance(key, str)
        )

    def entered(self) -> set[tuple[str, str]]:
        """(file, qualified name) of every Python function entered, here or in another process."""
        found = {(code.co_filename, getattr(code, "co_qualname", code.co_name)) for code in self.python_calls}
        for key in self.remote_python_calls:  # "code:<file>:<first line>:<qualified name>"
            parts = key.removeprefix("code:").rsplit(":", 2)
            if key.startswith("code:") and len(parts) == 3:
                found.add((parts[0], parts[2]))
        return found

    def called(self, functions: dict[Callable[..., Any], str], watched_only: bool = False) -> str:
        """The name of the first of ``functions`` that was called ("" if none); ``watched_only``: on ``watched``."""
        for func, used_watched in self.calls:
            if func in functions and (used_watched or not watched_only):
                return functions[func]
        keys = {call_key(func): name for func, name in functions.items()}
        for key, used_watched in self.remote_calls:
            if key in keys and (used_watched or not watched_only):
                return keys[key]
        codes = {getattr(func, "__code__", None): name for func, name in functions.items()}
        codes.pop(None, None)
        for code in self.python_calls & codes.keys():
            return codes[code]
        code_keys = {call_key(code): name for code, name in codes.items()}
        for key in self.remote_python_calls & code_keys.keys():
            return code_keys[key]
        return ""
