"""Each lesson's grading timeout (course/lessons.py) is what both routes use by default: the course's ``check`` and
nbgrader's autograde through the configuration template; a limit the teacher sets still wins. Nothing here starts
a kernel: the supervisor and nbgrader's execution are replaced by what records the limit they were given."""

from __future__ import annotations

import shutil

import pytest

from course.grading import checker
from course.grading import nbgrader as course_nbgrader
from course.lessons import LESSONS, UNKNOWN_LESSON_TIMEOUT_S, lesson_of
from course.solution_notebooks import NOTEBOOKS_DIR

TRANSLATION = lesson_of("06_translation")  # a lesson with more than the default
EMBEDDINGS = lesson_of("01_embeddings")


def _limit_check_gives(monkeypatch, tmp_path, lesson, **options) -> int:
    """The per-cell limit ``run_submission`` hands its supervisor for a copy of ``lesson`` handed in as is."""
    given = {}

    def supervise(job, work, env, wall):
        given["timeout_s"], given["wall"] = job["timeout_s"], wall
        return None  # as if the checker process had been stopped: the report says so, nothing runs

    monkeypatch.setattr(checker, "_supervise", supervise)
    handed_in = tmp_path / "alice" / lesson.file
    handed_in.parent.mkdir()
    shutil.copy(NOTEBOOKS_DIR / lesson.file, handed_in)
    checker.run_submission(handed_in, sandboxed=False, **options)
    return given["timeout_s"]


@pytest.mark.parametrize("lesson", [EMBEDDINGS, TRANSLATION], ids=lambda lesson: lesson.number)
def test_check_gives_each_cell_its_lessons_timeout(monkeypatch, tmp_path, lesson):
    assert _limit_check_gives(monkeypatch, tmp_path, lesson) == lesson.grading_timeout_s
    assert TRANSLATION.grading_timeout_s > EMBEDDINGS.grading_timeout_s == 60


def test_a_teachers_timeout_wins_over_the_lessons(monkeypatch, tmp_path):
    assert _limit_check_gives(monkeypatch, tmp_path, TRANSLATION, timeout_s=17) == 17


def test_the_command_leaves_the_timeout_to_the_lesson_unless_told(capsys):
    from course import assignments

    parser_help = ""
    with pytest.raises(SystemExit):
        assignments.main(["check", "--help"])
    parser_help = " ".join(capsys.readouterr().out.split())
    assert f"06: {TRANSLATION.grading_timeout_s} s" in parser_help and f"{UNKNOWN_LESSON_TIMEOUT_S} s" in parser_help


def _nbgrader_execute(config_text: str):
    """The Execute step of the autograde chain that ``config_text`` (a configuration file's text) sets up."""
    pytest.importorskip("nbgrader")
    from traitlets.config import Config

    namespace = {"c": Config(), "get_config": None}
    namespace["get_config"] = lambda: namespace["c"]
    exec(compile(config_text, "nbgrader_config.py", "exec"), namespace)
    config = namespace["c"]
    (execute,) = [step for step in config.Autograde.autograde_preprocessors if "Execute" in step.__name__]
    return execute, config


@pytest.mark.parametrize("lesson", [EMBEDDINGS, TRANSLATION], ids=lambda lesson: lesson.number)
def test_nbgrader_runs_each_lessons_cells_under_its_timeout(monkeypatch, lesson):
    from nbconvert.preprocessors import ExecutePreprocessor

    execute, config = _nbgrader_execute(course_nbgrader.CONFIG_TEMPLATE.read_text())
    seen = []
    monkeypatch.setattr(
        ExecutePreprocessor, "preprocess", lambda self, nb, resources=None, km=None: seen.append(self.timeout)
    )
    execute(config=config).preprocess({}, {"nbgrader": {"notebook": lesson.stem}})
    assert seen == [lesson.grading_timeout_s]


def test_nbgraders_own_timeout_in_the_configuration_wins(monkeypatch):
    from nbconvert.preprocessors import ExecutePreprocessor

    text = course_nbgrader.CONFIG_TEMPLATE.read_text() + "\nc.ExecutePreprocessor.timeout = 20\n"
    execute, config = _nbgrader_execute(text)
    seen = []
    monkeypatch.setattr(
        ExecutePreprocessor, "preprocess", lambda self, nb, resources=None, km=None: seen.append(self.timeout)
    )
    execute(config=config).preprocess({}, {"nbgrader": {"notebook": TRANSLATION.stem}})
    assert seen == [20]


def test_the_chain_is_nbgraders_own_but_for_its_execute_step():
    pytest.importorskip("nbgrader")
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import Execute

    ours = course_nbgrader.autograde_preprocessors()
    theirs = Autograde.class_traits()["autograde_preprocessors"].default()
    assert len(ours) == len(theirs) and theirs.index(Execute) == [issubclass(s, Execute) for s in ours].index(True)
    assert [s for s in ours if not issubclass(s, Execute)] == [s for s in theirs if s is not Execute]
    assert len(LESSONS) >= 12
