"""Lesson 12's exercise checks: the reference answers pass (and agree with helpers.analysis on a small GPT), an
untouched stub is "not attempted", every typical mistake gets the hint that names it, and the shared policy (numpy,
inputs changed in place, errors raised) reaches these checks too."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch
from conftest import assert_hint, learners_copy, not_attempted
from solution_text import MIN_CHARS, _expressions, _statements, squeeze
from test_hints_give_nothing_away import shown_strings

import course.exercises
from course.exercises import lesson12
from course.exercises.feedback import CHECK_BUG
from course.exercises.lesson12 import (
    check_head_attribution,
    check_logit_difference,
    check_logit_lens,
    reference_head_attribution,
    reference_logit_difference,
    reference_logit_lens,
)
from helpers.analysis.attribution import direct_logit_attribution, logit_lens, residual_stream
from helpers.analysis.circuits import record_head_outputs
from helpers.analysis.ioi import IOIBatch
from helpers.gpt import GPT, GPTConfig

# The references as a learner's own code: the checks refuse an answer that calls the course's reference_*
# itself, and these tests use them as the right computation (and build mistakes from them).
reference_head_attribution, reference_logit_difference, reference_logit_lens = (
    learners_copy(reference_head_attribution),
    learners_copy(reference_logit_difference),
    learners_copy(reference_logit_lens),
)


def _pick(table, io, s):
    """A learner's pairing: each prompt's row read at its own two names."""
    return torch.stack([table[n, io[n]] - table[n, s[n]] for n in range(len(io))])


def _rms(x, eps):
    return 1 / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


# ---------------------------------------------------------------------------------------------
# Exercise 1: the logit difference
# ---------------------------------------------------------------------------------------------
def test_the_reference_logit_difference_passes_log_softmax_too_and_a_stub_is_not_attempted():
    assert check_logit_difference(reference_logit_difference).passed
    assert check_logit_difference(lambda logits, io, s: _pick(logits[:, -1], io, s)).passed
    verdict = check_logit_difference(lambda logits, io, s: _pick(torch.log_softmax(logits[:, -1], -1), io, s))
    assert verdict.passed and "normaliser" in verdict.message, verdict
    assert check_logit_difference(not_attempted).status == "not attempted"
    assert course.exercises.check_logit_difference is check_logit_difference


@pytest.mark.parametrize(
    "mistake, fragments",
    [
        (lambda logits, io, s: _pick(logits[:, -1], s, io), ["names are swapped", "logit(S) − logit(IO)"]),
        (lambda logits, io, s: _pick(logits[:, 0], io, s), ["first position"]),
        (lambda logits, io, s: _pick(logits[:, -2], io, s), ["one position before the last"]),
        (lambda logits, io, s: _pick(logits.mean(1), io, s), ["averaged over the positions"]),
        (lambda logits, io, s: _pick(logits[:, -1].softmax(-1), io, s), ["probabilities (a softmax)"]),
        (lambda logits, io, s: torch.stack([logits[n, -1, io[n]] for n in range(len(io))]), ["logit(IO) alone"]),
        (lambda logits, io, s: _pick(logits[:, -1], io, io), ["every difference is 0"]),
        (lambda logits, io, s: _pick(logits[:, -1], io, s).mean(), ["mean over the prompts"]),
        (lambda logits, io, s: logits[:, -1, io] - logits[:, -1, s], ["(N, N) = (5, 5) table", "own two names"]),
        (lambda logits, io, s: logits[:, :, io].diagonal(dim1=0, dim2=2).T - logits[:, :, s].diagonal(dim1=0, dim2=2).T,
         ["prompt and position, (N, T)"]),
        (lambda logits, io, s: _pick(logits[:, -1], io, s) + 0.5, ["Expected ["]),
        (lambda logits, io, s: _pick(logits[:, -1], io, s).tolist(), ["return one tensor (N,)", "list of 5 float"]),
        (lambda logits, io, s: list(_pick(logits[:, -1], io, s)), ["return one tensor (N,)", "list of 5 Tensor"]),
    ],
)  # fmt: skip
def test_each_logit_difference_mistake_is_named(mistake, fragments):
    assert_hint(check_logit_difference(mistake), *fragments)


# ---------------------------------------------------------------------------------------------
# Exercise 2: the logit lens
# ---------------------------------------------------------------------------------------------
def _lens(read):
    """A learner's lens: ``read(residual (N, E), norm, last residual)`` gives what the output layer sees."""

    def logit_lens(residuals, norm, unembedding, io, s):
        return torch.stack([_pick(read(r, norm, residuals[-1]) @ unembedding.T, io, s).mean() for r in residuals])

    return logit_lens


def _per_prompt(residuals, norm, unembedding, io, s):
    return torch.stack([_pick(norm(r) @ unembedding.T, io, s) for r in residuals])


def _crossed(residuals, norm, unembedding, io, s):
    """A learner's lens that reads every prompt at every prompt's names: (n_layers + 1, N, N)."""
    logits = norm(residuals) @ unembedding.T
    return logits[:, :, io] - logits[:, :, s]


def test_the_reference_logit_lens_passes_and_a_stub_is_not_attempted():
    assert check_logit_lens(reference_logit_lens).passed
    assert check_logit_lens(_lens(lambda r, norm, last: norm(r))).passed
    assert check_logit_lens(not_attempted).status == "not attempted"


def _edits_the_norm(residuals, norm, unembedding, io, s):
    with torch.no_grad():
        norm.weight.fill_(1.0)
    return reference_logit_lens(residuals, norm, unembedding, io, s)


@pytest.mark.parametrize(
    "mistake, fragments",
    [
        (_lens(lambda r, norm, last: r), ["without the final norm"]),
        (_lens(lambda r, norm, last: r * _rms(last, norm.eps) * norm.weight), ["from the last residual", "OWN"]),
        (_lens(lambda r, norm, last: r * _rms(r, norm.eps)), ["learned weight is left out"]),
        (lambda r, norm, u, io, s: reference_logit_lens(r, norm, u, s, io), ["names are swapped"]),
        (_per_prompt, ["per residual and prompt, (4, 5)", "average over the prompts"]),
        (lambda *a: _per_prompt(*a).T, ["per residual and prompt, (5, 4)"]),
        (lambda *a: reference_logit_lens(*a)[-1], ["the last residual's", "EVERY residual"]),
        (lambda *a: _crossed(*a).mean(-1), ["(N, N) = (5, 5) table", "own two names", "one axis"]),
        (lambda *a: _crossed(*a).mean(-2).T, ["(N, N) = (5, 5) table", "own two names", "one axis"]),
        (lambda *a: _crossed(*a).mean((-1, -2)), ["(N, N) = (5, 5) table", "own two names", "whole table"]),
        (lambda *a: _per_prompt(*a).sum(1), ["summed over the prompts"]),
        (lambda r, norm, u, io, s: (norm(r.mean(1)) @ u.T)[:, io].mean(1) - (norm(r.mean(1)) @ u.T)[:, s].mean(1),
         ["averaged before the norm", "not linear"]),
        (lambda r, norm, u, io, s: torch.stack([_pick((norm(x) @ u.T).softmax(-1), io, s).mean() for x in r]),
         ["probabilities (a softmax over the vocabulary)"]),
        (lambda *a: reference_logit_lens(*a)[-1].repeat(4), ["the same number, the last residual's"]),
        (_edits_the_norm, ["the module `norm`", "`norm.weight` holds other numbers", "must not change it"]),
        (lambda r, norm, u, io, s: (norm(r) @ u)[..., 0], ["your code raised RuntimeError"]),
        (lambda *a: reference_logit_lens(*a).mean(), ["got a single number"]),
        (_lens(lambda r, norm, last: norm(norm(r))), ["applied twice"]),
        (lambda r, norm, u, io, s: ((r * norm(u[io] - u[s])).sum(-1)).mean(-1), ["applied to the direction"]),
        (lambda r, norm, u, io, s: ((norm(r) * norm(u[io] - u[s])).sum(-1)).mean(-1), ["applied to the direction"]),
        (lambda *a: reference_logit_lens(*a).tolist(), ["return one tensor (n_layers + 1,)"]),
        (lambda r, norm, u, io, s: reference_logit_lens(r.view(31, -1, 576), norm, u, io, s),
         ["your code raised RuntimeError", "instead of writing numbers in"]),
        (lambda r, norm, u, io, s: torch.stack([reference_logit_lens(r[i : i + 1], norm, u, io, s)[0]
                                                for i in range(31)]),  # SmolLM2's 30 layers + 1 written in
         ["your code raised IndexError", "a count written into it"]),
        (lambda r, *a: reference_logit_lens(r[1:], *a), ["first entry is missing", "embedding"]),
        (lambda r, *a: reference_logit_lens(r[:-1], *a), ["last entry is missing", "after the last block"]),
        (_lens(lambda r, norm, last: torch.nn.functional.layer_norm(r, (r.size(-1),)) * norm.weight), ["LayerNorm"]),
        (_lens(lambda r, norm, last: (r - r.mean(-1, keepdim=True)) / r.std(-1, keepdim=True) * norm.weight),
         ["LayerNorm"]),
        (lambda r, norm, u, io, s: ((r * _rms(r.transpose(0, -1), norm.eps).transpose(0, -1) * norm.weight)
                                    * (u[io] - u[s])).sum(-1).mean(-1), ["across the residuals or across the prompts"]),
        (_lens(lambda r, norm, last: r * _rms(r.T, norm.eps).T * norm.weight),  # one residual's: over its N prompts
         ["across the residuals or across the prompts"]),
        (lambda r, norm, u, io, s: ((norm(r) * (u[io] - u[s])).sum(-1)).median(-1).values, ["median"]),
        (lambda r, norm, u, io, s: ((norm(r) * (u[io] - u[s])).sum(-1)).abs().mean(-1), ["absolute value"]),
        (lambda r, *a: reference_logit_lens(r.cumsum(0), *a), ["running sum"]),
    ],
)  # fmt: skip
def test_each_logit_lens_mistake_is_named(mistake, fragments):
    assert_hint(check_logit_lens(mistake), *fragments)


def test_a_crossed_lens_is_not_told_to_average_over_the_prompts():
    """Cross-indexed names averaged over one axis are (n_layers + 1, N), as an unaveraged lens is: that hint's "average
    over the prompts" would send the learner to average a wrong table."""
    verdict = check_logit_lens(lambda *a: _crossed(*a).mean(-1))
    assert not verdict.passed and "average over the prompts" not in verdict.message, verdict.message
    assert "average over the prompts" in check_logit_lens(_per_prompt).message  # the unaveraged lens keeps it


# ---------------------------------------------------------------------------------------------
# Exercise 3: each head's direct push
# ---------------------------------------------------------------------------------------------
def _heads(write, scale_of, with_weight=True, sign=1.0, over_prompts="mean"):
    """A learner's loop over heads: ``write(out_weight, o_k (N, d), k, h, d)`` is head k's write (N, E);
    ``scale_of(written, all_writes, final_residual, eps)`` the norm's 1/RMS (N, 1), or None for no norm."""

    def head_attribution(head_outputs, out_weight, final_residual, norm, direction):
        _, h, d = head_outputs.shape
        writes = [write(out_weight, head_outputs[:, k], k, h, d) for k in range(h)]
        pushes = []
        for written in writes:
            scale = scale_of(written, writes, final_residual, norm.eps)
            seen = written if scale is None else written * scale * (norm.weight if with_weight else 1)
            push = sign * (seen * direction).sum(-1)
            pushes.append(push.mean() if over_prompts == "mean" else push.sum() if over_prompts == "sum" else push)
        return torch.stack(pushes)

    return head_attribution


def columns(w, o, k, h, d):
    return o @ w[:, k * d : (k + 1) * d].T


def rows(w, o, k, h, d):
    return o @ w[k * d : (k + 1) * d, :]


def interleaved(w, o, k, h, d):
    return o @ w[:, k::h].T


def full(written, writes, final_residual, eps):
    return _rms(final_residual, eps)


def _heads_normed_twice(head_outputs, out_weight, final_residual, norm, direction):
    h, d = head_outputs.shape[1:]
    writes = torch.einsum("nhd,ehd->nhe", head_outputs, out_weight.view(-1, h, d))
    return (norm(writes * _rms(final_residual, norm.eps)[:, None] * norm.weight) * direction[:, None]).sum(-1).mean(0)


def _heads_normed_direction(head_outputs, out_weight, final_residual, norm, direction):
    h, d = head_outputs.shape[1:]
    writes = torch.einsum("nhd,ehd->nhe", head_outputs, out_weight.view(-1, h, d))
    return (writes * norm(direction)[:, None]).sum(-1).mean(0)


def _smollm2_sizes(head_outputs, out_weight, final_residual, norm, direction):
    blocks = out_weight.view(576, 9, 64)  # SmolLM2's E, h and d written in
    return reference_head_attribution(head_outputs, blocks.flatten(1), final_residual, norm, direction)


def _smollm2_head_loop(head_outputs, out_weight, final_residual, norm, direction):
    """A loop over SmolLM2's 9 heads written in: it raises on the check's 3."""
    pushes = []
    for k in range(9):
        write = head_outputs[:, k] @ out_weight[:, k * 64 : (k + 1) * 64].T
        pushes.append((write * _rms(final_residual, norm.eps) * norm.weight * direction).sum(-1).mean())
    return torch.stack(pushes)


def _smollm2_head_count(head_outputs, out_weight, final_residual, norm, direction):
    """SmolLM2's 9 heads written in as the loop's count, the head size read: it raises on the check's 3 heads."""
    d = head_outputs.size(-1)
    pushes = []
    for k in range(9):
        write = head_outputs[:, k] @ out_weight[:, k * d : (k + 1) * d].T
        pushes.append((write * _rms(final_residual, norm.eps) * norm.weight * direction).sum(-1).mean())
    return torch.stack(pushes)


def _divided_by_weight(head_outputs, out_weight, final_residual, norm, direction):
    h, d = head_outputs.shape[1:]
    writes = torch.einsum("nhd,ehd->nhe", head_outputs, out_weight.view(-1, h, d))
    return (writes * _rms(final_residual, norm.eps)[:, None] / norm.weight * direction[:, None]).sum(-1).mean(0)


def test_the_reference_head_attribution_passes_and_a_stub_is_not_attempted():
    assert check_head_attribution(reference_head_attribution).passed
    assert check_head_attribution(_heads(columns, full)).passed
    assert check_head_attribution(not_attempted).status == "not attempted"


@pytest.mark.parametrize(
    "mistake, fragments",
    [
        (_heads(columns, lambda written, writes, final, eps: _rms(written, eps)), ["each head's own write"]),
        (_heads(columns, lambda *a: None), ["no final norm"]),
        (_heads(columns, full, with_weight=False), ["weight is left out"]),
        (_heads(rows, full), ["ROWS of out_weight", "COLUMNS"]),
        (_heads(interleaved, full), ["interleaved (every h-th column)"]),
        (_heads(columns, full, sign=-1.0), ["sign is flipped"]),
        (_heads(columns, full, over_prompts="sum"), ["summed over the prompts"]),
        (_heads(columns, lambda written, writes, final, eps: _rms(sum(writes), eps)), ["attention output"]),
        (_heads(columns, full, over_prompts="none"), ["per head and prompt, (3, 5)"]),
        (lambda *a: _heads(columns, full, over_prompts="none")(*a).T, ["per head and prompt, (5, 3)"]),
        (lambda *a: reference_head_attribution(*a).sum(), ["heads' pushes added up"]),
        (lambda *a: reference_head_attribution(*a) * 2, ["Expected ["]),
        (_heads(lambda w, o, k, h, d: columns(w, o, (k + 1) % h, h, d), full), ["rolled by one"]),
        (lambda *a: reference_head_attribution(*a).roll(1), ["rolled by one"]),
        (_heads_normed_twice, ["applied again after the frozen scale"]),
        (_heads_normed_direction, ["applied to the direction"]),
        (_smollm2_sizes, ["your code raised RuntimeError", "instead of writing numbers in"]),
        (lambda *a: reference_head_attribution(*a).tolist(), ["return one tensor (h,)"]),
        (_smollm2_head_loop, ["your code raised RuntimeError", "did not fit", "size is written in"]),
        (_smollm2_head_count, ["your code raised IndexError", "a count written into it"]),
        (_heads(columns, lambda written, writes, final, eps: 1 / _rms(final, eps)), ["multiplied instead of divided"]),
        (_heads(columns, lambda written, writes, final, eps: _rms(final, eps).mean()), ["averaged over the prompts"]),
        (
            _heads(columns, lambda written, writes, final, eps: _rms(final + sum(writes), eps)),
            ["added to final_residual"],
        ),
        (_heads(columns, lambda written, writes, final, eps: 1 / final.std(-1, keepdim=True)), ["standard deviation"]),
        (_divided_by_weight, ["weight was divided by"]),
    ],
)
def test_each_head_attribution_mistake_is_named(mistake, fragments):
    assert_hint(check_head_attribution(mistake), *fragments)


# ---------------------------------------------------------------------------------------------
# The references agree with helpers.analysis on a small GPT (grouped-query, rotary, RMSNorm: as SmolLM2 is)
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gpt_and_batch():
    torch.manual_seed(12)
    config = GPTConfig(vocab_size=40, embed_dim=24, num_heads=6, num_kv_heads=2, num_layers=3, ff_dim=32,
                       positions="rotary", norm="rms", feed_forward="swiglu")  # fmt: skip
    model = GPT(config).eval()
    with torch.no_grad():  # a final norm whose weight is not all ones, so that leaving it out would show
        model.norm.weight.uniform_(0.5, 1.5)
    N, T = 6, 7
    ids = torch.randint(0, 40, (N, T), generator=torch.Generator().manual_seed(3))
    io, s = torch.tensor([3, 5, 7, 9, 11, 13]), torch.tensor([5, 3, 9, 7, 13, 11])
    batch = IOIBatch("", [""] * N, ids, ids.clone(), io, s, io.clone(), {})
    return model, batch


def test_the_reference_lens_is_helpers_logit_lens(gpt_and_batch):
    model, batch = gpt_and_batch
    residuals = residual_stream(model, batch.ids)[:, :, -1]  # (n_layers + 1, N, E) at END
    with torch.no_grad():
        ours = reference_logit_lens(residuals, model.norm, model.lm_head.weight, batch.io, batch.s)
        logits = model(batch.ids)
    torch.testing.assert_close(ours, logit_lens(model, batch))
    # its last entry is the model's own mean logit difference
    torch.testing.assert_close(ours[-1], reference_logit_difference(logits, batch.io, batch.s).mean())


def test_the_reference_head_attribution_is_helpers_dla(gpt_and_batch):
    model, batch = gpt_and_batch
    h = model.config.num_heads
    projections = [block.attention.projections.out_proj for block in model.blocks]
    with record_head_outputs(projections, h) as recorded, torch.no_grad():
        model(batch.ids)
    final_residual = residual_stream(model, batch.ids)[-1][:, -1]  # (N, E)
    direction = model.lm_head.weight[batch.io] - model.lm_head.weight[batch.s]
    expected = direct_logit_attribution(model, batch).heads  # (n_layers, h)
    with torch.no_grad():
        ours = torch.stack([
            reference_head_attribution(recorded[layer][:, -1], projection.weight, final_residual, model.norm, direction)
            for layer, projection in enumerate(projections)
        ])  # fmt: skip
    torch.testing.assert_close(ours, expected)
    assert ours.abs().min() > 1e-4  # every head pushes something: a zero everywhere would agree trivially


# ---------------------------------------------------------------------------------------------
# The shared policy, and hints that give no line of the reference answers away
# ---------------------------------------------------------------------------------------------
CHECKS = {
    "logit difference": (check_logit_difference, reference_logit_difference),
    "logit lens": (check_logit_lens, reference_logit_lens),
    "head attribution": (check_head_attribution, reference_head_attribution),
}


@pytest.mark.parametrize("exercise", list(CHECKS))
def test_numpy_in_place_edits_and_errors_are_not_yet(exercise):
    check, right = CHECKS[exercise]
    assert_hint(check(lambda *a: right(*a).numpy()), "returned a numpy array", "torch.Tensor")

    def edits_its_input(*args):
        result = right(*args)
        args[0].add_(1)
        return result

    assert_hint(check(edits_its_input), "changed its input", "in place")

    def raises(*args):
        raise IndexError("index 9 is out of bounds")

    verdict = check(raises)
    assert_hint(verdict, "your code raised IndexError")
    assert CHECK_BUG not in verdict.message


def test_no_hint_writes_out_a_line_of_the_reference_answers():
    """The rule of tests/course/test_hints_give_nothing_away.py, held against the reference_* functions' code until
    the lesson's notebook (and its solution regions) exists."""
    module = Path(lesson12.__file__)
    solutions = set()
    for node in ast.parse(module.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("reference_"):
            code = "\n".join(ast.unparse(statement) for statement in node.body[1:])  # the docstring left out
            solutions |= {squeeze(t) for t in _statements(code) + _expressions(code) if len(squeeze(t)) >= MIN_CHARS}
    assert len(solutions) >= 5, solutions
    leaks = [(text, message[:80]) for message in shown_strings(module) for text in solutions
             if text in squeeze(message)]  # fmt: skip
    assert not leaks, leaks


def test_the_guides_table_quotes_hints_the_checks_give():
    """docs/teaching.md section 16 quotes each hint by a fragment: every fragment is in a message of the checks."""
    guide = (Path(__file__).resolve().parents[2] / "docs" / "teaching.md").read_text(encoding="utf-8")
    section = guide.split("## 16. Lesson 12", 1)[1].split("### Model answers", 1)[0]
    quoted = [q for line in section.splitlines() if line.startswith("| ") for q in re.findall(r'"([^"]+)"', line)]
    shown = " ".join(shown_strings(Path(lesson12.__file__)))  # f-strings' constant parts too
    assert len(quoted) >= 30, quoted
    missing = [q for q in quoted if q not in shown]
    assert not missing, missing
