"""What every exercise check shares: running the learner's code safely and printing one verdict."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

#: Set by ``python -m helpers.assignments check``: a file (outside the notebook's folder) where every verdict
#: is also recorded, one JSON object a line, so that what a student prints cannot pass for a verdict.
VERDICT_LOG_ENV = "ATTENTION_COURSE_VERDICT_LOG"


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
        mark = {"pass": "PASS", "wrong": "NOT YET", "not attempted": "NOT ATTEMPTED YET"}[self.status]
        return f"[{mark}] {self.exercise}: {self.message}"


class _Wrong(Exception):
    """Raised inside a check to stop at the first problem found."""


def run_check(exercise: str, body: Callable[[], str]) -> Verdict:
    """Run ``body`` (which returns a pass message or raises ``wrong(...)``), print and return the verdict.

    The learner's code may raise anything; ``NotImplementedError`` means "not attempted yet", any
    other exception is reported with its type and message instead of crashing the notebook.
    """
    try:
        verdict = Verdict(exercise, "pass", body())
    except NotImplementedError:
        verdict = Verdict(
            exercise, "not attempted", "replace `raise NotImplementedError()` with your code, then run this cell again."
        )
    except _Wrong as problem:
        verdict = Verdict(exercise, "wrong", str(problem))
    except Exception as error:  # the learner's code crashed: say how, keep the notebook going
        verdict = Verdict(exercise, "wrong", f"your code raised {type(error).__name__}: {error}")
    print(verdict)
    _record(verdict)
    return verdict


def _record(verdict: Verdict) -> None:
    """Append the verdict to the checker's log when one is set (see ``VERDICT_LOG_ENV``); else do nothing."""
    log = os.environ.get(VERDICT_LOG_ENV)
    if log:
        entry = {"exercise": verdict.exercise, "status": verdict.status, "message": verdict.message}
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")


def wrong(hint: str) -> _Wrong:
    """Build the exception a check raises to report a mistake: ``raise wrong("...")``."""
    return _Wrong(hint)


def as_tensor(answer: Any, name: str) -> Tensor:
    """The learner's result as a float64 tensor, or a clear complaint about what it is."""
    if isinstance(answer, Tensor):
        return answer.detach().to(torch.float64)
    try:
        return torch.as_tensor(answer, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise wrong(f"{name} should be a tensor, got {type(answer).__name__}") from None


def expect_shape(answer: Tensor, shape: Iterable[int], name: str) -> None:
    """Complain, naming both shapes, unless ``answer`` has ``shape``."""
    shape = tuple(shape)
    if tuple(answer.shape) != shape:
        raise wrong(f"{name} should have shape {shape}, got {tuple(answer.shape)}")


def close(a: Tensor, b: Tensor, atol: float = 1e-4) -> bool:
    """Equal within a tolerance that accepts float32 answers (and either dtype)."""
    return a.shape == b.shape and torch.allclose(a.to(torch.float64), b.to(torch.float64), atol=atol, rtol=1e-4)


def diagnose(answer: Tensor, mistakes: dict[str, Tensor], fallback: str) -> _Wrong:
    """Name the first known mistake whose result matches ``answer``, else give ``fallback``."""
    for hint, result in mistakes.items():
        if close(answer, result):
            return wrong(hint)
    return wrong(fallback)
