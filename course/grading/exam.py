"""Exam mode: a verdict and nothing else, for every route that shows a student or a teacher a check's result.

For homework a check's hint names the learner's mistake, sometimes within a token of the fix ("the slot is position
mod w"), and a fallback hint can print the value it expected. In an exam that coaches the student, and a teacher
who passes on ``check``'s rows or nbgrader's feedback page passes the hints on. In exam mode every route keeps the
verdict (pass, not yet right, not attempted) and the points, and drops the message:

* ``python -m course.assignments check --hide-checks``: the message column of each verdict row (:func:`exam_message`);
* ``python -m course.assignments nbgrader --hide-checks``: the test cells sit between nbgrader's hidden-test markers,
  so the student's copy shows no check, and under ``nbgrader autograde`` a cell with those markers gets verdict-only
  lines (:func:`exam_entry`), so neither the autograded notebook nor the feedback page holds a hint.

An ``error`` row keeps its message: it says why a check could not run (a time-out, the learner's own exception),
which the teacher needs to grade it again, and it holds nothing of the expected answer.
"""

from __future__ import annotations

__all__ = ["EXAM_MESSAGES", "HIDDEN_TESTS_MARKER", "exam_entry", "exam_message", "is_exam_cell"]

#: What a verdict says in exam mode: the verdict itself, no hint, no expected value.
EXAM_MESSAGES = {
    "pass": "right (exam mode: verdicts only)",
    "wrong": "not right (exam mode: no hint is given)",
    "not attempted": "not attempted (exam mode: no hint is given)",
}
#: The line nbgrader's hidden tests begin with (its ``ClearHiddenTests.begin_test_delimeter``'s default).
HIDDEN_TESTS_MARKER = "### BEGIN HIDDEN TESTS"
_LABELS = {"pass": "PASS", "wrong": "NOT YET", "not attempted": "NOT ATTEMPTED"}


def exam_message(status: str, message: str) -> str:
    """A row's message in exam mode: the verdict alone for pass, wrong and not attempted; ``error`` keeps its own."""
    return EXAM_MESSAGES.get(status, message)


def exam_entry(entry: dict[str, str]) -> dict[str, str]:
    """A check's result entry (function, status, message, text) with the hint and the printed line replaced by the
    verdict alone; an ``error`` entry is returned as it is."""
    status = entry.get("status", "error")
    if status not in EXAM_MESSAGES:
        return dict(entry)
    message = EXAM_MESSAGES[status]
    return {**entry, "message": message, "text": f"[{_LABELS[status]}] {entry.get('function', '?')}: {message}"}


def is_exam_cell(source: str) -> bool:
    """Whether a test cell was written in exam mode: its lines sit between nbgrader's hidden-test markers."""
    return any(line.strip() == HIDDEN_TESTS_MARKER for line in source.splitlines())
