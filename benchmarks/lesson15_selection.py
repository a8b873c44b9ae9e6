"""Lesson 15 on SmolLM2: if each query may read only k of its earlier keys, which k? (issue item 3)

SmolLM2-135M-Instruct (``load_pretrained_lm()``, the course's ``GPT``, 30 layers of 9 heads) reads the first 1,024
tokens of each text in one prefill per rule and budget, every layer softmaxing over the keys the rule names
(``helpers.analysis.key_selection.selected_attention``); the score is the mean next-token NLL of tokens 512 ..
1,023. Budgets k = 32, 64, 128, 256 keys per query. Rules:

* full causal attention (every key);
* oracle per head: each head's own k highest scores;
* oracle shared: one top k for all of a layer's heads, by their summed attention (DSA's shape, a perfect indexer);
* window: the k most recent keys; window + first 4: the first 4 tokens and the k - 4 most recent (StreamingLLM);
* MoBA, blocks of 16 keys, per head: the query's own block and the k / 16 - 1 earlier blocks whose mean-pooled key
  scores highest;
* indexer: one lightning indexer per layer (``helpers.lightning_indexer``: 4 ReLU heads of 64, rotary with the
  model's base), trained by KL to the layer's summed attention on the training texts below (the model frozen;
  ``train_indexers``), its top k shared by the heads; once per training seed (``--seeds``, default 0 and 1).

Texts: sections of the Python reference in the standard library (``pydoc_data.topics``), the first 1,024 tokens of
each. Evaluation (held out, as in lesson 14): ``types``, ``comparisons``, ``assignment``, ``import``,
``typesmapping``. Indexer training: ``compound``, ``formatstrings``, ``string-methods``, ``typesseq``. The lesson's
own text, ``execmodel``, is used by neither. The script checks that no paragraph of a training section is in an
evaluation section or the lesson's (``naming``, part of ``execmodel``, is therefore not a training text).

Besides the losses: the recall by layer at k = 64 (the share of each layer's full attention mass, over heads and
the queries from 512, that a rule's keys hold, in the unchanged model), and how much of the distance from window +
first 4 to the shared oracle the indexer closes, (loss(window + 4) - loss(indexer)) / (loss(window + 4) - loss(oracle
shared)), per text and seed. One JSON line per measurement goes to ``--log``; ``--table LOG`` reprints the tables.

``--passkey`` (lesson 13's model instead): Gemma 3 270M answers lesson 13's benchmark prompts (``benchmarks/
lesson13_passkey.py``: its 4 keys of seed 2026, 3 fillers, gaps of more than 600, 1,000 and 1,500 tokens; the
lesson uses others) with its three global layers reading only the shared oracle's top k keys per query, k = 8, 32,
128 (``selected_attention(..., layers=global_layers(model))``; the local layers keep their window of 512, so only
the global layers can read the key). Greedy, 8 tokens, the course's KV cache; fetched = the answer's first number
is the key. Its lines go to the same log (kind "passkey").

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/lesson15_selection.py --log benchmarks/lesson15_selection.jsonl
    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/lesson15_selection.py --passkey \
        --log benchmarks/lesson15_selection.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from pydoc_data.topics import topics

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from helpers.analysis.key_selection import (  # noqa: E402
    SelectionRule,
    indexer_top_k,
    mean_loss,
    moba,
    oracle_per_head,
    oracle_shared,
    recalls_by_layer,
    recent_window,
    train_indexers,
    window_and_first,
)
from helpers.models.language_model import load_pretrained_lm  # noqa: E402

LESSON_TEXT = "execmodel"
HELD_OUT = ("types", "comparisons", "assignment", "import", "typesmapping")
TRAINING = ("compound", "formatstrings", "string-methods", "typesseq")
TOKENS, FROM = 1024, 512
BUDGETS = (32, 64, 128, 256)
RECALL_AT = 64
MOBA_BLOCK, FIRST = 16, 4
PASSKEY_BUDGETS, PASSKEY_SEED = (8, 32, 128), 2026
INDEXER = "indexer"
RULES: dict[str, Callable[[int], SelectionRule]] = {
    "oracle per head": oracle_per_head,
    "oracle shared": oracle_shared,
    "window": recent_window,
    f"window + first {FIRST}": lambda k: window_and_first(k, FIRST),
    f"MoBA, blocks of {MOBA_BLOCK}": lambda k: moba(k, MOBA_BLOCK),
}
SINKS, SHARED = f"window + first {FIRST}", "oracle shared"
# The orderings judged on every text (and seed): (lower, higher) in loss.
ORDERINGS = (
    ("oracle per head", "oracle shared"),
    ("oracle shared", "oracle per head"),
    ("oracle shared", INDEXER),
    (INDEXER, SINKS),
    (INDEXER, f"MoBA, blocks of {MOBA_BLOCK}"),
    (f"MoBA, blocks of {MOBA_BLOCK}", SINKS),
    (SINKS, "window"),
)


def paragraphs(section: str) -> set[str]:
    """A section's paragraphs of more than 60 characters: enough to tell whether one section holds another."""
    return {p.strip() for p in topics[section].split("\n\n") if len(p.strip()) > 60}


def check_disjoint(training: tuple[str, ...], evaluation: tuple[str, ...]) -> None:
    """Refuse a training section that shares a paragraph with an evaluation section or the lesson's text."""
    used = set().union(*(paragraphs(s) for s in (*evaluation, LESSON_TEXT)))
    shared = {s: len(paragraphs(s) & used) for s in training}
    if any(shared.values()) or set(training) & {*evaluation, LESSON_TEXT}:
        raise ValueError(f"training sections must not overlap the evaluation or lesson texts: {shared}")


def text_ids(tokenizer, section: str) -> torch.Tensor:
    """The first ``TOKENS`` tokens of a ``pydoc_data.topics`` section, (1, T)."""
    ids = tokenizer(topics[section], return_tensors="pt").input_ids[:, :TOKENS]
    if ids.size(1) < TOKENS:
        raise ValueError(f"section {section!r} has {ids.size(1)} tokens, fewer than {TOKENS}")
    return ids


def machine() -> dict:
    return {"loadavg": [round(x, 2) for x in os.getloadavg()], "torch_threads": torch.get_num_threads()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--log", type=Path, help="append one JSON line per measurement here")
    parser.add_argument("--table", type=Path, help="print the tables of this JSON-lines log and stop")
    parser.add_argument("--texts", nargs="*", default=list(HELD_OUT), help="evaluation sections")
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1], help="indexer training seeds")
    parser.add_argument("--steps", type=int, default=150, help="AdamW steps per layer's indexer")
    parser.add_argument("--queries", type=int, default=256, help="random queries per training step")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--passkey", action="store_true", help="Gemma 3 270M's pass key instead (see the docstring)")
    args = parser.parse_args()
    if args.table:
        print_tables([json.loads(line) for line in args.table.read_text().splitlines() if line.strip()])
        return
    if args.passkey:
        passkey(args.log)
        return
    check_disjoint(TRAINING, tuple(args.texts))
    model, tokenizer = load_pretrained_lm()
    rows: list[dict] = []

    def record(row: dict) -> None:
        row |= machine()
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "by_layer"}), flush=True)
        if args.log:
            with args.log.open("a") as log:
                log.write(json.dumps(row) + "\n")

    training = [text_ids(tokenizer, s) for s in TRAINING]
    indexers = {}
    for seed in args.seeds:
        start = time.perf_counter()
        indexers[seed] = train_indexers(model, training, steps=args.steps, lr=args.lr, queries=args.queries, seed=seed)
        settings = {"steps": args.steps, "lr": args.lr, "queries": args.queries, "texts": list(TRAINING)}
        record({"kind": "training", "seed": seed, **settings, "seconds": round(time.perf_counter() - start, 1)})

    for section in args.texts:
        evaluate(model, text_ids(tokenizer, section), section, indexers, record)
    print_tables(rows)


def evaluate(model, ids: torch.Tensor, section: str, indexers: dict, record: Callable[[dict], None]) -> None:
    """Every rule's loss at every budget on one text, then the recall by layer at ``RECALL_AT``."""

    def measure(rule_name: str, k: int | None, seed: int | None, rule: SelectionRule | None) -> None:
        start = time.perf_counter()
        nll = round(mean_loss(model, ids, rule, FROM), 4)
        seconds = round(time.perf_counter() - start, 1)
        record(
            {"kind": "loss", "text": section, "rule": rule_name, "k": k, "seed": seed, "nll": nll, "seconds": seconds}
        )

    measure("full", None, None, None)
    for k in BUDGETS:
        for name, make in RULES.items():
            measure(name, k, None, make(k))
        for seed, trained in indexers.items():
            measure(INDEXER, k, seed, indexer_top_k(trained, k))
    recall_rules = {name: make(RECALL_AT) for name, make in RULES.items()}
    recall_rules |= {f"{INDEXER} {seed}": indexer_top_k(trained, RECALL_AT) for seed, trained in indexers.items()}
    start = time.perf_counter()
    found = recalls_by_layer(model, ids, recall_rules, FROM)
    seconds = round(time.perf_counter() - start, 1)
    for name, by_layer in found.items():
        seed = int(name.split()[-1]) if name.startswith(INDEXER) else None
        row = {"kind": "recall", "text": section, "rule": INDEXER if seed is not None else name, "k": RECALL_AT}
        record(row | {"seed": seed, "by_layer": [round(float(r), 4) for r in by_layer], "seconds": seconds})


def passkey(log: Path | None) -> None:
    """Gemma 3 270M on lesson 13's benchmark prompts, its three global layers reading only the shared oracle's
    top k keys per query (its local layers keep their window of 512): is the key still fetched from past the
    window? One JSON line per answer."""
    from lesson13_passkey import FILLERS, GAPS  # the lesson 13 benchmark's prompts (the lesson uses others)

    from helpers.analysis.key_selection import selected_attention
    from helpers.analysis.passkey import answer_greedily, global_layers, is_fetched, passkey_prompt

    model, tokenizer = load_pretrained_lm("gemma-3-270m")
    layers = global_layers(model)
    keys = random.Random(PASSKEY_SEED).sample(range(10000, 100000), 4)  # lesson13_passkey.py's keys
    for filler_index, filler in enumerate(FILLERS):
        for gap in GAPS:
            for key in keys:
                prompt = passkey_prompt(tokenizer, key, filler, gap)
                for k in PASSKEY_BUDGETS:
                    start = time.perf_counter()
                    with selected_attention(model, oracle_shared(k), layers):
                        answer = answer_greedily(model, tokenizer, prompt.ids)
                    row = {"kind": "passkey", "rule": SHARED, "k": k, "layers": list(layers), "key": prompt.key}
                    row |= {"filler": filler_index, "gap": gap, "T": prompt.ids.size(1), "distance": prompt.distance}
                    row |= {"answer": answer, "fetched": is_fetched(answer, prompt.key)}
                    row |= {"seconds": round(time.perf_counter() - start, 1)} | machine()
                    print(json.dumps(row), flush=True)
                    if log:
                        with log.open("a") as out:
                            out.write(json.dumps(row) + "\n")


def losses(rows: list[dict]) -> dict[tuple[str, int | None, str, int | None], float]:
    """(rule, k, text, seed) -> NLL; full attention is filed under every k."""
    found = {}
    for row in rows:
        if row["kind"] != "loss":
            continue
        for k in BUDGETS if row["rule"] == "full" else (row["k"],):
            found[(row["rule"], k, row["text"], row["seed"])] = row["nll"]
    return found


def print_passkey_table(rows: list[dict]) -> None:
    """Keys fetched per budget k and gap, with the global layers reading the shared oracle's top k."""
    gaps = sorted({row["gap"] for row in rows})
    print(f"\nGemma 3 270M, global layers {rows[0]['layers']} reading the shared oracle's top k: keys fetched")
    print("| k | " + " | ".join(f"gap > {g}" for g in gaps) + " | all |")
    print("|---" * (len(gaps) + 2) + "|")
    for k in sorted({row["k"] for row in rows}):
        cells = []
        for gap in [*gaps, None]:
            found = [row["fetched"] for row in rows if row["k"] == k and gap in (None, row["gap"])]
            cells.append(f"{sum(found)}/{len(found)}")
        print(f"| {k} | " + " | ".join(cells) + " |")
    lengths = [row["T"] for row in rows]
    print(f"prompts of {min(lengths)} .. {max(lengths)} tokens")


def print_tables(rows: list[dict]) -> None:
    if any(row["kind"] == "passkey" for row in rows):
        print_passkey_table([row for row in rows if row["kind"] == "passkey"])
        rows = [row for row in rows if row["kind"] != "passkey"]
        if not rows:
            return
    table = losses(rows)
    texts = list(dict.fromkeys(row["text"] for row in rows if row["kind"] == "loss"))
    seeds = sorted({s for (rule, _, _, s) in table if rule == INDEXER})
    names = ["full", *RULES, INDEXER]

    def values(rule: str, k: int) -> list[float]:
        return [v for (r, kk, _, _), v in table.items() if r == rule and kk == k]

    print(f"\nmean NLL of tokens {FROM} .. {TOKENS - 1}, mean over {len(texts)} texts ({', '.join(texts)})")
    print("| keys kept per query (k) | " + " | ".join(str(k) for k in BUDGETS) + " |")
    print("|---|" + "---:|" * len(BUDGETS))
    for name in names:
        cells = []
        for k in BUDGETS:
            found = values(name, k)
            cells.append(f"{statistics.mean(found):.3f}" if found else "")
        print(f"| {name} | " + " | ".join(cells) + " |")
    if seeds:
        spread = []
        for k in BUDGETS:
            by_seed = [
                statistics.mean(v for (r, kk, _, s), v in table.items() if (r, kk, s) == (INDEXER, k, seed))
                for seed in seeds
            ]
            spread.append(f"{min(by_seed):.3f}-{max(by_seed):.3f}")
        print("indexer, mean over texts, min-max over seeds: " + ", ".join(spread))

    print("\norderings in loss, on how many (text, seed) pairs they hold:")
    for lower, higher in ORDERINGS:
        cells = []
        for k in BUDGETS:
            pairs = [(t, s) for t in texts for s in (seeds if INDEXER in (lower, higher) else [None])]
            held = [
                table[(lower, k, t, s if lower == INDEXER else None)]
                < table[(higher, k, t, s if higher == INDEXER else None)]
                for t, s in pairs
                if (lower, k, t, s if lower == INDEXER else None) in table
                and (higher, k, t, s if higher == INDEXER else None) in table
            ]
            cells.append(f"k={k}: {sum(held)}/{len(held)}")
        print(f"  {lower} < {higher}: " + ", ".join(cells))

    print(f"\nshare of the distance from {SINKS} to {SHARED} that the indexer closes (per text and seed):")
    for k in BUDGETS:
        shares = [
            (table[(SINKS, k, t, None)] - table[(INDEXER, k, t, s)])
            / (table[(SINKS, k, t, None)] - table[(SHARED, k, t, None)])
            for t in texts
            for s in seeds
            if (INDEXER, k, t, s) in table and (SINKS, k, t, None) in table and (SHARED, k, t, None) in table
        ]
        if shares:
            print(f"  k={k}: mean {statistics.mean(shares):.2f}, min {min(shares):.2f}, max {max(shares):.2f}")

    recalls = [row for row in rows if row["kind"] == "recall"]
    if recalls:
        print(
            f"\nrecall by layer at k = {recalls[0]['k']} (mean over texts{' and seeds' if seeds else ''}), layers 0 ..:"
        )
        for name in dict.fromkeys(row["rule"] for row in recalls):
            layers = [row["by_layer"] for row in recalls if row["rule"] == name]
            by_layer = [statistics.mean(column) for column in zip(*layers, strict=True)]
            low = min(range(len(by_layer)), key=by_layer.__getitem__)
            print(
                f"  {name:22} mean {statistics.mean(by_layer):.3f}, lowest {by_layer[low]:.3f} (layer {low}): "
                + " ".join(f"{r:.2f}" for r in by_layer)
            )


if __name__ == "__main__":
    main()
