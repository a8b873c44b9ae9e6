"""Measure lesson 06's translation targets on this machine and print them (for benchmarks/RESULTS.md).

    python benchmarks/translation.py              # train the lesson's model, score it, time decoding
    python benchmarks/translation.py --lesson     # also execute the whole lesson notebook and time it

Targets (issue 7): trained within the lesson's 60 s -> test BLEU >= 97, >= 97 on the unseen-combination
subset, the running example translated exactly, best head's alignment accuracy >= 80 %; greedy decoding
of the 1,000 test sentences < 30 s; the whole lesson <= 150 s.

Times are reported two ways, because the course machine is shared: wall-clock seconds, and process CPU
seconds. Training runs on one thread (as the lesson does), so its CPU time is what the wall time would be
on a quiet machine; the wall time here includes waiting for other people's work.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from helpers.data.corpus import CAPTIONS_DIR, load_corpus  # noqa: E402
from helpers.models.translation import alignment_report, build_translator, evaluate, fit, score_translations  # noqa: E402
from helpers.models.translation.config import LESSON_CONFIG, LESSON_STEPS  # noqa: E402

RUNNING_EXAMPLE = "Eine Mutter und ihr kleiner Sohn genießen einen schönen Tag im Freien."


class Timer:
    """Wall-clock and process CPU seconds of a block (CPU of this process, all its threads)."""

    def __enter__(self) -> Timer:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


def measure_model(threads: int) -> dict:
    torch.set_num_threads(threads)
    train, val, test = (load_corpus("captions", split) for split in ("train", "val", "test"))
    unseen = [int(line) for line in (CAPTIONS_DIR / "test.unseen").read_text().split()]
    with Timer() as training:
        translator = build_translator(train, LESSON_CONFIG, device="cpu")
        history = fit(translator, train, val, steps=LESSON_STEPS, progress=False)
    with Timer() as greedy:
        scores, hypotheses = evaluate(translator, test)
    unseen_scores = score_translations([hypotheses[i] for i in unseen], [test.en[i] for i in unseen])
    with Timer() as beam:
        beam_scores, _ = evaluate(translator, test, beam_size=4)
    with Timer() as aligning:
        report = alignment_report(translator, test)
    example = translator.translate([RUNNING_EXAMPLE])[0]
    return {
        "threads": threads,
        "steps": LESSON_STEPS,
        "parameters": translator.model.num_parameters(),
        "train_wall_s": round(training.wall, 1),
        "train_cpu_s": round(training.cpu, 1),
        "target_tokens_per_cpu_s": round(history.target_tokens / training.cpu),
        "final_loss": history.losses[-1],
        "test_bleu": scores.bleu,
        "test_chrf": scores.chrf,
        "unseen_bleu": unseen_scores.bleu,
        "unseen_sentences": len(unseen),
        "signature": scores.signature,
        "running_example": example,
        "running_example_exact": example == test.en[test.de.index(RUNNING_EXAMPLE)],
        "best_head_alignment": round(float(report.accuracy.max()), 3),
        "best_head": report.best_head(),
        "diagonal_baseline": round(report.diagonal_baseline, 3),
        "greedy_1000_wall_s": round(greedy.wall, 2),
        "greedy_1000_cpu_s": round(greedy.cpu, 2),
        "beam4_bleu": beam_scores.bleu,
        "beam4_1000_wall_s": round(beam.wall, 2),
        "alignment_report_wall_s": round(aligning.wall, 2),
    }


def measure_lesson() -> dict:
    """Execute notebooks/06_translation.ipynb into a temporary copy; wall and CPU (kernel included) seconds."""
    notebook = ROOT / "notebooks" / "06_translation.ipynb"
    out = Path("/tmp") / "06_translation.benchmark.ipynb"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter",
            "nbconvert",
            "--to",
            "notebook",
            "--execute",
            "--ExecutePreprocessor.timeout=600",
            str(notebook),
            "--output",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"lesson_wall_s": round(time.perf_counter() - start, 1), "lesson_cpu_s_incl_kernel": round(cpu, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads for training (the lesson uses 1)")
    parser.add_argument("--lesson", action="store_true", help="also execute and time the whole lesson notebook")
    args = parser.parse_args()
    with open("/proc/loadavg") as handle:
        load = handle.read().split()[0]
    results = {"load_average_at_start": float(load), **measure_model(args.threads)}
    if args.lesson:
        results.update(measure_lesson())
    print(json.dumps(results, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
