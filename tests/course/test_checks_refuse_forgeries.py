"""No check can be forged through the modules it hands the learner, and none accepts a changed dtype (#59).

**The probe.** Every check is run on its own right answer, changed in one way: before computing, the answer zeroes
(or rescales) the parameters and buffers of every module the check handed it, then returns what the changed modules
give. A check whose expected value came from those same modules, computed after the call, would agree with it and
say "pass" (lessons 02 and 05 did). Every check must refuse it and name the module by the answer's own argument name.
The checks probed are every one with a right answer in ``test_exercises_robustness.RIGHT`` and every one with a
``reference_*`` answer in ``course.exercises`` (found by name, so a new lesson's checks are probed when they land),
in-process (the lesson's own check cell) and across the wire, as ``check`` and nbgrader grade them.

**The dtype.** The same right answers, returning another floating dtype than the one the check fed them, are refused
with a hint that names both.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
from collections.abc import Callable
from typing import Any

import pytest
import torch
from conftest import learners_copy
from test_exercises_robustness import RIGHT, _map
from test_reference_answers import WRITTEN_WITH_A_SHORTCUT
from test_remote_checks import remotely
from torch import Tensor, nn

import course.exercises
from course.exercises.feedback import CHECK_BUG


def _with_references() -> dict[str, tuple[Callable, Callable]]:
    """RIGHT, and each lesson's ``check_x`` with a learner's copy of its ``reference_x`` (found by name)."""
    answers = dict(RIGHT)
    known = {check for check, _ in answers.values()}
    for info in pkgutil.iter_modules(course.exercises.__path__):
        if not info.name.startswith("lesson"):
            continue
        module = importlib.import_module(f"course.exercises.{info.name}")
        for name, reference in vars(module).items():
            check = getattr(module, name.replace("reference_", "check_", 1), None)
            if name.startswith("reference_") and check is not None and name not in WRITTEN_WITH_A_SHORTCUT:
                if check not in known:
                    answers[f"{info.name}.{name[len('reference_') :]}"] = (check, learners_copy(reference))
                    known.add(check)
    return answers


ANSWERS = _with_references()
# Checks with no right answer here, and why the probe has nothing to change in them.
NOTHING_TO_PROBE = {
    "lesson06.check_teacher_forcing": "token ids in, ids and a mask out: no module, no float",
    "lesson09.check_layer_mapping": "a parameter's name in, a name out",
}


def test_every_check_is_probed():
    """A new lesson's check needs a right answer (RIGHT, or a ``reference_*`` of the same name) to be probed."""
    probed = {f"{check.__module__.rsplit('.', 1)[-1]}.{check.__name__}" for check, _ in ANSWERS.values()}
    public = {
        f"{info.name}.{name}"
        for info in pkgutil.iter_modules(course.exercises.__path__)
        if info.name.startswith("lesson")
        for name, value in vars(importlib.import_module(f"course.exercises.{info.name}")).items()
        if name.startswith("check_") and callable(value) and value.__module__ == f"course.exercises.{info.name}"
    }
    assert public - probed == set(NOTHING_TO_PROBE), public - probed

CHANGES: dict[str, Callable[[Tensor], Any]] = {
    "zeroes": lambda tensor: tensor.zero_(),
    "rescales": lambda tensor: tensor.mul_(0.5),
}


def _floating_tensors(module: nn.Module) -> list[Tensor]:
    return [t for t in (*module.parameters(), *module.buffers()) if t.is_floating_point() and t.numel()]


def _changing_modules(right: Callable, change: Callable[[Tensor], Any], changed: list[str]) -> Callable:
    """``right``, changed: it first applies ``change`` to every module argument's tensors (appending each such
    argument's name to ``changed``), then computes as ``right`` does. A callable it returns (a hook) does the same."""
    signature = inspect.signature(right)

    def answer(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        for name, value in bound.arguments.items():
            if isinstance(value, nn.Module) and _floating_tensors(value):
                with torch.no_grad():
                    for tensor in _floating_tensors(value):
                        change(tensor)
                changed.append(name)
        result = right(*args, **kwargs)
        if callable(result) and not isinstance(result, (Tensor, nn.Module, type)):
            return _changing_modules(result, change, changed)
        return result

    answer.__signature__ = signature  # type: ignore[attr-defined]
    return answer


def test_the_probe_reaches_the_checks_that_hand_out_modules():
    """Lessons 02, 04, 05, 10, 11 and 12 hand modules to the learner's code: the probe must find them there."""
    reached = set()
    for exercise, (check, right) in ANSWERS.items():
        changed: list[str] = []
        check(_changing_modules(right, CHANGES["zeroes"], changed))
        if changed:
            reached.add(check.__module__.rsplit(".", 1)[-1])
    assert reached >= {"lesson02", "lesson04", "lesson05", "lesson10", "lesson11", "lesson12"}, reached


@pytest.mark.parametrize("route", ["in-process", "remote"])
@pytest.mark.parametrize("change", list(CHANGES))
@pytest.mark.parametrize("exercise", list(ANSWERS))
def test_every_check_refuses_an_answer_that_changes_its_modules(exercise, change, route, capsys):
    check, right = ANSWERS[exercise]
    changed: list[str] = []
    answer = _changing_modules(right, CHANGES[change], changed)
    verdict = check(answer) if route == "in-process" else remotely(check, answer)
    if not changed:
        pytest.skip("this check hands the learner's code no module with weights")
    assert verdict.status == "wrong", verdict
    assert CHECK_BUG not in verdict.message, verdict.message
    assert "must not change it" in verdict.message, verdict.message
    assert f"the module `{changed[0]}`" in verdict.message, verdict.message


def _fed_dtype(args: tuple) -> torch.dtype | None:
    """The one floating dtype among the arguments' tensors and modules (None if none, or several)."""
    dtypes = set()
    for value in args:
        values = value if isinstance(value, (tuple, list)) else [value]
        for item in values:
            if isinstance(item, Tensor) and item.is_floating_point():
                dtypes.add(item.dtype)
            elif isinstance(item, nn.Module):
                dtypes |= {t.dtype for t in _floating_tensors(item)}
    return dtypes.pop() if len(dtypes) == 1 else None


# The other dtype an answer returns, by the one the check fed.
OTHER_DTYPE = {
    "float32 <-> float64": lambda fed: {torch.float32: torch.float64, torch.float64: torch.float32}[fed],
    "float16": lambda fed: torch.float16,
}


def _in_dtype(right: Callable, other: Callable[[torch.dtype], torch.dtype], seen: list) -> Callable:
    """``right``, its floating results turned into ``other(fed)``, where fed is the dtype it was given."""

    @functools.wraps(right)
    def answer(*args: Any) -> Any:
        result = right(*args)
        fed = _fed_dtype(args)
        if fed is None:
            return result
        given = other(fed)

        def convert(tensor: Any) -> Any:
            if not (isinstance(tensor, Tensor) and tensor.is_floating_point()):
                return tensor
            seen.append((fed, given))
            return tensor.to(given)

        return _map(result, convert)

    return answer


@pytest.mark.parametrize("other", list(OTHER_DTYPE))
@pytest.mark.parametrize("exercise", list(ANSWERS))
def test_every_check_refuses_a_changed_dtype_naming_both(exercise, other, capsys):
    check, right = ANSWERS[exercise]
    seen: list = []
    verdict = check(_in_dtype(right, OTHER_DTYPE[other], seen))
    if not seen:
        pytest.skip("this check feeds no floating dtype, or its answer returns no floating tensor")
    fed, given = seen[0]
    assert verdict.status == "wrong", verdict
    assert CHECK_BUG not in verdict.message, verdict.message
    assert "dtype changed" in verdict.message and str(fed) in verdict.message and str(given) in verdict.message

