"""StreamingLLM on SmolLM2 (issue 44, item 1): next-token loss with a window alone and with the first 4 tokens kept.

SmolLM2-135M-Instruct (``load_pretrained_lm()``, the course's ``GPT``) reads 1,536 tokens of English prose in one
prefill per variant, every layer masked by ``helpers.masks.streaming_mask`` (``helpers.streaming.nll_by_position``):
full causal; a window of 256 alone; 256 plus the first 4 tokens ("sinks"); 64 alone; 64 plus 4. The score is the
mean negative log-likelihood of tokens 512 .. 1,535 (every query then has more past than either window).

The texts are sections of the Python reference shipped in the standard library (``pydoc_data.topics``), each
section's first 1,536 tokens: ``execmodel`` ("Execution model") is the lesson's text; ``types``, ``comparisons``,
``assignment``, ``import`` and ``typesmapping`` are held out (the lesson does not read them). None of them is part
of another (``specialnames`` holds ``customization``, ``compound`` holds ``try``: those are left out).

One JSON line per (text, variant) goes to ``--log`` (the mean from token 512 and the means of each 64-token
block, for a loss-against-position figure); the table is printed (``--table LOG`` prints a log's table only).

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/lesson14_sinks.py --log benchmarks/lesson14_sinks.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from pydoc_data.topics import topics

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from helpers.models.language_model import load_pretrained_lm  # noqa: E402
from helpers.streaming import nll_by_position  # noqa: E402

LESSON_TEXT = "execmodel"
HELD_OUT = ("types", "comparisons", "assignment", "import", "typesmapping")
TOKENS, FROM, BLOCK = 1536, 512, 64
VARIANTS = {  # name: (window, sinks); window None = full causal
    "full": (None, 0),
    "window 256": (256, 0),
    "window 256 + 4 firsts": (256, 4),
    "window 64": (64, 0),
    "window 64 + 4 firsts": (64, 4),
}


def text_ids(tokenizer, section: str) -> torch.Tensor:
    """The first ``TOKENS`` tokens of a ``pydoc_data.topics`` section, (1, T)."""
    ids = tokenizer(topics[section], return_tensors="pt").input_ids[:, :TOKENS]
    if ids.size(1) < TOKENS:
        raise ValueError(f"section {section!r} has {ids.size(1)} tokens, fewer than {TOKENS}")
    return ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--log", type=Path, help="write one JSON line per (text, variant) here")
    parser.add_argument("--texts", nargs="*", default=[LESSON_TEXT, *HELD_OUT], help="pydoc_data.topics sections")
    parser.add_argument("--table", type=Path, help="print the table of this JSON-lines log and stop")
    args = parser.parse_args()
    if args.table:
        print_table([json.loads(line) for line in args.table.read_text().splitlines() if line.strip()])
        return
    model, tokenizer = load_pretrained_lm()
    rows = []
    for section in args.texts:
        ids = text_ids(tokenizer, section)
        for name, (window, sinks) in VARIANTS.items():
            start = time.perf_counter()
            nll = nll_by_position(model, ids, window, sinks)[0]  # (T - 1,): nll[t - 1] is token t's
            seconds = time.perf_counter() - start
            blocks = nll.view(-1)[BLOCK - 1 :].view(-1, BLOCK).mean(dim=1)  # tokens 64 .. 127, 128 .. 191, ...
            row = {
                "text": section,
                "role": "lesson" if section == LESSON_TEXT else "held out",
                "variant": name,
                "window": window,
                "sinks": sinks,
                "tokens": TOKENS,
                "nll_from_512": round(float(nll[FROM - 1 :].mean()), 4),
                "nll_by_block_of_64": [round(float(b), 4) for b in blocks],
                "seconds": round(seconds, 1),
                "loadavg": [round(x, 2) for x in os.getloadavg()],
                "torch_threads": torch.get_num_threads(),
            }
            rows.append(row)
            print(json.dumps({k: row[k] for k in ("text", "variant", "nll_from_512", "seconds")}), flush=True)
            if args.log:
                with args.log.open("a") as log:
                    log.write(json.dumps(row) + "\n")
    print_table(rows)


def print_table(rows: list[dict]) -> None:
    texts = list(dict.fromkeys(row["text"] for row in rows))
    print(f"\nmean NLL of tokens {FROM} .. {TOKENS - 1} ({TOKENS} tokens of each text)")
    print(f"{'variant':24}" + "".join(f"{t:>14}" for t in texts) + f"{'held-out mean':>15}")
    for name in VARIANTS:
        by_text = {row["text"]: row["nll_from_512"] for row in rows if row["variant"] == name}
        held = [by_text[t] for t in texts if t != LESSON_TEXT and t in by_text]
        mean = f"{sum(held) / len(held):15.3f}" if held else f"{'':15}"
        print(f"{name:24}" + "".join(f"{by_text.get(t, float('nan')):14.3f}" for t in texts) + mean)


if __name__ == "__main__":
    main()
