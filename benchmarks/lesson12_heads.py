"""Which of SmolLM2's IOI heads hold beyond the prompts a lesson runs: held-out names and templates.

Lesson 12 traces the indirect-object circuit on its own prompts. A head it names (a name mover, a negative name
mover) should be one that does the same on prompts it never saw. This script measures, for every name set ×
template (the course's three ``TEMPLATES`` and three held-out ones written here), with SmolLM2-135M-Instruct
built from the course's modules:

- the behaviour: the share of prompts whose logit difference logit(IO) − logit(S) is positive, its mean and min,
  and the corrupted ("ABC") batch's mean;
- the logit lens: the first layer whose residual reads a logit difference above half the model's own;
- direct logit attribution per head: the top ``--top`` positive and negative heads.

Then it prints which heads are among the top positive (negative) heads in *every* batch: what a lesson may claim.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/lesson12_heads.py --log benchmarks/lesson12_heads.jsonl

One JSON line per batch is appended to ``--log``; ``--table`` prints the summary from the log without a model.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from helpers.analysis.attribution import direct_logit_attribution, logit_lens  # noqa: E402
from helpers.analysis.ioi import TEMPLATES, ioi_batch, logit_difference, name_pairs  # noqa: E402

HELD_OUT_TEMPLATES = (
    "While {A} and {B} were cooking dinner, {S} passed the salt to",
    "When {A} and {B} arrived at the station, {S} waved goodbye to",
    "Later {A} and {B} visited the museum, and {S} showed a painting to",
)
NAME_SETS = {
    "lesson": ["Mary", "John", "Alice", "Bob", "Tom", "Anna", "James", "Sarah"],
    "held-out": ["Paul", "Emma", "David", "Kate", "Mark", "Lisa", "Peter", "Laura"],
}


def measure(model, tokenizer, template: str, names: list[str], top: int) -> dict:
    batch = ioi_batch(tokenizer, template, name_pairs(names))
    with torch.no_grad():
        clean = logit_difference(model(batch.ids), batch, per_prompt=True)
        corrupted = logit_difference(model(batch.corrupted), batch)
    lens = logit_lens(model, batch)
    parts = direct_logit_attribution(model, batch)
    h = parts.heads.size(1)
    order = parts.heads.flatten().argsort(descending=True)
    as_pairs = [(int(i) // h, int(i) % h, round(float(parts.heads.flatten()[i]), 3)) for i in order]
    return {
        "template": template,
        "names": names,
        "right": float((clean > 0).float().mean()),
        "logit_diff_mean": round(float(clean.mean()), 3),
        "logit_diff_min": round(float(clean.min()), 3),
        "corrupted_mean": round(float(corrupted), 3),
        "lens_first_layer_above_half": int((lens > lens[-1] / 2).float().argmax()),
        "lens": [round(float(x), 3) for x in lens],
        "top_positive": as_pairs[:top],
        "top_negative": as_pairs[::-1][:top],
        "load": [round(x, 2) for x in os.getloadavg()],
    }


def table(rows: list[dict]) -> None:
    print("| names | template | right | logit diff mean (min) | ABC mean | lens: first residual > half | top + heads |")
    print("|---|---|---:|---:|---:|---:|---|")
    for r in rows:
        heads = ", ".join(f"{layer}.{head} {value:+.2f}" for layer, head, value in r["top_positive"][:3])
        print(f"| {r['names'][0]}… | {r['template'][:38]}… | {r['right']:.0%} | {r['logit_diff_mean']:.2f} "
              f"({r['logit_diff_min']:.2f}) | {r['corrupted_mean']:.2f} | {r['lens_first_layer_above_half']} | "
              f"{heads} |")  # fmt: skip
    for sign in ("top_positive", "top_negative"):
        common = set.intersection(*({(a, b) for a, b, _ in r[sign]} for r in rows))
        print(f"\nheads in every batch's {sign.replace('_', ' ')}: {sorted(common) or 'none'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--log", type=Path, default=ROOT / "benchmarks" / "lesson12_heads.jsonl")
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--table", action="store_true", help="print the summary of the log, run nothing")
    args = parser.parse_args()
    if not args.table:
        from helpers.models.language_model import load_pretrained_lm

        model, tokenizer = load_pretrained_lm()
        done = set()
        if args.log.exists():
            done = {(r["template"], tuple(r["names"])) for r in map(json.loads, args.log.read_text().splitlines())}
        for names in NAME_SETS.values():
            for template in TEMPLATES + HELD_OUT_TEMPLATES:
                if (template, tuple(names)) in done:
                    continue
                start = time.perf_counter()
                row = measure(model, tokenizer, template, names, args.top)
                row["seconds"] = round(time.perf_counter() - start, 1)
                with args.log.open("a") as log:
                    log.write(json.dumps(row) + "\n")
                print(f"{names[0]}… {template[:40]}…: right {row['right']:.0%}, {row['seconds']} s", flush=True)
    table([json.loads(line) for line in args.log.read_text().splitlines()])


if __name__ == "__main__":
    main()
