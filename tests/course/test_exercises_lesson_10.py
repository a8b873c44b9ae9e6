"""Lesson 10's exercise checks: a right answer passes, each usual mistake gets its own hint."""

from __future__ import annotations

import torch
from conftest import learners_copy

from course.exercises import check_induction_score as exported
from course.exercises.feedback import CHECK_BUG
from course.exercises.lesson10 import (
    _targets,
    check_induction_score,
    check_patch_hook,
    check_repeated_batch,
    reference_induction_score,
    reference_patch_hook,
    reference_repeated_batch,
)

# The references as a learner's own code: the checks refuse an answer that calls the course's reference_*
# itself, and these tests use them as the right computation (and build mistakes from them).
reference_induction_score, reference_patch_hook, reference_repeated_batch = (
    learners_copy(reference_induction_score),
    learners_copy(reference_patch_hook),
    learners_copy(reference_repeated_batch),
)


def hint(check, fn) -> str:
    verdict = check(fn)
    assert verdict.status == "wrong", verdict
    assert CHECK_BUG not in verdict.message
    return verdict.message


def not_attempted(*args):
    raise NotImplementedError()


# --- exercise 1: the induction score ------------------------------------------------------------
def loop_score(shift: int, over_all_queries: bool = False, per_sequence: bool = False):
    """A learner's loop version: keys j < i with ids[j - shift] == ids[i]; shift 1 is right."""

    def score(weights, ids):
        N, h, T, _ = weights.shape
        sums, counts = [], []
        for n in range(N):
            total, count = torch.zeros(h), 0
            for i in range(T):
                keys = [j for j in range(i) if 0 <= j - shift < T and ids[n, j - shift] == ids[n, i]]
                if keys:
                    total = total + weights[n, :, i, keys].sum(-1)
                    count += 1
                elif over_all_queries:
                    count += 1
            sums.append(total)
            counts.append(count)
        if per_sequence:
            return torch.stack([s / c for s, c in zip(sums, counts, strict=True)]).mean(0)
        if over_all_queries:
            return sum(sums) / (N * T)
        return sum(sums) / sum(counts)

    return score


def test_induction_score_passes_the_right_answer_a_loop_too_and_is_exported():
    assert check_induction_score(reference_induction_score).passed
    assert check_induction_score(loop_score(1)).passed
    assert exported is check_induction_score


def test_induction_score_mistakes_get_specific_hints():
    assert "duplicate-token score" in hint(check_induction_score, loop_score(0))
    assert "the other way" in hint(check_induction_score, loop_score(-1))
    assert "no earlier occurrence" in hint(check_induction_score, loop_score(1, over_all_queries=True))
    assert "each sequence is averaged first" in hint(check_induction_score, loop_score(1, per_sequence=True))
    assert "keep the heads apart" in hint(
        check_induction_score, lambda w, ids: reference_induction_score(w, ids).mean()
    )
    assert "average over the sequences" in hint(
        check_induction_score,
        lambda w, ids: torch.stack([reference_induction_score(w[n : n + 1], ids[n : n + 1]) for n in range(len(ids))]),
    )
    assert "Expected" in hint(check_induction_score, lambda w, ids: reference_induction_score(w, ids) + 0.1)


def test_induction_score_not_attempted_and_errors():
    assert check_induction_score(not_attempted).status == "not attempted"
    message = hint(check_induction_score, lambda w, ids: w[5])
    assert message.startswith("your code raised IndexError")


# --- exercise 2: a repeated batch without the shortcut ------------------------------------------
def make_batch(
    fixed_length=False,
    whole_copy=False,
    late=False,
    fixed_start=False,
    exclusive_high=False,
    gap=0,
    early=False,
    on_first=False,
    short=False,
    last_start=True,
    low_token=0,
):
    def batch(N, T, V, low, high, generator):
        ids = torch.randint(low_token, V, (N, T), generator=generator)
        predictable = torch.zeros(N, T, dtype=torch.bool)
        for n in range(N):
            top = high if exclusive_high else high + 1
            L = high if fixed_length else int(torch.randint(low, top, (1,), generator=generator))
            top = T - 2 * L - gap + (1 if last_start else 0)
            s = 0 if fixed_start else int(torch.randint(0, top, (1,), generator=generator))
            second = s + L + gap
            copied = L - 1 if short else L
            ids[n, second : second + copied] = ids[n, s : s + copied]
            first, last = second, second + L - 1  # the right mask: [second, second + L - 2]
            if late:
                first += 1
            elif not whole_copy:
                last -= 1
            if early:
                first, last = first - 1, last - 1
            if on_first:
                first, last = first - L, last - L
            predictable[n, first : last + 1] = True
        return ids, predictable

    return batch


def test_repeated_batch_passes_the_right_answer_and_the_helper():
    assert check_repeated_batch(make_batch()).passed
    assert check_repeated_batch(reference_repeated_batch).passed


def test_repeated_batch_mistakes_get_specific_hints():
    assert "same length" in hint(check_repeated_batch, make_batch(fixed_length=True))
    assert "covers the whole second copy" in hint(check_repeated_batch, make_batch(whole_copy=True))
    assert "one position late" in hint(check_repeated_batch, make_batch(late=True))
    assert "same place" in hint(check_repeated_batch, make_batch(fixed_start=True))
    assert "upper bound is exclusive" in hint(check_repeated_batch, make_batch(exclusive_high=True))
    assert "there are 3 tokens between the first copy and the second" in hint(check_repeated_batch, make_batch(gap=3))
    assert "two tensors" in hint(check_repeated_batch, lambda *args: make_batch()(*args)[0])
    assert "boolean mask" in hint(
        check_repeated_batch, lambda *args: (make_batch()(*args)[0], make_batch()(*args)[1].long())
    )


def test_repeated_batch_not_attempted():
    assert check_repeated_batch(not_attempted).status == "not attempted"


# --- exercise 3: a hook that patches one head ---------------------------------------------------
def make_hook(kind="right"):
    def factory(head, num_heads, source):
        def hook(module, args):
            x = args[0].clone()
            d = x.size(-1) // num_heads
            if kind == "all":
                return (source.clone(),)
            if kind == "zero":
                x[..., head * d : (head + 1) * d] = 0
            elif kind == "interleaved":
                N, T, _ = x.shape
                view, src = x.view(N, T, d, num_heads), source.view(N, T, d, num_heads)
                view[..., head] = src[..., head]
            elif kind == "heads_for_size":
                x[..., head * num_heads : (head + 1) * num_heads] = source[
                    ..., head * num_heads : (head + 1) * num_heads
                ]
            elif kind == "off_by_one":
                x[..., (head - 1) * d : head * d] = source[..., (head - 1) * d : head * d]
            elif kind == "unchanged":
                pass
            elif kind in ("in_place", "in_place_returned"):
                args[0][..., head * d : (head + 1) * d] = source[..., head * d : (head + 1) * d]
                return (args[0],) if kind == "in_place_returned" else None
            elif kind == "numpy":
                x[..., head * d : (head + 1) * d] = source[..., head * d : (head + 1) * d]
                return (x.numpy(),)
            elif kind == "list":
                x[..., head * d : (head + 1) * d] = source[..., head * d : (head + 1) * d]
                return [x]
            else:
                x[..., head * d : (head + 1) * d] = source[..., head * d : (head + 1) * d]
            return (x,)

        return hook

    return factory


def test_patch_hook_passes_the_right_answer_and_really_patches_a_model():
    assert check_patch_hook(make_hook()).passed
    assert check_patch_hook(reference_patch_hook).passed
    # The reference hook on a real projection: the output changes only by that head's columns' contribution.
    projection = torch.nn.Linear(8, 3)
    run, source = torch.randn(2, 4, 8), torch.randn(2, 4, 8)
    handle = projection.register_forward_pre_hook(reference_patch_hook(1, 2, source))
    patched = projection(run)
    handle.remove()
    expected = projection(torch.cat([run[..., :4], source[..., 4:]], dim=-1))
    torch.testing.assert_close(patched, expected)


def test_patch_hook_mistakes_get_specific_hints():
    assert "every head was replaced" in hint(check_patch_hook, make_hook("all"))
    assert "zeroed, not patched" in hint(check_patch_hook, make_hook("zero"))
    assert "interleaved" in hint(check_patch_hook, make_hook("interleaved"))
    assert "uses num_heads where the head size belongs" in hint(check_patch_hook, make_hook("heads_for_size"))
    assert "off by one head" in hint(check_patch_hook, make_hook("off_by_one"))
    assert "unchanged" in hint(check_patch_hook, make_hook("unchanged"))
    assert "should return a function" in hint(check_patch_hook, lambda head, h, source: None)


def test_patch_hook_not_attempted():
    assert check_patch_hook(not_attempted).status == "not attempted"


# --- the lesson and its benchmark train the same models -------------------------------------------
def test_the_benchmark_measures_the_lessons_settings():
    import importlib.util
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("lesson10_seeds", root / "benchmarks" / "lesson10_seeds.py")
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    cells = json.loads((root / "notebooks" / "10_induction_heads.ipynb").read_text(encoding="utf-8"))["cells"]
    source = "\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "code")
    c = benchmark.LESSON
    assert f"V, T, E, H = {c['vocab_size']}, {c['seq_len']}, {c['embed_dim']}, {c['num_heads']}" in source
    assert f"LENGTHS = ({c['lengths'][0]}, {c['lengths'][1]})" in source
    learning_rate = f"{c['lr']:.0e}".replace("e-0", "e-")
    assert f"LR, STEPS, TRAP_STEPS = {learning_rate}, {c['steps']}, {c['trap_steps']}" in source
    assert c["steps"] == c["control_steps"] and f"lengths=({c['trap_length']}, {c['trap_length']})" in source
    assert source.count("repeated_only=True") == 3 and c["repeated_only"]
    # One SEED, from which every generator derives as the benchmark derives them (its "seeding" scheme).
    assert c["seeding"] == "one SEED" and 'SEED = int(os.environ.get("LESSON10_SEED", "0"))' in source
    for derived in ("manual_seed(1000 + SEED)", "manual_seed(1 + SEED)", "manual_seed(7 + SEED)"):
        assert derived in source, derived
    assert source.count("torch.manual_seed(SEED)") == 4 and source.count("seed=SEED") == 3
    assert "manual_seed(0)" not in source and "seed=0" not in source


# --- issue 35: answers that used to pass ---------------------------------------------------------
def test_induction_score_tells_j_up_to_i_and_no_restriction_from_the_averaging():
    def restricted(keys):
        def score(weights, ids):
            targets = _targets(ids, 1, keys)
            has = targets.any(-1)
            per_query = (weights * targets[:, None]).sum(-1)
            return (per_query * has[:, None]).sum(dim=(0, 2)) / has.sum()

        return score

    assert check_induction_score(restricted("earlier")).passed  # the same code with j < i is right
    assert "the key j = i counts too" in hint(check_induction_score, restricted("up to i"))
    message = hint(check_induction_score, restricted("all"))
    assert "not limited to j < i" in message and "averaged" not in message

    # The loop version with j <= i: the same hint.
    def loop_up_to_i(weights, ids):
        N, h, T, _ = weights.shape
        total, count = torch.zeros(h), 0
        for n in range(N):
            for i in range(T):
                keys = [j for j in range(1, i + 1) if ids[n, j - 1] == ids[n, i]]
                if keys:
                    total, count = total + weights[n, :, i, keys].sum(-1), count + 1
        return total / count

    assert "the key j = i counts too" in hint(check_induction_score, loop_up_to_i)


def test_induction_score_refuses_numpy():
    assert "returned a numpy array" in hint(
        check_induction_score, lambda w, ids: reference_induction_score(w, ids).numpy()
    )


def ignoring_generator(seed_itself: bool):
    def batch(N, T, V, low, high, generator):
        if seed_itself:
            torch.manual_seed(0)  # the same numbers for any generator
        return reference_repeated_batch(N, T, V, low, high, None)  # draws from torch's global stream

    return batch


def test_repeated_batch_refuses_an_ignored_generator():
    assert "two generators in the same state" in hint(check_repeated_batch, ignoring_generator(False))
    assert "seeded differently" in hint(check_repeated_batch, ignoring_generator(True))


def test_repeated_batch_every_place_and_every_token():
    assert "no second copy ends at the row's last position" in hint(check_repeated_batch, make_batch(last_start=False))
    message = hint(check_repeated_batch, make_batch(low_token=1))
    assert "token 0 never appears" in message


def test_repeated_batch_row_mistakes_get_their_own_hints():
    assert "one position early" in hint(check_repeated_batch, make_batch(early=True))
    assert "marks the first copy" in hint(check_repeated_batch, make_batch(on_first=True))
    assert "there is 1 token between" in hint(check_repeated_batch, make_batch(gap=1))
    assert "one token short" in hint(check_repeated_batch, make_batch(short=True))


def test_patch_hook_refuses_numpy_in_place_edits_and_a_list():
    assert "numpy array (item 0 of the tuple" in hint(check_patch_hook, make_hook("numpy"))
    assert "changed its input `args[0]` in place" in hint(check_patch_hook, make_hook("in_place"))
    assert "changed its input `args[0]` in place" in hint(check_patch_hook, make_hook("in_place_returned"))
    assert "only a tuple" in hint(check_patch_hook, make_hook("list"))
    assert "returned None" in hint(check_patch_hook, lambda head, h, source: lambda module, args: None)


def _solution_lines(notebook: str) -> list[str]:
    """The code lines between # BEGIN SOLUTION and # END SOLUTION, comments stripped, trivial ones left out."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    lines, inside = [], False
    for cell in json.loads((root / "notebooks" / notebook).read_text(encoding="utf-8"))["cells"]:
        for line in "".join(cell["source"]).splitlines():
            inside = (inside or "BEGIN SOLUTION" in line) and "END SOLUTION" not in line
            code = line.split("  #")[0].strip()
            if inside and "SOLUTION" not in line and len(code) >= 10:
                lines.append(code)
    return lines


def _message_strings(module) -> list[str]:
    """Every string constant in ``module``'s source (an f-string's constant pieces, each on its own)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(module))
    return [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def test_no_hint_gives_the_solution_away():
    import course.exercises.lesson10 as checks

    lines = _solution_lines("10_induction_heads.ipynb")
    assert len(lines) >= 10, lines  # the three solutions were found
    for text in _message_strings(checks):
        for line in lines:
            assert line not in text, (line, text)
