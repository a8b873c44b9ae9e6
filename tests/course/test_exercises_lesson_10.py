"""Lesson 10's exercise checks: a right answer passes, each usual mistake gets its own hint."""

from __future__ import annotations

import torch

from course.exercises import check_induction_score as exported
from course.exercises.feedback import CHECK_BUG
from course.exercises.lesson10 import (
    check_induction_score,
    check_patch_hook,
    check_repeated_batch,
    reference_induction_score,
    reference_patch_hook,
    reference_repeated_batch,
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
def make_batch(fixed_length=False, whole_copy=False, late=False, fixed_start=False, exclusive_high=False, gap=0):
    def batch(N, T, V, low, high, generator):
        ids = torch.randint(V, (N, T), generator=generator)
        predictable = torch.zeros(N, T, dtype=torch.bool)
        for n in range(N):
            top = high if exclusive_high else high + 1
            L = high if fixed_length else int(torch.randint(low, top, (1,), generator=generator))
            s = 0 if fixed_start else int(torch.randint(0, T - 2 * L - gap + 1, (1,), generator=generator))
            second = s + L + gap
            ids[n, second : second + L] = ids[n, s : s + L]
            first, last = second, second + L - 1  # the right mask: [second, second + L - 2]
            if late:
                first += 1
            elif not whole_copy:
                last -= 1
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
    assert "right after the first" in hint(check_repeated_batch, make_batch(gap=3))
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
            elif kind == "in_place":
                args[0][..., head * d : (head + 1) * d] = source[..., head * d : (head + 1) * d]
                return None
            else:
                x[..., head * d : (head + 1) * d] = source[..., head * d : (head + 1) * d]
            return (x,)

        return hook

    return factory


def test_patch_hook_passes_the_right_answer_in_place_too_and_really_patches_a_model():
    assert check_patch_hook(make_hook()).passed
    assert check_patch_hook(make_hook("in_place")).passed
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
