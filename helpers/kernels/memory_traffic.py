"""The bytes a kernel moves between global memory and its programs, counted from its own loads and stores.

Under Triton's interpreter every ``tl.load`` and ``tl.store`` of every program goes through one object,
``triton.runtime.interpreter.interpreter_builder``, as a masked load or a masked store of a block of pointers
(an unmasked one is a masked one with an all-true mask). ``count_memory_traffic`` wraps those two methods while a
block of code runs and adds up, for each call, the lanes its mask lets through times the size of the element: the
bytes that lane reads or writes in global memory on a GPU. A masked-off lane moves nothing and counts nothing.

What it counts is what the kernel asks for, not what a GPU's caches make of it: a block loaded twice counts twice
(on a GPU the second read may hit L2), and on-chip work (registers, shared memory) counts nothing, which is the
line FlashAttention's IO analysis draws too (HBM accesses; Dao et al. 2022, theorem 2):

- the naive kernel (scores and weights through global memory): 4 T S float32 numbers per head for the round trips
  of the scores and weights, and Q, K, V read once per block of the other side, so Θ(T²);
- FlashAttention, with on-chip memory of M elements: Θ(T² d² / M). Here a program holds a block of BM queries, so
  M grows as BM d, and its K and V are read once per block of queries: 2 (T / BM) S d elements.

So at a fixed block both grow as T², and tiling saves a factor that grows with the on-chip memory (about M / d²),
not with T: what grows with T is what the naive kernel must *hold*, the (T, S) scores, which no chip holds past
a few thousand tokens.

``flash_forward_elements`` and ``naive_elements`` are those two counts written as formulas for these kernels; the
tests hold the counted bytes to them exactly.

Atomics and tensor descriptors are not counted (no kernel here uses them): one used while counting is refused.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from helpers.kernels import runtime

import triton.runtime.interpreter as interpreter  # isort: skip  (after runtime, which decides TRITON_INTERPRET)

__all__ = [
    "MemoryTraffic",
    "count_memory_traffic",
    "flash_forward_elements",
    "measure_traffic",
    "naive_elements",
    "on_chip_elements",
]

_NOT_COUNTED = ("create_atomic_rmw", "create_atomic_cas", "create_descriptor_load", "create_descriptor_store")


@dataclass
class MemoryTraffic:
    """Bytes read from and written to global memory by the kernels run inside ``count_memory_traffic``."""

    bytes_read: int = 0
    bytes_written: int = 0
    loads: int = 0  # tl.load calls, all programs together
    stores: int = 0

    @property
    def bytes_moved(self) -> int:
        return self.bytes_read + self.bytes_written


def _lanes_times_size(ptrs: Any, mask: Any) -> int:
    """The bytes one masked load or store moves: its true lanes times the element's size."""
    lanes = int(np.count_nonzero(np.broadcast_to(mask.data, ptrs.data.shape)))
    return lanes * ptrs.get_element_ty().primitive_bitwidth // 8


@contextmanager
def count_memory_traffic() -> Iterator[MemoryTraffic]:
    """``with count_memory_traffic() as traffic: kernel(...)`` then ``traffic.bytes_read``, ``.bytes_written``.

    Needs the interpreter (``runtime.INTERPRETED``): a compiled kernel's loads run on the GPU, out of Python's sight.
    """
    if not runtime.INTERPRETED:
        raise RuntimeError(
            "count_memory_traffic reads the interpreter's loads and stores; the kernels are compiled here. Start "
            "Python with TRITON_INTERPRET=1 set (benchmarks/lesson16_bytes.py does) to count them."
        )
    builder = interpreter.interpreter_builder
    if "create_masked_load" in vars(builder):
        raise RuntimeError("count_memory_traffic is already counting: one count at a time")
    traffic = MemoryTraffic()
    load, store = builder.create_masked_load, builder.create_masked_store

    def counted_load(ptrs, mask, other, cache_policy, is_volatile):
        traffic.bytes_read += _lanes_times_size(ptrs, mask)
        traffic.loads += 1
        return load(ptrs, mask, other, cache_policy, is_volatile)

    def counted_store(ptrs, value, mask, cache_policy):
        traffic.bytes_written += _lanes_times_size(ptrs, mask)
        traffic.stores += 1
        return store(ptrs, value, mask, cache_policy)

    def refused(name: str) -> Callable[..., Any]:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"count_memory_traffic counts tl.load and tl.store only; the kernel called {name}")

        return refuse

    builder.create_masked_load = counted_load  # an instance attribute, in front of the class's method
    builder.create_masked_store = counted_store
    for name in _NOT_COUNTED:
        setattr(builder, name, refused(name))
    try:
        yield traffic
    finally:
        for name in ("create_masked_load", "create_masked_store", *_NOT_COUNTED):
            delattr(builder, name)  # the class's own methods show through again


def measure_traffic(kernel: Callable[..., Any], *args: Any, **kwargs: Any) -> MemoryTraffic:
    """Run ``kernel(*args, **kwargs)`` once and return the bytes it moved."""
    with count_memory_traffic() as traffic:
        kernel(*args, **kwargs)
    return traffic


def flash_forward_elements(T: int, S: int, d: int, block_q: int) -> dict[str, int]:
    """Elements the non-causal flash forward moves per (batch, head): Q read once, K and V once per block of
    queries, O written once (in the inputs' dtype); the log-sum-exp, T float32 numbers, is listed apart."""
    blocks = math.ceil(T / block_q)
    return {"q": T * d, "k": blocks * S * d, "v": blocks * S * d, "o": T * d, "lse": T}


def naive_elements(T: int, S: int, d: int, block_q: int, block_k: int) -> dict[str, int]:
    """Elements the non-causal naive kernels move per (batch, head): Q once per block of keys and K once per block
    of queries (the scores' tiles), the float32 scores written, read, the weights written, read, V once per block
    of queries, O written."""
    q_blocks, k_blocks = math.ceil(T / block_q), math.ceil(S / block_k)
    return {
        "q": k_blocks * T * d,
        "k": q_blocks * S * d,
        "scores written": T * S,
        "scores read": T * S,
        "weights written": T * S,
        "weights read": T * S,
        "v": q_blocks * S * d,
        "o": T * d,
    }


def on_chip_elements(d: int, block_q: int, block_k: int) -> int:
    """M: what one program of the flash forward holds on chip, in elements: its queries and accumulator (BM, d),
    a block of keys and of values (BN, d), the block of scores (BM, BN) and two numbers per query row."""
    return 2 * block_q * d + 2 * block_k * d + block_q * block_k + 2 * block_q
