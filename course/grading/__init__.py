"""Grading handed-in lessons: the locked cell that runs one graded check, and (in submodules) the teacher's tools.

``graded(check, "function")`` is what a graded test cell of an nbgrader source notebook calls (in a student's own
kernel the check runs there, beside the student's code; ``nbgrader autograde`` with the course's configuration
runs the check outside its kernel instead, :mod:`course.grading.nbgrader_tests`)::

    from course.exercises.lesson03 import check_attention_weights
    from course.grading import graded

    assert graded(check_attention_weights, "attention_weights").passed, "read the verdict above"

It refuses a check that is not the course's own (a ``check_...`` redefined or rebound from an answer
cell, in the notebook or in its module), refuses to grade in a kernel where the notebook set up a known way
to forge a verdict (an IPython event hook such as ``post_run_cell`` registered from the notebook's code, this
module's functions or IPython's display path replaced: see ``tampering``; looked for before and after the
check runs the learner's code), looks the learner's function up by name (a function whose cell
never ran is reported, not a ``NameError`` from deep inside), runs the check, and, under the course's
checker (``GRADING_ENV`` set), reports the verdict as a display output of a MIME type of its own that only
the checker reads, and only from the cells it wrote itself.

``python -m course.assignments check`` and nbgrader's autograde do not use it: there the verdict is computed outside
the kernel (:mod:`course.grading.remote`, run by :mod:`course.grading.remote_cells` in the supervisor or in
nbgrader's process; :mod:`course.grading.learner_side` is all the graded kernel runs; :mod:`course.grading.wire`
what crosses between them). The rest of the package runs on the teacher's side:
:mod:`course.grading.checker` (the ``check`` command and its gradebook), :mod:`course.grading.supervisor` (the
process that runs one notebook) and :mod:`course.grading.sandbox` (the bubblewrap sandbox its kernel runs in).
"""

from __future__ import annotations

import inspect
import os
import sys
import types
from pathlib import Path
from typing import Any

__all__ = ["GRADING_ENV", "VERDICT_MIME", "NotGenuine", "graded", "tampering"]

#: Set by the checker in the kernel's environment: verdicts are then also displayed as ``VERDICT_MIME``.
GRADING_ENV = "ATTENTION_COURSE_GRADING"
VERDICT_MIME = "application/vnd.attention-course.verdict+json"
_COURSE = Path(__file__).resolve().parents[1]  # course/
# The course's own package, beside course/ (read-only in the sandbox): its IPython hooks are the course's, e.g. the
# one helpers.tools.threads registers so that a lesson's thread count follows the machine's load.
_HELPERS = _COURSE.parent / "helpers"


class NotGenuine(AssertionError):
    """A graded check (or the verdict it returned) is not the course's own: someone replaced it."""


def _defined_in_course(function: Any) -> bool:
    """Whether ``function`` and every function it wraps were compiled from a file of the course package."""
    seen = 0
    while function is not None and seen < 10:
        code = getattr(function, "__code__", None)
        if code is None:
            return False
        try:
            path = Path(code.co_filename).resolve()
        except (OSError, ValueError):
            return False
        if _COURSE not in path.parents:
            return False
        function = getattr(function, "__wrapped__", None)
        seen += 1
    return True


def _genuine_check(check: Any) -> None:
    """Refuse ``check`` unless it is the function of that name in a course.exercises module, compiled from it."""
    name = getattr(check, "__name__", None)
    module = sys.modules.get(getattr(check, "__module__", None) or "")
    if not (isinstance(name, str) and name.startswith("check_") and module is not None):
        raise NotGenuine(f"{check!r} is not one of the course's checks (expected a check_... from course.exercises)")
    module_file = Path(getattr(module, "__file__", "") or "").resolve()
    if not module.__name__.startswith("course.exercises.") or _COURSE not in module_file.parents:
        raise NotGenuine(f"{name} does not come from the course's checks (its module is {module.__name__})")
    if getattr(module, name, None) is not check or not _defined_in_course(check):
        raise NotGenuine(f"{name} was replaced after the course defined it: the graded check must be the course's own")
    from course.exercises import feedback

    if not _defined_in_course(feedback.run_check):
        raise NotGenuine("course.exercises.feedback.run_check was replaced: the checks cannot report a verdict")


# IPython's events whose callbacks run around every cell: a hook there could display a forged verdict.
_EVENTS = ("pre_execute", "pre_run_cell", "post_execute", "post_run_cell")
_GUARDED = ("graded", "_report", "tampering", "_refuse_tampering", "_genuine_check", "_defined_in_course", "_installed")


def _installed(function: Any) -> bool:
    """Whether ``function`` (or the method behind a bound method or a callable object) was compiled from a
    file of the Python installation or the course, not from a notebook's cell."""
    function = getattr(function, "__func__", function)
    if not isinstance(function, types.FunctionType) and not isinstance(function, types.BuiltinFunctionType):
        method = type(function).__dict__.get("__call__")  # a callable object: the code its calls run
        function = getattr(method, "__func__", method)
    code = getattr(function, "__code__", None)
    if code is None:
        return isinstance(function, (types.BuiltinFunctionType, types.WrapperDescriptorType))
    try:
        path = Path(code.co_filename).resolve()
    except (OSError, ValueError):
        return False
    homes = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), _COURSE, _HELPERS}
    return path.is_file() and any(home in path.parents for home in homes)


def _compiled_here() -> dict[str, types.CodeType]:
    """This module's top-level functions' code, compiled afresh from its file."""
    source = Path(__file__).read_text(encoding="utf-8")
    code = compile(source, __file__, "exec", dont_inherit=True)
    return {const.co_name: const for const in code.co_consts if isinstance(const, types.CodeType)}


def tampering() -> str | None:
    """What, in this kernel, the notebook changed so that it could forge a verdict; None if nothing known.

    Looked for: this module's functions (``graded``, ``_report``...) not the code of this module's file, an
    IPython event callback (``post_run_cell``...) that was not compiled from a file of the installation or
    the course, and IPython's ``display`` or the shell's display publisher replaced. This is detection
    inside the learner's own kernel: code that patches Python itself (builtins, ``compile``, this check's
    helpers from a file with a forged name) can still hide; docs/teaching.md says what that leaves open.
    """
    module = sys.modules.get(__name__)
    fresh = _compiled_here()
    for name in _GUARDED:
        function = getattr(module, name, None)
        if getattr(function, "__code__", None) != fresh.get(name):
            return f"course.grading.{name} was replaced from the notebook"
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    if shell is None:
        return None
    for event in _EVENTS:
        for callback in shell.events.callbacks.get(event, []):
            if not _installed(callback):
                name = getattr(callback, "__qualname__", type(callback).__name__)
                return f"the notebook registered a {event} hook ({name}), which could change what a check reports"
    import IPython.display

    publisher = getattr(shell, "display_pub", None)
    replaced = [
        label
        for label, function in (
            ("IPython.display.display", IPython.display.display),
            ("the shell's display publisher", getattr(publisher, "publish", None)),
        )
        if function is None or not _installed(function)
    ]
    if replaced:
        return f"{replaced[0]} was replaced from the notebook: a verdict shown through it could be forged"
    return None


def _user_namespace() -> dict[str, Any]:
    try:
        from IPython import get_ipython
    except ImportError:  # outside IPython: the caller's globals
        return inspect.stack()[2].frame.f_globals
    shell = get_ipython()
    return shell.user_ns if shell is not None else inspect.stack()[2].frame.f_globals


def _refuse_tampering() -> None:
    found = tampering()
    if found:
        raise NotGenuine(f"not graded: {found}")


def _report(function: str, check: str, status: str, message: str) -> None:
    """Under the checker, display the verdict as VERDICT_MIME (nothing shows in JupyterLab or nbgrader)."""
    if not os.environ.get(GRADING_ENV):
        return
    from IPython.display import display

    entry = {"function": function, "check": check, "status": status, "message": message}
    display({VERDICT_MIME: entry, "text/plain": f"(graded: {function} {status})"}, raw=True)


def graded(check: Any, function: str):
    """Run the course's ``check`` on the learner's function named ``function``; return the Verdict.

    Raises ``NotGenuine`` (an ``AssertionError``, so nbgrader scores the cell 0) when the check or its
    verdict is not the course's own, and ``NameError`` naming the function when the learner's cell that
    defines it has not run. The check prints its verdict as it does in the lesson.
    """
    label = getattr(check, "__name__", repr(check))
    try:
        _genuine_check(check)
        _refuse_tampering()
    except NotGenuine as problem:
        _report(function, label, "error", str(problem))
        raise
    answer = _user_namespace().get(function)
    if answer is None:
        message = f"{function} is not defined: the cell that defines it did not run, or raised"
        _report(function, label, "error", message)
        raise NameError(message)
    from course.exercises.feedback import Verdict

    verdict = check(answer)
    if type(verdict) is not Verdict or verdict.status not in ("pass", "wrong", "not attempted"):
        message = f"{label} returned {type(verdict).__name__}, not the course's verdict: something replaced it"
        _report(function, label, "error", message)
        raise NotGenuine(message)
    try:
        _refuse_tampering()  # again: the learner's code, called by the check, may have set something up
    except NotGenuine as problem:
        _report(function, label, "error", str(problem))
        raise
    _report(function, label, verdict.status, verdict.message)
    return verdict
