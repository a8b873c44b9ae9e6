"""Attention's cost against the length T: time and peak memory of three ways to compute it, side by side in one run.

* weights: ``helpers.scaled_dot_product_attention``, which materialises the (N, h, L, S) weights (the path
  ``helpers.MultiHeadAttention`` takes when weights are asked for);
* sdpa: ``torch.nn.functional.scaled_dot_product_attention``, PyTorch's fused kernel (the path
  ``MultiHeadAttention(need_weights=False)`` takes);
* flash: ``helpers.flash_attention``, lesson 07's tiled attention in plain PyTorch.

Self-attention, N = 1, 8 heads of 64, causal by default, float32, inference mode. Peak memory is the resident
memory a call adds at its peak (``helpers.peak_memory``: Linux's VmHWM, reset before each call, with glibc told to
return freed blocks); time is the median of several calls, the three ways alternating so that a changing load hits
all alike.

    .venv/bin/python benchmarks/attention_cost.py [--lengths 512 1024 2048 4096 8192] [--repeats 3] [--no-causal]
        [--threads 1]

On a busy machine pass ``--threads 1``: flash's many small products suffer most when two threads wait for each other.

Prints a Markdown table and the targets of lesson 07 (flash at most 3x sdpa and faster than the weights path from
T = 1024 up; flash's memory growing from T = 1024 to the largest T by less than a tenth of the (h, T, T) weights).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from functools import partial

import torch
import torch.nn.functional as F

from helpers import flash_attention, peak_memory, scaled_dot_product_attention

HEADS, HEAD_DIM = 8, 64
PATHS = {
    "weights": lambda q, k, v, causal: scaled_dot_product_attention(q, k, v, is_causal=causal)[0],
    "sdpa": lambda q, k, v, causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
    "flash": lambda q, k, v, causal: flash_attention(q, k, v, is_causal=causal),
}


def measure(T: int, causal: bool, repeats: int) -> dict[str, tuple[float, int]]:
    """{path: (median seconds, peak bytes)} for one length."""
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 1, HEADS, T, HEAD_DIM).unbind(0)  # (N, h, T, d) each
    calls = {name: partial(attend, q, k, v, causal) for name, attend in PATHS.items()}
    peaks = {name: peak_memory(call)[1] for name, call in calls.items()}  # also each path's warm-up at this T
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():  # alternate the paths
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    return {name: (statistics.median(times[name]), peaks[name]) for name in calls}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-causal", dest="causal", action="store_false")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}, "
        f"load average {os.getloadavg()[0]:.1f}; N = 1, h = {HEADS}, d = {HEAD_DIM}, "
        f"{'causal' if args.causal else 'no mask'}\n"
    )
    with torch.inference_mode():
        for attend in PATHS.values():  # first calls set up thread pools and caches: not attention's cost
            attend(*torch.randn(3, 1, HEADS, 256, HEAD_DIM).unbind(0), args.causal)
        rows = {T: measure(T, args.causal, args.repeats) for T in args.lengths}
    mib = 2**20
    print(
        "| T | weights (ms) | sdpa (ms) | flash (ms) | flash / sdpa | weights / flash "
        "| peak MiB: weights | sdpa | flash | (h, T, T) weights MiB |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for T, r in rows.items():
        (tw, mw), (ts, ms), (tf, mf) = r["weights"], r["sdpa"], r["flash"]
        print(
            f"| {T} | {1000 * tw:.1f} | {1000 * ts:.1f} | {1000 * tf:.1f} | {tf / ts:.2f} | {tw / tf:.2f} | "
            f"{mw / mib:.1f} | {ms / mib:.1f} | {mf / mib:.1f} | {HEADS * T * T * 4 / mib:.0f} |"
        )
    print()
    from_1024 = [T for T in rows if T >= 1024]
    if from_1024:
        worst = max(rows[T]["flash"][0] / rows[T]["sdpa"][0] for T in from_1024)
        faster = all(rows[T]["flash"][0] < rows[T]["weights"][0] for T in from_1024)
        print(f"- flash at most 3x sdpa from T = 1024 up: worst {worst:.2f}x -> {'met' if worst <= 3 else 'NOT met'}")
        print(f"- flash faster than the weights path from T = 1024 up: {'met' if faster else 'NOT met'}")
    if 1024 in rows and max(rows) > 1024:
        top = max(rows)
        growth = rows[top]["flash"][1] - rows[1024]["flash"][1]
        weights = HEADS * top * top * 4
        print(
            f"- flash memory growth T = 1024 -> {top}: {growth / mib:.1f} MiB, vs a tenth of the (h, T, T) weights "
            f"{weights / 10 / mib:.0f} MiB -> {'met' if growth < weights / 10 else 'NOT met'}"
        )


if __name__ == "__main__":
    main()
