"""Attention as Triton kernels (lesson 16): one source, compiled on a GPU, interpreted on a CPU.

Shapes, in the course notation: N batch, h query heads, h_kv key/value heads (g = h / h_kv query heads share one),
T queries, S keys and values, d head size; k keys selected per query in the sparse kernel. New letters here: BM
queries per program (a block of queries), BN keys per step of a program's loop (a block of keys).

The modules, one idea each:

- ``runtime``: which path the kernels take, compiled on a CUDA GPU or run by Triton's CPU interpreter
  (``TRITON_INTERPRET=1``), decided once, before any kernel is defined.
- ``checks``: the shapes, dtypes and devices every kernel's caller refuses by name before a launch.
- ``flash_forward``: FlashAttention-2's forward kernel (online softmax over key blocks, log-sum-exp saved; causal
  with an early stop, a sliding window, grouped-query heads by pointer).
- ``flash_backward``: its backward kernels (P recomputed from the log-sum-exp; dK and dV per key block, dQ per
  query block).
- ``flash_attention``: the ``torch.autograd.Function`` around both and ``flash_attention_triton``, the call that
  equals ``F.scaled_dot_product_attention``.
- ``sparse_attention``: top-k attention as a kernel: each query gathers only its k selected keys.
- ``topk_reference``: the PyTorch forms the sparse kernel is checked against (a masked dense form and a gather).
- ``naive_attention``: attention as three kernels that write the (T, S) scores and weights to global memory, the
  kernel FlashAttention was written to beat.
- ``memory_traffic``: the bytes a kernel moves between global memory and its programs, counted from its own loads
  and stores under the interpreter.

Triton publishes wheels for Linux only. ``import helpers`` and ``helpers.kernels`` work everywhere; importing a
kernel module where Triton is missing raises an ``ImportError`` that says so and points to WSL 2 or a Linux machine
(``triton_available()`` asks first, without importing Triton).
"""

from __future__ import annotations

import importlib.util

TRITON_MISSING = (
    "helpers.kernels needs Triton (pip install 'triton==3.9.0'), which is published for Linux only (x86-64 and "
    "aarch64). On Windows, run the course in WSL 2; on macOS, on a Linux machine or a Linux container. "
    "`make setup` installs it on Linux."
)


def triton_available() -> bool:
    """True where Triton can be imported (Linux with the wheel installed); imports nothing."""
    return importlib.util.find_spec("triton") is not None
