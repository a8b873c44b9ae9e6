"""Time helpers.MultiHeadAttention against torch.nn.MultiheadAttention, side by side in one run.

Batch 32, embedding 512, 8 heads, sequence lengths 16 to 1024; inference and forward+backward;
with and without attention weights. Both modules hold the same weights; timings alternate between
them so that a noisy machine slows both alike, and each figure is the median of several repeats.

    .venv/bin/python benchmarks/attention_speed.py [--lengths 16 64 256 1024] [--repeats 5]

Prints a Markdown table of times and ratios (ours / torch: below 1 means ours is faster).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch
from torch import nn

from helpers import MultiHeadAttention

BATCH, EMBED, HEADS = 32, 512, 8


def time_call(fn, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def make_step(module: nn.Module, x: torch.Tensor, need_weights: bool, backward: bool):
    def step():
        if backward:
            out, _ = module(x, x, x, need_weights=need_weights)
            out.sum().backward()
        else:
            with torch.inference_mode():
                module(x, x, x, need_weights=need_weights)

    return step


def compare(length: int, need_weights: bool, backward: bool, repeats: int) -> tuple[float, float]:
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(EMBED, HEADS, batch_first=True)
    ours = MultiHeadAttention(EMBED, HEADS, batch_first=True)
    ours.load_state_dict(theirs.state_dict())
    for module in (ours, theirs):
        module.train(backward)  # inference in eval mode (torch may take its fast path), training otherwise
    x = torch.randn(BATCH, length, EMBED, requires_grad=backward)
    steps = {name: make_step(m, x, need_weights, backward) for name, m in (("ours", ours), ("torch", theirs))}
    for step in steps.values():  # warm-up
        step()
    samples = {"ours": [], "torch": []}
    for _ in range(repeats):  # alternate, so drifting machine load hits both alike
        for name, step in steps.items():
            samples[name] += time_call(step, 1)
    return statistics.median(samples["ours"]), statistics.median(samples["torch"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 64, 256, 1024])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}, "
        f"batch {BATCH}, embedding {EMBED}, {HEADS} heads, median of {args.repeats}\n"
    )
    print("| mode | weights | length | ours (ms) | torch (ms) | ours / torch |")
    print("|---|---|---:|---:|---:|---:|")
    for backward in (False, True):
        for need_weights in (False, True):
            for length in args.lengths:
                ours, theirs = compare(length, need_weights, backward, args.repeats)
                mode = "forward+backward" if backward else "inference"
                print(
                    f"| {mode} | {'yes' if need_weights else 'no'} | {length} | {ours * 1e3:.1f} | "
                    f"{theirs * 1e3:.1f} | {ours / theirs:.2f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
