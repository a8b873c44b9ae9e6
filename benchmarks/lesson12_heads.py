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

With ``--circuit`` it measures, on the same batches, what lesson 12's later sections claim (log
``benchmarks/lesson12_circuit.jsonl``): the attention from END to IO and S2 of the heads the lesson names; the
residual entering which layer first carries more at END than at S2; path patching of every head before layer 23,
together, into the layer-23 writers' queries and keys; the duplicate-token and induction heads' path into the
S-inhibition heads' values; and the knock-out shares of the lesson's circuit, of its writers and heads against, and of
as many random heads (three draws).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/lesson12_heads.py --log benchmarks/lesson12_heads.jsonl
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/lesson12_heads.py --circuit     # about 1 minute a batch

With ``--query`` it measures lesson 12's last section on the same batches (log ``benchmarks/lesson12_query.jsonl``):
each name mover's (23.0, 23.1, 23.2) score for S2 minus its score for the IO, from END, split over the parts of END's
residual that make its query (``query_attribution``): the five heads that lower it most, the S-inhibition heads'
parts, and how the parts add up.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/lesson12_heads.py --query       # a few seconds a batch

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

from helpers.analysis.attribution import direct_logit_attribution, logit_lens, query_attribution  # noqa: E402
from helpers.analysis.ioi import TEMPLATES, ioi_batch, logit_difference, name_pairs  # noqa: E402
from helpers.analysis.patching import knock_out, path_patching, residual_patching  # noqa: E402

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


# The heads lesson 12 names, from its run on its own prompts (template 0, the lesson's names).
WRITERS = [(23, 3), (29, 1), (23, 0), (23, 1), (23, 2)]
AGAINST = [(29, 0), (24, 4)]
S_INHIBITION = [(20, 0), (19, 2), (22, 5)]
EARLY = [(8, 1), (5, 6), (2, 4), (9, 2), (17, 4), (17, 5)]  # duplicate-token and induction heads
CIRCUIT = sorted({*WRITERS, *AGAINST, *S_INHIBITION, (18, 1), *EARLY})


def measure_circuit(model, tokenizer, template: str, names: list[str]) -> dict:
    batch = ioi_batch(tokenizer, template, name_pairs(names))
    N = batch.ids.size(0)

    def metric(logits):
        return logit_difference(logits, batch)

    with torch.no_grad():
        logits, weights = model(batch.ids, need_weights=True)
    clean = float(metric(logits))
    rows = torch.arange(N)
    end, io, s2 = batch.positions["END"], batch.positions["IO"], batch.positions["S2"]
    attention = {f"{layer}.{head}": [round(float(weights[layer][rows, head, end, key].mean()), 3) for key in (io, s2)]
                 for layer, head in WRITERS + AGAINST + S_INHIBITION}  # fmt: skip
    layers = list(range(16, 27))
    patched = residual_patching(model, batch.ids, batch.corrupted, metric, [s2, end], layers=layers)
    move = next((layer for layer in layers if patched[layer, 1] > patched[layer, 0]), None)
    before = [(layer, head) for layer in range(23) for head in range(model.config.num_heads)]
    receivers = [pair for pair in WRITERS if pair[0] == 23]
    by_queries = path_patching(model, batch.ids, batch.corrupted, metric, before, receivers, kind="q").effect
    by_keys = path_patching(model, batch.ids, batch.corrupted, metric, before, [(23, 0), (23, 1)], kind="k").effect
    into_values = path_patching(model, batch.ids, batch.corrupted, metric, EARLY, [(19, 0), (20, 0), (22, 1)],
                                kind="v").effect  # fmt: skip
    kept = {"circuit": CIRCUIT, "writers_against": WRITERS + AGAINST, "none": []}
    shares = {name: round(knock_out(model, batch.ids, batch.corrupted, metric, keep) / clean, 3)
              for name, keep in kept.items()}  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    randoms = []
    for _ in range(3):
        drawn = torch.randperm(30 * 9, generator=generator)[: len(CIRCUIT)]
        keep = [divmod(int(i), 9) for i in drawn]
        randoms.append(round(knock_out(model, batch.ids, batch.corrupted, metric, keep) / clean, 3))
    return {
        "template": template,
        "names": names,
        "attention_io_s2": attention,
        "move_layer": move,
        "s2_at_16": round(float(patched[16, 0]), 3),
        "end_at_26": round(float(patched[26, 1]), 3),
        "path_queries": round(by_queries, 3),
        "path_keys": round(by_keys, 3),
        "path_early_into_values": round(into_values, 3),
        "knock_out": shares,
        "knock_out_random": randoms,
        "load": [round(x, 2) for x in os.getloadavg()],
    }


NAME_MOVERS = [(23, 0), (23, 1), (23, 2)]
S_INHIBITION = [(20, 0), (19, 2), (22, 5), (18, 1)]  # the lesson's path-patching senders, and 18.1 (attention only)


def measure_query(model, tokenizer, template: str, names: list[str]) -> dict:
    batch = ioi_batch(tokenizer, template, name_pairs(names))
    row: dict = {"template": template, "names": names, "movers": {}}
    for mover in NAME_MOVERS:
        keys = (batch.positions["S2"], batch.positions["IO"])
        parts = query_attribution(model, batch.ids, mover, batch.positions["END"], keys)
        flat = parts.heads.flatten()
        order = flat.argsort()[:5]
        row["movers"][f"{mover[0]}.{mover[1]}"] = {
            "score_difference": round(float(parts.total), 3),
            "parts_sum": round(float(parts.parts_sum()), 3),
            "heads_sum": round(float(parts.heads.sum()), 3),
            "mlps_sum": round(float(parts.mlps.sum()), 3),
            "most_negative": [[*divmod(int(i), parts.heads.size(1)), round(float(flat[i]), 3)] for i in order],
            "s_inhibition": {f"{a}.{b}": round(float(parts.heads[a, b]), 3) for a, b in S_INHIBITION},
        }
    return row


def query_table(rows: list[dict]) -> None:
    columns = "| names | template | mover | S2 − IO score | heads / MLPs | five heads that lower it most |"
    print(columns + " 20.0 | 19.2 | 22.5 | 18.1 |")
    print("|---|---|---|---:|---:|---|---:|---:|---:|---:|")
    for r in rows:
        for mover, m in r["movers"].items():
            lowest = ", ".join(f"{a}.{b} {v:+.2f}" for a, b, v in m["most_negative"])
            inhibition = " | ".join(f"{m['s_inhibition'][k]:+.2f}" for k in ("20.0", "19.2", "22.5", "18.1"))
            print(f"| {r['names'][0]}… | {r['template'][:30]}… | {mover} | {m['score_difference']:+.2f} | "
                  f"{m['heads_sum']:+.2f} / {m['mlps_sum']:+.2f} | {lowest} | {inhibition} |")  # fmt: skip
    movers = [m for r in rows for m in r["movers"].values()]
    first = {tuple(m["most_negative"][0][:2]) for m in movers}
    in_five = {k: sum(any(f"{a}.{b}" == k for a, b, _ in m["most_negative"]) for m in movers) for k in ("19.2", "22.5")}
    print(f"\nthe head that lowers it most, over {len(movers)} (batch, mover): {sorted(first)}")
    print(f"19.2 among the five lowest: {in_five['19.2']}/{len(movers)}; 22.5: {in_five['22.5']}/{len(movers)}")
    print(f"18.1's part positive: {sum(m['s_inhibition']['18.1'] > 0 for m in movers)}/{len(movers)}")
    print(
        f"every score difference negative: {all(m['score_difference'] < 0 for m in movers)}; "
        f"largest |parts - total|: {max(abs(m['parts_sum'] - m['score_difference']) for m in movers):.3f}"
    )


def query(args) -> None:
    log = ROOT / "benchmarks" / "lesson12_query.jsonl"
    if not args.table:
        from helpers.models.language_model import load_pretrained_lm

        model, tokenizer = load_pretrained_lm()
        done = set()
        if log.exists():
            done = {(r["template"], tuple(r["names"])) for r in map(json.loads, log.read_text().splitlines())}
        for names in NAME_SETS.values():
            for template in TEMPLATES + HELD_OUT_TEMPLATES:
                if (template, tuple(names)) in done:
                    continue
                start = time.perf_counter()
                row = measure_query(model, tokenizer, template, names)
                row["seconds"] = round(time.perf_counter() - start, 1)
                with log.open("a") as out:
                    out.write(json.dumps(row) + "\n")
                print(f"{names[0]}… {template[:40]}…: {row['seconds']} s", flush=True)
    query_table([json.loads(line) for line in log.read_text().splitlines()])


def circuit_table(rows: list[dict]) -> None:
    print("| names | template | move layer | S2 at 16 | END at 26 | path: queries | keys | early -> values | "
          "knock-out: circuit | writers + against | random (3) |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        k = r["knock_out"]
        print(f"| {r['names'][0]}… | {r['template'][:30]}… | {r['move_layer']} | {r['s2_at_16']:.2f} | "
              f"{r['end_at_26']:.2f} | {r['path_queries']:+.2f} | {r['path_keys']:+.2f} | "
              f"{r['path_early_into_values']:+.2f} | {k['circuit']:.0%} | {k['writers_against']:.0%} | "
              f"{', '.join(f'{x:.0%}' for x in r['knock_out_random'])} |")  # fmt: skip


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
    parser.add_argument("--circuit", action="store_true", help="measure lesson 12's circuit claims instead")
    parser.add_argument("--query", action="store_true", help="measure lesson 12's query decomposition instead")
    args = parser.parse_args()
    if args.query:
        query(args)
        return
    if args.circuit:
        circuit(args)
        return
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


def circuit(args) -> None:
    log = ROOT / "benchmarks" / "lesson12_circuit.jsonl"
    if not args.table:
        from helpers.models.language_model import load_pretrained_lm

        model, tokenizer = load_pretrained_lm()
        done = set()
        if log.exists():
            done = {(r["template"], tuple(r["names"])) for r in map(json.loads, log.read_text().splitlines())}
        for names in NAME_SETS.values():
            for template in TEMPLATES + HELD_OUT_TEMPLATES:
                if (template, tuple(names)) in done:
                    continue
                start = time.perf_counter()
                row = measure_circuit(model, tokenizer, template, names)
                row["seconds"] = round(time.perf_counter() - start, 1)
                with log.open("a") as out:
                    out.write(json.dumps(row) + "\n")
                print(f"{names[0]}… {template[:40]}…: {row['seconds']} s", flush=True)
    circuit_table([json.loads(line) for line in log.read_text().splitlines()])


if __name__ == "__main__":
    main()
