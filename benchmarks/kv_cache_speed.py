"""Time per generated token against its position, with and without the KV cache, for lesson 07's GPT.

Runs the lesson's model size (random weights: the time does not depend on them) on one thread, several times,
and prints per run the total speed-up and the median time per token over the last 40 steps (the statistic
lesson 07 prints), so that the lesson states only what held over runs.
Usage: .venv/bin/python benchmarks/kv_cache_speed.py [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from helpers import GPT, GPTConfig


def step_times(model: GPT, prompt: torch.Tensor, steps: int, use_cache: bool) -> list[float]:
    """Milliseconds of each generation step (greedy), with or without the cache."""
    tokens, cache, times = prompt, (model.new_cache() if use_cache else None), []
    with torch.inference_mode():
        logits = model(tokens, cache)
        for _ in range(steps):
            next_token = logits[:, -1].argmax(dim=-1, keepdim=True)
            tokens = torch.cat((tokens, next_token), dim=1)
            start = time.perf_counter()
            logits = model(next_token if use_cache else tokens, cache)
            times.append(1000 * (time.perf_counter() - start))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=651, embed_dim=64, num_heads=4, num_kv_heads=2, num_layers=2, ff_dim=128)
    model = GPT(config).eval()
    prompt = torch.tensor([[1, 5, 6]])
    step_times(model, prompt, 20, True), step_times(model, prompt, 20, False)  # warm-up
    print("run | total ms: cache  no cache  speed-up | median ms/token, last 40 steps: cache  no cache  speed-up")
    for run in range(args.runs):
        cached, plain = step_times(model, prompt, args.steps, True), step_times(model, prompt, args.steps, False)
        late = (statistics.median(cached[-40:]), statistics.median(plain[-40:]))
        print(
            f"{run:3d} | {sum(cached):8.0f} {sum(plain):8.0f}   x{sum(plain) / sum(cached):4.1f} | "
            f"{late[0]:6.2f} {late[1]:6.2f}   x{late[1] / late[0]:4.1f}"
        )


if __name__ == "__main__":
    main()
