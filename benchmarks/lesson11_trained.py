"""Lesson 11's trained comparison: MHA, GQA, MQA and MLA at a cache budget, on lesson 10's repeated-token task.

Five small rotary GPTs (E = 32, h = 4 heads of d = 8, 2 layers, GELU feed-forward of 64) that differ only in their
attention, each trained with the same seed on the same batches for the same number of steps
(``helpers.analysis.cache_budget``): MHA (64 cache numbers per token and layer), GQA with 2 key/value heads (32),
MQA (16), and MLA at MQA's budget (d_c = 12 + d_R = 4 = 16) and at GQA's (28 + 4 = 32). Recorded per run: the
final loss on the predictable tokens, the cache bytes per token (float32 here; halve them for 16-bit), training
tokens per second, the first step whose loss is below half of chance (lesson 10's phase change), and the best
induction score of layer 1's heads (lesson 10's score; above 0.3 counts as an induction head formed).

    OMP_NUM_THREADS=1 nice .venv/bin/python benchmarks/lesson11_trained.py --seeds 0 1 2 \\
        --log benchmarks/lesson11_trained.jsonl

Each run appends one JSON line to ``--log`` with ``os.getloadavg()`` at its end; runs already there (same settings)
are skipped. ``--table`` prints the min-max table from the log without training. Tokens per second are measured
while other processes share the machine: compare them within one run only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from helpers.analysis.cache_budget import build_variant, cache_numbers_per_layer, train_repeated  # noqa: E402

# The lesson's settings (notebooks/11_latent_attention.ipynb, its trained-comparison cell): keep the two in step.
LESSON = {
    "vocab_size": 32,
    "seq_len": 32,
    "lengths": [4, 12],
    "embed_dim": 32,
    "num_heads": 4,
    "num_layers": 2,
    "ff_dim": 64,
    "lr": 3e-3,
    "steps": 1200,
    "every": 50,
}
# name -> the variant's keyword arguments for build_variant
VARIANTS = {
    "MHA": {"kind": "MHA"},
    "GQA-2": {"kind": "GQA", "num_kv_heads": 2},
    "MQA": {"kind": "MQA"},
    "MLA-12+4": {"kind": "MLA", "latent_dim": 12, "rotary_dim": 4},
    "MLA-28+4": {"kind": "MLA", "latent_dim": 28, "rotary_dim": 4},
}
INDUCTION_FORMED = 0.3


def one_run(name: str, seed: int, steps: int) -> dict:
    c = LESSON
    torch.manual_seed(seed)
    model = build_variant(
        vocab_size=c["vocab_size"], embed_dim=c["embed_dim"], num_heads=c["num_heads"],
        num_layers=c["num_layers"], ff_dim=c["ff_dim"], **VARIANTS[name],
    )  # fmt: skip
    result = train_repeated(model, steps, c["seq_len"], tuple(c["lengths"]), lr=c["lr"], seed=seed, every=c["every"])
    h = result.history
    best = [float(scores[1].max()) for scores in h.induction]  # layer 1's best head at every evaluation
    formed = next((s for s, score in zip(h.steps, best, strict=True) if score > INDUCTION_FORMED), None)
    numbers = cache_numbers_per_layer(model)
    return {
        "variant": name,
        "seed": seed,
        "steps": steps,
        "threads": torch.get_num_threads(),
        "settings": c,
        "cache_numbers_per_token_layer": numbers,
        "cache_bytes_per_token_fp32": numbers * c["num_layers"] * 4,
        "parameters": sum(p.numel() for p in model.parameters()),
        "final_loss": result.final_loss,
        "phase_change_step": h.first_step_below(math.log(c["vocab_size"]) / 2),
        "final_induction_score": best[-1],
        "induction_formed_step": formed,
        "train_tokens_per_second": result.tokens_per_second,
        "loadavg": os.getloadavg(),
    }


def span(values, digits=2) -> str:
    """min-max of the values that are not None ("never" if none is)."""
    values = [v for v in values if v is not None]
    if not values:
        return "never"
    low, high = min(values), max(values)
    return f"{low:.{digits}f}" if low == high else f"{low:.{digits}f}-{high:.{digits}f}"


def steps_span(rows: list[dict], key: str) -> str:
    """The min-max step over the runs, and how many runs never got there."""
    never = sum(r[key] is None for r in rows)
    return span([r[key] for r in rows], 0) + (f" ({never} never)" if never and never < len(rows) else "")


def table(rows: list[dict]) -> str:
    lines = [
        "| variant | cache numbers / token / layer | bytes / token (fp32, 2 layers) | final loss | phase change step "
        "| induction score (layer 1) | induction formed (>0.3) at step | train tokens/s | seeds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    for name in VARIANTS:
        mine = [r for r in rows if r["variant"] == name]
        if not mine:
            continue
        phase, formed = (steps_span(mine, key) for key in ("phase_change_step", "induction_formed_step"))
        seeds = sorted(r["seed"] for r in mine)
        lines.append(
            f"| {name} | {mine[0]['cache_numbers_per_token_layer']} | {mine[0]['cache_bytes_per_token_fp32']} "
            f"| {span([r['final_loss'] for r in mine])} | {phase} | {span([r['final_induction_score'] for r in mine])} "
            f"| {formed} | {span([r['train_tokens_per_second'] for r in mine], 0)} | {seeds} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=LESSON["steps"])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--log", type=Path, default=ROOT / "benchmarks" / "lesson11_trained.jsonl")
    parser.add_argument("--table", action="store_true", help="print the table from the log and stop")
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.log.read_text().splitlines()] if args.log.exists() else []
    if not args.table:
        for seed in args.seeds:
            for name in args.variants:
                if any(
                    r["variant"] == name and r["seed"] == seed and r["steps"] == args.steps and r["settings"] == LESSON
                    for r in rows
                ):
                    continue
                started = time.perf_counter()
                row = one_run(name, seed, args.steps)
                rows.append(row)
                with args.log.open("a") as log:
                    log.write(json.dumps(row) + "\n")
                seconds, load = time.perf_counter() - started, row["loadavg"][0]
                print(f"{name} seed {seed}: loss {row['final_loss']:.3f}, induction "
                      f"{row['final_induction_score']:.2f}, {seconds:.0f} s, load {load:.1f}", flush=True)  # fmt: skip
    print(table([r for r in rows if r["steps"] == args.steps and r["settings"] == LESSON]))


if __name__ == "__main__":
    main()
