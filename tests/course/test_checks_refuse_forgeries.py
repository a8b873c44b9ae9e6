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
from course.exercises import lesson02, lesson05
from course.exercises.feedback import CHECK_BUG, call_learner, run_check


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
            shortcut = name in WRITTEN_WITH_A_SHORTCUT
            if name.startswith("reference_") and check is not None and not shortcut and check not in known:
                answers[f"{info.name}.{name[len('reference_') :]}"] = (check, learners_copy(reference))
                known.add(check)
    return answers


ANSWERS = _with_references()
# Checks with no right answer here, and why the probe has nothing to change in them.
NOTHING_TO_PROBE = {
    "lesson06.check_teacher_forcing": "token ids in, ids and a mask out: no module, no float",
    "lesson09.check_layer_mapping": "a parameter's name in, a name out",
    # Tensors in, no module; a right answer must launch a Triton kernel (tests/course/test_exercises_lesson_16.py).
    "lesson16.check_masked_row_softmax": "tensors in, no module: its right answer is a Triton kernel",
    "lesson16.check_online_attention": "tensors in, no module: its right answer is a Triton kernel",
    "lesson16.check_causal_attention": "tensors in, no module: its right answer is a Triton kernel",
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
    for check, right in ANSWERS.values():
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


# The three forgeries the issue found (each scored a pass in a lesson's cell, under `check` and under nbgrader).
def _zero(*modules: nn.Module) -> None:
    with torch.no_grad():
        for module in modules:
            for tensor in _floating_tensors(module):
                tensor.zero_()


def zeroed_projections(target, source, q_proj, k_proj, v_proj):
    _zero(q_proj, k_proj, v_proj)
    d = q_proj.out_features
    return (
        target.new_zeros(*target.shape[:2], d),
        source.new_zeros(*source.shape[:2], d),
        source.new_zeros(*source.shape[:2], d),
    )


def zeroed_block(x, sublayer, norm, norm_first):
    _zero(norm, sublayer)
    return x if norm_first else torch.zeros_like(x)


def zeroed_last_norm(layer, tgt, memory, tgt_mask, memory_key_padding_mask):
    layer.self_attn(tgt, tgt, tgt)  # each sub-block's first part runs once, in order, as the check watches
    layer.multihead_attn(tgt, memory, memory)
    layer.linear1(tgt)
    _zero(layer.norm3)
    return torch.zeros_like(tgt)


FORGERIES = {
    "lesson 02: q_proj, k_proj and v_proj zeroed": (
        lesson02.check_cross_attention_inputs,
        zeroed_projections,
        "q_proj",
    ),
    "lesson 05: the norm and sublayer zeroed": (lesson05.check_residual_block, zeroed_block, "sublayer"),
    "lesson 05: norm3 zeroed": (lesson05.check_decoder_layer_forward, zeroed_last_norm, "layer"),
}


@pytest.mark.parametrize("route", ["in-process", "remote"])
@pytest.mark.parametrize("forgery", list(FORGERIES))
def test_the_forgeries_found_are_refused_by_name(forgery, route, capsys):
    check, answer, module = FORGERIES[forgery]
    verdict = check(answer) if route == "in-process" else remotely(check, answer)
    assert verdict.status == "wrong", verdict
    assert f"changed the module `{module}` it was given" in verdict.message, verdict.message
    assert "must not change it" in verdict.message


def _linear_answer(change: Callable[[nn.Module], Any]) -> Callable:
    def cross_attention_inputs(target, source, q_proj, k_proj, v_proj):
        q, k, v = q_proj(target), k_proj(source), v_proj(source)
        change(k_proj)
        return q, k, v

    return cross_attention_inputs


def _hook(module: nn.Module) -> None:
    module.register_forward_hook(lambda m, args, out: out * 0)


# Other changes than the numbers, each named: (change, the words naming it, refused over the wire too).
OTHER_CHANGES = {
    "a setting": (lambda m: setattr(m, "in_features", 7), "`k_proj.in_features` is now 7, not 6", True),
    "the training flag": (lambda m: m.eval(), "`k_proj.training` is now False, not True", True),
    "a new attribute": (lambda m: setattr(m, "scale", 0.0), "`k_proj.scale` was set", True),
    "a weight replaced by another dtype": (
        lambda m: setattr(m, "weight", nn.Parameter(m.weight.detach().double())),
        "`k_proj.weight` changed from torch.float32",
        True,
    ),
    "an instance forward": (lambda m: setattr(m, "forward", lambda x: x * 0), "`k_proj.forward` was set", False),
    "a hook": (_hook, "the hooks on `k_proj` were changed", False),
}


@pytest.mark.parametrize("change", list(OTHER_CHANGES))
def test_a_modules_settings_parts_and_hooks_are_its_state_too(change, capsys):
    """In a lesson every change is refused; over the wire the kernel sends back a module's numbers and plain
    settings (a forward or a hook of the kernel's copy never reaches the check's module: nothing to refuse there)."""
    edit, words, over_the_wire = OTHER_CHANGES[change]
    answer = _linear_answer(edit)
    local = lesson02.check_cross_attention_inputs(answer)
    assert local.status == "wrong" and words in local.message and "`k_proj`" in local.message, local
    if over_the_wire:
        far = remotely(lesson02.check_cross_attention_inputs, answer)
        assert (far.status, far.message) == (local.status, local.message), far


def test_a_refused_change_is_put_back():
    """The check's module holds its numbers and settings again once the change is refused (whatever a check does
    after the refusal, it reads the module as it came)."""
    layer = nn.Linear(3, 2)
    before = {name: t.clone() for name, t in layer.state_dict().items()}

    def zeroes(module):
        _zero(module)
        module.training = False
        return torch.zeros(2)

    verdict = run_check("demo", lambda: call_learner(zeroes, layer))
    assert verdict.status == "wrong" and "the module `module`" in verdict.message, verdict
    assert all(torch.equal(before[name], t) for name, t in layer.state_dict().items())
    assert layer.training


def test_calling_a_module_or_reading_its_weights_changes_nothing():
    """Views, transposes, calls and a forward in training mode are reads: the same answer passes."""

    def reads(target, source, q_proj, k_proj, v_proj):
        weight = k_proj.weight.T  # a view
        return q_proj(target), source @ weight + k_proj.bias, v_proj.forward(source)

    assert lesson02.check_cross_attention_inputs(reads).passed
