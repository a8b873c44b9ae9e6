"""Lesson 14's recall task: softmax attention, linear attention and the gated delta rule trained on lesson 10's
repeated random segments, at one size, over seeds.

Small rotary GPTs that differ only in their layers' kind (``GPTConfig.layer_kinds``): "global" (softmax attention,
a KV cache), "linear" (causal linear attention) and "delta" (the gated delta rule), both of the latter from
``helpers.delta_rule`` with a state of h · d · d numbers per layer and no short convolution; both layers alike,
or a hybrid of softmax and linear or delta in either order: layer 0 linear or delta and layer 1 softmax (Qwen3-Next's
order, linear layers before the softmax one) or layer 0 softmax and layer 1 the other kind. The size is lesson 11's
trained comparison (V = 32, T = 32, E = 32, h = 4 heads of d = 8, 2 layers, a GELU feed-forward of 64, LayerNorm,
rotary positions, which the linear layers apply to their queries and keys too) on lesson 10's data (segments of
4-12 tokens repeated once, the loss on the predictable tokens only, AdamW 3e-3, batches of 32,
``helpers.analysis.cache_budget.train_repeated``: the same batches for every kind of a seed). The delta layers
add beta's and alpha's projections (E -> h each), 264 parameters a layer. ``--steps``: 1,000 by default (lesson
11 took 1,200; 20-90 s a run on one thread), 3,000 for the longer runs.

Measured per run on a held-out batch of 512 sequences:

* the loss on the repeated half's predictable tokens (chance ln V = 3.47) and the top-1 accuracy there (chance
  1 / V = 0.03): recall of a token seen once, 4-12 positions back;
* an induction-like score that every kind has: each layer's (T, T) matrix W with outputs = W V (softmax's weights,
  linear attention's masked Q K^T, the delta rule's ``delta_rule_weights``), its absolute values normalised per row
  (for softmax that is the weights themselves), and lesson 10's induction score on that: the share of a query's
  weight on the token after an earlier copy of itself, the best head of layer 1;
* what generation keeps after the T tokens: the cache's bytes measured (``KVCache.nbytes``, float32) and counted
  (``kv_cache_bytes`` or ``recurrent_state_bytes``, asserted equal), and the same count at T = 4,096.

    OMP_NUM_THREADS=1 nice /work/main/.venv/bin/python benchmarks/lesson14_recall.py --seeds 0 1 2
    OMP_NUM_THREADS=1 nice /work/main/.venv/bin/python benchmarks/lesson14_recall.py --seeds 0 1 2 --steps 3000

Each run appends one JSON line to ``--log`` with ``os.getloadavg()`` at its end; runs already there (same settings)
are skipped. ``--table`` prints the table from the log without training.
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

from helpers.analysis.cache_budget import train_repeated  # noqa: E402
from helpers.analysis.circuits import induction_score, repeated_batch, repeated_loss  # noqa: E402
from helpers.gpt import GPT, GPTConfig  # noqa: E402
from helpers.kv_cache import kv_cache_bytes, recurrent_state_bytes  # noqa: E402

SETTINGS = {
    "vocab_size": 32,
    "seq_len": 32,
    "lengths": [4, 12],
    "embed_dim": 32,
    "num_heads": 4,
    "num_layers": 2,
    "ff_dim": 64,
    "lr": 3e-3,
    "steps": 1000,
    "every": 100,
}
# name -> the kind of each of the 2 layers: the three alike, and the hybrids in both orders. Qwen3-Next's order
# puts the linear layers first and a softmax layer after them, as lesson 10's circuit reads a previous-token head
# (layer 0) before the induction head (layer 1); the other order, softmax first, is kept for comparison.
KINDS = {
    "softmax": ("global", "global"),
    "linear": ("linear", "linear"),
    "gated delta": ("delta", "delta"),
    "softmax, then linear": ("global", "linear"),
    "softmax, then gated delta": ("global", "delta"),
    "linear, then softmax": ("linear", "global"),
    "gated delta, then softmax": ("delta", "global"),
}
LONG_T = 4096


def build(kind: str) -> GPT:
    c = SETTINGS
    config = GPTConfig(
        vocab_size=c["vocab_size"], embed_dim=c["embed_dim"], num_heads=c["num_heads"], num_kv_heads=c["num_heads"],
        num_layers=c["num_layers"], ff_dim=c["ff_dim"], positions="rotary",
        layer_kinds=KINDS[kind],
    )  # fmt: skip
    return GPT(config)


def absolute_share(weights: torch.Tensor) -> torch.Tensor:
    """|W| normalised per row: (N, h, T, T) -> the same, each query's row summing to 1 (softmax's weights stay)."""
    magnitude = weights.abs()
    return magnitude / magnitude.sum(-1, keepdim=True).clamp_min(1e-12)


def cache_bytes(model: GPT, kind: str, tokens: int) -> int:
    """The count of what generation keeps after ``tokens`` tokens of one sequence, float32: a KV cache for each
    softmax layer, a state for each other one."""
    c, softmax = model.config, KINDS[kind].count("global")
    kv = kv_cache_bytes(softmax, c.num_kv_heads, c.head_dim, tokens, bytes_per_number=4) if softmax else 0
    others = c.num_layers - softmax
    return kv + (
        recurrent_state_bytes(others, c.num_heads, c.head_dim, c.head_dim, bytes_per_number=4) if others else 0
    )


@torch.no_grad()
def measure(model: GPT, kind: str, seed: int) -> dict:
    c = SETTINGS
    test = repeated_batch(
        512, c["seq_len"], c["vocab_size"], tuple(c["lengths"]), torch.Generator().manual_seed(1000 + seed)
    )
    logits, weights = model(test.ids, need_weights=True)
    keep = test.predictable[:, :-1]
    correct = logits[:, :-1].argmax(-1) == test.ids[:, 1:]
    induction = induction_score(absolute_share(weights[-1]), test.ids)  # (h,), layer 1
    cache = model.new_cache()
    model(test.ids[:1], cache)  # one sequence of T tokens
    measured = cache.nbytes()
    counted = cache_bytes(model, kind, c["seq_len"])
    assert measured == counted, (kind, measured, counted)
    return {
        "repeated_loss": float(repeated_loss(logits, test)),
        "recall_accuracy": float(correct[keep].float().mean()),
        "induction_share_layer1": float(induction.max()),
        "cache_bytes_measured_T": measured,
        "cache_bytes_counted_long_T": cache_bytes(model, kind, LONG_T),
    }


def one_run(kind: str, seed: int, steps: int) -> dict:
    c = SETTINGS
    torch.manual_seed(seed)
    model = build(kind)
    result = train_repeated(model, steps, c["seq_len"], tuple(c["lengths"]), lr=c["lr"], seed=seed, every=c["every"])
    return {
        "kind": kind,
        "seed": seed,
        "steps": steps,
        "threads": torch.get_num_threads(),
        "settings": c,
        "parameters": sum(p.numel() for p in model.parameters()),
        "train_loss_history": result.history.loss,
        **measure(model, kind, seed),
        "train_tokens_per_second": result.tokens_per_second,
        "loadavg": os.getloadavg(),
    }


def span(values, digits=2) -> str:
    low, high = min(values), max(values)
    return f"{low:.{digits}f}" if f"{low:.{digits}f}" == f"{high:.{digits}f}" else f"{low:.{digits}f}-{high:.{digits}f}"


def table(rows: list[dict]) -> str:
    lines = [
        f"| kind | steps | parameters | loss on the repeated half (chance {math.log(SETTINGS['vocab_size']):.2f}) "
        f"| recall accuracy (chance {1 / SETTINGS['vocab_size']:.2f}) | induction share, best layer-1 head "
        f"| cache bytes at T = {SETTINGS['seq_len']} (fp32, measured) | at T = {LONG_T} (counted) | seeds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for steps in sorted({r["steps"] for r in rows}):
        for kind in KINDS:
            lines += _row([r for r in rows if r["kind"] == kind and r["steps"] == steps])
    return "\n".join(lines)


def _row(mine: list[dict]) -> list[str]:
    """One line of the table: min-max over the seeds of one kind and number of steps (none if no run)."""
    if not mine:
        return []
    first = mine[0]
    return [
        f"| {first['kind']} | {first['steps']} | {first['parameters']} | {span([r['repeated_loss'] for r in mine])} "
        f"| {span([r['recall_accuracy'] for r in mine])} | {span([r['induction_share_layer1'] for r in mine])} "
        f"| {first['cache_bytes_measured_T']:,} | {first['cache_bytes_counted_long_T']:,} "
        f"| {sorted(r['seed'] for r in mine)} |"
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=SETTINGS["steps"])
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    parser.add_argument("--log", type=Path, default=ROOT / "benchmarks" / "lesson14_recall.jsonl")
    parser.add_argument("--table", action="store_true", help="print the table from the log and stop")
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.log.read_text().splitlines()] if args.log.exists() else []
    same = [r for r in rows if r["settings"] == SETTINGS]
    if not args.table:
        for seed in args.seeds:
            for kind in args.kinds:
                if any(r["kind"] == kind and r["seed"] == seed and r["steps"] == args.steps for r in same):
                    continue
                started = time.perf_counter()
                row = one_run(kind, seed, args.steps)
                same.append(row)
                with args.log.open("a") as log:
                    log.write(json.dumps(row) + "\n")
                print(f"{kind} seed {seed}: loss {row['repeated_loss']:.3f}, recall {row['recall_accuracy']:.2f}, "
                      f"induction share {row['induction_share_layer1']:.2f}, {time.perf_counter() - started:.0f} s, "
                      f"load {row['loadavg'][0]:.1f}", flush=True)  # fmt: skip
    print(table(same))


if __name__ == "__main__":
    main()
