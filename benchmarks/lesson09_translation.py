"""Lesson 09's comparison: SmolLM2-135M-Instruct (a general chat model) against lesson 06's small translator.

Lesson 09 runs SmolLM2 live on a handful of test sentences but cannot train lesson 06's translator within its
time budget, nor read anything lesson 06 left behind. So this script trains lesson 06's model exactly as
lesson 06 does (``build_translator`` and ``fit`` with ``LESSON_CONFIG``, ``LESSON_STEPS`` steps, one thread)
for several seeds, and scores it and SmolLM2 (through ``chat_translate``: its chat template, greedy, our KV
cache) on the same sentences: the lesson's handful (``LESSON_LINES``) and the first ``TEST_SENTENCES`` lines of
the test split. sacreBLEU's BLEU and chrF, one reference each.

    nice .venv/bin/python benchmarks/lesson09_translation.py --seeds 0 1 2 --log benchmarks/lesson09_translation.jsonl

Each run (one translator seed, or SmolLM2) appends one JSON line to ``--log`` as it finishes; runs already in the
log with the same fingerprint (config, corpus, model sources, torch version, the sentences) are skipped, so an
interrupted sweep resumes. ``--table`` prints the RESULTS.md table from the log. A translator run is about a
minute of CPU on a quiet machine; SmolLM2 on 26 sentences about as long.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from lesson06_seeds import fingerprint as translator_fingerprint  # noqa: E402  (after the path set-up above)

from helpers.data.corpus import ParallelCorpus, load_corpus  # noqa: E402
from helpers.models.language_model import TRANSLATE_REQUEST, chat_translate, load_pretrained_lm  # noqa: E402
from helpers.models.translation import (  # noqa: E402
    TrainingHistory,
    Translator,
    build_translator,
    fit,
    score_translations,
)
from helpers.models.translation.config import LESSON_CONFIG, LESSON_STEPS  # noqa: E402

# The test lines (0-based) lesson 09 translates live: the running example (line 10) and the first five.
LESSON_LINES = (10, 0, 1, 2, 3, 4)
TEST_SENTENCES = 20  # the first 20 test lines: SmolLM2 needs about a second per sentence on a quiet machine


def scores(hypotheses: list[str], references: list[str]) -> dict:
    result = score_translations(hypotheses, references)
    return {"bleu": result.bleu, "chrf": result.chrf, "sentences": result.sentences}


def sentences_key() -> str:
    text = json.dumps([LESSON_LINES, TEST_SENTENCES, TRANSLATE_REQUEST])
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def score_both_sets(translate, test) -> dict:
    """``translate`` (list of German -> list of English) on the lesson's lines and on the first test lines."""
    lesson = translate([test.de[i] for i in LESSON_LINES])
    first = translate(test.de[:TEST_SENTENCES])
    return {
        "lesson": scores(lesson, [test.en[i] for i in LESSON_LINES]),
        "test_first": scores(first, test.en[:TEST_SENTENCES]),
        "lesson_hypotheses": lesson,
    }


def train_translator(seed: int, train: ParallelCorpus, val: ParallelCorpus) -> tuple[Translator, TrainingHistory]:
    """Lesson 06's model trained as lesson 06 trains it: ``LESSON_CONFIG`` with ``seed``, ``LESSON_STEPS`` steps,
    one thread (``benchmarks/lesson17_side_by_side.py`` trains it here too)."""
    torch.set_num_threads(1)  # as lesson 06 trains it
    translator = build_translator(train, replace(LESSON_CONFIG, seed=seed), device="cpu")
    return translator, fit(translator, train, val, steps=LESSON_STEPS, progress=False)


def measure_translator(seed: int) -> dict:
    train, val, test = (load_corpus("captions", split) for split in ("train", "val", "test"))
    cpu = time.process_time()
    translator, history = train_translator(seed, train, val)
    result = {
        "model": "translator",
        "seed": seed,
        "threads": 1,
        "parameters": translator.model.num_parameters(),
        "train_cpu_s": round(time.process_time() - cpu, 1),
        "val_bleu": history.best_score,
    }
    result |= score_both_sets(translator.translate, test)
    result["test_all"] = scores(translator.translate(test.de), test.en)
    return result


def measure_smollm2(threads: int) -> dict:
    torch.set_num_threads(threads)
    test = load_corpus("captions", "test")
    model, tokenizer = load_pretrained_lm()
    cpu = time.process_time()
    result = {
        "model": "smollm2",
        "threads": threads,
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    result |= score_both_sets(lambda german: chat_translate(model, tokenizer, german), test)
    result["cpu_s"] = round(time.process_time() - cpu, 1)
    return result


def table(runs: list[dict]) -> str:
    translators = [r for r in runs if r["model"] == "translator"]
    smol = [r for r in runs if r["model"] == "smollm2"]

    def span(group, part, metric):
        values = [r[part][metric] for r in group]
        return "–" if not values else f"{min(values):.1f} – {max(values):.1f}"

    lines = [
        "| model | parameters | runs | BLEU, lesson's 6 lines | chrF, lesson's 6 lines | "
        f"BLEU, first {TEST_SENTENCES} test lines | chrF, first {TEST_SENTENCES} |",
        "|---|---:|---|---|---|---|---|",
    ]
    for name, group, runs_text in (
        ("lesson 06's translator", translators, "seeds " + ", ".join(str(r["seed"]) for r in translators)),
        ("SmolLM2-135M-Instruct", smol, "threads " + ", ".join(str(r["threads"]) for r in smol)),
    ):
        if group:
            lines.append(
                f"| {name} | {group[0]['parameters']:,} | {runs_text} | {span(group, 'lesson', 'bleu')} | "
                f"{span(group, 'lesson', 'chrf')} | {span(group, 'test_first', 'bleu')} | "
                f"{span(group, 'test_first', 'chrf')} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2], help="translator seeds")
    parser.add_argument("--smollm2-threads", type=int, nargs="*", default=[2], help="thread counts for SmolLM2")
    parser.add_argument("--log", type=Path, default=ROOT / "benchmarks" / "lesson09_translation.jsonl")
    parser.add_argument("--table", action="store_true", help="print the table from the log and stop")
    args = parser.parse_args()
    runs = [json.loads(line) for line in args.log.read_text().splitlines()] if args.log.exists() else []
    if args.table:
        print(table(runs))
        return
    stamp = f"{translator_fingerprint()}-{sentences_key()}"
    done = {(r["model"], r.get("seed"), r["threads"]) for r in runs if r.get("fingerprint") == stamp}
    todo = [("translator", seed, 1) for seed in args.seeds] + [("smollm2", None, t) for t in args.smollm2_threads]
    for model, seed, threads in todo:
        if (model, seed, threads) in done:
            continue
        print(f"{model} seed={seed} threads={threads} ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        result = measure_translator(seed) if model == "translator" else measure_smollm2(threads)
        result |= {"fingerprint": stamp, "wall_s": round(time.perf_counter() - start, 1)}
        with args.log.open("a") as log:
            log.write(json.dumps(result, ensure_ascii=False) + "\n")
        runs.append(result)
        print(json.dumps({k: v for k, v in result.items() if k != "lesson_hypotheses"}), file=sys.stderr, flush=True)
    print(table([r for r in runs if r.get("fingerprint") == stamp]))


if __name__ == "__main__":
    main()
