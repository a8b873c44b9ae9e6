"""What every test file shares: the matplotlib backend, figure clean-up, one-thread torch, exercise helpers.

- matplotlib draws with the non-interactive Agg backend (no window, no display needed), chosen here before
  any test imports pyplot, and every figure a test leaves open is closed after it.
- ``one_torch_thread``: a fixture for tiny models; under pytest-xdist every worker runs torch on one thread, and so
  do the kernels and processes it starts.
- ``SLOWEST_FIRST``: the files that take longest run first, so that both workers stay busy to the end.
- Each lesson that nbval runs is followed by its student copy's exercises and checks, run in nbval's kernel
  (``_student_copies_in_nbval_kernels``): a lesson is executed once per test run, not once more for its copy.
- ``integration``: the marker of tests that start kernels, browsers, servers, several processes or load a real
  pretrained model (listed in ``INTEGRATION`` below, by file, or marked one by one in their files). ``make test``
  runs them; ``make unit`` leaves them out (``-m "not integration"``) to stay a quick loop.
- ``not_attempted`` and ``assert_hint``: what the exercise-check tests feed and assert; import them with
  ``from conftest import assert_hint, not_attempted`` (pytest puts this folder on the import path).
"""

from __future__ import annotations

import os

import matplotlib
import pytest
import torch

matplotlib.use("Agg")  # before pyplot is imported anywhere: no GUI backend on a test runner

import matplotlib.pyplot as plt
from student_copy_runs import RUN_TEST, StudentCopyInLessonKernel

from course.lessons import LESSONS, lesson_of, missing_needs

# Under pytest-xdist (`make test` runs two workers, one per core) each worker computes on one thread: two workers
# of torch's default two threads each would fight over two cores.
# The kernels and processes a worker starts (nbval's lesson kernels, student copies, nbgrader, torchrun) inherit
# one thread through the environment: a lesson's two threads spinning beside the other worker ran its cells 2-20x
# slower (lessons 09 and 10 under nbval took over 330 s and 300 s, against 74 s and about 150 s alone).
PARALLEL_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if PARALLEL_WORKERS > 1:
    torch.set_num_threads(1)
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(variable, "1")
# Run serially (WORKERS=1), a kernel's threads follow the load cell by cell (helpers/tools/threads.py).


# Files whose tests start kernels, browsers, servers or other processes, or load a real pretrained model (SmolLM2,
# Gemma, MiniLM and BERT), paths from tests/. A file with a few such tests marks them itself (test_gradebook.py).
INTEGRATION = {
    "course/test_checking_submissions.py",
    "course/test_corpus_generator.py",
    "course/test_handout.py",
    "course/test_nbgrader_term.py",
    "course/test_student_copies.py",
    "kernels/test_kernels_compile.py",  # a fresh interpreter compiles every kernel for sm_90 (about a minute)
    "kernels/test_kernels_runtime.py",  # fresh interpreters: the kernels' path is decided before Triton's import
    "models/test_gemma.py",
    "models/test_language_model.py",
    "models/test_pretrained.py",
    "models/translation/test_distributed.py",
    "test_browser.py",
    "test_lab.py",
    "test_site_browser.py",
    "tools/test_threads_processes.py",
}
TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
NOTEBOOKS = os.path.join(ROOT, "notebooks")

# The files that take longest, longest first (seconds on one worker of a 2-core machine, `--junitxml` of one
# `make test`), paths from the repository root. They run first, and the hundreds of quick files fill the gaps
# after them, so that neither worker is left idle while the other finishes a long file. pytest-xdist's own order
# (most tests first) starts the nbgrader term, 5 tests and two minutes, among the last files. `make test` passes
# --no-loadscope-reorder to keep this order. The lessons' nbval runs join by their registry entries' ``test_s``
# (course/lessons.py); the test files are here.
SLOW_TEST_FILES_S = {
    # two 270M models: 105 s of CPU (301 s wall at load 4), 3 December, less the ~33 s of CPU transformers' load of
    # Gemma no longer spends (load_reference_lm, 48.4 -> 15.6 s measured at load ~5): an estimate until a quiet run
    "tests/models/test_gemma.py": 120,
    # junitxml of make test, 2 December, quiet: 108 s; the timeout test's split took 90.8 -> 69.9 s at load ~8,
    # so about 20 s less: an estimate until a quiet run
    "tests/course/test_checking_submissions.py": 88,
    "tests/course/test_nbgrader_term.py": 80,
    "tests/test_browser.py": 65,
    "tests/models/test_language_model.py": 45,  # 57 s, less ~13 s of CPU of the reference load (16.6 -> 3.8 s)
    "tests/models/translation/test_distributed.py": 37,
    "tests/test_site_browser.py": 28,
    # make lab and a learner's exercise in Chromium: 29 s alone at load 4 (4 December), not a quiet measurement
    "tests/test_lab.py": 29,
    "tests/course/test_gradebook.py": 24,
    "tests/course/test_check_sandbox.py": 20,
    "tests/tools/test_threads_processes.py": 14,
    "tests/course/test_student_copies.py": 12,  # the copies' exercises run in nbval's kernels
}
SLOW_S = {**{lesson.path: lesson.test_s for lesson in LESSONS if lesson.test_s}, **SLOW_TEST_FILES_S}
SLOWEST_FIRST = sorted(SLOW_S, key=lambda path: -SLOW_S[path])


def pytest_configure(config):
    marker = "integration: starts kernels, browsers, processes or loads a real pretrained model"
    config.addinivalue_line("markers", marker)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if os.path.relpath(str(item.path), TESTS).replace(os.sep, "/") in INTEGRATION:
            item.add_marker(pytest.mark.integration)
        _skip_a_lesson_whose_model_is_missing(item)
    rank = {path: i for i, path in enumerate(SLOWEST_FIRST)}
    # A stable sort: the slow files first, in that order; every file's own tests (a lesson's cells) keep theirs.
    items.sort(key=lambda item: rank.get(os.path.relpath(str(item.path), ROOT).replace(os.sep, "/"), len(rank)))
    if os.environ.get("COURSE_STUDENT_COPIES", "") != "full":
        _student_copies_in_nbval_kernels(config, items)


def _skip_a_lesson_whose_model_is_missing(item) -> None:
    """A lesson's nbval cells are skipped, naming what to install, when a package its entry needs is missing
    (course/lessons.py, ``missing_needs``: Gemma's wheels for lesson 13)."""
    if os.path.dirname(str(item.path)) != NOTEBOOKS:
        return
    lesson = lesson_of(os.path.basename(str(item.path)))
    missing = missing_needs(lesson) if lesson else []
    if missing:
        item.add_marker(pytest.mark.skip(reason=f"lesson {lesson.number} needs {'; '.join(missing)}: make setup"))


def _student_copies_in_nbval_kernels(config, items) -> None:
    """Each lesson nbval runs gets one more item after its last cell: its student copy's exercises and checks, run
    in nbval's kernel (tests/student_copy_runs.py), and test_student_copies.py's own run of it, which would execute
    the lesson a second time in a fresh kernel, is left out. So a lesson is executed once per test run."""
    last_cell = {}  # nbval's collector of a lesson -> the position of its last cell in `items`
    for position, item in enumerate(items):
        if type(getattr(item, "parent", None)).__name__ == "IPyNbFile" and os.path.dirname(str(item.path)) == NOTEBOOKS:
            last_cell[item.parent] = position
    for lesson, position in sorted(last_cell.items(), key=lambda pair: -pair[1]):  # from the end: places hold
        items.insert(position + 1, StudentCopyInLessonKernel.from_parent(lesson, name="student copy"))
    covered = {os.path.basename(str(lesson.path)) for lesson in last_cell}
    left_out = [
        item
        for item in items
        if getattr(item, "originalname", None) == RUN_TEST and item.callspec.params["lesson"].name in covered
    ]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if item not in left_out]


@pytest.fixture(autouse=True)
def _close_figures():
    """Close every figure a test opened, so that figures do not pile up (and warn) across tests."""
    yield
    plt.close("all")


@pytest.fixture
def one_torch_thread():
    """Tiny models run fastest on one thread (two threads spin against each other on a busy 2-core runner)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def not_attempted(*args, **kwargs):
    """A learner's untouched stub, as a student copy has it: it raises NotImplementedError."""
    raise NotImplementedError()


def learners_copy(reference):
    """``reference``'s code as a learner's own function (compiled from no file of the course), with its globals: the
    right computation, which the checks accept, where calling the course's ``reference_*`` itself is refused."""
    import types

    def own(code):  # the inner functions too (a hook the reference returns)
        consts = tuple(own(c) if isinstance(c, types.CodeType) else c for c in code.co_consts)
        return code.replace(co_filename="<learner's cell>", co_consts=consts)

    code = own(reference.__code__).replace(co_name=f"learners_{reference.__name__}")
    return types.FunctionType(code, reference.__globals__, f"learners_{reference.__name__}", reference.__defaults__)


def assert_hint(verdict, *fragments: str) -> None:
    """The check said "wrong" and its hint names every one of ``fragments``."""
    assert verdict.status == "wrong", verdict
    for fragment in fragments:
        assert fragment in verdict.message, (fragment, verdict.message)


@pytest.fixture(scope="session")
def smollm2():
    """Lesson 09's SmolLM2-135M-Instruct built from the course's modules, ``(model, tokenizer)``: loaded once per
    test session (540 MB in float32), shared by every test that needs it."""
    from helpers.models.language_model import load_pretrained_lm

    return load_pretrained_lm()


@pytest.fixture(scope="session")
def smollm2_reference():
    """The same GGUF file loaded by ``transformers`` (the reference), once per test session."""
    from helpers.models.language_model import load_reference_lm

    return load_reference_lm()
