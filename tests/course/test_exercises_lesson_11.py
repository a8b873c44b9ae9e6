"""Lesson 11's exercise checks: the reference answers pass, an untouched stub is "not attempted", and every typical
mistake gets the hint that names it."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch
from conftest import assert_hint, learners_copy, not_attempted

from course.exercises.lesson11 import (
    _BYTES_CASES,
    _bytes_mistakes,
    check_absorbed_weights,
    check_cache_bytes,
    check_cache_entry,
    reference_absorbed_weights,
    reference_cache_bytes,
    reference_cache_entry,
)
from helpers.rotary import apply_rotary

# The references as a learner's own code: the checks refuse an answer that calls the course's reference_*
# itself, and these tests use them as the right computation (and build mistakes from them).
reference_absorbed_weights, reference_cache_bytes, reference_cache_entry = (
    learners_copy(reference_absorbed_weights),
    learners_copy(reference_cache_bytes),
    learners_copy(reference_cache_entry),
)


# ---------------------------------------------------------------------------------------------
# Exercise 1
# ---------------------------------------------------------------------------------------------
def test_the_reference_cache_bytes_pass_and_a_stub_is_not_attempted():
    assert check_cache_bytes(reference_cache_bytes).passed
    assert check_cache_bytes(not_attempted).status == "not attempted"


def _per_kind(kind, n_layers, h, h_kv, d, d_c, d_R):
    return {"MHA": 2 * h * d, "GQA": 2 * h_kv * d, "MQA": 2 * d, "MLA": d_c + d_R}[kind]


def _wrong_for(which: str, wrong_bytes):
    """A learner right for every kind but ``which``, where ``wrong_bytes(n_layers, h, h_kv, d, d_c, d_R)`` is given."""

    def cache_bytes(kind, n_layers, h, h_kv, d, d_c, d_R):
        if kind == which:
            return wrong_bytes(n_layers, h, h_kv, d, d_c, d_R)
        return reference_cache_bytes(kind, n_layers, h, h_kv, d, d_c, d_R)

    return cache_bytes


def _scaled_all(factor_of_layers: bool, factor: float):
    def cache_bytes(kind, n_layers, h, h_kv, d, d_c, d_R):
        per_layer = _per_kind(kind, n_layers, h, h_kv, d, d_c, d_R) * 2
        return int(per_layer * (n_layers if factor_of_layers else 1) * factor)

    return cache_bytes


def _keys_only_but_mla(kind, n_layers, h, h_kv, d, d_c, d_R):
    """Keys counted without values for the three kinds that cache keys; MLA's latent right: told apart from
    counting numbers instead of bytes (which halves MLA's too) only by looking at every kind."""
    right = reference_cache_bytes(kind, n_layers, h, h_kv, d, d_c, d_R)
    return right if kind == "MLA" else right // 2


@pytest.mark.parametrize(
    "mistake, fragments",
    [
        (_scaled_all(False, 1), ["MHA", "multiply by n_layers"]),
        (_scaled_all(True, 8), ["in bits"]),
        (_scaled_all(True, 0.5), ["numbers, not bytes", "MLA's latent included"]),
        (_scaled_all(True, 2), ["4 bytes a number"]),
        (_keys_only_but_mla, ["only the keys"]),
        (
            _wrong_for("MLA", lambda n_layers, h, h_kv, d, d_c, d_R: n_layers * h * (d_c + d_R) * 2),
            ["counted per head"],
        ),
        (
            _wrong_for("MLA", lambda n_layers, h, h_kv, d, d_c, d_R: n_layers * 2 * (d_c + d_R) * 2),
            ["a key and a value"],
        ),
        (_wrong_for("MHA", lambda n_layers, h, h_kv, d, d_c, d_R: 2 * n_layers * h_kv * d * 2), ["MHA", "h heads"]),
        (_wrong_for("GQA", lambda n_layers, h, h_kv, d, d_c, d_R: 2 * n_layers * h * d * 2), ["GQA", "h_kv key/value"]),
        (_wrong_for("MQA", lambda n_layers, h, h_kv, d, d_c, d_R: 2 * n_layers * h * d * 2), ["MQA", "ONE key"]),
        (_wrong_for("MLA", lambda n_layers, h, h_kv, d, d_c, d_R: n_layers * (2 * d_c + d_R) * 2), ["ONE latent"]),
        (_wrong_for("MLA", lambda n_layers, h, h_kv, d, d_c, d_R: n_layers * d_c * 2), ["rotary key is missing"]),
        (_wrong_for("MLA", lambda n_layers, h, h_kv, d, d_c, d_R: n_layers * (d_c + h * d_R) * 2), ["shared by all"]),
        (_wrong_for("MLA", lambda n_layers, h, h_kv, d, d_c, d_R: 2 * n_layers * h * d * 2), ["never cached"]),
        (_wrong_for("MLA", lambda n_layers, h, h_kv, d, d_c, d_R: n_layers * (d_c + d_R)), ["one byte per number"]),
        # Four more of the usual ones (#45): numbers of one layer, queries cached, GQA's group size, MQA with h_kv.
        (lambda kind, n_layers, h, h_kv, d, d_c, d_R: _per_kind(kind, n_layers, h, h_kv, d, d_c, d_R),
         ["one layer's count of numbers", "2 bytes"]),
        (_wrong_for("MHA", lambda n_layers, h, h_kv, d, d_c, d_R: 3 * n_layers * h * d * 2), ["queries are counted"]),
        (_wrong_for("GQA", lambda n_layers, h, h_kv, d, d_c, d_R: n_layers * (h * d + 2 * h_kv * d) * 2),
         ["queries are counted"]),
        (_wrong_for("GQA", lambda n_layers, h, h_kv, d, d_c, d_R: 2 * n_layers * (h // h_kv) * d * 2),
         ["g = h / h_kv"]),
        (_wrong_for("MQA", lambda n_layers, h, h_kv, d, d_c, d_R: 2 * n_layers * h_kv * d * 2),
         ["MQA counted with h_kv", "ONE key/value head"]),
        (_wrong_for("MLA", lambda n_layers, h, h_kv, d, d_c, d_R: n_layers * 2 * d_c * 2),
         ["latent counted twice", "rotary key left out"]),
    ],
)  # fmt: skip
def test_each_cache_bytes_mistake_is_named(mistake, fragments):
    assert_hint(check_cache_bytes(mistake), *fragments)


@pytest.mark.parametrize(
    "mistake, misleading",
    [
        # MHA with h_kv heads once read as "only the keys" (the first case had h_kv = h / 2 by chance); MLA as a key
        # and a value of d_c + d_R each, as "4 bytes a number".
        (_wrong_for("MHA", lambda n_layers, h, h_kv, d, d_c, d_R: 2 * n_layers * h_kv * d * 2), "only the keys"),
        (_wrong_for("MLA", lambda n_layers, h, h_kv, d, d_c, d_R: n_layers * 2 * (d_c + d_R) * 2), "4 bytes"),
    ],
)
def test_a_mistake_is_not_told_another_ones_hint(mistake, misleading):
    verdict = check_cache_bytes(mistake)
    assert not verdict.passed and misleading not in verdict.message, verdict.message


def test_the_first_bytes_case_tells_every_mistake_apart():
    """The configuration each kind is diagnosed at first gives every named mistake of that kind its own number."""
    case = _BYTES_CASES[0]
    for kind in ("MHA", "GQA", "MQA", "MLA"):
        numbers = list(_bytes_mistakes(kind, **case).values())
        assert len(set(numbers)) == len(numbers), (kind, case)
        assert reference_cache_bytes(kind, **case) not in numbers, (kind, case)


def test_a_non_number_is_refused():
    def cache_bytes(kind, n_layers, h, h_kv, d, d_c, d_R):
        return "many"

    assert_hint(check_cache_bytes(cache_bytes), "an int")


@pytest.mark.parametrize(
    "convert, fragment",
    [(float, "got a float"), (torch.tensor, "got a tensor"), (lambda n: torch.tensor(float(n)), "got a tensor")],
)
def test_a_right_number_of_another_type_is_refused_as_numpy_is(convert, fragment):
    """One rule for every type: numpy's numbers were refused while a float or a tensor of the right value passed."""

    def cache_bytes(kind, n_layers, h, h_kv, d, d_c, d_R):
        return convert(reference_cache_bytes(kind, n_layers, h, h_kv, d, d_c, d_R))

    assert_hint(check_cache_bytes(cache_bytes), "as an int", fragment)


# ---------------------------------------------------------------------------------------------
# Exercise 2
# ---------------------------------------------------------------------------------------------
def _pieces(layer):
    h, d = layer.config.num_heads, layer.config.head_dim
    E, d_c = layer.config.embed_dim, layer.config.latent_dim
    w_q = layer.q_proj.weight.view(h, d, E)
    w_uk, w_uv = layer.k_up.weight.view(h, d, d_c), layer.v_up.weight.view(h, d, d_c)
    w_o = layer.out_proj.weight.view(E, h, d).transpose(0, 1)
    return h, d, E, d_c, w_q, w_uk, w_uv, w_o


def test_the_reference_absorption_passes_and_a_stub_is_not_attempted():
    assert check_absorbed_weights(reference_absorbed_weights).passed
    assert check_absorbed_weights(not_attempted).status == "not attempted"


def _swapped(layer):
    *_, w_q, w_uk, w_uv, w_o = _pieces(layer)
    return w_uv.transpose(1, 2) @ w_q, w_o @ w_uk


def _scaled(layer):
    q, o = reference_absorbed_weights(layer)
    return q / (layer.config.score_dim**0.5), o


def _summed_query(layer):
    q, o = reference_absorbed_weights(layer)
    return q.sum(0, keepdim=True).expand_as(q), o


def _interleaved(layer):
    h, d, E, d_c, *_ = _pieces(layer)
    w_uk = layer.k_up.weight.view(d, h, d_c).transpose(0, 1)
    w_q = layer.q_proj.weight.view(d, h, E).transpose(0, 1)
    return w_uk.transpose(1, 2) @ w_q, reference_absorbed_weights(layer)[1]


def _output_with_uk(layer):
    *_, w_uk, _, w_o = _pieces(layer)
    return reference_absorbed_weights(layer)[0], w_o @ w_uk


def _output_rows(layer):
    h, d, E, _, _, _, w_uv, _ = _pieces(layer)
    return reference_absorbed_weights(layer)[0], layer.out_proj.weight.view(h, d, E).transpose(1, 2) @ w_uv


def _transposed_query(layer):
    q, o = reference_absorbed_weights(layer)
    return q.transpose(1, 2), o


def _transposed_output(layer):
    q, o = reference_absorbed_weights(layer)
    return q, o.transpose(1, 2)


def _folds_in_swapped_order(layer):
    q, o = reference_absorbed_weights(layer)
    return o, q


def _both_transposed(layer):
    q, o = reference_absorbed_weights(layer)
    return q.transpose(1, 2), o.transpose(1, 2)


def _query_rows_as_columns(layer):
    h, d, E, _, _, w_uk, *_ = _pieces(layer)
    w_q = layer.q_proj.weight.view(h, E, d).transpose(1, 2)  # the (h·d, E) weight read as if it were (E, h·d)
    return w_uk.transpose(1, 2) @ w_q, reference_absorbed_weights(layer)[1]


def _query_interleaved_only(layer):
    h, d, E, _, _, w_uk, *_ = _pieces(layer)
    w_q = layer.q_proj.weight.view(d, h, E).transpose(0, 1)  # every h-th row; W_UK's blocks right
    return w_uk.transpose(1, 2) @ w_q, reference_absorbed_weights(layer)[1]


def _rolled(which, shift):
    def absorb(layer):
        *_, w_q, w_uk, w_uv, w_o = _pieces(layer)
        if which == "W_Q":
            return w_uk.transpose(1, 2) @ w_q.roll(shift, 0), w_o @ w_uv
        if which == "W_UK":
            return w_uk.roll(shift, 0).transpose(1, 2) @ w_q, w_o @ w_uv
        if which == "W_UV":
            return w_uk.transpose(1, 2) @ w_q, w_o @ w_uv.roll(shift, 0)
        return w_uk.transpose(1, 2) @ w_q, (w_o @ w_uv).roll(shift, 0)

    return absorb


def _up_split_as_columns(name):
    """W_UK's or W_UV's (h·d, d_c) weight viewed as (h, d_c, d): each head's block cut across the heads' rows."""

    def absorb(layer):
        h, d, _, d_c, w_q, w_uk, w_uv, w_o = _pieces(layer)
        wrong = getattr(layer, name).weight.view(h, d_c, d).transpose(1, 2)  # (h, d, d_c), but the wrong numbers
        if name == "k_up":
            return wrong.transpose(1, 2) @ w_q, w_o @ w_uv
        return w_uk.transpose(1, 2) @ w_q, w_o @ wrong

    return absorb


@pytest.mark.parametrize(
    "mistake, fragments",
    [
        (_folds_in_swapped_order, ["swapped order"]),
        (_both_transposed, ["both folds are transposed"]),
        (_query_rows_as_columns, ["W_Q was split as if it were stored (E, h·d)"]),
        (_query_interleaved_only, ["W_Q's heads are read interleaved"]),
        (_rolled("W_Q", 1), ["rolled by one", "W_UK block"]),
        (_rolled("W_UK", -1), ["rolled by one", "W_UK block"]),
        (_rolled("W_UV", 1), ["rolled by one", "W_O block"]),
        (_rolled("output", -1), ["rolled by one", "W_O block"]),
        (_swapped, ["W_UK and W_UV are swapped in both folds"]),
        (lambda layer: (_swapped(layer)[0], reference_absorbed_weights(layer)[1]), ["queries were folded with W_UV"]),
        (_scaled, ["scale"]),
        (_summed_query, ["summed over the heads"]),
        (_interleaved, ["interleaved"]),
        (_output_with_uk, ["output was folded with W_UK"]),
        (_output_rows, ["COLUMNS"]),
        (_transposed_query, ["(h, E, d_c): transpose"]),
        (_transposed_output, ["(h, d_c, E): transpose"]),
        (lambda layer: reference_absorbed_weights(layer)[0], ["two tensors"]),
        (lambda layer: tuple(t.transpose(1, 2) for t in reversed(reference_absorbed_weights(layer))),
         ["each fold is the other one transposed"]),
        (_up_split_as_columns("k_up"), ["W_UK was split as (h, d_c, d)"]),
        (_up_split_as_columns("v_up"), ["W_UV was split as (h, d_c, d)"]),
        (lambda layer: (reference_absorbed_weights(layer)[0] / layer.config.head_dim**0.5,
                        reference_absorbed_weights(layer)[1]), ["scale (or a 1/√d) is folded in"]),
        (lambda layer: (reference_absorbed_weights(layer)[0],
                        reference_absorbed_weights(layer)[1] / layer.config.score_dim**0.5),
         ["scale is folded into the output"]),
        (lambda layer: tuple(t[:1].expand_as(t) for t in reference_absorbed_weights(layer)), ["head 0's fold"]),
        (lambda layer: (_pieces(layer)[5] @ _pieces(layer)[4], _pieces(layer)[7] @ _pieces(layer)[6]),
         ["product's shapes did not fit", "turn (transpose)"]),  # W_UK,i not transposed
        (lambda layer: (reference_absorbed_weights(layer)[0], _pieces(layer)[6] @ _pieces(layer)[7]),
         ["product's shapes did not fit"]),  # W_UV,i @ W_O,i, the wrong order
        (lambda layer: (reference_absorbed_weights(layer)[0],
                        reference_absorbed_weights(layer)[1][:1].expand(3, -1, -1)),
         ["head 0's fold", "W_O,i and W_UV,i"]),
    ],
)  # fmt: skip
def test_each_absorption_mistake_is_named(mistake, fragments):
    assert_hint(check_absorbed_weights(mistake), *fragments)


# ---------------------------------------------------------------------------------------------
# Exercise 3
# ---------------------------------------------------------------------------------------------
def test_the_reference_cache_entry_passes_and_a_stub_is_not_attempted():
    assert check_cache_entry(reference_cache_entry).passed
    assert check_cache_entry(not_attempted).status == "not attempted"


def _halves(k, positions, base):
    half = k.size(-1) // 2
    a, b = k[..., :half], k[..., half:]
    angles = positions[:, None].double() * base ** (-torch.arange(0, k.size(-1), 2, dtype=torch.float64) / k.size(-1))
    cos, sin = angles.cos(), angles.sin()
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)


@pytest.mark.parametrize(
    "mistake, fragments",
    [
        (lambda x, p, w_dkv, w_kr, base: (apply_rotary(x @ w_dkv.T, p, base), x @ w_kr.T), ["latent was rotated"]),
        (lambda x, p, w_dkv, w_kr, base: (apply_rotary(x @ w_dkv.T, p, base), apply_rotary(x @ w_kr.T, p, base)),
         ["c must stay position-free"]),
        (lambda x, p, w_dkv, w_kr, base: (x @ w_dkv.T, x @ w_kr.T), ["not rotated"]),
        (lambda x, p, w_dkv, w_kr, base: (x @ w_dkv.T, apply_rotary(x @ w_kr.T, None, base)), ["positions 0 .. L - 1"]),
        (lambda x, p, w_dkv, w_kr, base: (x @ w_dkv.T, apply_rotary(x @ w_kr.T, p)), ["base 10000"]),
        (lambda x, p, w_dkv, w_kr, base: (x @ w_dkv.T, _halves(x @ w_kr.T, p, base)), ["(k, k + d/2)"]),
        (lambda x, p, w_dkv, w_kr, base: (x @ w_dkv.T, apply_rotary(x @ w_kr.T, -p, base)), ["backwards"]),
        (lambda x, p, w_dkv, w_kr, base: (x @ w_dkv.T, apply_rotary(x @ w_kr.T, p, base)[:, None].repeat(1, 3, 1, 1)),
         ["ONE key shared"]),
        (lambda x, p, w_dkv, w_kr, base: (2 * x @ w_dkv.T, apply_rotary(x @ w_kr.T, p, base)), ["x @ w_dkv.T"]),
        (lambda x, p, w_dkv, w_kr, base: ((x.view(-1, 576) @ w_dkv.T).view(2, 4, -1),
                                          apply_rotary(x @ w_kr.T, p, base)),
         ["your code raised RuntimeError", "instead of writing numbers in"]),
        (lambda x, p, w_dkv, w_kr, base: (apply_rotary(x @ w_kr.T, p, base), x @ w_dkv.T), ["swapped order"]),
        (lambda x, p, w_dkv, w_kr, base: (x @ w_dkv, apply_rotary(x @ w_kr.T, p, base)),
         ["product's shapes did not fit", "(out, in)"]),
        (lambda x, p, w_dkv, w_kr, base: ((x @ w_dkv.T)[:, -1:], apply_rotary(x @ w_kr.T, p, base)[:, -1:]),
         ["c has one token"]),
        (lambda x, p, w_dkv, w_kr, base: (x @ w_dkv.T, apply_rotary(x @ w_kr.T, p + 1, base)), ["off by one"]),
        (lambda x, p, w_dkv, w_kr, base: (x @ w_dkv.T, apply_rotary(x @ w_kr.T, p - 1, base)), ["off by one"]),
        (lambda x, p, w_dkv, w_kr, base: (x @ w_dkv.T, apply_rotary(x @ w_kr.T, p[-1].repeat(len(p)), base)),
         ["rotated by one position"]),
        (lambda x, p, w_dkv, w_kr, base: (x @ w_dkv.T, apply_rotary(apply_rotary(x @ w_kr.T, p, base), p, base)),
         ["rotated twice"]),
        (lambda x, p, w_dkv, w_kr, base: (x @ w_dkv.T, apply_rotary(x, p, base) @ w_kr.T), ["before the projection"]),
        (lambda x, p, w_dkv, w_kr, base: (x @ w_dkv.T, apply_rotary((x @ w_dkv.T)[..., : w_kr.size(0)], p, base)),
         ["taken from the latent"]),
        (lambda x, p, w_dkv, w_kr, base: (x @ w_dkv.T, apply_rotary(x @ w_kr.T, p, base) / w_kr.size(0) ** 0.5),
         ["scaled by 1/√d_R"]),
        (lambda x, p, w_dkv, w_kr, base: (x @ w_dkv.T, apply_rotary(x.float() @ w_kr.T.float(), p + 1, base).double()),
         ["off by one"]),  # in float32: the mistakes are named at a float32 answer's precision
    ],
)  # fmt: skip
def test_each_cache_entry_mistake_is_named(mistake, fragments):
    assert_hint(check_cache_entry(mistake), *fragments)


def test_the_notebook_runs_the_benchmarks_settings():
    """The lesson's trained comparison uses benchmarks/lesson11_trained.py's LESSON settings (its claims come from
    there): the notebook's settings cell must hold the same numbers."""
    import importlib.util

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("lesson11_trained", root / "benchmarks" / "lesson11_trained.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    cells = json.loads((root / "notebooks" / "11_latent_attention.ipynb").read_text(encoding="utf-8"))["cells"]
    assigned = {}
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        source = "\n".join(line for line in "".join(cell["source"]).split("\n") if not line.startswith("%"))
        for node in ast.parse(source).body:
            names = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
            if isinstance(node, ast.Assign) and names in (["TRAINED"], ["VARIANTS"]):
                assigned[names[0]] = ast.literal_eval(node.value)
    assert assigned == {"TRAINED": bench.LESSON, "VARIANTS": bench.VARIANTS}


def test_absorbing_that_writes_into_the_layers_weights_is_refused():
    """A fold that zeroes W_Q in place and returns the fold of the zeroed weights agreed with a reference read from
    the same layer afterwards: a false pass. The references now read an untouched copy, and the change is named."""

    def zero_the_queries(layer):
        layer.q_proj.weight.zero_()
        return reference_absorbed_weights(layer)

    assert_hint(check_absorbed_weights(zero_the_queries), "the module `layer`", "`layer.q_proj.weight`")

    def transposed_views_only(layer):  # views are reads: still right
        return reference_absorbed_weights(layer)

    assert check_absorbed_weights(transposed_views_only).passed


def test_absorbing_with_the_checks_sizes_written_in_is_refused():
    def hard_coded(layer):  # h = 3, d = 4, d_c = 5, E = 12: right for the check's first layer only
        w_q, w_uk = layer.q_proj.weight.view(3, 4, 12), layer.k_up.weight.view(3, 4, 5)
        w_o, w_uv = layer.out_proj.weight.view(12, 3, 4).transpose(0, 1), layer.v_up.weight.view(3, 4, 5)
        return w_uk.transpose(1, 2) @ w_q, w_o @ w_uv

    assert_hint(check_absorbed_weights(hard_coded), "wrong for a layer of other sizes")


def test_absorbing_with_other_sizes_written_in_that_raise_is_named():
    """SmolLM2's sizes written in raise inside the answer on the check's layer: named as sizes written in, not as a
    bare error."""

    def smollm2_sizes(layer):
        w_q, w_uk = layer.q_proj.weight.view(9, 64, 576), layer.k_up.weight.view(9, 64, 384)
        return w_uk.transpose(1, 2) @ w_q, w_uk

    assert_hint(check_absorbed_weights(smollm2_sizes), "your code raised RuntimeError", "instead of writing numbers in")
