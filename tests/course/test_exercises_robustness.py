"""Every check of lessons 01-05, 07-15 and 17 survives any answer of the right type, leaves the random stream alone,
and shows its verdict once in a notebook.

"Survives" means: the check returns a verdict that blames the answer (never the check itself, never
"your code raised" for code that raised nothing) and the right answer passes.
"""

from __future__ import annotations

import functools
import importlib
import math
import pkgutil

import pytest
import torch
import torch.nn.functional as F
from conftest import learners_copy

import course.exercises
from course.exercises.feedback import (
    CHECK_BUG,
    LearnerCode,
    Verdict,
    _Wrong,
    as_int,
    call_learner,
    learner_check,
    run_check,
)
from course.exercises.lesson01 import check_one_hot_lookup, check_positional_encoding
from course.exercises.lesson02 import check_cross_attention_inputs, check_linear_projection
from course.exercises.lesson03 import check_attention_weights, check_masked_attention, check_padding_to_attn_mask
from course.exercises.lesson04 import check_merge_heads, check_multi_head_attention, check_split_heads
from course.exercises.lesson05 import check_decoder_layer_forward, check_residual_block
from course.exercises.lesson07 import (
    check_kv_cache_step,
    check_online_softmax_update,
    check_rotary_cache_step,
    check_rotate_pairs,
    check_tiled_attention_update,
)
from course.exercises.lesson08 import (
    check_previous_token_score,
    check_similarity_scores,
    check_stack_qkv,
    reference_previous_token_score,
)
from course.exercises.lesson09 import check_rms_norm, check_swiglu
from course.exercises.lesson10 import (
    check_induction_score,
    check_patch_hook,
    check_repeated_batch,
    reference_induction_score,
    reference_patch_hook,
    reference_repeated_batch,
)
from course.exercises.lesson11 import (
    check_absorbed_weights,
    check_cache_bytes,
    check_cache_entry,
    reference_absorbed_weights,
    reference_cache_bytes,
    reference_cache_entry,
)
from course.exercises.lesson12 import (
    check_head_attribution,
    check_logit_difference,
    check_logit_lens,
    reference_head_attribution,
    reference_logit_difference,
    reference_logit_lens,
)
from course.exercises.lesson13 import (
    check_hybrid_cache_bytes,
    check_rolling_write,
    check_window_mask,
    reference_hybrid_cache_bytes,
    reference_rolling_write,
    reference_window_mask,
)
from course.exercises.lesson14 import (
    check_delta_step,
    check_output_gate,
    check_sink_softmax,
    reference_delta_step,
    reference_sink_softmax,
)
from course.exercises.lesson15 import (
    check_index_scores,
    check_indexer_target,
    check_top_k_keys,
    reference_index_scores,
    reference_indexer_target,
    reference_top_k_keys,
)
from course.exercises.lesson17 import (
    check_lora_forward,
    check_lora_parameter_count,
    check_merge_weight,
    check_new_adapter,
    reference_lora_forward,
    reference_lora_parameter_count,
    reference_merge_weight,
    reference_new_adapter,
)
from helpers.rotary import apply_rotary

# The references as a learner's own code: the checks refuse an answer that calls the course's reference_*
# itself, and these tests use them as the right computation (and build mistakes from them).
(
    reference_previous_token_score,
    reference_induction_score,
    reference_patch_hook,
    reference_repeated_batch,
    reference_absorbed_weights,
    reference_cache_bytes,
    reference_cache_entry,
    reference_head_attribution,
    reference_logit_difference,
    reference_logit_lens,
    reference_hybrid_cache_bytes,
    reference_rolling_write,
    reference_window_mask,
    reference_delta_step,
    reference_sink_softmax,
    reference_top_k_keys,
    reference_index_scores,
    reference_indexer_target,
    reference_new_adapter,
    reference_lora_forward,
    reference_merge_weight,
    reference_lora_parameter_count,
) = (
    learners_copy(reference_previous_token_score),
    learners_copy(reference_induction_score),
    learners_copy(reference_patch_hook),
    learners_copy(reference_repeated_batch),
    learners_copy(reference_absorbed_weights),
    learners_copy(reference_cache_bytes),
    learners_copy(reference_cache_entry),
    learners_copy(reference_head_attribution),
    learners_copy(reference_logit_difference),
    learners_copy(reference_logit_lens),
    learners_copy(reference_hybrid_cache_bytes),
    learners_copy(reference_rolling_write),
    learners_copy(reference_window_mask),
    learners_copy(reference_delta_step),
    learners_copy(reference_sink_softmax),
    learners_copy(reference_top_k_keys),
    learners_copy(reference_index_scores),
    learners_copy(reference_indexer_target),
    learners_copy(reference_new_adapter),
    learners_copy(reference_lora_forward),
    learners_copy(reference_merge_weight),
    learners_copy(reference_lora_parameter_count),
)


def _mha(query, key, value, q_proj, k_proj, v_proj, out_proj, num_heads):
    N, L, E = query.shape
    d = E // num_heads
    q, k, v = (
        p(x).view(N, x.size(1), num_heads, d).transpose(1, 2)
        for p, x in ((q_proj, query), (k_proj, key), (v_proj, value))
    )
    heads = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=-1) @ v
    return out_proj(heads.transpose(1, 2).reshape(N, L, E))


def _decoder(layer, tgt, memory, tgt_mask, memory_key_padding_mask):
    x = layer.norm1(tgt + layer.dropout1(layer.self_attn(tgt, tgt, tgt, attn_mask=tgt_mask, need_weights=False)[0]))
    attended = layer.multihead_attn(x, memory, memory, key_padding_mask=memory_key_padding_mask, need_weights=False)
    x = layer.norm2(x + layer.dropout2(attended[0]))
    return layer.norm3(x + layer.dropout3(layer.linear2(layer.dropout(layer.activation(layer.linear1(x))))))


def _positional_encoding(num_positions, dim):
    angles = torch.arange(num_positions)[:, None] * 10000.0 ** (-torch.arange(0, dim, 2) / dim)
    table = torch.zeros(num_positions, dim)
    table[:, 0::2], table[:, 1::2] = torch.sin(angles), torch.cos(angles)
    return table


def _online(m, s, block):
    new = torch.maximum(m, block.amax(-1))
    return new, s * torch.exp(m - new) + torch.exp(block - new[:, None]).sum(-1)


def _tiled(m, s, out, scores, v):
    new = torch.maximum(m, scores.amax(-1))
    p, r = torch.exp(scores - new[:, None]), torch.exp(m - new)
    return new, s * r + p.sum(-1), out * r[:, None] + p @ v


def _cache_step(q, k_new, v_new, k_cache, v_cache):
    keys, values = torch.cat((k_cache, k_new), dim=2), torch.cat((v_cache, v_new), dim=2)
    return F.scaled_dot_product_attention(q, keys, values), keys, values


def _rotate(x, angles):
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()), -1).flatten(-2)


def _rotary_step(q, k_new, v_new, k_cache, v_cache):
    position = torch.tensor([k_cache.size(-2)])
    return _cache_step(apply_rotary(q, position), apply_rotary(k_new, position), v_new, k_cache, v_cache)


# Each check with one right answer (lesson 08's similarity check and lessons 11 and 13's cache bytes return numbers,
# not tensors: tested apart).
RIGHT = {
    "one-hot look-up": (check_one_hot_lookup, lambda ids, w: F.one_hot(ids, w.shape[0]).to(w.dtype) @ w),
    "positional encoding": (check_positional_encoding, _positional_encoding),
    "linear projection": (check_linear_projection, lambda x, w, b: x @ w.T + b),
    "cross-attention inputs": (check_cross_attention_inputs, lambda t, s, q, k, v: (q(t), k(s), v(s))),
    "attention weights": (
        check_attention_weights,
        lambda q, k: torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1),
    ),
    "masked attention": (
        check_masked_attention,
        lambda q, k, v, m: (
            torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~m, float("-inf")), dim=-1) @ v
        ),
    ),
    "padding mask": (check_padding_to_attn_mask, lambda m: ~m[:, None, :]),
    "split heads": (check_split_heads, lambda x, h: x.unflatten(-1, (h, -1)).transpose(1, 2)),
    "merge heads": (check_merge_heads, lambda x: x.transpose(1, 2).flatten(2)),
    "multi-head attention": (check_multi_head_attention, _mha),
    "residual block": (check_residual_block, lambda x, s, n, first: x + s(n(x)) if first else n(x + s(x))),
    "decoder layer": (check_decoder_layer_forward, _decoder),
    "online softmax update": (check_online_softmax_update, _online),
    "tiled attention update": (check_tiled_attention_update, _tiled),
    "KV cache step": (check_kv_cache_step, _cache_step),
    "rotary rotation": (check_rotate_pairs, _rotate),
    "rotary cache step": (check_rotary_cache_step, _rotary_step),
    "stack q, k, v": (check_stack_qkv, lambda q, k, v, bq, bk, bv: (torch.cat([q, k, v]), torch.cat([bq, bk, bv]))),
    "previous-token score": (check_previous_token_score, reference_previous_token_score),
    "RMSNorm": (check_rms_norm, lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w),
    "SwiGLU": (check_swiglu, lambda x, g, u, d: (F.silu(x @ g.T) * (x @ u.T)) @ d.T),
    "induction score": (check_induction_score, reference_induction_score),
    "absorbed matrices": (check_absorbed_weights, reference_absorbed_weights),
    "latent cache entry": (check_cache_entry, reference_cache_entry),
    "logit difference": (check_logit_difference, reference_logit_difference),
    "logit lens": (check_logit_lens, reference_logit_lens),
    "head attribution": (check_head_attribution, reference_head_attribution),
    "window mask": (check_window_mask, reference_window_mask),
    "rolling write": (check_rolling_write, reference_rolling_write),
    "sink softmax": (check_sink_softmax, reference_sink_softmax),
    "output gate": (check_output_gate, lambda heads, x, w: heads * torch.sigmoid(x @ w.T)),
    "delta step": (check_delta_step, reference_delta_step),
    "top-k keys": (check_top_k_keys, reference_top_k_keys),
    "index scores": (check_index_scores, reference_index_scores),
    "indexer target": (check_indexer_target, reference_indexer_target),
    "new adapter": (check_new_adapter, reference_new_adapter),
    "LoRA forward": (check_lora_forward, reference_lora_forward),
    "merged weight": (check_merge_weight, reference_merge_weight),
}


def _first_tensor(args):
    return next((a for a in args if isinstance(a, torch.Tensor)), torch.ones(2, 3))


def _map(result, change):
    """Apply ``change`` to the tensor (or to each tensor of the tuple) a right answer returned."""
    if isinstance(result, tuple):
        return tuple(change(t) for t in result)
    return change(result)


_ONE_DIMENSIONAL = {
    "online softmax update",
    "previous-token score",
    "induction score",
    "logit difference",
    "logit lens",
    "head attribution",
}

# Odd answers that raise nothing: each check must say what is wrong without crashing.
ODD_ANSWERS = {
    "returns None": lambda right: lambda *a: None,
    "returns a string": lambda right: lambda *a: "attention",
    "returns a float": lambda right: lambda *a: 0.5,
    "returns a dict": lambda right: lambda *a: {"out": _first_tensor(a)},
    "returns a list of numbers": lambda right: lambda *a: [1.0, 2.0, 3.0],
    "returns its first input": lambda right: lambda *a: _first_tensor(a),
    "returns an empty tensor": lambda right: lambda *a: torch.empty(0),
    "returns a 0-dim tensor": lambda right: lambda *a: torch.tensor(1.0),
    "returns a 5-dim tensor": lambda right: lambda *a: torch.ones(1, 1, 1, 1, 1),
    "returns zeros": lambda right: lambda *a: _map(right(*a), torch.zeros_like),
    "returns NaN": lambda right: lambda *a: _map(right(*a), lambda t: torch.full(t.shape, float("nan"))),
    "returns inf": lambda right: lambda *a: _map(right(*a), lambda t: torch.full(t.shape, float("inf"))),
    "returns integers": lambda right: lambda *a: _map(right(*a), lambda t: t.long() + 7),
    "returns complex numbers": lambda right: lambda *a: _map(right(*a), lambda t: t.to(torch.complex64) * 1j),
    "returns the answer transposed": lambda right: lambda *a: _map(right(*a), lambda t: t.mT if t.dim() > 1 else t),
    "returns an extra dimension": lambda right: lambda *a: _map(right(*a), lambda t: t[None]),
    "returns the answer twice in a tuple": lambda right: lambda *a: (right(*a), right(*a)),
    "returns the answer plus a random number": lambda right: (
        lambda *a: _map(right(*a), lambda t: t.float() + torch.randn(()))
    ),
    "returns a sparse tensor": lambda right: lambda *a: _map(right(*a), lambda t: (t.float() + 1).to_sparse()),
    "returns a tensor on the meta device": lambda right: lambda *a: _map(right(*a), lambda t: t.to("meta")),
    "returns the answer in bfloat16 plus one": lambda right: lambda *a: _map(right(*a), lambda t: t.bfloat16() + 1),
    "writes into its inputs, then answers zeros": lambda right: (
        lambda *a: _map(right(*_double_in_place(a)), torch.zeros_like)
    ),
}


def _double_in_place(args):
    """A careless answer that writes into its inputs (tensors, and the weights of modules it is given)."""
    for arg in args:
        if isinstance(arg, torch.Tensor) and arg.is_floating_point():
            arg.mul_(2)
        elif isinstance(arg, torch.nn.Module):
            with torch.no_grad():
                for parameter in arg.parameters():
                    parameter.mul_(2)
    return args


RAISED = {
    "ValueError": ValueError("bad value"),
    "TypeError": TypeError("bad type"),
    "RuntimeError": RuntimeError("shapes do not match"),
    "KeyError": KeyError("q"),
    "ZeroDivisionError": ZeroDivisionError("division by zero"),
}


@pytest.mark.parametrize("odd", list(ODD_ANSWERS))
@pytest.mark.parametrize("exercise", list(RIGHT))
def test_every_check_survives_odd_answers(exercise, odd, capsys):
    check, right = RIGHT[exercise]
    if odd == "returns the answer transposed" and exercise in _ONE_DIMENSIONAL:
        pytest.skip("its answers are 1-D: transposing leaves them right")
    verdict = check(ODD_ANSWERS[odd](right))
    assert isinstance(verdict, Verdict)
    assert verdict.status == "wrong", verdict
    assert CHECK_BUG not in verdict.message, verdict.message
    assert "your code raised" not in verdict.message, verdict.message  # nothing was raised
    assert capsys.readouterr().out.count("[NOT YET]") == 1


@pytest.mark.parametrize("error", list(RAISED))
@pytest.mark.parametrize("exercise", list(RIGHT))
def test_every_check_reports_an_error_the_answer_raised(exercise, error):
    check, _ = RIGHT[exercise]

    def answer(*args):
        raise RAISED[error]

    verdict = check(answer)
    assert verdict.status == "wrong"
    assert CHECK_BUG not in verdict.message, verdict.message
    assert error in verdict.message, verdict.message


@pytest.mark.parametrize("exercise", list(RIGHT))
def test_every_check_passes_its_right_answer(exercise):
    """In the dtype the check fed it; in another, it is refused by name (tests/course/test_checks_refuse_forgeries)."""
    check, right = RIGHT[exercise]
    verdict = check(right)
    assert verdict.passed, verdict


@pytest.mark.parametrize("exercise", list(RIGHT))
def test_checks_leave_the_random_stream_alone(exercise):
    """#13.4: a check, and the learner's code it runs, draw from a forked stream."""
    check, right = RIGHT[exercise]

    def draws_random_numbers(*args):
        torch.randn(5)  # the learner's code may draw random numbers too (dropout, init, ...)
        return right(*args)

    for answer in (right, draws_random_numbers, ODD_ANSWERS["returns zeros"](right)):
        torch.manual_seed(7)
        before = torch.random.get_rng_state()
        check(answer)
        assert torch.equal(torch.random.get_rng_state(), before), f"{exercise} moved the global random stream"


def test_checks_leave_the_random_stream_alone_when_not_attempted():
    def not_attempted(*args):
        raise NotImplementedError()

    for check, _ in RIGHT.values():
        torch.manual_seed(8)
        before = torch.random.get_rng_state()
        assert check(not_attempted).status == "not attempted"
        assert torch.equal(torch.random.get_rng_state(), before)


def test_a_bug_in_a_check_is_not_blamed_on_the_learner():
    from course.exercises.feedback import call_learner, run_check

    # A check body whose own computation fails (no learner code on the way): the check's bug, said so.
    buggy_body = functools.partial(torch.matmul, torch.ones(2, 3), torch.ones(2, 3))
    verdict = run_check("demo", buggy_body)
    assert verdict.status == "wrong" and CHECK_BUG in verdict.message, verdict.message

    # The same error raised inside the learner's function is the learner's.
    def learner(q, k):
        return q @ k

    verdict = run_check("demo", lambda: call_learner(learner, torch.ones(2, 3), torch.ones(2, 3)))
    assert verdict.message.startswith("your code raised RuntimeError"), verdict.message


@pytest.mark.integration  # a kernel: make test, not make unit
def test_a_verdict_shows_once_in_a_notebook():
    """In a notebook a check cell needs no `_ =`: the verdict line appears once; a verdict shown later shows again."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    cells = [
        "import torch\n"
        "from course.exercises.lesson01 import check_positional_encoding\n"
        "def right(p, e):  # written out: the helper itself is a shortcut the check refuses\n"
        "    angle = torch.arange(p)[:, None] * 10000 ** (-torch.arange(0, e, 2) / e)\n"
        "    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)",
        "check_positional_encoding(right)",
        "verdict = check_positional_encoding(lambda p, e: right(p, e) + 1)",
        "verdict",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbclient.NotebookClient(notebook, timeout=120, kernel_name="python3", shutdown_kernel="immediate").execute()

    def shown(cell):
        texts = [o.get("text", "") for o in cell.outputs if o.output_type == "stream"]
        texts += [o["data"].get("text/plain", "") for o in cell.outputs if o.output_type == "execute_result"]
        return "".join(texts)

    assert shown(notebook.cells[1]).count("[PASS]") == 1
    assert "Verdict(" not in shown(notebook.cells[1])
    assert shown(notebook.cells[2]).count("[NOT YET]") == 1
    assert shown(notebook.cells[3]).count("[NOT YET]") == 1


# Every public check calls the learner's code one way only: through call_learner, enforced by @learner_check.
_CHECK_MODULES = sorted(
    info.name for info in pkgutil.iter_modules(course.exercises.__path__) if info.name.startswith("lesson")
)
# Lessons whose checks their own engineers move onto @learner_check (the lead removes these marks after merging).
_NOT_YET_GUARDED: dict[str, str] = {}


def _public_checks():
    for module_name in _CHECK_MODULES:
        module = importlib.import_module(f"course.exercises.{module_name}")
        for name, value in vars(module).items():
            if name.startswith("check_") and callable(value) and value.__module__ == module.__name__:
                marks = []
                if module_name in _NOT_YET_GUARDED:
                    marks = [pytest.mark.xfail(reason=_NOT_YET_GUARDED[module_name], strict=False)]
                yield pytest.param(value, id=f"{module_name}.{name}", marks=marks)


def test_every_lesson_module_is_found():
    assert {"lesson07", "lesson08"} <= set(_CHECK_MODULES), _CHECK_MODULES


# The checks that RIGHT leaves out, each with where its odd answers are tested instead.
TESTED_APART = {
    "check_teacher_forcing": "lesson 06: tests/course/test_translation_exercises.py",
    "check_alignment_accuracy": "lesson 06: tests/course/test_translation_exercises.py",
    "check_similarity_scores": "returns numbers: test_the_similarity_check_survives_odd_answers below",
    "check_layer_mapping": "lesson 09: a name for a name, tests/course/test_exercises_lesson_09.py",
    "check_repeated_batch": "returns a batch of three tensors: test_lesson_10s_other_checks_follow_the_policy_too",
    "check_patch_hook": "returns a hook: test_lesson_10s_other_checks_follow_the_policy_too",
    "check_cache_bytes": "returns an int: the cache-bytes tests below",
    "check_hybrid_cache_bytes": "returns an int: the hybrid cache-bytes tests below",
    "check_lora_parameter_count": "returns an int: the LoRA parameter-count tests below",
    # A right answer there must launch a Triton kernel (torch alone is refused), which this file does not import.
    "check_masked_row_softmax": "lesson 16: Triton kernels, tests/course/test_exercises_lesson_16.py",
    "check_online_attention": "lesson 16: Triton kernels, tests/course/test_exercises_lesson_16.py",
    "check_causal_attention": "lesson 16: Triton kernels, tests/course/test_exercises_lesson_16.py",
}


def test_every_check_of_every_lesson_in_the_registry_is_held_here():
    """A new lesson's checks join RIGHT (or TESTED_APART, saying where), found through course/lessons.py."""
    from course.lessons import LESSONS

    listed = {check.__name__ for check, _ in RIGHT.values()} | set(TESTED_APART)
    missing = []
    for lesson in LESSONS:
        if f"lesson{lesson.number}" in _CHECK_MODULES:
            module = importlib.import_module(f"course.exercises.lesson{lesson.number}")
            missing += [
                f"{module.__name__}.{name}"
                for name, value in vars(module).items()
                if name.startswith("check_")
                and callable(value)
                and value.__module__ == module.__name__
                and name not in listed
            ]
    assert missing == [], f"add each to RIGHT (a right answer) or to TESTED_APART (where it is tested): {missing}"


@pytest.mark.parametrize("check", list(_public_checks()))
def test_every_public_check_calls_the_learner_only_through_call_learner(check):
    assert getattr(check, "__learner_check__", False), f"decorate {check.__name__} with @learner_check"


@learner_check
def _naive_check(answer):
    """A check written carelessly: it calls the learner's function directly, not through call_learner."""
    return run_check("demo", lambda: f"got {answer(torch.ones(2), torch.ones(2)).sum().item():.0f}")


def test_a_direct_call_in_a_guarded_check_still_goes_through_call_learner():
    assert _naive_check(lambda a, b: a + b).passed

    def broken(a, b):
        return a @ torch.ones(3)

    verdict = _naive_check(broken)
    assert verdict.message.startswith("your code raised RuntimeError"), verdict.message
    assert CHECK_BUG not in verdict.message


def test_a_function_with_the_wrong_parameters_is_told_its_signature():
    verdict = _naive_check(lambda a: a)
    assert verdict.status == "wrong"
    assert CHECK_BUG not in verdict.message and "TypeError" not in verdict.message, verdict.message
    assert "with 2 arguments" in verdict.message and "(a)" in verdict.message, verdict.message


def test_a_learner_class_and_its_objects_stay_behind_the_proxy():
    class Broken(torch.nn.Module):
        def forward(self, x):
            raise KeyError("oops")

    @learner_check
    def check(module_class):
        def body():
            module = module_class()
            assert isinstance(module, torch.nn.Module)  # isinstance still sees the learner's class
            module.forward(torch.ones(1))  # a method called directly is guarded too
            return "unreachable"

        return run_check("demo", body)

    verdict = check(Broken)
    assert verdict.message.startswith("your code raised KeyError"), verdict.message


def test_call_learner_accepts_a_proxy_without_wrapping_twice():
    def broken(x):
        raise ValueError("bad")

    verdict = run_check("demo", lambda: call_learner(LearnerCode(broken), 1))
    assert verdict.message == "your code raised ValueError: bad", verdict.message


@pytest.mark.parametrize(
    "odd",
    [None, "0.5", 0.5, (float("nan"), 1.0), (1.0, float("inf")), (torch.ones(2), 1.0), ("a", "b"), (1.0, 2.0, 3.0)],
    ids=repr,
)
def test_the_similarity_check_survives_odd_answers(odd):
    verdict = check_similarity_scores(lambda cosines: odd)
    assert verdict.status == "wrong" and CHECK_BUG not in verdict.message, verdict.message
    assert "your code raised" not in verdict.message, verdict.message


# Lesson 11's cache bytes returns a number (an int), not a tensor: its odd answers are numbers and other things.
@pytest.mark.parametrize(
    "odd",
    [
        None,
        "many",
        0.5,
        float("nan"),
        float("inf"),
        -1,
        0,
        True,
        torch.ones(3),
        torch.tensor(1.5),
        (1, 2),
        [7],
        {"a": 2},
    ],
    ids=repr,
)
def test_the_cache_bytes_check_survives_odd_answers(odd, capsys):
    verdict = check_cache_bytes(lambda kind, n_layers, h, h_kv, d, d_c, d_R: odd)
    assert verdict.status == "wrong" and CHECK_BUG not in verdict.message, verdict.message
    assert "your code raised" not in verdict.message, verdict.message
    assert capsys.readouterr().out.count("[NOT YET]") == 1


@pytest.mark.parametrize("error", list(RAISED))
def test_the_cache_bytes_check_reports_an_error_the_answer_raised(error):
    def answer(kind, n_layers, h, h_kv, d, d_c, d_R):
        raise RAISED[error]

    verdict = check_cache_bytes(answer)
    assert verdict.status == "wrong" and CHECK_BUG not in verdict.message and error in verdict.message, verdict


def test_the_cache_bytes_check_wants_an_int_as_it_wants_no_numpy_and_leaves_the_random_stream_alone():
    """One rule for every type (issue 45): numpy's integers were refused while a float or a one-number tensor of
    the right value passed; now each is told to return an int."""

    def drawing(*args, **kwargs):
        torch.randn(3)  # the learner's code may draw random numbers: the check's fork keeps them from the notebook
        return reference_cache_bytes(*args, **kwargs)

    torch.manual_seed(9)
    before = torch.random.get_rng_state()
    assert check_cache_bytes(drawing).passed
    assert torch.equal(torch.random.get_rng_state(), before)
    for other in (float, torch.tensor):
        verdict = check_cache_bytes(lambda *a, other=other, **k: other(reference_cache_bytes(*a, **k)))
        assert verdict.status == "wrong" and "as an int" in verdict.message, verdict


# Lesson 13's hybrid cache bytes returns an int too, from a model's config: the same odd answers.
@pytest.mark.parametrize(
    "odd",
    [
        None,
        "many",
        0.5,
        float("nan"),
        float("inf"),
        -1,
        0,
        True,
        torch.ones(3),
        torch.tensor(1.5),
        (1, 2),
        [7],
        {"a": 2},
    ],
    ids=repr,
)
def test_the_hybrid_cache_bytes_check_survives_odd_answers(odd, capsys):
    verdict = check_hybrid_cache_bytes(lambda config, T, bytes_per_number=2: odd)
    assert verdict.status == "wrong" and CHECK_BUG not in verdict.message, verdict.message
    assert "your code raised" not in verdict.message, verdict.message
    assert capsys.readouterr().out.count("[NOT YET]") == 1


@pytest.mark.parametrize("error", list(RAISED))
def test_the_hybrid_cache_bytes_check_reports_an_error_the_answer_raised(error):
    def answer(config, T, bytes_per_number=2):
        raise RAISED[error]

    verdict = check_hybrid_cache_bytes(answer)
    assert verdict.status == "wrong" and CHECK_BUG not in verdict.message and error in verdict.message, verdict


def test_the_hybrid_cache_bytes_check_wants_an_int_and_leaves_the_random_stream_alone():
    np = pytest.importorskip("numpy")

    def drawing(*args):
        torch.randn(3)
        return reference_hybrid_cache_bytes(*args)

    torch.manual_seed(9)
    before = torch.random.get_rng_state()
    assert check_hybrid_cache_bytes(drawing).passed
    assert torch.equal(torch.random.get_rng_state(), before)
    for other in (float, torch.tensor, np.int64):
        verdict = check_hybrid_cache_bytes(lambda *a, other=other: other(reference_hybrid_cache_bytes(*a)))
        assert verdict.status == "wrong" and "an int" in verdict.message, verdict


# Lesson 17's count of the parameters LoRA trains returns an int too, from layers' shapes and a rank.
@pytest.mark.parametrize(
    "odd",
    [
        None,
        "many",
        0.5,
        float("nan"),
        float("inf"),
        -1,
        0,
        True,
        torch.ones(3),
        torch.tensor(1.5),
        (1, 2),
        [7],
        {"a": 2},
    ],
    ids=repr,
)
def test_the_lora_parameter_count_check_survives_odd_answers(odd, capsys):
    verdict = check_lora_parameter_count(lambda shapes, rank: odd)
    assert verdict.status == "wrong" and CHECK_BUG not in verdict.message, verdict.message
    assert "your code raised" not in verdict.message, verdict.message
    assert capsys.readouterr().out.count("[NOT YET]") == 1


@pytest.mark.parametrize("error", list(RAISED))
def test_the_lora_parameter_count_check_reports_an_error_the_answer_raised(error):
    def answer(shapes, rank):
        raise RAISED[error]

    verdict = check_lora_parameter_count(answer)
    assert verdict.status == "wrong" and CHECK_BUG not in verdict.message and error in verdict.message, verdict


def test_the_lora_parameter_count_check_wants_an_int_and_leaves_the_random_stream_alone():
    np = pytest.importorskip("numpy")

    def drawing(shapes, rank):
        torch.randn(3)
        return reference_lora_parameter_count(shapes, rank)

    torch.manual_seed(9)
    before = torch.random.get_rng_state()
    assert check_lora_parameter_count(drawing).passed
    assert torch.equal(torch.random.get_rng_state(), before)
    for other in (float, torch.tensor, np.int64):
        verdict = check_lora_parameter_count(lambda *a, other=other: other(reference_lora_parameter_count(*a)))
        assert verdict.status == "wrong" and "an int" in verdict.message, verdict


# --- one policy for every check (issue 35): numpy refused, inputs left alone, the generator used ---------------
def _numpy(result):
    return tuple(t.numpy() for t in result) if isinstance(result, tuple) else result.numpy()


def _edits_its_input(right):
    """The right answer, computed first; then the first tensor argument is changed in place."""

    def answer(*args):
        result = right(*args)
        first = next(a for a in args if isinstance(a, torch.Tensor))
        with torch.no_grad():
            first.logical_not_() if first.dtype == torch.bool else first.add_(1)
        return result

    return answer


@pytest.mark.parametrize("exercise", list(RIGHT))
def test_every_check_refuses_a_numpy_answer(exercise):
    check, right = RIGHT[exercise]
    verdict = check(lambda *a: _numpy(_map(right(*a), lambda t: t.detach())))
    assert verdict.status == "wrong" and "returned a numpy array" in verdict.message, verdict


@pytest.mark.parametrize("exercise", list(RIGHT))
def test_every_check_refuses_an_answer_that_changes_its_input(exercise):
    if exercise in ("positional encoding", "window mask"):
        pytest.skip("its inputs are two numbers, no tensor")
    if exercise == "absorbed matrices":
        pytest.skip("its input is a layer, no tensor")
    if exercise == "new adapter":
        pytest.skip("its inputs are three sizes and a generator, no tensor")
    check, right = RIGHT[exercise]
    verdict = check(_edits_its_input(right))
    assert verdict.status == "wrong" and "in place" in verdict.message, verdict
    assert CHECK_BUG not in verdict.message


def test_lesson_10s_other_checks_follow_the_policy_too():
    def batch_numpy(*args):
        ids, predictable = reference_repeated_batch(*args)
        return ids.numpy(), predictable

    assert "returned a numpy array (item 0" in check_repeated_batch(batch_numpy).message

    def hook_in_place(head, num_heads, source):
        def hook(module, args):
            reference = reference_patch_hook(head, num_heads, source)(module, args)
            args[0].copy_(reference[0])
            return reference

        return hook

    assert "changed its input `args[0]` in place" in check_patch_hook(hook_in_place).message


def _demo_check(function, *inputs):
    return run_check("demo", lambda: f"got {type(call_learner(function, *inputs)).__name__}")


def test_a_generator_must_be_used_and_nothing_else():
    def right(n, generator):
        return torch.randint(10, (n,), generator=generator)

    def global_stream(n, generator):
        return torch.randint(10, (n,))

    def ignored(n, generator):
        return torch.arange(n)

    def makes_an_object(n, generator):
        return object()  # not comparable: not judged

    generator = torch.Generator().manual_seed(3)
    assert _demo_check(right, 20, generator).passed
    assert "two generators in the same state" in _demo_check(global_stream, 20, generator).message
    assert "seeded differently" in _demo_check(ignored, 20, generator).message
    assert _demo_check(makes_an_object, 20, generator).passed
    # The caller's generator moves on as after one call: the repeats use copies.
    generator, once = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    right(20, once)
    assert _demo_check(right, 20, generator).passed
    assert torch.equal(generator.get_state(), once.get_state())


def test_inputs_are_compared_inside_tuples_and_dicts_and_nan_equals_nan():
    x = torch.tensor([1.0, float("nan")])
    assert _demo_check(lambda pair: pair[0] * 2, (x.clone(),)).passed  # NaN is unchanged, not "changed"

    def edits_a_dict(table):
        table["k"].zero_()
        return table["k"]

    assert "changed its input `table['k']` in place" in _demo_check(edits_a_dict, {"k": torch.ones(2)}).message
    assert "input `x` in place" in _demo_check(lambda x: x.mul_(2), torch.ones(2)).message
    assert (
        "input `args[1]` in place" in _demo_check(lambda *args: args[1].add_(1), torch.ones(1), torch.ones(1)).message
    )


def test_the_numpy_rule_names_the_type_the_check_expects():
    """A numpy integer where lesson 11's cache_bytes wants a Python int is told to return an int, not a tensor;
    a check that expects tensors still asks for a tensor, and names a numpy number as a number."""
    np = pytest.importorskip("numpy")
    verdict = check_cache_bytes(lambda *a, **k: np.int64(reference_cache_bytes(*a, **k)))
    assert "returned a numpy number (numpy.int64)" in verdict.message, verdict
    assert "expects an int" in verdict.message and "torch.Tensor" not in verdict.message, verdict
    verdict = check_cache_bytes(lambda *a, **k: np.array(reference_cache_bytes(*a, **k)))
    assert "returned a numpy array" in verdict.message and "expects an int" in verdict.message, verdict
    verdict = check_induction_score(lambda w, ids: reference_induction_score(w, ids).numpy()[0])
    assert "returned a numpy number (numpy.float32)" in verdict.message and "torch.Tensor" in verdict.message

    @learner_check(returns="a string (a parameter's name)")
    def names_check(answer):
        return run_check("demo", lambda: call_learner(answer, 1))

    verdict = names_check(lambda x: (np.str_("w"),))  # inside a tuple, from a check declared to want a string
    assert "numpy value (numpy.str_) (item 0 of the tuple" in verdict.message, verdict
    assert "expects a string (a parameter's name)" in verdict.message, verdict
    assert getattr(names_check, "__learner_check__", False)


def test_numpy_is_found_inside_what_is_returned():
    x = torch.ones(2)
    assert "numpy array:" in _demo_check(lambda t: t.numpy(), x).message
    assert "item 1 of the tuple" in _demo_check(lambda t: (t, t.numpy()), x).message
    assert "item 'a' of the dict" in _demo_check(lambda t: {"a": t.numpy()}, x).message
    assert _demo_check(lambda t: float(t.sum()), x).passed  # a plain number is no numpy array


@pytest.mark.parametrize(
    ("answer", "named"),
    [
        (4096.0, "a float (4096.0)"),
        (torch.tensor(4096), "a tensor (torch.int64, shape ())"),
        (True, "bool (True)"),
        ("4096", "str ('4096')"),
        (None, "NoneType (None)"),
    ],
)
def test_a_count_that_is_not_a_plain_int_is_refused_naming_what_came(answer, named):
    """The one refusal behind lessons 11 and 13's byte counts: what came is named, where and why are the check's."""
    assert as_int(4096, "a number of bytes", "for MHA", "why") == 4096
    with pytest.raises(_Wrong) as refused:
        as_int(answer, "a number of bytes", "for MHA", "a count of bytes is a whole number.")
    assert (
        str(refused.value)
        == f"return a number of bytes as an int, got {named} for MHA: a count of bytes is a whole number."
    )
