"""Bytes counted from the kernels' own loads and stores (helpers.kernels.memory_traffic), under the interpreter:
exactly the counts FlashAttention's IO analysis predicts for these kernels, and the naive kernel's Θ(T²) against the
flash kernel's Θ(T² d² / M). The naive kernel itself equals SDPA."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers.kernels import TRITON_MISSING, triton_available

if not triton_available():  # asked without importing Triton: its first import must follow the runtime's decision
    pytest.skip(TRITON_MISSING, allow_module_level=True)

from helpers.kernels import runtime

if not runtime.INTERPRETED:
    pytest.skip("bytes are counted under Triton's interpreter; the kernels are compiled here", allow_module_level=True)

import triton.runtime.interpreter as interpreter

from helpers.kernels.flash_attention import flash_attention_triton
from helpers.kernels.flash_forward import flash_forward
from helpers.kernels.memory_traffic import (
    count_memory_traffic,
    flash_forward_elements,
    measure_traffic,
    naive_elements,
)
from helpers.kernels.naive_attention import naive_attention_triton

FLOAT32 = 4


def qkv(T, d, h=1, h_kv=1, S=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    S = T if S is None else S
    return (
        torch.randn(1, h, T, d, generator=gen),
        torch.randn(1, h_kv, S, d, generator=gen),
        torch.randn(1, h_kv, S, d, generator=gen),
    )


@pytest.mark.parametrize(("T", "S"), [(48, 48), (20, 37)])  # a ragged last block: masked lanes count nothing
def test_the_flash_forward_moves_exactly_q_once_k_and_v_once_per_query_block_and_o_once(T, S):
    q, k, v = qkv(T, 16, S=S)
    traffic = measure_traffic(flash_forward, q, k, v, block_q=16, block_k=16)
    elements = flash_forward_elements(T, S, 16, block_q=16)
    assert traffic.bytes_read == FLOAT32 * (elements["q"] + elements["k"] + elements["v"])
    assert traffic.bytes_written == FLOAT32 * (elements["o"] + elements["lse"])


def test_the_naive_kernels_move_the_scores_and_weights_through_global_memory():
    T, d = 48, 16
    q, k, v = qkv(T, d)
    traffic = measure_traffic(naive_attention_triton, q, k, v, block_q=16, block_k=16)
    elements = naive_elements(T, T, d, 16, 16)
    assert traffic.bytes_moved == FLOAT32 * sum(elements.values())
    assert traffic.bytes_written == FLOAT32 * (2 * T * T + T * d)  # scores and weights, then the output


def test_at_a_fixed_block_both_grow_as_t_squared_and_a_larger_block_saves_more():
    """FlashAttention's IO analysis, counted: at a fixed block (fixed on-chip memory M) the naive and the flash
    counts both grow as T² (doubling T multiplies them by nearly 4; the flash count's O(T d) terms weigh more at
    small T), and the flash count falls as the block, and so M, grows (Θ(T² d² / M)), while the naive one keeps
    its 4 T² float32 round trips of the scores and weights."""
    d = 16
    naive, flash = {}, {}
    for T, block in [(32, 16), (64, 16), (64, 32)]:
        q, k, v = qkv(T, d)
        naive[T, block] = measure_traffic(naive_attention_triton, q, k, v, block_q=block, block_k=block).bytes_moved
        flash[T, block] = measure_traffic(flash_forward, q, k, v, block_q=block, block_k=block).bytes_moved
    assert 3.5 < naive[64, 16] / naive[32, 16] <= 4
    assert 3.0 < flash[64, 16] / flash[32, 16] <= 4
    assert flash[64, 32] < flash[64, 16] < naive[64, 16]
    assert naive[64, 32] > FLOAT32 * 4 * 64 * 64  # the round trips stay whatever the block


def test_the_causal_early_stop_reads_fewer_keys():
    q, k, v = qkv(64, 16)
    full = measure_traffic(flash_forward, q, k, v, block_q=16, block_k=16)
    causal = measure_traffic(flash_forward, q, k, v, causal=True, block_q=16, block_k=16)
    # blocks of keys read: 4 per query block without the stop, 1 + 2 + 3 + 4 = 10 of 16 with it
    key_bytes = FLOAT32 * 16 * 16 * 2  # a block of keys and one of values
    assert full.bytes_read - causal.bytes_read == (16 - 10) * key_bytes


def test_the_backward_kernels_are_counted_too():
    q, k, v = (t.requires_grad_() for t in qkv(32, 16))
    out = flash_attention_triton(q, k, v, block_q=16, block_k=16)
    with count_memory_traffic() as traffic:
        out.backward(torch.ones_like(out))
    assert traffic.bytes_written >= FLOAT32 * 3 * 32 * 16  # dq, dk, dv at least once each
    assert traffic.loads > 0 and traffic.stores > 0


def test_counting_leaves_the_interpreter_as_it_found_it():
    builder = interpreter.interpreter_builder
    with count_memory_traffic(), pytest.raises(RuntimeError, match="one count at a time"), count_memory_traffic():
        pass
    assert "create_masked_load" not in vars(builder) and "create_masked_store" not in vars(builder)
    q, k, v = qkv(20, 16)
    with count_memory_traffic() as traffic:
        pass
    flash_forward(q, k, v)  # outside the block: not counted
    assert traffic.bytes_moved == 0


@pytest.mark.parametrize("causal", [False, True])
def test_the_naive_kernel_equals_sdpa(causal):
    q, k, v = qkv(37, 32, h=4, h_kv=2)
    got = naive_attention_triton(q, k, v, causal=causal, block_q=16, block_k=16)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
