"""Lesson 17 side by side: lesson 06's small translator, trained from scratch, beside SmolLM2 + LoRA, same captions.

``benchmarks/lesson17_lora.py`` teaches SmolLM2-135M-Instruct the course's captions with LoRA adapters and scores
it on three caption sets. This script trains lesson 06's translator exactly as lesson 06 (and
``benchmarks/lesson09_translation.py``, whose ``train_translator`` it calls) does: ``build_translator`` and ``fit``
with ``LESSON_CONFIG`` and the seed, ``LESSON_STEPS`` steps, one thread, every parameter trained. It scores the
translator's greedy translations with sacreBLEU (BLEU and chrF, one reference each) on the same sets:

* the first 60 test captions (the LoRA issue's; among the lesson's own first 100);
* test captions 100–399, the LoRA benchmark's held-out set;
* Multi30k's first 100 real test captions (``test_2016_flickr``), when ``../shared/data/multi30k`` (or
  ``$MULTI30K_DIR``) holds them with the pinned SHA-256 (``lesson17_lora.multi30k_test``'s check); recorded "absent"
  or "checksum mismatch" otherwise. The translator's word-level vocabulary is the course corpus's: a Multi30k word it
  never saw becomes ``<unk>`` on the way in (the translation still runs, reading ``<unk>`` there). The line records
  how many source words were unknown, in how many captions, and how many outputs hold an ``<unk>``.

Per seed it records the parameter count (all trained), the training's CPU and wall seconds (``build_translator``, the
tokenizers included, and ``fit``, its closing validation on 200 captions included), steps, threads, the load average
before and after, versions, and each set's scores, seconds and first translations. One JSON line per seed goes to
``--log``; a seed already there with the same fingerprint (lesson 06's config, the corpus, the model's sources, torch's
version, the caption sets) is skipped, so an interrupted sweep resumes. ``--table`` prints the markdown table comparing
the translator's runs with the LoRA runs of ``--lora-log`` and stops.

    OMP_NUM_THREADS=1 nice .venv/bin/python benchmarks/lesson17_side_by_side.py --seeds 0 1 2 \\
        --log benchmarks/lesson17_side_by_side.jsonl
    .venv/bin/python benchmarks/lesson17_side_by_side.py --table --log benchmarks/lesson17_side_by_side.jsonl

Time, measured for seeds 0–2 on the course's 2-core machine while the LoRA sweep ran beside it (load average 2.9 at
the start, 4.0 at the end): training 49–51 s of CPU, 73–76 s of wall time a seed; the translations under a second
(0.05 s for 60 captions, 0.2 s for 300, 0.1–0.2 s for Multi30k's 100, greedy and batched); a seed 75–77 s in all.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from lesson06_seeds import fingerprint as translator_fingerprint  # noqa: E402  (after the path set-up above)
from lesson09_translation import scores, train_translator  # noqa: E402
from lesson17_lora import machine, multi30k_test, span, versions  # noqa: E402

from helpers.data.corpus import ParallelCorpus, load_corpus  # noqa: E402
from helpers.data.tokenization import UNK, UNK_ID  # noqa: E402
from helpers.models.translation import Translator  # noqa: E402
from helpers.models.translation.config import LESSON_STEPS  # noqa: E402

# The LoRA benchmark's caption sets (its defaults: --issue-captions, --held-out, --multi30k).
ISSUE_CAPTIONS = 60
HELD_OUT = "100:400"
MULTI30K_CAPTIONS = 100
LORA_LOG = ROOT / "benchmarks" / "lesson17_lora.jsonl"
DEFAULT_LOG = ROOT / "benchmarks" / "lesson17_side_by_side.jsonl"


def sets_key() -> str:
    return hashlib.sha256(json.dumps([ISSUE_CAPTIONS, HELD_OUT, MULTI30K_CAPTIONS]).encode()).hexdigest()[:8]


def score_set(translator: Translator, corpus: ParallelCorpus, indices) -> dict:
    """Greedy translations of the captions at ``indices``: sacreBLEU's scores, seconds and the first three."""
    indices = list(indices)
    start = time.perf_counter()
    hypotheses = translator.translate([corpus.de[i] for i in indices])
    seconds = round(time.perf_counter() - start, 2)
    result = scores(hypotheses, [corpus.en[i] for i in indices])
    return result | {"seconds": seconds, "first": hypotheses[:3], "outputs_with_unk": sum(UNK in h for h in hypotheses)}


def unknown_words(translator: Translator, sentences: list[str]) -> dict:
    """How many of the sentences' source tokens the translator's vocabulary maps to ``<unk>``, and in how many."""
    rows = translator.source_tokenizer.encode_batch(sentences, add_special=False)
    return {
        "source_tokens": sum(len(row) for row in rows),
        "unknown_tokens": sum(row.count(UNK_ID) for row in rows),
        "captions_with_unknown": sum(UNK_ID in row for row in rows),
        "first_source_tokens": translator.source_tokenizer.tokens(sentences[0]) if sentences else [],
    }


def score_multi30k(translator: Translator, multi30k: ParallelCorpus) -> dict:
    indices = range(min(MULTI30K_CAPTIONS, len(multi30k)))
    result = unknown_words(translator, [multi30k.de[i] for i in indices])
    try:
        return score_set(translator, multi30k, indices) | result
    except ValueError as error:  # a caption longer than the model's positions: recorded, not raised
        return {"error": str(error)} | result


def measure(seed: int, test: ParallelCorpus, multi30k: ParallelCorpus | None) -> dict:
    train, val = load_corpus("captions", "train"), load_corpus("captions", "val")
    start_machine = machine()
    cpu, wall = time.process_time(), time.perf_counter()
    translator, history = train_translator(seed, train, val)
    train_cpu, train_wall = time.process_time() - cpu, time.perf_counter() - wall
    parameters = list(translator.model.parameters())
    result = {
        "model": "translator",
        "seed": seed,
        "threads": 1,
        "steps": LESSON_STEPS,
        "steps_taken": history.steps_done,
        "parameters": sum(p.numel() for p in parameters),
        "trainable": sum(p.numel() for p in parameters if p.requires_grad),
        "train_cpu_s": round(train_cpu, 1),
        "train_wall_s": round(train_wall, 1),
        "val_bleu": history.best_score,
        "fit": history.to_dict(),  # fit's own seconds: the training loop and its validation, no tokenizers
        "issue": score_set(translator, test, range(ISSUE_CAPTIONS)),
        "held_out": score_set(translator, test, span(HELD_OUT)),
    }
    if multi30k is not None:
        result["multi30k"] = score_multi30k(translator, multi30k)
    return result | {"machine_start": start_machine, "machine_end": machine()}


def read_log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def table(translators: list[dict], lora_runs: list[dict]) -> str:
    """Markdown: lesson 06's translator per seed, then SmolLM2 + LoRA per run of the LoRA log."""
    lines = [
        "| model | targets, rank | seed | threads | parameters trained | parameters in the model | steps | "
        "training s, CPU | training s, wall | BLEU first 60 test | BLEU test 100–399 | "
        f"Multi30k BLEU (first {MULTI30K_CAPTIONS} test) | load avg |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]

    def load(row: dict) -> str:
        return "/".join(f"{row[k]['loadavg'][0]:.1f}" for k in ("machine_start", "machine_end"))

    for row in translators:
        m30k = row.get("multi30k")
        if m30k is None:
            m30k_text = row.get("multi30k_status", "–")
        elif "error" in m30k:
            m30k_text = f"failed: {m30k['error'][:60]}"
        else:
            share = 100 * m30k["unknown_tokens"] / m30k["source_tokens"]
            m30k_text = f"{m30k['bleu']:.1f} ({share:.0f} % of source words unknown)"
        lines.append(
            f"| lesson 06's translator | all | {row['seed']} | {row['threads']} | {row['trainable']:,} | "
            f"{row['parameters']:,} | {row['steps']} | {row['train_cpu_s']:.0f} | {row['train_wall_s']:.0f} | "
            f"{row['issue']['bleu']:.1f} | {row['held_out']['bleu']:.1f} | {m30k_text} | {load(row)} |"
        )
    for row in lora_runs:
        s, after = row["settings"], row["after"]
        if "multi30k" in after:
            m30k_text = f"{after['multi30k']['bleu']:.1f}"
        elif not s.get("multi30k_captions"):
            m30k_text = "not run"  # --multi30k 0: the files may have been there, they were not scored
        else:
            m30k_text = row.get("multi30k", "–")
        issue = f"{after['issue']['bleu']:.1f}"
        if s["issue_captions"] != ISSUE_CAPTIONS:
            issue += f" (first {s['issue_captions']})"
        held_out = f"{after['held_out']['bleu']:.1f}"
        if s["held_out"] != HELD_OUT:
            held_out += f" ({s['held_out']})"
        lines.append(
            f"| SmolLM2 + LoRA | {','.join(s['targets'])}, r {s['rank']} | {s['seed']} | "
            f"{row['machine_start']['torch_threads']} | {row['trainable']:,} | {row['parameters']:,} | {s['steps']} | "
            f"– | {row['step_s']['total']:.0f} | {issue} | {held_out} | {m30k_text} | {load(row)} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2], help="translator seeds")
    parser.add_argument("--log", type=Path, help="append one JSON line per seed here (seeds in it are skipped)")
    parser.add_argument("--lora-log", type=Path, default=LORA_LOG, help="the LoRA runs the table compares with")
    parser.add_argument("--table", action="store_true", help=f"print the table of --log (default {DEFAULT_LOG.name})")
    parser.add_argument(
        "--multi30k-dir",
        type=Path,
        default=Path(os.environ.get("MULTI30K_DIR") or ROOT.parent / "shared" / "data" / "multi30k"),
    )
    args = parser.parse_args()
    stamp = f"{translator_fingerprint()}-{sets_key()}"
    if args.table:
        runs = [r for r in read_log(args.log or DEFAULT_LOG) if r.get("fingerprint") == stamp]
        print(table(runs, read_log(args.lora_log)))
        return

    runs = read_log(args.log) if args.log else []
    done = {r["seed"] for r in runs if r.get("fingerprint") == stamp}
    todo = [seed for seed in args.seeds if seed not in done]
    print(f"{len(todo)} of {len(args.seeds)} seeds to do", file=sys.stderr, flush=True)
    if todo:
        test = load_corpus("captions", "test")
        multi30k, multi30k_status = multi30k_test(args.multi30k_dir)
    for seed in todo:
        print(f"translator seed={seed} ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        result = measure(seed, test, multi30k)
        result |= {
            "multi30k_status": multi30k_status,
            "fingerprint": stamp,
            "wall_s": round(time.perf_counter() - start, 1),
            "versions": versions(),
        }
        if args.log:
            with args.log.open("a") as log:
                log.write(json.dumps(result, ensure_ascii=False) + "\n")
        runs.append(result)
        print(table([result], []), file=sys.stderr, flush=True)
    print(table([r for r in runs if r.get("fingerprint") == stamp], read_log(args.lora_log)))


if __name__ == "__main__":
    main()
