"""What every exercise check shares: running the learner's code safely and printing one verdict.

Every public check is decorated with ``@learner_check``: each callable the learner hands in reaches the
check's body as a ``LearnerCode`` proxy whose every call goes through ``call_learner``, so no check can call
the learner's code any other way (``tests/course/test_exercises_robustness.py`` holds every ``check_*`` to it).

A check prints its verdict (graders and the student-copy tests read that line from stdout) and
returns it. In a notebook the returned verdict does not show a second time, so a check cell is
just ``check_x(x)``, without ``_ =``. A check runs inside ``torch.random.fork_rng()``: whatever
random numbers it or the learner's code draws, the notebook's random stream is untouched.
"""

from __future__ import annotations

import functools
import inspect
import sysconfig
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

import helpers
from course.exercises.module_snapshot import ModuleSnapshot

# What run_check says when the check itself (not the learner's code) fails: tests assert it never appears.
CHECK_BUG = "the check itself could not finish (a bug in the course, not in your code)"
# What the learner's code is told to return when it returns numpy, unless the check says otherwise
# (``@learner_check(returns="an int (a number of bytes)")``).
TENSOR = "a tensor (a torch.Tensor)"
# A usual mistake's name (the hint) -> its result, or a function that computes it lazily (diagnose, diagnose_cases).
# A mistake's result in one case: a tensor, several (ways to one mistake), or a function computing either lazily.
MistakeResult = Tensor | list[Tensor] | Callable[[], Tensor | list[Tensor]]
Mistakes = Mapping[str, MistakeResult]
# The exercise whose check is running (``run_check`` sets it): each call of the learner's code refuses its
# graduated helper (``course.exercises.graduated.GRADUATED_HELPERS``).
_EXERCISE: ContextVar[str | None] = ContextVar("exercise", default=None)


# What an exercise whose code still raises NotImplementedError is told (its mark is NOT YET, as for a wrong
# answer): that it is not attempted, and what to do, in one sentence. Tests tell the two apart by its start.
NOT_ATTEMPTED = "not attempted yet"
NOT_ATTEMPTED_MESSAGE = (
    f"{NOT_ATTEMPTED}: write your code in place of `raise NotImplementedError()` in the exercise's cell, "
    "run that cell, then run this one again."
)


@dataclass(frozen=True)
class Verdict:
    """The outcome of one check: ``status`` is "pass", "wrong" or "not attempted"."""

    exercise: str
    status: str
    message: str

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def __str__(self) -> str:
        # An exercise not yet attempted is NOT YET too (a learner's copy starts so), its message says what to do.
        mark = "PASS" if self.status == "pass" else "NOT YET"
        return f"[{mark}] {self.exercise}: {self.message}"

    def _ipython_display_(self) -> None:
        # Shown as the value of a cell: print the verdict line, unless run_check printed it in this very cell.
        if getattr(self, "_printed_in_cell", None) != _cell_number():
            print(self)


def _cell_number() -> int | None:
    """The number of the notebook cell running now (None outside IPython)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return None if shell is None else shell.execution_count


class _Wrong(Exception):
    """Raised inside a check to stop at the first problem found."""


class LearnerError(Exception):
    """The learner's code raised ``error``: reported as such, never mistaken for a bug in the check."""

    def __init__(self, error: Exception) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error


def call_learner(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call the learner's ``function``; any exception it raises becomes a ``LearnerError``.

    ``NotImplementedError`` passes through unchanged: it means "not attempted yet". A function defined with
    the wrong parameters is told so by name (a ``wrong`` verdict), before it runs. Every call holds the learner
    to the course's rules for any exercise (each a ``wrong`` verdict that names the mistake):

    - **the inputs stay as they were**: a tensor argument (or one inside a tuple, list or dict argument) that
      the call changed in place is refused, since the caller may still need it; so is a module argument whose
      parameters, buffers, plain attributes (``eps``, ``training``), parts or hooks the call changed, named by
      the argument (the check's expected values come from those modules: an answer that zeroes their weights
      must not match its own expected value);
    - **the dtype asked for**: when the tensor arguments (and the module arguments' weights) are all of one
      floating dtype, a floating result (or one inside a tuple, list or dict result) of another dtype is
      refused, naming both;
    - **torch, not numpy**: a numpy array or number returned (alone or inside a tuple, list or dict) is refused,
      and the learner is told what to return instead: what the check was declared to expect
      (``@learner_check(returns=...)``, e.g. "an int"), a tensor unless it says otherwise;
    - **randomness from the generator given**: when an argument is a ``torch.Generator``, the call is repeated
      with a copy of that generator (the result must be the same) and with a differently seeded one (it must
      differ): code that draws from torch's global stream, or ignores the generator, is refused.
    """
    returns = function._returns if isinstance(function, LearnerCode) else TENSOR
    function = function._function if isinstance(function, LearnerCode) else function
    _expect_signature(function, args, kwargs)
    generators = [value for value in (*args, *kwargs.values()) if isinstance(value, torch.Generator)]
    drawn = (generators[0], generators[0].get_state()) if generators else None  # the generator, its state before
    result = _call_once(function, args, kwargs, returns)
    if drawn is not None:
        _expect_drawn_from(function, *drawn, result, args, kwargs, returns)
    # An object made by the learner's class runs the learner's methods: it stays behind the proxy too.
    return LearnerCode(result) if isinstance(function, type) and callable(result) else result


def _call_once(function: Callable[..., Any], args: tuple, kwargs: dict, returns: str = TENSOR) -> Any:
    """One call of the learner's code, its inputs compared before and after, its result checked for numpy
    (``returns`` says, in words, what the exercise expects instead)."""
    from course.call_recording import CallRecorder

    before = _tensor_inputs(args, kwargs)
    kept = [(where, tensor, _copy(tensor)) for where, tensor in before]
    modules = [(where, module, ModuleSnapshot(module)) for where, module in _module_inputs(args, kwargs)]
    asked = _dtype_fed(before, modules)
    try:
        with CallRecorder() as recorder:  # what it calls: the course's own answer is not the learner's
            result = function(*args, **kwargs)
    except NotImplementedError:
        raise
    except Exception as error:  # anything the learner's code does wrong is the learner's to fix
        raise LearnerError(error) from error
    name = _name(function)
    answer = _reference_called(recorder)
    if answer:
        raise wrong(
            f"`{name}` calls the course's own answer, `{answer}` (the one this check compares with): the numbers "
            "agree, but nothing of yours was checked. Write the computation yourself, with the operations the "
            "exercise names."
        )
    helper = _graduated_helper(recorder)
    if helper:
        raise wrong(
            f"`{name}` calls {helper}, the course's own version of the function this exercise asks you to write: "
            "the numbers agree, but nothing of yours was checked. Write it yourself, with the operations the "
            "exercise names (the helper is there to use once you have written it)."
        )
    for where, tensor, copy in kept:
        if copy is not None and not _same_tensor(tensor, copy):
            raise wrong(
                f"`{name}` changed its input {_argument_name(function, where)} in place: the caller's "
                "tensor now holds other numbers, and the caller may still need the original. Leave every input "
                "as it came: build the result in a new tensor (work on a copy, or use operations that return "
                "a new tensor) and return that."
            )
    for where, module, snapshot in modules:
        change = snapshot.change(module, _plain_argument_name(function, where))
        if change:
            snapshot.restore(module)  # the check's module as it came, whatever the check does next
            raise wrong(
                f"`{name}` changed the module {_argument_name(function, where)} it was given ({change}): the "
                "exercise must not change it. The caller's module now computes something else, and the caller "
                "still needs it as it was. Use the module as it came (call it, read its weights) and leave its "
                "parameters, buffers and settings alone."
            )
    numpy_at = _numpy_inside(result)
    if numpy_at is not None:
        raise wrong(_numpy_hint(name, numpy_at, result, returns))
    if asked is not None:
        _expect_dtype_kept(name, result, asked)
    return result


_EXERCISES = str(Path(__file__).resolve().parent)  # course/exercises: the checks and their reference_* answers


def _reference_called(recorder: Any) -> str:
    """The name of a ``reference_*`` function of the course's checks that the learner's call entered ("" if none)."""
    for file, qualname in sorted(recorder.entered()):
        name = qualname.split(".")[0]
        if name.startswith("reference_") and str(Path(file).resolve().parent) == _EXERCISES:
            return name
    return ""


def _graduated_helper(recorder: Any) -> str:
    """The graduated ``helpers`` function of the running exercise that the learner's call used ("" if none)."""
    from course.exercises.graduated import graduated_helper_called

    return graduated_helper_called(recorder, _EXERCISE.get())


def _numpy_hint(name: str, where: str, result: Any, returns: str) -> str:
    """The numpy rule's hint: what came back (an array or a numpy number) and what the exercise expects."""
    found = result
    if where and isinstance(result, (tuple, list, dict)):  # the first numpy item inside, to name its kind
        items = result.values() if isinstance(result, dict) else result
        found = next((item for item in items if type(item).__module__ == "numpy"), result)
    # An ndarray (of any shape) is an array; numpy.int64, numpy.float32 ... are numbers (numpy.str_ a value),
    # named by their type.
    number = getattr(getattr(found, "dtype", None), "kind", "") in ("b", "i", "u", "f", "c")
    kind = "numpy array" if type(found).__name__ == "ndarray" else "numpy " + ("number" if number else "value")
    kind += "" if kind == "numpy array" else f" (numpy.{type(found).__name__})"
    if returns == TENSOR:
        return (
            f"`{name}` returned a {kind}{where}: every exercise works in torch, so return {TENSOR}; a trip "
            "through numpy also loses the dtype, the device and the gradient. Stay with torch operations."
        )
    return (
        f"`{name}` returned a {kind}{where}: this exercise expects {returns}, not a numpy type. Leave numpy "
        "out, or turn the result into the plain Python type before returning it."
    )


def _name(function: Callable[..., Any]) -> str:
    return getattr(function, "__name__", type(function).__name__)


def _tensor_inputs(args: tuple, kwargs: dict) -> list[tuple[tuple, Tensor]]:
    """Every tensor among the arguments, or one level inside a tuple, list or dict argument, with where it is:
    (position or keyword,) or (position or keyword, index or key)."""
    found: list[tuple[tuple, Tensor]] = []
    for key, value in (*enumerate(args), *kwargs.items()):
        if isinstance(value, Tensor):
            found.append(((key,), value))
        elif isinstance(value, (tuple, list)):
            found += [((key, i), item) for i, item in enumerate(value) if isinstance(item, Tensor)]
        elif isinstance(value, dict):
            found += [((key, k), item) for k, item in value.items() if isinstance(item, Tensor)]
    return found


def _module_inputs(args: tuple, kwargs: dict) -> list[tuple[tuple, nn.Module]]:
    """Every module among the arguments, or one level inside a tuple, list or dict argument, with where it is (as
    ``_tensor_inputs`` says it)."""
    found: list[tuple[tuple, nn.Module]] = []
    for key, value in (*enumerate(args), *kwargs.items()):
        if _checks_module(value):
            found.append(((key,), value))
        elif isinstance(value, (tuple, list)):
            found += [((key, i), item) for i, item in enumerate(value) if _checks_module(item)]
        elif isinstance(value, dict):
            found += [((key, k), item) for k, item in value.items() if _checks_module(item)]
    return found


def _checks_module(value: Any) -> bool:
    """Whether ``value`` is a module the check made (a learner's own module stays behind a ``LearnerCode`` proxy,
    whose class reads as the module's: it is the learner's to change)."""
    return isinstance(value, nn.Module) and not isinstance(value, LearnerCode)


def _dtype_fed(tensors: list[tuple[tuple, Tensor]], modules: list) -> torch.dtype | None:
    """The one floating dtype of the tensor arguments and the module arguments' parameters and buffers: the dtype
    the exercise asks its result in (None when they hold none, or several)."""
    dtypes = {tensor.dtype for _, tensor in tensors if tensor.dtype.is_floating_point}
    for _, module, _ in modules:
        dtypes |= {t.dtype for t in (*module.parameters(), *module.buffers()) if t.dtype.is_floating_point}
    return dtypes.pop() if len(dtypes) == 1 else None


def _expect_dtype_kept(name: str, result: Any, asked: torch.dtype) -> None:
    """Refuse a floating tensor in ``result`` (itself, or one level inside a tuple, list or dict) whose dtype is
    not ``asked``, naming both: numbers in another dtype are other numbers (float32 keeps about 7 digits of
    float64's 16), however close they look."""
    if isinstance(result, (tuple, list, dict)):
        items = result.items() if isinstance(result, dict) else enumerate(result)
        found = [(f" (item {key!r} of the {type(result).__name__} it returned)", item) for key, item in items]
    else:
        found = [("", result)]
    for where, item in found:
        if isinstance(item, Tensor) and item.dtype.is_floating_point and item.dtype != asked:
            raise wrong(
                f"the dtype changed: `{name}` was given {asked} and returned a tensor of dtype {item.dtype}{where}. "
                f"The exercise asks for {asked}, the dtype of its inputs: work in that dtype throughout (a new "
                "tensor made without a dtype, or a conversion on the way, gives another one)."
            )


def _copy(tensor: Tensor) -> Tensor | None:
    """A copy to compare against after the call (None for a tensor without numbers to compare)."""
    if tensor.layout != torch.strided or tensor.device.type == "meta":
        return None
    return tensor.detach().clone()


def _same_tensor(tensor: Tensor, copy: Tensor) -> bool:
    """Whether ``tensor`` still holds what ``copy`` recorded (NaN equal to NaN)."""
    if tensor.shape != copy.shape or tensor.dtype != copy.dtype:
        return False
    now = tensor.detach()
    if now.dtype.is_floating_point or now.dtype.is_complex:
        return bool(((now == copy) | (now.isnan() & copy.isnan())).all())
    return torch.equal(now, copy)


def _argument_name(function: Callable[..., Any], where: tuple) -> str:
    """`x`, or `args[0]` for a tensor inside a tuple argument, named as the learner's function names it."""
    key = where[0]
    if isinstance(key, int):
        key = _positional_names(function, key + 1)[key]
    inner = f"[{where[1]!r}]" if len(where) > 1 else ""
    return f"`{key}{inner}`"


def _plain_argument_name(function: Callable[..., Any], where: tuple) -> str:
    """``_argument_name`` without the backticks: the start of a path such as ``layer.norm3.weight``."""
    return _argument_name(function, where).strip("`")


def _positional_names(function: Callable[..., Any], count: int) -> list[str]:
    """The names the first ``count`` positional arguments have inside ``function`` (``*args`` ones as args[i])."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        parameters = []
    names: list[str] = []
    for parameter in parameters:
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            names += [f"{parameter.name}[{i}]" for i in range(count - len(names))]
        elif parameter.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            names.append(parameter.name)
    return names + [f"number {i + 1}" for i in range(len(names), count)]


def _numpy_inside(result: Any, depth: int = 0) -> str | None:
    """None if no numpy array is in ``result``; else where it is ("" for the result itself)."""
    if type(result).__module__ == "numpy" and hasattr(result, "shape") and hasattr(result, "__array__"):
        return "" if depth == 0 else None
    if depth < 2 and isinstance(result, (tuple, list, dict)):
        items = result.items() if isinstance(result, dict) else enumerate(result)
        for key, item in items:
            if type(item).__module__ == "numpy" and hasattr(item, "__array__") and hasattr(item, "shape"):
                return f" (item {key!r} of the {type(result).__name__} it returned)"
            if _numpy_inside(item, depth + 1) is not None:
                return f" (inside item {key!r} of the {type(result).__name__} it returned)"
    return None


def _expect_drawn_from(
    function: Callable[..., Any],
    generator: torch.Generator,
    state: Tensor,
    result: Any,
    args: tuple,
    kwargs: dict,
    returns: str = TENSOR,
) -> None:
    """Call ``function`` again with a copy of ``generator`` as it was (same result expected), then with one in
    another state (another result expected). Results that cannot be compared (objects) are not judged."""

    def again(replacement: torch.Generator) -> Any:
        def swap(value: Any) -> Any:
            return replacement if value is generator else value

        return _call_once(function, tuple(swap(a) for a in args), {k: swap(v) for k, v in kwargs.items()}, returns)

    same = torch.Generator(device=generator.device)
    same.set_state(state)
    repeated = _same_result(result, again(same))
    if repeated is None:
        return
    name = _name(function)
    if not repeated:
        raise wrong(
            f"`{name}` gave different results for two generators in the same state: some random numbers come "
            "from torch's global random stream, not from the generator it was given. Pass that generator to "
            "every random call (generator=...), so that the same generator always gives the same result."
        )
    other = torch.Generator(device=generator.device)
    seed = 1
    while torch.equal(other.manual_seed(seed).get_state(), state):
        seed += 1
    if _same_result(result, again(other)):
        raise wrong(
            f"`{name}` gave the same result for generators seeded differently: it ignores the generator it "
            "was given. Draw every random number from that generator (generator=...)."
        )


def _same_result(a: Any, b: Any) -> bool | None:
    """Whether two results are equal (tensors, numbers, strings, and tuples, lists or dicts of them); None when
    they cannot be compared."""
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        if _copy(a) is None or _copy(b) is None:
            return None
        return a.shape == b.shape and a.dtype == b.dtype and _same_tensor(a, b.detach())
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return False
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        if len(a) != len(b):
            return False
        verdicts = [_same_result(x, y) for x, y in zip(a, b, strict=True)]
        return None if None in verdicts else all(verdicts)
    if isinstance(a, (int, float, str, bool, type(None))) and isinstance(b, (int, float, str, bool, type(None))):
        return a == b
    return None


def _expect_signature(function: Callable[..., Any], args: tuple, kwargs: dict) -> None:
    """Complain, naming the parameters, when ``function`` cannot take these arguments."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin or C function without a readable signature: let it run
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError:
        name = getattr(function, "__name__", type(function).__name__)
        given = f"{len(args)} argument{'s' if len(args) != 1 else ''}" + (
            f" and the keywords {', '.join(kwargs)}" if kwargs else ""
        )
        raise wrong(
            f"the exercise calls `{name}` with {given}, but it is defined as `{name}{signature}`: "
            "keep the parameters the exercise's template gives."
        ) from None


class LearnerCode:
    """A learner's callable (function, class or object) that can be called only through ``call_learner``.

    Attributes are read through from the wrapped object; those that are callable (methods) come back wrapped
    too, so ``module.forward(x)`` is as safe as ``module(x)``. ``isinstance`` sees the wrapped object's class.
    """

    __slots__ = ("_function", "_returns")

    def __init__(self, function: Any, returns: str = TENSOR) -> None:
        object.__setattr__(self, "_function", function)
        object.__setattr__(self, "_returns", returns)  # in words, what the check expects a call to return

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return call_learner(self, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name in ("_function", "_returns"):  # not set yet (a copy being built): no recursion
            raise AttributeError(name)
        value = getattr(self._function, name)
        return LearnerCode(value) if callable(value) and not isinstance(value, type) else value

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # so that isinstance(proxy, nn.Module) holds for a learner's module
        return type(self._function)

    def __repr__(self) -> str:
        return f"LearnerCode({self._function!r})"


def learner_check(check: Callable[..., Verdict] | None = None, *, returns: str = TENSOR):
    """Decorate a public ``check_*``: every callable argument reaches it as a ``LearnerCode`` proxy.

    Tensors, numbers and other plain data pass unchanged. The decorated check is marked, and a test
    requires the mark on every public check of ``course.exercises``. ``@learner_check`` alone expects the
    learner's code to return tensors; ``@learner_check(returns="an int (a number of bytes)")`` names what it
    expects instead, and the numpy rule tells a learner who returned numpy to return that.
    """
    if check is None:
        return functools.partial(learner_check, returns=returns)

    @functools.wraps(check)
    def guarded(*args: Any, **kwargs: Any) -> Verdict:
        args = tuple(_guard(value, returns) for value in args)
        kwargs = {key: _guard(value, returns) for key, value in kwargs.items()}
        return check(*args, **kwargs)

    guarded.__learner_check__ = True  # type: ignore[attr-defined]
    return guarded


def _guard(value: Any, returns: str = TENSOR) -> Any:
    if isinstance(value, LearnerCode | Tensor) or not callable(value):
        return value
    return LearnerCode(value, returns)


def run_check(exercise: str, body: Callable[[], str]) -> Verdict:
    """Run ``body`` (which returns a pass message or raises ``wrong(...)``), print and return the verdict.

    ``body`` calls the learner's code through ``call_learner``. ``NotImplementedError`` means
    "not attempted yet"; a ``LearnerError`` is reported with the error's type and message; any
    other exception is the check's own bug and says so, instead of blaming the learner.
    The body runs inside ``torch.random.fork_rng()``, so the caller's random stream is unchanged.
    """
    running = _EXERCISE.set(exercise)
    try:
        with torch.random.fork_rng(devices=[]):
            verdict = Verdict(exercise, "pass", body())
    except NotImplementedError:
        verdict = Verdict(exercise, "not attempted", NOT_ATTEMPTED_MESSAGE)
    except _Wrong as problem:
        verdict = Verdict(exercise, "wrong", str(problem))
    except LearnerError as problem:
        verdict = Verdict(exercise, "wrong", f"your code raised {problem}")
    except Exception as error:  # keep the notebook going, and say whose code failed
        if _raised_in_learner_code(error):
            verdict = Verdict(exercise, "wrong", f"your code raised {type(error).__name__}: {error}")
        else:
            verdict = Verdict(exercise, "wrong", f"{CHECK_BUG}: {type(error).__name__}: {error}")
    finally:
        _EXERCISE.reset(running)
    print(verdict)
    object.__setattr__(verdict, "_printed_in_cell", _cell_number())
    return verdict


# Code that is not the learner's: the course's two packages (course and helpers), torch, and Python's standard library.
_NOT_LEARNER_CODE = tuple(
    str(Path(root).resolve())
    for root in (
        Path(__file__).parents[1],  # course/
        Path(helpers.__file__).parent,  # helpers/
        Path(torch.__file__).parent,
        sysconfig.get_paths()["stdlib"],
    )
)


def _raised_in_learner_code(error: Exception) -> bool:
    """Whether the traceback of ``error`` passes through code outside the course, torch and the stdlib.

    For checks that call the learner's function directly rather than through ``call_learner``.
    """
    for frame in traceback.extract_tb(error.__traceback__):
        filename = frame.filename
        if filename.startswith("<frozen"):
            continue
        if filename.startswith("<") or not str(Path(filename).resolve()).startswith(_NOT_LEARNER_CODE):
            return True
    return False


def wrong(hint: str) -> _Wrong:
    """Build the exception a check raises to report a mistake: ``raise wrong("...")``."""
    return _Wrong(hint)


def as_tensor(answer: Any, name: str) -> Tensor:
    """The learner's result as a float64 tensor, or a clear complaint about what it is."""
    if isinstance(answer, Tensor):
        expect_plain_tensor(answer, name)
        if answer.is_complex():
            raise wrong(f"{name} should hold real numbers, got dtype {answer.dtype}")
        return answer.detach().to("cpu", torch.float64)
    if isinstance(answer, (tuple, list)) and any(isinstance(item, Tensor) for item in answer):
        raise wrong(f"{name} should be one tensor, got a {type(answer).__name__} of {len(answer)} items")
    try:
        return torch.as_tensor(answer, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise wrong(f"{name} should be a tensor, got {type(answer).__name__}") from None


def as_int(answer: Any, what: str, where: str, why: str) -> int:
    """The learner's count (a number of bytes, of layers) as a plain int, or a hint that names what came instead
    (a float, a tensor with its dtype and shape, a bool, anything else by its type): "return ``what`` as an int,
    got … ``where``: ``why``". Numpy's numbers never get here: ``call_learner`` refuses them first."""
    if isinstance(answer, int) and not isinstance(answer, bool):
        return answer
    if isinstance(answer, Tensor):
        got = f"a tensor ({answer.dtype}, shape {tuple(answer.shape)})"
    elif isinstance(answer, float):
        got = f"a float ({answer!r})"
    else:
        got = f"{type(answer).__name__} ({answer!r})"[:80]
    raise wrong(f"return {what} as an int, got {got} {where}: {why}")


def expect_plain_tensor(answer: Tensor, name: str) -> None:
    """Complain unless ``answer`` is an ordinary dense tensor holding numbers (not sparse, not on "meta")."""
    if answer.layout != torch.strided:
        raise wrong(f"{name} should be an ordinary (dense) tensor, got layout {answer.layout}: use `.to_dense()`")
    if answer.device.type == "meta":
        raise wrong(f"{name} is on the meta device: it has a shape but no numbers")


def expect_shape(answer: Tensor, shape: Iterable[int], name: str, letters: str = "") -> None:
    """Complain, naming both shapes, unless ``answer`` has ``shape``.

    ``name`` says what the tensor is ("the output"), ``letters`` its shape in the course's notation
    ("(N, L, E)"); the message reads "the output should have shape (N, L, E) = (2, 3, 8), got (2, 8, 3)".
    """
    shape = tuple(shape)
    if tuple(answer.shape) != shape:
        expected = f"{letters} = {shape}" if letters else f"{shape}"
        raise wrong(f"{name} should have shape {expected}, got {tuple(answer.shape)}")


def close(a: Tensor, b: Tensor, atol: float = 1e-4) -> bool:
    """Equal within a tolerance that accepts float32 answers (the dtype itself is call_learner's to judge); NaN
    matches NaN."""
    return a.shape == b.shape and torch.allclose(
        a.to(torch.float64), b.to(torch.float64), atol=atol, rtol=1e-4, equal_nan=True
    )


def mistake_results(result: MistakeResult) -> list[Tensor] | None:
    """A mistake's results in one case, as a list; None where it cannot be computed for these inputs (simulating
    a mistake whose shapes do not fit raises: it never crashes a check)."""
    if callable(result):
        try:
            result = result()
        except (RuntimeError, ValueError, IndexError):
            return None
    return result if isinstance(result, list) else [result]


def matches_mistake(answer: Tensor, result: MistakeResult) -> bool | None:
    """Whether ``answer`` equals one of a mistake's results in one case (None: not computable there)."""
    results = mistake_results(result)
    return None if results is None else any(close(answer, candidate) for candidate in results)


def named_mistake(
    answers: Sequence[Tensor], mistakes: Sequence[Mistakes], uncomputable_rules_out: bool = False
) -> _Wrong | None:
    """The course's one engine for naming a mistake: the hint of the first mistake whose results match the answers
    in EVERY case where it is listed, or None.

    ``answers[i]`` is the learner's result on case i and ``mistakes[i]`` the usual mistakes' results on it. A hint
    absent from a case is not judged there. A hint whose result cannot be computed in a case is skipped there, or,
    with ``uncomputable_rules_out``, ruled out (code with that mistake would have raised on that case, and this one
    gave an answer). A mistake must match in at least one case. One fixed example can make two mistakes give the
    same number, or a mistake agree with the answer by chance; several cases that tell them apart cannot.
    """
    for hint in dict.fromkeys(hint for table in mistakes for hint in table):
        matched = 0
        for answer, table in zip(answers, mistakes, strict=True):
            verdict = matches_mistake(answer, table[hint]) if hint in table else None
            if verdict is False or (verdict is None and hint in table and uncomputable_rules_out):
                break  # ruled out: the cases after it are not computed
            matched += verdict is True
        else:
            if matched:
                return wrong(hint)
    return None


def diagnose(answer: Tensor, mistakes: Mistakes, fallback: str) -> _Wrong:
    """Name the first known mistake whose result matches ``answer`` (``named_mistake`` on one case), else give
    ``fallback``."""
    return named_mistake([answer], [mistakes]) or wrong(fallback)


def diagnose_cases(answers: Sequence[Tensor], mistakes: Sequence[Mistakes], fallback: str) -> _Wrong:
    """``named_mistake`` over several cases, else ``fallback``."""
    return named_mistake(answers, mistakes) or wrong(fallback)
