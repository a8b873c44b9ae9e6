"""Train and score the command line's Multi30k preset for given time budgets, with the README's own commands.

    python benchmarks/multi30k.py --data-dir path/to/multi30k --minutes 10 30 60
    python benchmarks/multi30k.py --data-dir path/to/multi30k --minutes 60 --core 0 &   # two budgets side by side,
    python benchmarks/multi30k.py --data-dir path/to/multi30k --minutes 10 30 --core 1  # one core each

Targets (issue 17): test 2016 sacreBLEU >= 36.5 after 30 minutes and >= 40 after 60 minutes of training on one
core (``--threads 1``) of the course's 2-core machine. Each budget is its own run (the learning rate warms up and
decays over the time given), trained by ``python -m helpers.models.translation train`` and scored by ``evaluate --json``
exactly as the README shows, so this measures what a learner gets. Prints one Markdown row per run for
benchmarks/RESULTS.md. Minutes are wall-clock: run it on a quiet machine, or say what else was running.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The last line `train` prints: "best validation BLEU 38.75 at step 1475 of 1475 (1804 s); saved runs/x.pt".
SUMMARY = re.compile(r"best validation BLEU ([\d.]+) at step (\d+) of (\d+)")


def command(core: int | None, *args: str) -> list[str]:
    """``python -m helpers.models.translation --threads 1 ARGS``, pinned to one core when asked (Linux's taskset)."""
    pin = ["taskset", "-c", str(core)] if core is not None else []
    return [*pin, sys.executable, "-m", "helpers.models.translation", "--threads", "1", *args]


def train(minutes: float, data_dir: str, out: Path, seed: int | None, core: int | None) -> dict:
    extra = ["--seed", str(seed)] if seed is not None else []
    args = ["train", "--corpus", "multi30k", "--data-dir", data_dir, "--minutes", str(minutes), "--out", str(out)]
    log = out.with_suffix(".log")
    with log.open("w") as stream:  # one summary line a minute: a log, not a progress bar
        subprocess.run(command(core, *args, *extra), cwd=ROOT, stderr=stream, stdout=stream, check=True)
    found = SUMMARY.search(log.read_text())
    if found is None:
        raise RuntimeError(f"no summary line in {log}")
    return {"best_val_bleu": float(found[1]), "best_step": int(found[2]), "steps": int(found[3])}


def evaluate(checkpoint: Path, beam: int, core: int | None) -> dict:
    args = ["evaluate", "--checkpoint", str(checkpoint), "--split", "test", "--beam", str(beam), "--json"]
    done = subprocess.run(command(core, *args), cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True, help="folder with the six Multi30k task-1 .gz files")
    parser.add_argument("--minutes", type=float, nargs="+", default=[10, 30, 60])
    parser.add_argument("--seed", type=int, default=None, help="override the preset's seed (0)")
    parser.add_argument("--beam", type=int, default=4, help="also score with this beam size (1: greedy only)")
    parser.add_argument("--core", type=int, default=None, help="pin every process to this CPU core (taskset)")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "runs" / "multi30k-benchmark")
    args = parser.parse_args()
    if args.core is not None and shutil.which("taskset") is None:
        parser.error("--core needs taskset (util-linux)")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    print("| minutes | steps | best validation BLEU (at step) | test 2016 BLEU / chrF, greedy | beam |")
    print("|---:|---:|---:|---|---|")
    for minutes in args.minutes:
        out = args.out_dir / f"m30k-{minutes:g}min-seed{args.seed if args.seed is not None else 0}.pt"
        trained = train(minutes, args.data_dir, out, args.seed, args.core)
        greedy = evaluate(out, 1, args.core)
        beam = evaluate(out, args.beam, args.core) if args.beam > 1 else None
        beam_cell = f"{beam['bleu']:.2f} / {beam['chrf']:.2f} (beam {args.beam})" if beam else "-"
        print(
            f"| {minutes:g} | {trained['steps']:,} | {trained['best_val_bleu']:.1f} ({trained['best_step']:,}) "
            f"| {greedy['bleu']:.2f} / {greedy['chrf']:.2f} | {beam_cell} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
