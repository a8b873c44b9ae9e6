"""A pass key past the window, held out of lesson 13's sample: can Gemma 3 270M fetch a number stated more than
``gap`` tokens before the question, and which global layers does it take?

The prompt (``helpers.analysis.passkey.passkey_prompt``) states a five-digit key, repeats a filler until the key's
last token lies more than ``gap`` tokens before the question's first token, then asks "What is the pass key? The
pass key is". The window of Gemma's local layers is 512 tokens, so with every gap here (600 and more) no local layer
reads the key from the question: only the global layers 5, 11 and 17 can, or a local layer reading what one of them
wrote later in the prompt. Each prompt is answered greedily (8 tokens, the course's KV cache) under the variants of
``passkey_variants``: intact, every layer local (the three global layers given the window 512, each keeping its
rotary base), and each global layer made local alone. Fetched: the answer's first number is the key.

The keys (drawn with ``--seed``) and the three fillers below are the benchmark's own: the lesson uses others.
One JSON line per trial goes to ``--log`` (and a last line with the run's seconds, threads and load); the table of
keys fetched by variant and gap is printed, or rebuilt from the log with ``--table``.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/lesson13_passkey.py --log benchmarks/lesson13_passkey.jsonl
    .venv/bin/python benchmarks/lesson13_passkey.py --table benchmarks/lesson13_passkey.jsonl
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from helpers.analysis.passkey import PasskeyTrial, count_fetched, passkey_trials  # noqa: E402

FILLERS = (
    "A farmer walks along the road to the market. He carries apples and bread in a basket. ",
    "The museum opens at nine in the morning. Visitors look at old maps, coins and paintings. ",
    "Rain fell over the harbour all night. The boats rocked gently, and the lamps on the pier stayed lit. ",
)
GAPS = (600, 1000, 1500)


def table(trials: list[PasskeyTrial]) -> str:
    """Markdown: keys fetched per variant, by gap and in all."""
    gaps = sorted({t.gap for t in trials})
    by_gap = count_fetched(trials, by=("variant", "gap"))
    lines = ["| variant | " + " | ".join(f"gap > {g}" for g in gaps) + " | all |", "|---" * (len(gaps) + 2) + "|"]
    for variant, (fetched, total) in count_fetched(trials).items():
        cells = [f"{by_gap[(variant, g)][0]}/{by_gap[(variant, g)][1]}" for g in gaps]
        lines.append(f"| {variant} | " + " | ".join(cells) + f" | {fetched}/{total} |")
    lengths = [t.T for t in trials]
    lines.append(f"\nprompts of {min(lengths)} .. {max(lengths)} tokens; {len(trials)} answers")
    return "\n".join(lines)


def read_log(path: Path) -> list[PasskeyTrial]:
    trials = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if "variant" in row:
            trials.append(PasskeyTrial(**(row | {"layers": tuple(row["layers"])})))
    return trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=4, help="how many random five-digit keys")
    parser.add_argument("--gaps", type=int, nargs="+", default=list(GAPS), help="key-to-question tokens, more than")
    parser.add_argument("--fillers", type=int, default=len(FILLERS), help="how many of the three fillers")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--log", type=Path, default=None)
    parser.add_argument("--table", type=Path, default=None, help="print the table of a log and stop")
    args = parser.parse_args()
    if args.table:
        print(table(read_log(args.table)))
        return
    from helpers.models.language_model import load_pretrained_lm

    model, tokenizer = load_pretrained_lm("gemma-3-270m")
    keys = random.Random(args.seed).sample(range(10000, 100000), args.keys)
    start = time.perf_counter()

    def record(trial: PasskeyTrial) -> None:
        line = json.dumps(dataclasses.asdict(trial))
        print(line, flush=True)
        if args.log:
            with args.log.open("a") as log:
                log.write(line + "\n")

    trials = passkey_trials(model, tokenizer, keys, FILLERS[: args.fillers], args.gaps, on_trial=record)
    run = {"seconds": round(time.perf_counter() - start, 1), "threads": torch.get_num_threads()}
    run |= {"load": [round(x, 2) for x in os.getloadavg()], "seed": args.seed, "keys": keys}
    if args.log:
        with args.log.open("a") as log:
            log.write(json.dumps(run) + "\n")
    print(json.dumps(run))
    print(table(trials))


if __name__ == "__main__":
    main()
