"""``check`` computes each verdict outside the graded kernel: no forgery inside the kernel reaches it (#46, #48).

One handed-in notebook of a lesson whose exercises are all graded by lesson 02's real projection check runs, in one
sandboxed kernel, every forgery that once scored "pass" on a wrong answer, and every one docs/teaching.md listed as
"detected, not prevented", each before a wrong answer of its own: each of those answers must be graded ``wrong``,
by its numbers. An answer that is right only where no reference answer is within the kernel's reach, and a right
answer after every forgery has been set up, must pass.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbformat import v4

from course.grading import checker, sandbox

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(sandbox.unavailable() is not None, reason=f"no sandbox here: {sandbox.unavailable()}"),
]

KERNELSPEC = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
IMPORT = "from course.exercises.lesson02 import check_linear_projection"
RIGHT = "x @ weight.T + bias"
WRONG = "x @ weight + bias"  # square weights: the numbers are wrong, the shape is right

# Each forgery, then a wrong answer of its own. The verdict display they rewrite is the in-kernel route's.
FORGERIES = {
    # An edited copy of course.grading first on course.__path__ (the old locked cell's reload then found it).
    "proj_grading_copy": """\
import pathlib, shutil, sys, tempfile
import course, course.grading

fake = pathlib.Path(tempfile.mkdtemp()) / "course"
shutil.copytree(pathlib.Path(course.grading.__file__).parent, fake / "grading")
init = fake / "grading" / "__init__.py"
forged = "    verdict = check(answer)\\n    verdict = Verdict(verdict.exercise, 'pass', 'forged')\\n"
init.write_text(init.read_text().replace("    verdict = check(answer)\\n", forged))
course.__path__.insert(0, str(fake))
for name in [name for name in sys.modules if name.startswith("course.grading")]:
    del sys.modules[name]
""",
    # A display publisher whose type has a C __call__ (functools.partial), rewriting the verdict to pass.
    "proj_partial_publisher": """\
import functools
from IPython import get_ipython

MIME = "application/vnd.attention-course.verdict+json"


def forge(original, data, *args, **kwargs):
    if MIME in data:
        data = {**data, MIME: {**data[MIME], "status": "pass", "message": "forged"}}
    return original(data, *args, **kwargs)


get_ipython().display_pub.publish = functools.partial(forge, get_ipython().display_pub.publish)
""",
    # A display publisher hook rewriting the status in every message it sends.
    "proj_publisher_hook": """\
from IPython import get_ipython


def rewrite(message):
    data = message.get("content", {}).get("data", {})
    if MIME in data:
        data[MIME].update(status="pass", message="forged")
    print("[PASS] forged")
    return message


get_ipython().display_pub.register_hook(rewrite)
""",
    # A daemon thread that waits for the verdict, clears the cell's output and shows its own, again and again.
    "proj_daemon_thread": """\
import threading, time
from IPython.display import clear_output, display


def show_a_pass():
    for _ in range(600):
        time.sleep(0.05)
        clear_output()
        for function in ("proj_daemon_thread", "proj_reload", "proj_hook", "proj_display"):
            display({MIME: {"function": function, "status": "pass", "message": "forged"}}, raw=True)
        print("[PASS] forged")


threading.Thread(target=show_a_pass, daemon=True).start()
""",
    # importlib.reload itself patched: the old locked cell reloaded course.grading through it.
    "proj_reload": """\
import importlib, types
from IPython.display import display


def fake_reload(module):
    fake = types.ModuleType(module.__name__)

    def graded(check, function):
        display({MIME: {"function": function, "status": "pass", "message": "forged"}}, raw=True)
        return types.SimpleNamespace(passed=True, status="pass")

    fake.graded = graded
    return fake


importlib.reload = fake_reload
""",
    # The guide's "detected, not prevented": graded and _report patched from the notebook ...
    "proj_graded_patched": """\
import course.grading as grading

grading._report = lambda function, check, status, message: None
grading.graded = lambda check, function: types.SimpleNamespace(passed=True, status="pass")
""",
    # ... an IPython event hook that shows a pass after every cell ...
    "proj_hook": """\
from IPython import get_ipython


def forge_after_each_cell(result):
    display({MIME: {"function": "proj_hook", "status": "pass", "message": "forged"}}, raw=True)


get_ipython().events.register("post_run_cell", forge_after_each_cell)
""",
    # ... IPython's display replaced, and a second verdict shown from the answer's cell ...
    "proj_display": """\
import IPython.display

IPython.display.display = lambda *objects, **options: None
display({MIME: {"function": "proj_display", "status": "pass", "message": "forged"}}, raw=True)
""",
    # ... torch's comparisons made always true ...
    "proj_allclose": """\
import torch

torch.allclose = lambda *args, **kwargs: True
torch.equal = lambda *args, **kwargs: True
torch.isclose = lambda a, b, *args, **kwargs: torch.ones_like(a, dtype=torch.bool)
""",
    # ... and a tensor subclass that compares equal to anything (the answer below returns one).
    "proj_agreeable_tensor": """\
class Agreeable(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.allclose, torch.equal, torch.Tensor.equal):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})
""",
}
RETURNS = {"proj_agreeable_tensor": f"({WRONG}).as_subclass(Agreeable)"}

# Right only where no reference answer is within reach: not importable, not readable from the course's files.
REACH = """\
def proj_reach(x, weight, bias):
    import pathlib
    import course

    found = [
        path.name
        for path in (pathlib.Path(course.__file__).parent / "exercises").glob("*.py")
        if "def reference_" in path.read_text() or "def check_" in path.read_text()
    ]
    for lesson in ("lesson11", "lesson12", "lesson13", "lesson02"):
        try:
            module = __import__(f"course.exercises.{lesson}", fromlist=["*"])
            found += [name for name in dir(module) if name.startswith("reference_")]
            found += [f"{lesson}: {name}" for name in vars(module) if name.startswith("check_")]
        except ImportError:
            pass
    if found:
        raise RuntimeError(f"within the kernel's reach: {found}")
    return x @ weight.T + bias
"""


def answer(function: str, body: str) -> str:
    return f"def {function}(x, weight, bias):\n    return {body}"


def write(path: Path, cells: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(v4.new_notebook(cells=[v4.new_code_cell(text) for text in cells], metadata=KERNELSPEC), path)
    return path


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    root = tmp_path_factory.mktemp("remote")
    functions = [*FORGERIES, "proj_reach", "proj_right"]
    lesson = [IMPORT]
    for function in functions:
        solution = f"def {function}(x, weight, bias):\n    # BEGIN SOLUTION\n    return {RIGHT}\n    # END SOLUTION"
        lesson += [solution, f"check_linear_projection({function})"]
    write(root / "notebooks" / "04_forgeries.ipynb", lesson)
    cells = [IMPORT]
    for function, forgery in FORGERIES.items():
        cells += [forgery, answer(function, RETURNS.get(function, WRONG)), f"check_linear_projection({function})"]
    cells += [REACH, "check_linear_projection(proj_reach)"]
    cells += [answer("proj_right", RIGHT), "check_linear_projection(proj_right)"]
    submission = write(root / "submitted" / "mallory" / "04_forgeries.ipynb", cells)
    report = checker.run_submission(submission, timeout_s=120, notebooks_dir=root / "notebooks")
    return {row.exercise: row for row in report.results}, report.problem


@pytest.mark.parametrize("function", list(FORGERIES))
def test_a_forgery_inside_the_kernel_leaves_a_wrong_answer_wrong(rows, function):
    results, problem = rows
    row = results[function]
    assert (row.status, row.points) == ("wrong", 0) and "forged" not in row.message, (row, problem)
    assert "weight" in row.message, row  # the check's own hint for this answer's numbers: the weight untransposed


def test_no_reference_answer_and_no_check_is_within_the_graded_kernels_reach(rows):
    results, problem = rows
    assert (results["proj_reach"].status, results["proj_reach"].points) == ("pass", 1), (results["proj_reach"], problem)


def test_a_right_answer_after_every_forgery_still_passes(rows):
    results, problem = rows
    assert (results["proj_right"].status, results["proj_right"].points) == ("pass", 1), (results["proj_right"], problem)
    assert problem is None


# Lesson 13's checks send a model's config (a helpers.gpt.GPTConfig, which the kernel loads in full: it trusts the
# checker) and two ints; what comes back is data (an int, a mask, a buffer). Right and wrong answers, graded remotely.
LESSON_13 = "from course.exercises.lesson13 import check_hybrid_cache_bytes, check_rolling_write, check_window_mask"
LESSON_13_ANSWERS = {
    "my_window_mask": (
        "def my_window_mask(T, window):\n"
        "    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]\n"
        "    return (j > i) | (j <= i - window)",
        "check_window_mask",
        "pass",
    ),
    "my_rolling_write": (
        "def my_rolling_write(buffer, new, position):\n"
        "    buffer[:, :, position % buffer.size(2)] = new\n"
        "    return buffer",
        "check_rolling_write",
        "wrong",
    ),
    "my_hybrid_cache_bytes": (
        "def my_hybrid_cache_bytes(config, T, bytes_per_number=2):\n"
        "    kept = sum(T if kind == 'global' else min(T, config.window) for kind in config.layer_kinds)\n"
        "    return kept * 2 * config.num_kv_heads * config.head_dim * bytes_per_number",
        "check_hybrid_cache_bytes",
        "pass",
    ),
    "my_hybrid_cache_bytes_all_local": (
        "def my_hybrid_cache_bytes_all_local(config, T, bytes_per_number=2):\n"
        "    kept = len(config.layer_kinds) * min(T, config.window)\n"
        "    return kept * 2 * config.num_kv_heads * config.head_dim * bytes_per_number",
        "check_hybrid_cache_bytes",
        "wrong",
    ),
}


def test_lesson_13s_checks_grade_remotely_with_a_config_sent_to_the_kernel(tmp_path):
    lesson, cells = [LESSON_13, "import torch"], [LESSON_13, "import torch"]
    for function, (code, check, _) in LESSON_13_ANSWERS.items():
        header, body = code.split("\n", 1)
        lesson += [f"{header}\n    # BEGIN SOLUTION\n{body}\n    # END SOLUTION", f"{check}({function})"]
        cells += [code, f"{check}({function})"]
    write(tmp_path / "notebooks" / "13_hybrid.ipynb", lesson)
    submission = write(tmp_path / "submitted" / "mallory" / "13_hybrid.ipynb", cells)
    report = checker.run_submission(submission, timeout_s=120, notebooks_dir=tmp_path / "notebooks")
    rows = {row.exercise: row for row in report.results}
    assert report.problem is None, report.problem
    for function, (_, _, status) in LESSON_13_ANSWERS.items():
        assert rows[function].status == status, rows[function]
    assert "in place" in rows["my_rolling_write"].message, rows["my_rolling_write"]
    assert "global layers were counted as local" in rows["my_hybrid_cache_bytes_all_local"].message


# Lesson 14's checks send scores holding -inf (rows blocked everywhere) and thousands, a sink of -inf, and
# log_alpha as a tensor or None; a wrong answer that raises on one case is called again on the square case. Right
# answers, mistakes named by their numbers, and a graduated helper refused from the calls recorded in the kernel.
LESSON_14 = "from course.exercises.lesson14 import check_delta_step, check_output_gate, check_sink_softmax"
LESSON_14_ANSWERS = {
    "my_sink_softmax": (
        "def my_sink_softmax(scores, sink):\n"
        "    column = sink.view(-1, 1, 1).expand(*scores.shape[:-1], 1)\n"
        "    return torch.cat([scores, column], dim=-1).softmax(dim=-1)[..., :-1]",
        "check_sink_softmax",
        "pass",
    ),
    "my_sink_softmax_renormalised": (
        "def my_sink_softmax_renormalised(scores, sink):\n"
        "    column = sink.view(-1, 1, 1).expand(*scores.shape[:-1], 1)\n"
        "    weights = torch.cat([scores, column], dim=-1).softmax(dim=-1)[..., :-1]\n"
        "    return weights / weights.sum(dim=-1, keepdim=True)",
        "check_sink_softmax",
        "wrong",
    ),
    "my_gated_heads": (
        "def my_gated_heads(heads, x, gate_weight):\n    return heads * torch.sigmoid(x @ gate_weight.T)",
        "check_output_gate",
        "pass",
    ),
    "my_gated_heads_untransposed": (
        "def my_gated_heads_untransposed(heads, x, gate_weight):\n    return heads * torch.sigmoid(x @ gate_weight)",
        "check_output_gate",
        "wrong",
    ),
    "my_delta_step": (
        "def my_delta_step(state, k, v, beta, log_alpha=None):\n"
        "    if log_alpha is not None:\n"
        "        state = state * log_alpha.exp()[..., None, None]\n"
        "    recalled = (k[..., None, :] @ state).squeeze(-2)\n"
        "    return state + k[..., :, None] * (beta[..., None] * (v - recalled))[..., None, :]",
        "check_delta_step",
        "pass",
    ),
    "my_delta_step_library": (
        "def my_delta_step_library(state, k, v, beta, log_alpha=None):\n"
        "    from helpers.delta_rule import delta_rule_step\n"
        "    return delta_rule_step(state, k, k, v, beta, log_alpha)[1]",
        "check_delta_step",
        "wrong",
    ),
}


def test_lesson_14s_checks_grade_remotely_with_infinities_and_none_sent_to_the_kernel(tmp_path):
    lesson, cells = [LESSON_14, "import torch"], [LESSON_14, "import torch"]
    for function, (code, check, _) in LESSON_14_ANSWERS.items():
        header, body = code.split("\n", 1)
        lesson += [f"{header}\n    # BEGIN SOLUTION\n{body}\n    # END SOLUTION", f"{check}({function})"]
        cells += [code, f"{check}({function})"]
    write(tmp_path / "notebooks" / "14_sinks.ipynb", lesson)
    submission = write(tmp_path / "submitted" / "mallory" / "14_sinks.ipynb", cells)
    report = checker.run_submission(submission, timeout_s=120, notebooks_dir=tmp_path / "notebooks")
    rows = {row.exercise: row for row in report.results}
    assert report.problem is None, report.problem
    for function, (_, _, status) in LESSON_14_ANSWERS.items():
        assert rows[function].status == status, rows[function]
    assert "each row sums to 1" in rows["my_sink_softmax_renormalised"].message
    assert "untransposed" in rows["my_gated_heads_untransposed"].message
    assert "delta_rule_step" in rows["my_delta_step_library"].message


# Issue 59: answers that zero the modules a check hands them (each scored a pass under `check`, its expected value
# read from the modules after the call), and one that returns float32 where the check fed float64: each refused by
# name. The same lessons' right answers pass.
MODULES = (
    "import torch\n"
    "from course.exercises.lesson02 import check_cross_attention_inputs\n"
    "from course.exercises.lesson05 import check_decoder_layer_forward, check_residual_block\n"
    "from course.exercises.lesson14 import check_sink_softmax"
)
MODULE_ANSWERS = {
    "zeroed_projections": (
        "def zeroed_projections(target, source, q_proj, k_proj, v_proj):\n"
        "    with torch.no_grad():\n"
        "        for proj in (q_proj, k_proj, v_proj):\n"
        "            proj.weight.zero_(); proj.bias.zero_()\n"
        "    d = q_proj.out_features\n"
        "    return target.new_zeros(*target.shape[:2], d), source.new_zeros(*source.shape[:2], d), "
        "source.new_zeros(*source.shape[:2], d)",
        "check_cross_attention_inputs",
        "the module `q_proj`",
    ),
    "zeroed_block": (
        "def zeroed_block(x, sublayer, norm, norm_first):\n"
        "    with torch.no_grad():\n"
        "        norm.weight.zero_(); norm.bias.zero_(); sublayer.weight.zero_()\n"
        "    return x if norm_first else torch.zeros_like(x)",
        "check_residual_block",
        "the module `sublayer`",
    ),
    "zeroed_last_norm": (
        "def zeroed_last_norm(layer, tgt, memory, tgt_mask, memory_key_padding_mask):\n"
        "    layer.self_attn(tgt, tgt, tgt); layer.multihead_attn(tgt, memory, memory); layer.linear1(tgt)\n"
        "    with torch.no_grad():\n"
        "        layer.norm3.weight.zero_(); layer.norm3.bias.zero_()\n"
        "    return torch.zeros_like(tgt)",
        "check_decoder_layer_forward",
        "the module `layer`",
    ),
    "sink_softmax_in_float32": (
        "def sink_softmax_in_float32(scores, sink):\n"
        "    column = sink.view(-1, 1, 1).expand(*scores.shape[:-1], 1)\n"
        "    return torch.cat([scores, column], dim=-1).softmax(dim=-1)[..., :-1].float()",
        "check_sink_softmax",
        "the dtype changed",
    ),
    "right_projections": (
        "def right_projections(target, source, q_proj, k_proj, v_proj):\n"
        "    return q_proj(target), k_proj(source), v_proj(source)",
        "check_cross_attention_inputs",
        None,
    ),
    "right_block": (
        "def right_block(x, sublayer, norm, norm_first):\n"
        "    return x + sublayer(norm(x)) if norm_first else norm(x + sublayer(x))",
        "check_residual_block",
        None,
    ),
}


def test_answers_that_change_the_checks_modules_or_the_dtype_are_refused_by_check(tmp_path):
    lesson, cells = [MODULES], [MODULES]
    for function, (code, check, _) in MODULE_ANSWERS.items():
        header = code.split("\n", 1)[0]
        lesson += [
            f"{header}\n    # BEGIN SOLUTION\n    raise NotImplementedError()\n    # END SOLUTION",
            f"{check}({function})",
        ]
        cells += [code, f"{check}({function})"]
    write(tmp_path / "notebooks" / "05_modules.ipynb", lesson)
    submission = write(tmp_path / "submitted" / "mallory" / "05_modules.ipynb", cells)
    report = checker.run_submission(submission, timeout_s=120, notebooks_dir=tmp_path / "notebooks")
    rows = {row.exercise: row for row in report.results}
    assert report.problem is None, report.problem
    for function, (_, _, named) in MODULE_ANSWERS.items():
        row = rows[function]
        if named is None:
            assert (row.status, row.points) == ("pass", 1), row
        else:
            assert (row.status, row.points) == ("wrong", 0) and named in row.message, row
