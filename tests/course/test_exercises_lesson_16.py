"""Every check of lesson 16 passes a right Triton kernel, says "not attempted" for a student copy's stub, and names
each usual mistake when it is written into a real kernel, run under Triton's CPU interpreter as the lesson runs it.

One kernel per exercise holds the right answer and each mistake, chosen by a ``HOW`` constexpr, so the mistakes are
real kernels a learner could write, not a simulation of them (the checks simulate them in PyTorch).
"""

from __future__ import annotations

import math
import os

import pytest
import torch
import torch.nn.functional as F

os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported: the kernels run on CPU tensors
triton = pytest.importorskip("triton", reason="Triton is installed on Linux only (pyproject's marker)")
tl = pytest.importorskip("triton.language")

from course.exercises.lesson16 import (  # noqa: E402 - after the interpreter is switched on
    check_causal_attention,
    check_masked_row_softmax,
    check_online_attention,
)


def _not_attempted(*args):
    raise NotImplementedError()


def assert_hint(verdict, *fragments: str) -> None:
    assert verdict.status == "wrong", verdict
    assert "could not finish" not in verdict.message, verdict.message
    for fragment in fragments:
        assert fragment in verdict.message, verdict.message


# ---------------------------------------------------------------------------------------------
# Exercise 1: a row softmax, the last block masked
# ---------------------------------------------------------------------------------------------
@triton.jit
def _softmax_kernel(x_ptr, out_ptr, C, s0, s1, BLOCK: tl.constexpr, HOW: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    if HOW == "drops last":
        mask = offs < C - 1
    elif HOW == "one past":
        mask = offs <= C
    else:
        mask = offs < C
    if HOW == "strides swapped":
        pointers = x_ptr + row * s1 + offs * s0
    elif HOW == "contiguous assumed":
        pointers = x_ptr + row * C + offs
    else:
        pointers = x_ptr + row * s0 + offs * s1
    if HOW == "zero padding":
        x = tl.load(pointers, mask=mask, other=0.0)
    else:
        x = tl.load(pointers, mask=mask, other=float("-inf"))
    e = tl.exp(x) if HOW == "max not subtracted" else tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * C + offs, e / tl.sum(e, axis=0), mask=mask)


def softmax_by(how: str = "right", block: int | None = None, to_numpy: bool = False):
    def masked_row_softmax(x):
        R, C = x.shape
        out = torch.empty(R * C + 1)[: R * C].view(R, C)  # one spare element: "one past" writes there
        if how == "output strides":
            out = torch.empty_like(x)  # x's strides, while the kernel stores at row · C
        size = block or triton.next_power_of_2(C)
        _softmax_kernel[(R,)](x, out, C, x.stride(0), x.stride(1), BLOCK=size, HOW=how)
        return out.numpy() if to_numpy else out

    return masked_row_softmax


def test_the_right_softmax_kernel_passes():
    assert check_masked_row_softmax(softmax_by()).passed


@pytest.mark.parametrize(
    "how,fragment",
    [
        ("drops last", "off by one"),
        ("one past", "one element past its end"),
        ("zero padding", "minus infinity"),
        ("strides swapped", "strides are swapped"),
        ("contiguous assumed", "transposed"),
        ("max not subtracted", "subtract the row's maximum"),
        ("output strides", "the output's own strides"),
    ],
)
def test_each_softmax_mistake_is_named(how, fragment):
    assert_hint(check_masked_row_softmax(softmax_by(how)), fragment)


def test_a_softmax_block_written_in_is_named():
    assert_hint(check_masked_row_softmax(softmax_by(block=8)), "written into the kernel", "(8, 7)", "(5, 12)")
    # 16 fits every row but the widest, (4, 33)
    assert_hint(check_masked_row_softmax(softmax_by(block=16)), "written into the kernel", "(4, 33)")


def test_the_softmax_check_wants_a_tensor_and_knows_a_stub():
    assert_hint(check_masked_row_softmax(softmax_by(to_numpy=True)), "numpy")
    assert check_masked_row_softmax(_not_attempted).status == "not attempted"
    assert_hint(check_masked_row_softmax(lambda x: torch.softmax(x, dim=0)), "no Triton kernel ran")


# ---------------------------------------------------------------------------------------------
# Exercise 2: attention with the online softmax, the log-sum-exp saved
# ---------------------------------------------------------------------------------------------
@triton.jit
def _online_kernel(q_ptr, k_ptr, v_ptr, out_ptr, lse_ptr, S, scale, D: tl.constexpr, BLOCK_N: tl.constexpr,
                   HOW: tl.constexpr):  # fmt: skip
    i = tl.program_id(0)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + i * D + offs_d)
    m = tl.full([], 0.0 if HOW == "max starts at zero" else float("-inf"), tl.float32)
    total = tl.full([], 0.0, tl.float32)
    acc = tl.zeros([D], dtype=tl.float32)
    for start in range(0, S, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        keep = offs_n < S
        k = tl.load(k_ptr + offs_n[:, None] * D + offs_d[None, :], mask=keep[:, None], other=0.0)
        v = tl.load(v_ptr + offs_n[:, None] * D + offs_d[None, :], mask=keep[:, None], other=0.0)
        s = tl.sum(k * q[None, :], axis=1)
        if HOW != "unscaled" and HOW != "lse unscaled max":
            s = s * scale
        if HOW != "padding unmasked":
            s = tl.where(keep, s, float("-inf"))
        block_max = tl.max(s, axis=0)
        new = block_max if HOW == "block max" else tl.maximum(m, block_max)
        alpha = tl.exp(m - new)
        p = tl.exp(s - block_max) if HOW == "own block max" else tl.exp(s - new)
        if HOW == "lse unscaled max":  # the scale folded into the exp (as Triton's tutorial does), m unscaled
            alpha = tl.exp((m - new) * scale)
            p = tl.exp((s - new) * scale)
        total = total + tl.sum(p, axis=0) if HOW == "sum not rescaled" else total * alpha + tl.sum(p, axis=0)
        if HOW == "acc not rescaled":
            acc = acc + tl.sum(p[:, None] * v, axis=0)
        else:
            acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        if HOW == "normalised in step":
            acc = acc / total
        m = new
    if HOW != "normalised in step":
        acc = acc / total
    tl.store(out_ptr + i * D + offs_d, acc)
    if HOW == "lse is m":
        tl.store(lse_ptr + i, m)
    elif HOW == "lse is log l":
        tl.store(lse_ptr + i, tl.log(total))
    elif HOW == "lse base 2":
        tl.store(lse_ptr + i, (m + tl.log(total)) * 1.4426950408889634)
    elif HOW == "lse log2 of l":
        tl.store(lse_ptr + i, m + tl.log2(total))
    elif HOW == "lse plus one":
        tl.store(lse_ptr + i, m + tl.log(total) + 1.0)
    elif HOW != "lse unsaved":
        tl.store(lse_ptr + i, m + tl.log(total))


def online_by(how: str = "right", d: int | None = None, to_numpy: bool = False):
    def online_attention(q, k, v):
        T, size = q.shape
        out, lse = torch.empty(T, size), torch.zeros(T)  # zeros: "lse unsaved" leaves them, deterministically
        _online_kernel[(T,)](
            q, k, v, out, lse, k.size(0), 1 / math.sqrt(size), D=d or size, BLOCK_N=16, HOW=how
        )  # fmt: skip
        return (out.numpy(), lse.numpy()) if to_numpy else (out, lse)

    return online_attention


def test_the_right_online_kernel_passes():
    assert check_online_attention(online_by()).passed


@pytest.mark.parametrize(
    "how,fragment",
    [
        ("acc not rescaled", "accumulator is not rescaled"),
        ("sum not rescaled", "running sum is not rescaled"),
        ("block max", "block's own max"),
        ("own block max", "same reference"),
        ("padding unmasked", "past S"),
        ("unscaled", "not scaled"),
        ("normalised in step", "divide once"),
        ("lse is m", "running max alone"),
        ("lse is log l", "log(l) alone"),
        ("lse base 2", "base 2"),
        ("lse unsaved", "left unsaved"),
        ("max starts at zero", "starts at 0"),
        ("lse log2 of l", "base-2 log of l"),
        ("lse unscaled max", "unscaled scores"),
        ("lse plus one", "lse is stored"),
    ],
)
def test_each_online_mistake_is_named(how, fragment):
    assert_hint(check_online_attention(online_by(how)), fragment)


def test_an_online_head_size_written_in_is_named():
    assert_hint(check_online_attention(online_by(d=16)), "written into the kernel", "(5, 37, 16)", "(3, 20, 32)")


def test_the_online_check_wants_tensors_and_knows_a_stub():
    assert_hint(check_online_attention(online_by(to_numpy=True)), "numpy")
    assert check_online_attention(_not_attempted).status == "not attempted"
    assert_hint(check_online_attention(lambda q, k, v: (q.clone(), k.clone())), "no Triton kernel ran")

    def torch_only(q, k, v):  # right numbers, no kernel
        scores = q @ k.T / math.sqrt(q.size(-1))
        return torch.softmax(scores, dim=-1) @ v, torch.logsumexp(scores, dim=-1)

    assert_hint(check_online_attention(torch_only), "no Triton kernel ran")
    assert_hint(check_online_attention(lambda q, k, v: online_by()(q, k, v)[0]), "two tensors")


def test_the_block_max_case_overflows_float32_but_the_right_kernel_does_not():
    """The mistake is told apart by an overflow: the right kernel must stay finite on the very same case."""
    out, lse = online_by()(*(torch.randn(2, 16) for _ in range(3)))
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()
    verdict = check_online_attention(online_by("block max"))
    assert_hint(verdict, "overflows")


# ---------------------------------------------------------------------------------------------
# Exercise 3: causal attention over blocks
# ---------------------------------------------------------------------------------------------
@triton.jit
def _causal_kernel(q_ptr, k_ptr, v_ptr, out_ptr, T, scale, D: tl.constexpr, BLOCK: tl.constexpr,
                   HOW: tl.constexpr):  # fmt: skip
    start_m = tl.program_id(0) * BLOCK
    offs_m = start_m + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, D)
    rows = offs_m < T
    q = tl.load(q_ptr + offs_m[:, None] * D + offs_d[None, :], mask=rows[:, None], other=0.0)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    total = tl.zeros([BLOCK], dtype=tl.float32)
    acc = tl.zeros([BLOCK, D], dtype=tl.float32)
    if HOW == "no mask" or HOW == "one future key, all blocks" or HOW == "past diagonal":
        end = T
    elif HOW == "stops before diagonal":
        end = start_m
    else:
        end = start_m + BLOCK
    for start_n in range(0, end, BLOCK):
        offs_n = start_n + tl.arange(0, BLOCK)
        cols = offs_n < T
        k = tl.load(k_ptr + offs_n[:, None] * D + offs_d[None, :], mask=cols[:, None], other=0.0)
        v = tl.load(v_ptr + offs_n[:, None] * D + offs_d[None, :], mask=cols[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k))
        if HOW != "unscaled":
            s = s * scale
        if HOW == "diagonal excluded":
            keep = offs_m[:, None] > offs_n[None, :]
        elif HOW == "one future key" or HOW == "one future key, all blocks":
            keep = offs_m[:, None] + 1 >= offs_n[None, :]
        elif HOW == "mask reversed":
            keep = (offs_m[:, None] <= offs_n[None, :]) | (start_n < start_m)
        elif HOW == "mask reversed, every block":
            keep = offs_m[:, None] <= offs_n[None, :]
        elif HOW == "no mask" or HOW == "block mask":
            keep = offs_m[:, None] >= 0
        else:
            keep = offs_m[:, None] >= offs_n[None, :]
        s = tl.where(keep & cols[None, :], s, float("-inf"))
        new = tl.max(s, axis=1) if HOW == "block max" else tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - new)
        p = tl.exp(s - new[:, None])
        total = total * alpha + tl.sum(p, axis=1)
        acc = (acc if HOW == "acc not rescaled" else acc * alpha[:, None]) + tl.dot(p, v)
        m = new
    tl.store(out_ptr + offs_m[:, None] * D + offs_d[None, :], acc / total[:, None], mask=rows[:, None])


def causal_by(how: str = "right", d: int | None = None, to_numpy: bool = False):
    def causal_attention(q, k, v):
        T, size = q.shape
        out = torch.empty(T, size)
        grid = (triton.cdiv(T, 16),)
        _causal_kernel[grid](q, k, v, out, T, 1 / math.sqrt(size), D=d or size, BLOCK=16, HOW=how)
        return out.numpy() if to_numpy else out

    return causal_attention


def test_the_right_causal_kernel_passes_and_equals_sdpa():
    q, k, v = (torch.randn(37, 16) for _ in range(3))
    expected = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)[0]
    torch.testing.assert_close(causal_by()(q, k, v), expected, atol=1e-5, rtol=1e-5)
    assert check_causal_attention(causal_by()).passed


@pytest.mark.parametrize(
    "how,fragment",
    [
        ("no mask", "also the later ones"),
        ("stops before diagonal", "stops before"),
        ("diagonal excluded", "misses its own key"),
        ("one future key", "right after it"),
        ("one future key, all blocks", "right after it"),
        ("mask reversed", "wrong way round"),
        ("mask reversed, every block", "wrong way round"),
        ("block mask", "every key of the block"),
        ("unscaled", "not scaled"),
        ("past diagonal", "runs past the diagonal block"),
        ("block max", "block's own max"),
        ("acc not rescaled", "accumulator is not rescaled"),
    ],
)
def test_each_causal_mistake_is_named(how, fragment):
    assert_hint(check_causal_attention(causal_by(how)), fragment)


def test_a_causal_head_size_written_in_is_named():
    assert_hint(check_causal_attention(causal_by(d=16)), "written into the kernel", "(37, 16)", "(20, 32)")


def test_a_causal_grid_written_in_is_named():
    def grid_for_37(q, k, v):  # three programs, enough for every case up to T = 48
        out = torch.empty_like(q)
        _causal_kernel[(3,)](q, k, v, out, q.size(0), 1 / math.sqrt(q.size(1)), D=q.size(1), BLOCK=16, HOW="right")
        return out

    assert_hint(check_causal_attention(grid_for_37), "written into the kernel", "(70, 16)")


def test_the_causal_check_wants_a_tensor_and_knows_a_stub():
    assert_hint(check_causal_attention(causal_by(to_numpy=True)), "numpy")
    assert check_causal_attention(_not_attempted).status == "not attempted"
    sdpa = lambda q, k, v: F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)[0]  # noqa: E731
    assert_hint(check_causal_attention(sdpa), "no Triton kernel ran")


# ---------------------------------------------------------------------------------------------
# The grader's route: the check in one place, the learner's kernels behind the wire (course.grading.wire)
# ---------------------------------------------------------------------------------------------
class _Loopback:
    """A channel to a 'kernel' in this process, requests and replies framed as on the real channel (the real
    kernel's round trip is tests/course/test_remote_verdicts.py's)."""

    def __init__(self, handles: dict) -> None:
        self.handles = handles

    def ask(self, request: dict):
        from course.grading import learner_side, wire

        sent = wire.unframe(wire.frame(request, trusted=True), trusted=True)
        return wire.unframe(wire.frame(learner_side._call(sent, self.handles)))


def _remotely(check, answer):
    from course.grading import learner_side, remote, wire

    handles: dict = {}
    hello = wire.unframe(wire.frame({"answer": learner_side._describe(answer, handles)}))
    return check(remote.from_kernel(hello["answer"], _Loopback(handles)))


@pytest.mark.parametrize(
    "check,answer,fragment",
    [
        (check_masked_row_softmax, softmax_by("zero padding"), "minus infinity"),
        (check_online_attention, online_by("acc not rescaled"), "accumulator is not rescaled"),
        (check_online_attention, online_by("lse unsaved"), "left unsaved"),
        (check_causal_attention, causal_by("stops before diagonal"), "stops before"),
        (check_causal_attention, causal_by("past diagonal"), "runs past the diagonal block"),
        (check_masked_row_softmax, lambda x: torch.softmax(x, dim=-1), "no Triton kernel ran"),
    ],
)
def test_the_checks_give_their_verdicts_across_the_wire(check, answer, fragment):
    """The checks only call the learner's function and read tensors back, so a grader that holds the check in
    another process (the learner's kernels run where the learner's code runs) reaches the same verdicts."""
    assert_hint(_remotely(check, answer), fragment)


@pytest.mark.parametrize(
    "check,right",
    [(check_masked_row_softmax, softmax_by), (check_online_attention, online_by), (check_causal_attention, causal_by)],
    ids=["softmax", "online", "causal"],
)
def test_a_right_kernel_passes_across_the_wire(check, right):
    assert _remotely(check, right()).passed
