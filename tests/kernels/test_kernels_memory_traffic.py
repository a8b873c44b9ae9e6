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
    measure,
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
    traffic = measure(flash_forward, q, k, v, block_q=16, block_k=16)
    elements = flash_forward_elements(T, S, 16, block_q=16)
    assert traffic.bytes_read == FLOAT32 * (elements["q"] + elements["k"] + elements["v"])
    assert traffic.bytes_written == FLOAT32 * (elements["o"] + elements["lse"])


def test_the_naive_kernels_move_the_scores_and_weights_through_global_memory():
    T, d = 48, 16
    q, k, v = qkv(T, d)
    traffic = measure(naive_attention_triton, q, k, v, block_q=16, block_k=16)
    elements = naive_elements(T, T, d, 16, 16)
    assert traffic.bytes_moved == FLOAT32 * sum(elements.values())
    assert traffic.bytes_written == FLOAT32 * (2 * T * T + T * d)  # scores and weights, then the output


def test_tiling_saves_more_as_t_grows_and_larger_query_blocks_save_more():
    """The naive count grows as T², the flash count as T² / BM: their ratio grows with T, and with BM."""
    d = 16
    ratios = {}
    for T, block in [(32, 16), (64, 16), (64, 32)]:
        q, k, v = qkv(T, d)
        naive = measure(naive_attention_triton, q, k, v, block_q=block, block_k=block).bytes_moved
        flash = measure(flash_forward, q, k, v, block_q=block, block_k=block).bytes_moved
        ratios[T, block] = naive / flash
    assert ratios[64, 16] > ratios[32, 16] > 1
    assert ratios[64, 32] > ratios[64, 16]


def test_the_causal_early_stop_reads_fewer_keys():
    q, k, v = qkv(64, 16)
    full = measure(flash_forward, q, k, v, block_q=16, block_k=16)
    causal = measure(flash_forward, q, k, v, causal=True, block_q=16, block_k=16)
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
