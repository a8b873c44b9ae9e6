"""Lesson 16 on a GPU: the Triton FlashAttention kernels compiled, against SDPA's flash back end and lesson 07's
PyTorch tiling, forward and forward + backward, in tokens per second and peak memory.

For each length T (default 1k to 16k) and dtype (float16, bfloat16): causal self-attention, N = 1, h = 16 heads of
d = 64 (``--heads``, ``--head-size``), three ways:

- ``triton``: ``helpers.kernels.flash_attention_triton`` (compiled; BM = BN = 64 for d = 64);
- ``sdpa flash``: ``F.scaled_dot_product_attention`` inside ``sdpa_kernel(SDPBackend.FLASH_ATTENTION)``, the
  FlashAttention-2 kernels PyTorch ships;
- ``lesson 07``: ``helpers.flash_attention`` (tiles of 256 queries and 512 keys, a Python loop over them).

Each time is the median of ``--repeats`` calls after ``--warmup`` calls (CUDA events), tokens/s = N T / time; peak
memory is ``torch.cuda.max_memory_allocated`` during one call, less what was allocated before it (the inputs).
Outputs are first checked against SDPA's (2e-2 in 16-bit; the kernels' exactness is the tests' job).

On a machine without CUDA there is nothing to measure (the interpreter says nothing about speed): the script says
so and exits 0. ``--smoke`` runs the same code on the CPU at a tiny size with the interpreter, to check the
script's own plumbing; its numbers mean nothing.

    .venv/bin/python benchmarks/lesson16_speed.py --log benchmarks/lesson16_speed.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from helpers.kernels import TRITON_MISSING, triton_available  # noqa: E402

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def ways(device: torch.device) -> dict[str, Callable[..., torch.Tensor]]:
    from helpers.flash import flash_attention
    from helpers.kernels.flash_attention import flash_attention_triton

    def sdpa_flash(q, k, v):
        backend = SDPBackend.FLASH_ATTENTION if device.type == "cuda" else SDPBackend.MATH
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    return {
        "triton": lambda q, k, v: flash_attention_triton(q, k, v, causal=True),
        "sdpa flash": sdpa_flash,
        "lesson 07": lambda q, k, v: flash_attention(q, k, v, is_causal=True),
    }


def timed(call: Callable[[], object], device: torch.device, warmup: int, repeats: int) -> float:
    """Median seconds of one call (CUDA events on a GPU, the wall clock on a CPU)."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1000)
        else:
            started = time.perf_counter()
            call()
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def peak_bytes(call: Callable[[], object], device: torch.device) -> int | None:
    """Bytes a call allocates at its peak above what was allocated before it (GPU only)."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    call()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def measure(T: int, dtype: torch.dtype, args: argparse.Namespace, device: torch.device) -> list[dict]:
    gen = torch.Generator(device=device).manual_seed(0)
    shape = (1, args.heads, T, args.head_size)
    q, k, v = (torch.randn(shape, generator=gen, device=device, dtype=dtype) for _ in range(3))
    grad_out = torch.randn(shape, generator=gen, device=device, dtype=dtype)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    rows = []
    for name, attend in ways(device).items():
        torch.testing.assert_close(attend(q, k, v), expected, atol=2e-2, rtol=0)
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]

        def forward(attend=attend):
            with torch.no_grad():
                return attend(q, k, v)

        def forward_backward(attend=attend, leaves=leaves):
            out = attend(*leaves)
            return torch.autograd.grad(out, leaves, grad_out)

        for direction, call in (("forward", forward), ("forward+backward", forward_backward)):
            seconds = timed(call, device, args.warmup, args.repeats)
            rows.append(
                {
                    "way": name,
                    "direction": direction,
                    "T": T,
                    "dtype": str(dtype).removeprefix("torch."),
                    "N": 1,
                    "h": args.heads,
                    "d": args.head_size,
                    "seconds": seconds,
                    "tokens_per_s": T / seconds,
                    "peak_bytes": peak_bytes(call, device),
                    "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu (smoke run)",
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        "| dtype | T | direction | triton tokens/s | sdpa flash tokens/s | lesson 07 tokens/s | triton / sdpa "
        "| peak MiB: triton | sdpa flash | lesson 07 |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    by = {(r["dtype"], r["T"], r["direction"], r["way"]): r for r in rows}
    for dtype, T, direction in sorted({(r["dtype"], r["T"], r["direction"]) for r in rows}):
        get = [by[dtype, T, direction, way] for way in ("triton", "sdpa flash", "lesson 07")]
        mib = ["-" if r["peak_bytes"] is None else f"{r['peak_bytes'] / 2**20:.1f}" for r in get]
        lines.append(
            f"| {dtype} | {T} | {direction} | {get[0]['tokens_per_s']:,.0f} | {get[1]['tokens_per_s']:,.0f} "
            f"| {get[2]['tokens_per_s']:,.0f} | {get[0]['tokens_per_s'] / get[1]['tokens_per_s']:.2f} "
            f"| {mib[0]} | {mib[1]} | {mib[2]} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--dtypes", nargs="+", choices=sorted(DTYPES), default=["float16", "bfloat16"])
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--head-size", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--smoke", action="store_true", help="check the script on the CPU at a tiny size")
    parser.add_argument("--log", type=Path, default=None, help="JSON lines, written afresh")
    args = parser.parse_args()
    if not triton_available():
        print(f"nothing to measure: {TRITON_MISSING}")
        return
    if args.smoke:
        device = torch.device("cpu")
        args.lengths, args.heads, args.head_size, args.warmup, args.repeats = [64], 2, 16, 0, 1
    elif not torch.cuda.is_available():
        print(
            "nothing to measure: no CUDA device. On a CPU the kernels run in Triton's interpreter, which is correct "
            "but says nothing about speed; run this on a machine with an NVIDIA GPU (or --smoke to check the script)."
        )
        return
    else:
        device = torch.device("cuda")
    rows = [row for name in args.dtypes for T in args.lengths for row in measure(T, DTYPES[name], args, device)]
    if args.log:
        args.log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(table(rows))


if __name__ == "__main__":
    main()
