"""The one check every kernel's caller runs first: shapes, dtypes and devices a kernel can read, refused by name.

The kernels read raw pointers with strides, so a wrong shape is not an exception inside them but a silent read of
someone else's memory (on a GPU) or of the wrong rows: everything is checked on the host, before a launch.
Does not import Triton.
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor

__all__ = [
    "KERNEL_DTYPES",
    "MAX_HEAD_SIZE",
    "check_attention_inputs",
    "check_positive_int",
    "check_scale",
    "check_window",
]

KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MAX_HEAD_SIZE = 256  # one (BM, d) block of queries and its accumulator sit in a program's registers


def check_attention_inputs(q: Tensor, k: Tensor, v: Tensor, interpreted: bool) -> tuple[int, int, int, int, int, int]:
    """Refuse what the kernels cannot read; return ``(N, h, h_kv, T, S, d)``.

    q: (N, h, T, d), k and v: (N, h_kv, S, d) with h a multiple of h_kv, one dtype of ``KERNEL_DTYPES``, one device:
    the CPU or a GPU for the interpreter, a CUDA GPU for compiled kernels.
    """
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        if not isinstance(tensor, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dim() != 4:
            raise ValueError(
                f"{name} must be 4-D: q (N, h, T, d), k and v (N, h_kv, S, d); got {name} {tuple(tensor.shape)}"
            )
        if tensor.dtype not in KERNEL_DTYPES:
            raise TypeError(f"{name} must be float32, float16 or bfloat16 for the kernels, got {tensor.dtype}")
    if len({q.dtype, k.dtype, v.dtype}) > 1:
        raise TypeError(f"q, k and v must have one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if len({q.device, k.device, v.device}) > 1:
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    if not interpreted and q.device.type != "cuda":
        raise ValueError(
            f"the kernels are compiled for the GPU here, so q, k and v must be CUDA tensors, got {q.device} "
            "(move them with .cuda(), or set TRITON_INTERPRET=1 before the first import to interpret them)"
        )
    if interpreted and q.device.type not in ("cpu", "cuda"):
        raise ValueError(f"Triton's interpreter reads CPU (or CUDA) tensors, got {q.device}")
    N, h, T, d = q.shape
    if k.shape != v.shape:
        raise ValueError(f"k and v must have one shape (N, h_kv, S, d), got {tuple(k.shape)} and {tuple(v.shape)}")
    N_k, h_kv, S, d_k = k.shape
    if N_k != N or d_k != d:
        raise ValueError(
            f"q (N, h, T, d) = {tuple(q.shape)} and k (N, h_kv, S, d) = {tuple(k.shape)} must agree on N and d"
        )
    if h_kv < 1 or h % h_kv != 0:
        raise ValueError(
            f"the query heads h = {h} must be a multiple of the key/value heads h_kv = {h_kv} (grouped-query heads)"
        )
    if min(N, T, S) < 1 or not 1 <= d <= MAX_HEAD_SIZE:
        raise ValueError(
            f"the kernels need N, T, S >= 1 and 1 <= d <= {MAX_HEAD_SIZE}; got q {tuple(q.shape)}, k {tuple(k.shape)}"
        )
    return N, h, h_kv, T, S, d


def check_positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    return int(value)


def check_window(window: object, causal: bool) -> int | None:
    """None, or a positive number of keys with ``causal=True`` (query i then reads keys i - window + 1 .. i)."""
    if window is None:
        return None
    if not causal:
        raise ValueError(f"window needs causal=True (query i reads keys i - window + 1 .. i), got window={window!r}")
    return check_positive_int("window (a number of keys)", window)


def check_scale(scale: object, d: int) -> float:
    """The scores' factor: ``1 / sqrt(d)`` for None, else a finite real number (NaN or inf would give NaN weights)."""
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not math.isfinite(scale):
        raise ValueError(f"scale must be a finite number (or None for 1/sqrt(d)), got {scale!r}")
    return float(scale)
