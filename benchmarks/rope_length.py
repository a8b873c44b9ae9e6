"""Lesson 07's length experiment over several seeds: train short, test longer, with sinusoidal, rotary or no positions.

The task: at every position output the token 3 positions earlier (a copy with a delay). One-layer GPTs with 2 heads
of 16 (``helpers.GPT``), trained 200 steps on sequences of 32 tokens, exactly as in the lesson, then tested on 200
fresh sequences of 32, 64 and 128 tokens. One torch thread, like the lesson.

    .venv/bin/python benchmarks/rope_length.py [--seeds 0 1 2 3 4] [--steps 200]

Prints a Markdown table of accuracies per seed, and which claims held on every seed.
"""

from __future__ import annotations

import argparse

import torch

from helpers import GPT, GPTConfig
from helpers.gpt import train_gpt

LENGTHS = (32, 64, 128)
POSITIONS = ("sinusoidal", "rotary", "none")


def delayed_copy(num_sequences: int, T: int, seed: int, delay: int = 3, vocab: int = 16):
    x = torch.randint(vocab, (num_sequences, T), generator=torch.Generator().manual_seed(seed))
    y = torch.full_like(x, -100)
    y[:, delay:] = x[:, :-delay]
    return x, y


def accuracy(model: GPT, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        predicted = model(x).argmax(dim=-1)
    return (predicted[y != -100] == y[y != -100]).float().mean().item()


def run(seed: int, steps: int) -> dict[str, list[float]]:
    """The lesson's cell with the seed in place of 0 (the lesson itself is seed 0)."""
    train_x, train_y = delayed_copy(4000, 32, seed=seed)
    results = {}
    for positions in POSITIONS:
        torch.manual_seed(seed)
        config = GPTConfig(
            vocab_size=16,
            embed_dim=32,
            num_heads=2,
            num_kv_heads=2,
            num_layers=1,
            ff_dim=64,
            positions=positions,
            max_len=128,
        )
        model = GPT(config)
        train_gpt(model, train_x, train_y, steps=steps, batch_size=32, lr=1e-2, seed=seed)
        results[positions] = [accuracy(model, *delayed_copy(200, T, seed=100 + seed)) for T in LENGTHS]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("| seed | positions | " + " | ".join(f"T = {T}" for T in LENGTHS) + " |")
    print("|---|---|" + "---:|" * len(LENGTHS))
    all_results = []
    for seed in args.seeds:
        results = run(seed, args.steps)
        all_results.append(results)
        for positions, row in results.items():
            print(f"| {seed} | {positions} | " + " | ".join(f"{a:.2f}" for a in row) + " |", flush=True)
    claims = {
        "none < 0.5 at T = 32": all(r["none"][0] < 0.5 for r in all_results),
        "sinusoidal and rotary > 0.95 at T = 32": all(
            min(r["sinusoidal"][0], r["rotary"][0]) > 0.95 for r in all_results
        ),
        "both below 0.95 at T = 64 (they degrade)": all(
            max(r["sinusoidal"][1], r["rotary"][1]) < 0.95 for r in all_results
        ),
        "rotary > sinusoidal at T = 64": all(r["rotary"][1] > r["sinusoidal"][1] for r in all_results),
        "rotary > sinusoidal at T = 128": all(r["rotary"][2] > r["sinusoidal"][2] for r in all_results),
    }
    print()
    for claim, held in claims.items():
        print(f"- {claim}: {'held on every seed' if held else 'did NOT hold on every seed'}")


if __name__ == "__main__":
    main()
