"""Does ``torch.compile`` make a Multi30k training step faster on one CPU thread? (issue 17: add a flag only if so)

    python benchmarks/translation_compile.py --data-dir path/to/multi30k

Times the command line's ``multi30k`` preset on real batches (token-budget batches vary in shape, as in
training): the first 20 steps (compilation included) and the next 100, eager and compiled
(``dynamic=True``, so that new batch shapes do not each recompile). Each mode runs in its own process.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from helpers.data.batching import make_batches  # noqa: E402
from helpers.data.corpus import load_corpus  # noqa: E402
from helpers.models.translation import build_translator  # noqa: E402
from helpers.models.translation.cli import PRESETS  # noqa: E402
from helpers.models.translation.pipeline import encode_pairs  # noqa: E402
from helpers.models.translation.training import teacher_forcing, translation_loss  # noqa: E402


def time_steps(data_dir: str, compiled: bool) -> tuple[float, float]:
    """Seconds for the first 20 training steps and for the next 100."""
    torch.set_num_threads(1)
    config = PRESETS["multi30k"]
    corpus = load_corpus("multi30k", "train", data_dir)
    translator = build_translator(corpus, config, "cpu")
    examples = encode_pairs(translator, corpus)
    batches = make_batches([s for s, _ in examples], [t for _, t in examples], config.batch_tokens, shuffle=True)
    model = translator.model.train()
    net = torch.compile(model, dynamic=True) if compiled else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, fused=True)

    def step(batch) -> None:
        tgt_in, tgt_out = teacher_forcing(batch.tgt)
        loss = translation_loss(net(batch.src, tgt_in), tgt_out, config.label_smoothing)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    seconds = []
    for chunk in (batches[:20], batches[20:120]):
        start = time.perf_counter()
        for batch in chunk:
            step(batch)
        seconds.append(time.perf_counter() - start)
    return seconds[0], seconds[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True, help="folder with the six Multi30k task-1 .gz files")
    parser.add_argument("--mode", choices=["eager", "compiled"], help=argparse.SUPPRESS)  # one mode, in a child
    args = parser.parse_args()
    if args.mode:
        first, rest = time_steps(args.data_dir, args.mode == "compiled")
        print(f"| {args.mode} | {first:.1f} | {rest:.1f} | {rest / 100:.2f} |", flush=True)
        return
    print("| mode | first 20 steps (s) | next 100 steps (s) | s per step |\n|---|---:|---:|---:|", flush=True)
    for mode in ("eager", "compiled"):  # separate processes: no compiled state or warm caches carry over
        subprocess.run([sys.executable, __file__, "--data-dir", args.data_dir, "--mode", mode], check=True)


if __name__ == "__main__":
    main()
