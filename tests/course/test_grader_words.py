"""What ``check`` writes when a file or an answer is odd: a clear message in the row, never a raw library error.

A notebook nested 100,000 levels deep or holding a 5,000-digit number is refused as a notebook that cannot be read,
with a row for each exercise; an answer that holds an object (a dict keyed by one) is refused naming the object,
without torch's checkpoint advice or its terminal escapes; an answer too large to cross is refused as too large,
with the limit. Nothing here starts a kernel.
"""

from __future__ import annotations

import base64
import csv
import io

import pytest
import torch
from test_handed_in import no_kernel, notebook_json, tiny_lesson  # noqa: F401 (no_kernel: an autouse fixture)

from course import assignments
from course.grading import wire
from course.solution_notebooks import NESTING_LIMIT, ReleaseError, notebook_from_bytes


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


ODD_FILES = {
    "nested 100,000 deep": (
        notebook_json([], odd=0).replace('"odd": 0', f'"odd": {deep(100_000)}'),
        f"its JSON is nested more than {NESTING_LIMIT} levels deep",
    ),
    "nested just over the limit": (
        notebook_json([], odd=0).replace('"odd": 0', f'"odd": {deep(NESTING_LIMIT)}'),
        f"its JSON is nested more than {NESTING_LIMIT} levels deep",
    ),
    "a 5,000-digit number": (
        notebook_json([], odd=0).replace('"odd": 0', '"odd": ' + "7" * 5000),
        "it holds a number of more than 4,300 digits",
    ),
}


@pytest.mark.parametrize("case", ODD_FILES, ids=list(ODD_FILES))
def test_an_odd_file_is_refused_saying_what_is_wrong_with_it(case):
    text, expected = ODD_FILES[case]
    with pytest.raises(ReleaseError, match="cannot be read as a notebook") as error:
        notebook_from_bytes(text.encode(), "alice/02_tiny.ipynb")
    assert expected in str(error.value)


def test_a_notebook_as_deep_as_the_limit_is_read():
    text = notebook_json([], odd=0).replace('"odd": 0', f'"odd": {deep(NESTING_LIMIT - 1)}')  # the top object is 1
    assert notebook_from_bytes(text.encode(), "a.ipynb").cells == []


@pytest.mark.parametrize("case", ODD_FILES, ids=list(ODD_FILES))
def test_an_odd_file_gets_a_row_per_exercise_and_one_for_the_notebook_saying_why(case, tmp_path, capsys):
    text, expected = ODD_FILES[case]
    path = tmp_path / "ann" / "02_tiny.ipynb"
    path.parent.mkdir()
    path.write_text(text)
    lessons = tiny_lesson(tmp_path / "notebooks").parent
    status = assignments.main(["check", "--notebooks", str(lessons), "--out", str(tmp_path / "g"), str(path)])
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out), delimiter="\t"))[1:]
    assert status == 1
    assert [row[2:4] for row in rows] == [["linear_projection", "error"], ["(notebook)", "error"]]
    for row in rows:
        assert expected in row[5] and "report it" not in row[5], row


class Key:
    """A learner's own class, used as a dict key."""


def framed(value) -> str:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


@pytest.mark.parametrize(
    ("value", "named"), [({Key(): 1}, f"{__name__}.Key"), ({frozenset([1]): 2}, "frozenset"), ([Key()], "Key")]
)
def test_an_answer_holding_an_object_is_refused_naming_it_without_torchs_advice(value, named):
    with pytest.raises(wire.Unreadable) as error:
        wire.unframe(framed(value))
    message = str(error.value)
    assert named in message and "is not data" in message and "dicts of them (their keys too)" in message
    assert "\x1b" not in message and "weights_only" not in message and "checkpoint" not in message


def test_an_unreadable_message_is_one_plain_line():
    with pytest.raises(wire.Unreadable) as error:
        wire.unframe(base64.b64encode(b"\x1b[1mnot a pickle\n").decode())
    assert "\x1b" not in str(error.value) and "\n" not in str(error.value)


def test_an_answer_over_the_size_limit_is_refused_as_too_large_with_the_limit(monkeypatch):
    monkeypatch.setattr(wire, "MAX_BYTES", 4 * 2**20)  # 3 MiB of data as base64
    text = framed(torch.zeros(2**20))  # 4 MiB of float32
    with pytest.raises(wire.Unreadable) as error:
        wire.unframe(text)
    assert str(error.value).startswith("too large: 4 MiB, over the limit of 3 MiB for one answer"), error.value
    assert torch.equal(wire.unframe(framed(torch.zeros(2**18))), torch.zeros(2**18))  # 1 MiB crosses
