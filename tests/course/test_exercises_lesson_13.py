"""Lesson 13's exercise checks: the reference answers pass (and agree with the library they graduate into:
helpers.masks, helpers.kv_cache and a tiny hybrid GPT's rolling cache), an untouched stub is "not attempted", every
typical mistake gets the hint that names it and no other, the library's own functions are refused as shortcuts,
and the shared policy (numpy, inputs changed in place, errors raised) reaches these checks too."""

from __future__ import annotations

import ast
import itertools
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import assert_hint, learners_copy, not_attempted
from solution_text import MIN_CHARS, _expressions, _statements, squeeze
from test_hints_give_nothing_away import shown_strings

from course.exercises import lesson13
from course.exercises.feedback import CHECK_BUG
from course.exercises.lesson13 import (
    _BYTES_CASES,
    _CONFIGS,
    _MASK_CASES,
    _MASK_MISTAKES,
    _WRITE_CASES,
    GEMMA,
    _bytes_mistakes,
    _write_case,
    _write_mistakes,
    check_hybrid_cache_bytes,
    check_rolling_write,
    check_window_mask,
    reference_hybrid_cache_bytes,
    reference_rolling_write,
    reference_window_mask,
)
from helpers.gpt import GPT, GPTConfig
from helpers.kv_cache import rolling_kv_cache_bytes
from helpers.masks import causal_mask_at, sliding_window_mask

# The references as a learner's own code: the checks refuse an answer that calls the course's reference_*
# itself, and these tests use them as the right computation (and build mistakes from them).
reference_hybrid_cache_bytes, reference_rolling_write, reference_window_mask = (
    learners_copy(reference_hybrid_cache_bytes),
    learners_copy(reference_rolling_write),
    learners_copy(reference_window_mask),
)

# The solution bodies proposed for notebooks/13_hybrid_attention.ipynb (each between # BEGIN and # END SOLUTION):
# they pass, and no hint holds a line of them (test_hints_give_nothing_away holds the notebook's own once it exists).
SOLUTIONS = {
    "my_window_mask": """\
def my_window_mask(T, window):
    i = torch.arange(T)[:, None]  # the query's position, one row each
    j = torch.arange(T)[None, :]  # the key's position, one column each
    return (j > i) | (j <= i - window)
""",
    "my_rolling_write": """\
def my_rolling_write(buffer, new, position):
    slot = position % buffer.shape[2]
    written = buffer.clone()
    written[:, :, slot] = new
    return written
""",
    "my_hybrid_cache_bytes": """\
def my_hybrid_cache_bytes(config, T, bytes_per_number=2):
    per_token = 2 * config.num_kv_heads * config.head_dim * bytes_per_number
    tokens = sum(T if kind == "global" else min(T, config.window) for kind in config.layer_kinds)
    return tokens * per_token
""",
}


def _solution(name):
    namespace = {"torch": torch}
    exec(compile(SOLUTIONS[name], "<learner's cell>", "exec"), namespace)
    return namespace[name]


CHECKS = {
    "my_window_mask": check_window_mask,
    "my_rolling_write": check_rolling_write,
    "my_hybrid_cache_bytes": check_hybrid_cache_bytes,
}


@pytest.mark.parametrize("name", list(SOLUTIONS))
def test_the_notebooks_solutions_pass_and_a_stub_is_not_attempted(name):
    assert CHECKS[name](_solution(name)).passed
    assert CHECKS[name](not_attempted).status == "not attempted"


def test_the_references_pass():
    assert check_window_mask(reference_window_mask).passed
    assert check_rolling_write(reference_rolling_write).passed
    assert check_hybrid_cache_bytes(reference_hybrid_cache_bytes).passed


# ---------------------------------------------------------------------------------------------
# Exercise 1: the sliding-window mask
# ---------------------------------------------------------------------------------------------
def _positions(T):
    return torch.arange(T)[:, None], torch.arange(T)[None, :]


def test_the_reference_mask_is_the_librarys():
    for T, window in [*_MASK_CASES, (1, 1), (12, 5)]:
        assert torch.equal(reference_window_mask(T, window), sliding_window_mask(T, window)), (T, window)


def test_every_mask_mistake_gives_masks_of_its_own_over_the_cases():
    """No two named mistakes (nor a mistake and the right mask) agree on every case: each gets its own hint."""
    table = {"right": [sliding_window_mask(T, w) for T, w in _MASK_CASES]}
    table |= {hint: [m(T, w) for T, w in _MASK_CASES] for hint, m in _MASK_MISTAKES.items()}
    for (a, masks_a), (b, masks_b) in itertools.combinations(table.items(), 2):
        assert not all(torch.equal(x, y) for x, y in zip(masks_a, masks_b, strict=True)), (a[:40], b[:40])


def _loop_mask(T, window):
    blocked = torch.ones(T, T, dtype=torch.bool)
    for i in range(T):
        blocked[i, i - window + 1 : i + 1] = False
    return blocked


def _right_but_at(edge):
    def window_mask(T, window):
        i, j = _positions(T)
        if edge(T, window):
            return j > i + 5  # something else
        return (j > i) | (j <= i - window)

    return window_mask


@pytest.mark.parametrize(
    "mistake, fragments",
    [
        (lambda T, w: (lambda i, j: (j <= i) & (j > i - w))(*_positions(T)), ["flipped", "True = blocked"]),
        (lambda T, w: (lambda i, j: (j > i) | (j < i - w))(*_positions(T)), ["one key too wide", "window + 1"]),
        (lambda T, w: (lambda i, j: (j > i) | (j <= i - w + 1))(*_positions(T)), ["one key too narrow"]),
        (lambda T, w: (lambda i, j: (j >= i) | (j <= i - w))(*_positions(T)), ["own key is blocked"]),
        (lambda T, w: (lambda i, j: j <= i - w)(*_positions(T)), ["future is visible", "CAUSAL"]),
        (lambda T, w: (lambda i, j: (i - j).abs() >= w)(*_positions(T)), ["band on both sides"]),
        (lambda T, w: (lambda i, j: j > i)(*_positions(T)), ["plain causal mask", "window is ignored"]),
        (lambda T, w: (lambda i, j: (i > j) | (i <= j - w))(*_positions(T)), ["transposed"]),
        (_loop_mask, ["first queries read too little", "below 0"]),
        (_right_but_at(lambda T, w: w >= T), ["window >= T", "plain causal mask"]),
        (_right_but_at(lambda T, w: w == 1), ["a window of 1", "its own key only"]),
        (lambda T, w: reference_window_mask(T, w).float(), ["0 and 1 of dtype torch.float32", "torch.bool"]),
        (lambda T, w: reference_window_mask(T, w).long(), ["0 and 1 of dtype torch.int64"]),
        (lambda T, w: torch.zeros(T, T).masked_fill(reference_window_mask(T, w), float("-inf")), ["0 and -inf"]),
        (lambda T, w: reference_window_mask(T, w).numpy(), ["returned a numpy array", "torch.Tensor"]),
        (lambda T, w: reference_window_mask(T, w)[None, None], ["one (T, T) mask", "(1, 1, 7, 7)"]),
        (lambda T, w: reference_window_mask(T, w)[:, :w], ["(T, window) = (7, 3) table", "one column per KEY"]),
        (lambda T, w: reference_window_mask(T, w).tolist(), ["return one tensor (T, T)", "list of 7"]),
        (lambda T, w: None, ["should be a tensor", "NoneType"]),
        (lambda T, w: reference_window_mask(T + 1, w), ["shape (T, T) = (7, 7), got (8, 8)"]),
        (lambda T, w: reference_window_mask(T, w) ^ (torch.rand(T, T) > 2), None),  # right: passes (see below)
        (lambda T, w: sliding_window_mask(T, w), ["helpers.masks.sliding_window_mask", "one call"]),
        (lambda T, w: causal_mask_at(torch.arange(T), T, w), ["helpers.masks.sliding_window_mask", "causal_mask_at"]),
        (lambda T, w: torch.ones(T, T, dtype=torch.bool).triu(1) | torch.ones(T, T, dtype=torch.bool).tril(-w), None),
        (lambda T, w: reference_window_mask(T, w) & (torch.arange(T) != 2), ["query", "should read"]),
        (lambda T, w: reference_window_mask(T, min(w, 4)), ["cut to 4", "window = 6 with T = 12"]),
        (lambda T, w: reference_window_mask(T, w % T or T), ["modulo T", "longer than T is the causal mask"]),
    ],
)  # fmt: skip
def test_each_window_mask_mistake_is_named(mistake, fragments):
    verdict = check_window_mask(mistake)
    if fragments is None:  # two right answers written otherwise
        assert verdict.passed, verdict
        return
    assert_hint(verdict, *fragments)
    assert CHECK_BUG not in verdict.message


# ---------------------------------------------------------------------------------------------
# Exercise 2: one write into the rolling buffer
# ---------------------------------------------------------------------------------------------
def _write_at(slot_of):
    def rolling_write(buffer, new, position):
        written = buffer.clone()
        written[:, :, slot_of(position, buffer.shape[2])] = new
        return written

    return rolling_write


def _in_place(buffer, new, position):
    buffer[:, :, position % buffer.shape[2]] = new
    return buffer


def _along(dim):
    def rolling_write(buffer, new, position):
        written = buffer.clone()
        index = [slice(None)] * 4
        index[dim] = position % buffer.shape[2]
        written[tuple(index)] = new
        return written

    return rolling_write


def _every_row_the_first(buffer, new, position):
    written = buffer.clone()
    written[:, :, position % buffer.shape[2]] = new[0]
    return written


def _first_row_only(buffer, new, position):
    written = buffer.clone()
    written[0, :, position % buffer.shape[2]] = new[0]
    return written


def _slot_mod_last_size(buffer, new, position):
    written = buffer.clone()
    written[:, :, position % buffer.size(-1)] = new
    return written


def _others_zeroed(start):
    """A write into a buffer built fresh by ``start(buffer)`` (zeros, in one way or another), the slot right."""

    def rolling_write(buffer, new, position):
        written = start(buffer)
        written[:, :, position % buffer.shape[2]] = new
        return written

    return rolling_write


def _heads_written_in(buffer, new, position):
    """Right for the first cases' (2, 5, w, 3) keys, a reshape to them elsewhere: h and d written in."""
    written = buffer.clone()
    written[:, :, position % buffer.shape[2]] = new.reshape(-1, 5, 3)
    return written


def _batch_written_in(buffer, new, position):  # held back: N written in, another size of the same kind
    written = buffer.clone()
    written[:, :, position % buffer.shape[2]] = new.reshape(2, buffer.shape[1], -1)
    return written


def _zeros_then_copied(buffer, new, position):
    written = torch.zeros(buffer.shape)
    written.copy_(buffer)
    written[:, :, position % buffer.shape[2]] = new
    return written


def test_every_write_mistake_gives_buffers_of_their_own_over_the_cases():
    """No two named mistakes (nor a mistake and the right write) agree on every case, and none raises: each gets
    its own hint."""
    cases = [(_write_case(sizes, seed), position) for seed, (sizes, position) in enumerate(_WRITE_CASES)]
    table = {"right": [reference_rolling_write(*case, position) for case, position in cases]}
    for hint in _write_mistakes(*cases[0][0], cases[0][1]):
        table[hint] = [_write_mistakes(*case, position)[hint]() for case, position in cases]
    for (a, xs), (b, ys) in itertools.combinations(table.items(), 2):
        assert not all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(xs, ys, strict=True)), (a[:40], b[:40])


@pytest.mark.parametrize(
    "mistake, fragments",
    [
        (_write_at(lambda p, w: (p + 1) % w), ["one too far"]),
        (_write_at(lambda p, w: (p - 1) % w), ["one short"]),
        (_write_at(lambda p, w: p), ["position was used as the slot", "IndexError", "mod w"]),
        (_write_at(lambda p, w: min(p, w - 1)), ["clamped"]),
        (lambda b, n, p: torch.cat((b[:, :, 1:], n[:, :, None]), dim=2), ["shifted", "overwrites one slot"]),
        (lambda b, n, p: torch.cat((n[:, :, None], b[:, :, :-1]), dim=2), ["shifted", "at the front"]),
        (lambda b, n, p: b.clone(), ["unchanged"]),
        (lambda b, n, p: b, ["unchanged"]),
        (lambda b, n, p: torch.cat((b, n[:, :, None]), dim=2), ["grew", "appended"]),
        (_in_place, ["changed its input `buffer` in place"]),
        (lambda b, n, p: reference_rolling_write(b, n, p).numpy(), ["returned a numpy array", "torch.Tensor"]),
        (_along(1), ["heads' axis (dim 1)", "slots are dim 2"]),
        (_along(0), ["batch axis (dim 0)"]),
        (_along(3), ["features' axis (dim 3)"]),
        (_every_row_the_first, ["first sequence's key"]),
        (_first_row_only, ["only the first sequence's slot"]),
        (lambda b, n, p: n, ["the size of one key", "whole buffer"]),
        (lambda b, n, p: (reference_rolling_write(b, n, p), n), ["return one tensor"]),
        (lambda b, n, p: reference_rolling_write(b, n, p).transpose(2, 3), ["should have shape (N, h, w, d)"]),
        (lambda b, n, p: reference_rolling_write(b, n, p) * 2, ["slots [0, 1, 2, 3] differ", "slot 1"]),
        (lambda b, n, p: b.index_copy(2, torch.tensor([p % b.size(2)]), n[:, :, None]), None),
        (_write_at(lambda p, w: p % 4), ["written in as 4", "third size"]),
        (_slot_mod_last_size, ["mod d", "third size"]),
        (lambda b, n, p: reference_rolling_write(b.float(), n.float(), p), ["dtype changed", "torch.float32"]),
        (lambda b, n, p: reference_rolling_write(b.half(), n.half(), p), ["dtype changed", "torch.float16"]),
        (_zeros_then_copied, ["dtype changed", "torch.float64", "torch.float32"]),
        (_write_at(lambda p, w: p // w), ["position // w", "REMAINDER"]),
        (_write_at(lambda p, w: int(p / w)), ["position // w", "REMAINDER"]),  # held back: the same, in floats
        (_write_at(lambda p, w: p % (w + 1)), ["mod (w + 1)", "one past the last", "IndexError"]),
        (_write_at(lambda p, w: p - (w + 1) * (p // (w + 1))), ["mod (w + 1)"]),  # held back: the remainder by hand
        (_others_zeroed(torch.zeros_like), ["other slots were zeroed", "copy the buffer"]),
        (_others_zeroed(lambda b: b * 0), ["other slots were zeroed"]),  # held back
        (_others_zeroed(lambda b: torch.zeros(b.shape, dtype=b.dtype)), ["other slots were zeroed"]),  # held back
        (_heads_written_in, ["a size is written in", "(2, 5, 4, 3)", "h = 5", "RuntimeError"]),
        (_batch_written_in, ["a size is written in", "N = 2"]),  # held back: the batch size written in
    ],
)  # fmt: skip
def test_each_rolling_write_mistake_is_named(mistake, fragments):
    verdict = check_rolling_write(mistake)
    if fragments is None:
        assert verdict.passed, verdict
        return
    assert_hint(verdict, *fragments)
    assert CHECK_BUG not in verdict.message


def test_an_error_that_is_no_missing_modulo_is_reported_as_raised():
    def rolling_write(buffer, new, position):
        raise IndexError("index 9 is out of bounds")

    verdict = check_rolling_write(rolling_write)
    assert_hint(verdict, "your code raised IndexError")
    assert "mod w" not in verdict.message


# ---------------------------------------------------------------------------------------------
# Exercise 3: a hybrid model's cache bytes
# ---------------------------------------------------------------------------------------------
def _windows(config):
    return [config.layer_window(i) for i in range(config.num_layers)]


def test_the_reference_bytes_are_the_librarys_count():
    for name, T, given in _BYTES_CASES:
        config, bytes_per_number = _CONFIGS[name], 2 if given is None else given
        expected = rolling_kv_cache_bytes(_windows(config), config.num_kv_heads, config.head_dim, T, bytes_per_number)
        assert reference_hybrid_cache_bytes(config, T, bytes_per_number) == expected, (name, T)


def test_the_reference_bytes_are_what_a_hybrid_gpts_rolling_cache_holds():
    """A tiny GPT with local and global layers, fed T tokens through its rolling cache (float32: 4 bytes)."""
    config = GPTConfig(
        vocab_size=20, embed_dim=16, num_heads=4, num_kv_heads=2, num_layers=4, ff_dim=32, head_dim=6, window=3,
        layer_kinds=("local", "global", "local", "local"), norm="rms", feed_forward="swiglu",
    )  # fmt: skip
    torch.manual_seed(0)
    model = GPT(config).eval()
    cache = model.new_cache(rolling=True)
    ids = torch.randint(0, 20, (1, 8))
    with torch.no_grad():
        model(ids[:, :2], cache=cache)
        assert cache.nbytes() == reference_hybrid_cache_bytes(config, 2, 4)  # T < window
        for t in range(2, 8):
            model(ids[:, t : t + 1], cache=cache)
            assert cache.nbytes() == reference_hybrid_cache_bytes(config, t + 1, 4), t + 1


def test_every_bytes_mistake_gives_numbers_of_its_own_over_the_cases():
    rows = [_bytes_mistakes(_CONFIGS[name], T, 2 if given is None else given) for name, T, given in _BYTES_CASES]
    right = [reference_hybrid_cache_bytes(_CONFIGS[name], T, 2 if g is None else g) for name, T, g in _BYTES_CASES]

    def variants(hint):
        if isinstance(rows[0][hint], list):  # several ways to one mistake: one tuple over the cases each
            return list(zip(*(row[hint] for row in rows), strict=True))
        return [tuple(row[hint] for row in rows)]

    table = {"right": [tuple(right)]} | {hint: variants(hint) for hint in rows[0]}
    for (a, va), (b, vb) in itertools.combinations(table.items(), 2):
        assert not set(va) & set(vb), (a[:50], b[:50])


def _bytes(tokens_of, h_kv=lambda c: c.num_kv_heads, d=lambda c: c.head_dim, per_number=lambda b: b, pairs=2):
    """A learner's count: ``tokens_of(config, T)`` tokens kept over the layers, times the bytes of a token."""

    def hybrid_cache_bytes(config, T, bytes_per_number=2):
        return tokens_of(config, T) * pairs * h_kv(config) * d(config) * per_number(bytes_per_number)

    return hybrid_cache_bytes


def _kept(local, glob=lambda c, T: T):
    return lambda c, T: sum(local(c, T) if k == "local" else glob(c, T) for k in c.layer_kinds)


RIGHT_TOKENS = _kept(lambda c, T: min(T, c.window))


def _one_layer_per_kind(c, T):
    return sum(min(T, c.window) if k == "local" else T for k in set(c.layer_kinds))


def _five_to_one(c, T):
    return sum(T if (i + 1) % 6 == 0 else min(T, c.window) for i in range(c.num_layers))


def _numpy_int(c, T, b=2):
    return __import__("numpy").int64(reference_hybrid_cache_bytes(c, T, b))


def _library(c, T, b=2):
    return rolling_kv_cache_bytes(_windows(c), c.num_kv_heads, c.head_dim, T, b)


def _by_windows(c, T, b=2):  # right, written otherwise
    return sum(min(T, w or T) for w in _windows(c)) * 2 * c.num_kv_heads * c.head_dim * b


def _gemma_written_in(config, T, bytes_per_number=2):
    return (15 * min(T, 512) + 3 * T) * 2 * 1 * 256 * bytes_per_number


@pytest.mark.parametrize(
    "mistake, fragments",
    [
        (_bytes(_kept(lambda c, T: min(T, c.window), lambda c, T: min(T, c.window))), ["global layers were counted"]),
        (_bytes(_kept(lambda c, T: T)), ["local layers were counted as global"]),
        (_bytes(_kept(lambda c, T: max(T, c.window))), ["whole window before"]),
        (_bytes(_kept(lambda c, T: c.window)), ["whole window before"]),  # `T if win is None else win`
        (_bytes(_kept(lambda c, T: min(T, c.window + 1))), ["one token too long"]),
        (_bytes(_kept(lambda c, T: min(T, c.window - 1))), ["one token too short"]),
        (_bytes(_kept(lambda c, T: min(T, c.window), lambda c, T: 0)), ["only the local layers"]),
        (_bytes(_kept(lambda c, T: 0)), ["only the global layers"]),
        (_bytes(_one_layer_per_kind), ["one layer of each kind"]),
        (_bytes(_five_to_one), ["Gemma's pattern"]),
        (_bytes(RIGHT_TOKENS, pairs=1), ["counted once", "a key AND a value"]),
        (_bytes(RIGHT_TOKENS, h_kv=lambda c: c.num_heads), ["query heads"]),
        (_bytes(RIGHT_TOKENS, d=lambda c: c.embed_dim // c.num_heads), ["E / h"]),
        (_bytes(RIGHT_TOKENS, h_kv=lambda c: 1, d=lambda c: c.embed_dim), ["embedding size E", "h_kv · d"]),
        (lambda c, T, b=2: RIGHT_TOKENS(c, T) * 2 * c.embed_dim * b, ["embedding size E"]),  # held back
        (_bytes(_kept(lambda c, T: T - c.window)), ["T - window", "DROPPED"]),
        (_bytes(_kept(lambda c, T: max(0, T - c.window))), ["T - window"]),  # held back: clipped at 0
        (_bytes(RIGHT_TOKENS, per_number=lambda b: 1), ["number of numbers, not of bytes"]),
        (_bytes(RIGHT_TOKENS, per_number=lambda b: 8 * b), ["in bits"]),
        (_bytes(RIGHT_TOKENS, per_number=lambda b: 2), ["written in as 2"]),
        (_bytes(_kept(lambda c, T: min(T, 512))), ["Gemma 3 270M's sizes are written in", "window 512"]),
        (_bytes(RIGHT_TOKENS, d=lambda c: 256), ["Gemma 3 270M's sizes are written in"]),
        (_bytes(RIGHT_TOKENS, h_kv=lambda c: 1), ["Gemma 3 270M's sizes are written in"]),
        (_gemma_written_in, ["Gemma 3 270M's sizes are written in"]),
        (_bytes(lambda c, T: 15 * min(T, c.window) + 3 * T), ["right for Gemma 3 270M's config", "written in"]),
        (lambda c, T, b=2: float(reference_hybrid_cache_bytes(c, T, b)), ["as an int", "got a float"]),
        (lambda c, T, b=2: torch.tensor(reference_hybrid_cache_bytes(c, T, b)), ["as an int", "got a tensor"]),
        (lambda c, T, b=2: True, ["as an int", "bool"]),
        (lambda c, T, b=2: None, ["as an int", "NoneType"]),
        (_numpy_int, ["numpy number", "expects an int"]),
        (lambda c, T: reference_hybrid_cache_bytes(c, T), ["with 3 arguments", "keep the parameters"]),
        (lambda c, T, b=2: reference_hybrid_cache_bytes(c, T, b) + 1, ["expected", "bytes, got"]),
        (_library, ["rolling_kv_cache_bytes", "one call"]),
        (_by_windows, None),
    ],
)  # fmt: skip
def test_each_bytes_mistake_is_named(mistake, fragments):
    verdict = check_hybrid_cache_bytes(mistake)
    if fragments is None:
        assert verdict.passed, verdict
        return
    assert_hint(verdict, *fragments)
    assert CHECK_BUG not in verdict.message


def test_the_gemma_case_is_gemma_3_270ms_config():
    """The sizes the check calls Gemma's are the issue's (18 layers, 5:1, window 512, one KV head of 256)."""
    assert GEMMA.num_layers == 18 and GEMMA.layer_kinds.count("global") == 3 and GEMMA.window == 512
    assert (GEMMA.num_kv_heads, GEMMA.head_dim, GEMMA.embed_dim, GEMMA.num_heads) == (1, 256, 640, 4)
    assert [i for i, kind in enumerate(GEMMA.layer_kinds) if kind == "global"] == [5, 11, 17]


def test_a_config_changed_by_the_learner_changes_nothing():
    """Each call gets its own copy of the config: an answer that edits it is judged by its numbers only, as under
    the checker (where the kernel's copy never comes back)."""

    def edits(config, T, bytes_per_number=2):
        answer = reference_hybrid_cache_bytes(config, T, bytes_per_number)
        config.window = 1
        return answer

    assert check_hybrid_cache_bytes(edits).passed


# ---------------------------------------------------------------------------------------------
# The shared policy, and hints that give no line of the reference answers away
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("check", [check_window_mask, check_rolling_write, check_hybrid_cache_bytes])
def test_errors_are_the_learners(check):
    def raises(*args):
        raise ZeroDivisionError("division by zero")

    verdict = check(raises)
    assert_hint(verdict, "your code raised ZeroDivisionError")
    assert CHECK_BUG not in verdict.message


def _solution_texts(code: str) -> set[str]:
    return {squeeze(t) for t in _statements(code) + _expressions(code) if len(squeeze(t)) >= MIN_CHARS}


def test_no_hint_writes_out_a_line_of_the_references_or_of_the_notebooks_solutions():
    """The rule of tests/course/test_hints_give_nothing_away.py, held against the reference_* functions' code and
    the solutions proposed above until the lesson's notebook (and its solution regions) exists."""
    module = Path(lesson13.__file__)
    solutions = set()
    for node in ast.parse(module.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("reference_"):
            solutions |= _solution_texts("\n".join(ast.unparse(statement) for statement in node.body[1:]))
    for source in SOLUTIONS.values():
        body = textwrap.dedent(source.split("\n", 1)[1])
        solutions |= _solution_texts(body)
    assert len(solutions) >= 8, solutions
    leaks = [(text, message[:80]) for message in shown_strings(module) for text in solutions
             if text in squeeze(message)]  # fmt: skip
    assert not leaks, leaks
