"""How far back Gemma 3 270M's local and global heads look, on texts lesson 13 does not use.

For each text (two licence texts of the system's /usr/share/common-licenses, and the course corpus' validation
captions in English and in German, each joined into one running text), the first ``--length`` tokens (<bos>
included) get one forward pass with the heads' weights; ``helpers.analysis.attention_distance`` gives every
head's mean look-back distance sum_j w_ij (i - j) over the queries at positions >= ``--start`` (default 512, the
window: from there on a local head could use its whole window, so its distance is at most 511, and a global head
could look up to i tokens back). The table by layer and head is the mean over the texts; the summary by kind is
per text, and the lines under it say which comparisons hold on every text.

``--first-key-out`` leaves each query's weight on the first token (<bos>) out and renormalises the rest: a global
head parks much of its weight on <bos> (lesson 09's sink), which is the farthest key of all, so with it left out
the distance says how far back the head reads the text itself.

One JSON line per text goes to ``--log`` (the (18, 4) table, the summary by kind, seconds and load).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/lesson13_distance.py --log benchmarks/lesson13_distance.jsonl
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/lesson13_distance.py --first-key-out \
        --log benchmarks/lesson13_distance.jsonl
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from helpers.analysis.attention_distance import attention_distances, distance_by_kind, layer_kinds  # noqa: E402

LICENSES = Path("/usr/share/common-licenses")


def held_out_texts() -> dict[str, str]:
    """Name -> text: running English and German prose of kinds the lesson does not show."""
    captions = ROOT / "data" / "captions"
    texts = {
        "GPL-3 licence": (LICENSES / "GPL-3").read_text(encoding="utf-8"),
        "MPL-2.0 licence": (LICENSES / "MPL-2.0").read_text(encoding="utf-8"),
        "captions, English": " ".join((captions / "val.en").read_text(encoding="utf-8").split("\n")),
        "captions, German": " ".join((captions / "val.de").read_text(encoding="utf-8").split("\n")),
    }
    return {name: " ".join(text.split()) for name, text in texts.items()}  # one running text: no layout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=1536, help="tokens of each text")
    parser.add_argument("--start", type=int, default=512, help="the first query position averaged")
    parser.add_argument("--first-key-out", action="store_true", help="leave each query's weight on <bos> out")
    parser.add_argument("--log", type=Path, default=None)
    args = parser.parse_args()
    from helpers.models.language_model import load_pretrained_lm

    model, tokenizer = load_pretrained_lm("gemma-3-270m")
    kinds, reach = layer_kinds(model), model.config.window - 1  # a local head's largest possible distance
    tables, summaries = {}, {}
    for name, text in held_out_texts().items():
        ids = tokenizer(text, return_tensors="pt").input_ids[:, : args.length]
        if ids.size(1) < args.length:
            raise SystemExit(f"{name} has only {ids.size(1)} tokens, fewer than --length {args.length}")
        start = time.perf_counter()
        table = attention_distances(model, ids, start=args.start, first_key_out=args.first_key_out)  # (18, 4)
        rows = distance_by_kind(table, kinds)
        tables[name], summaries[name] = table, rows
        line = {"text": name, "T": ids.size(1), "start": args.start, "first_key_out": args.first_key_out}
        line |= {"distances": table.round(decimals=1).tolist()}
        line |= {"by_kind": [dataclasses.asdict(row) for row in rows], "seconds": round(time.perf_counter() - start, 1)}
        line |= {"threads": torch.get_num_threads(), "load": [round(x, 2) for x in os.getloadavg()]}
        if args.log:
            with args.log.open("a") as log:
                log.write(json.dumps(line) + "\n")
        print(json.dumps({k: v for k, v in line.items() if k != "distances"}), flush=True)
    mean = torch.stack(list(tables.values())).mean(0)  # (18, 4)
    print(f"\nMean look-back distance (tokens), queries {args.start} .. {args.length - 1}, mean of {len(tables)} texts")
    print("| layer | kind | head 0 | head 1 | head 2 | head 3 |\n|---|---|---|---|---|---|")
    for layer, kind in enumerate(kinds):
        print(f"| {layer} | {kind} | " + " | ".join(f"{x:.0f}" for x in mean[layer].tolist()) + " |")
    print(f"\n| text | local: mean (min .. max) | global: mean (min .. max) | global heads > {reach} |")
    print("|---|---|---|---|")
    for name, rows in summaries.items():
        local, full = (next(r for r in rows if r.kind == kind) for kind in ("local", "global"))
        beyond = int((tables[name][list(full.layers)] > reach).sum())
        print(
            f"| {name} | {local.mean:.0f} ({local.low:.0f} .. {local.high:.0f}) | "
            f"{full.mean:.0f} ({full.low:.0f} .. {full.high:.0f}) | {beyond} of {full.heads} |"
        )


if __name__ == "__main__":
    main()
