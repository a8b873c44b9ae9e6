"""What lesson 06 may claim: its model trained with several seeds and thread counts, and the claims measured.

A trained model differs between machines (float results depend on the CPU and the thread count), so the
lesson's prose states only what held in every run here, and points at the numbers its cells print for the
rest. This script trains the lesson's exact model (``LESSON_CONFIG``, ``LESSON_STEPS`` steps) for every
seed and thread count, measures each quantity the prose talks about, and prints min / max over the runs.

    nice .venv/bin/python benchmarks/lesson06_seeds.py --seeds 0 1 2 3 4 --threads 1 2 \\
        --log benchmarks/lesson06_seeds.jsonl

On a busy machine set ``OMP_WAIT_POLICY=PASSIVE`` for the two-thread runs: waiting threads then sleep instead of
spinning (the results are the same; a spinning two-thread run can take twenty times longer under load).

Each run appends one JSON line to ``--log`` as it finishes (progress goes to stderr), and runs already in
the log are skipped, so an interrupted sweep resumes where it stopped. A run counts only if its
fingerprint matches (the config, the corpus files, the model's source files and torch's version), so after
a change to the model, the corpus or the config every run trains again. ``--table`` prints the table from
the log without training. One run is about a minute of CPU on a quiet machine (10 runs: about 12 minutes).
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

from helpers.data.corpus import CAPTIONS_DIR, load_corpus  # noqa: E402  (after the path set-up above)
from helpers.models.translation import (  # noqa: E402
    alignment_report,
    build_translator,
    evaluate,
    fit,
    head_ablation,
    score_translations,
)
from helpers.models.translation.config import LESSON_CONFIG, LESSON_STEPS  # noqa: E402
from helpers.models.translation.evaluation import crossing_example, reference_word_attention  # noqa: E402
from helpers.models.translation.inspection import attention_maps  # noqa: E402
from helpers.models.translation.model import ablated_heads  # noqa: E402
from helpers.models.translation.translator import Translator  # noqa: E402

RUNNING_EXAMPLE = "Eine Mutter und ihr kleiner Sohn genießen einen schönen Tag im Freien."
ABLATION_SENTENCES = 200  # the lesson silences each head on the first 200 test sentences
ENCODER_SENTENCES = 100  # encoder heads' attention measured on the first 100 test sentences


# The source files that decide what training produces (the measuring code in evaluation.py is left out).
MODEL_SOURCES = [
    "attention.py",
    "data/batching.py",
    "data/corpus.py",
    "embeddings.py",
    "layers.py",
    "data/tokenization.py",
    "models/translation/config.py",
    "models/translation/decoding.py",
    "models/translation/model.py",
    "models/translation/pipeline.py",
    "models/translation/training.py",
    "models/translation/translator.py",
]


def fingerprint() -> str:
    """A short hash of everything that decides the trained model, so that stale log lines are not reused."""
    digest = hashlib.sha256(json.dumps(LESSON_CONFIG.to_dict(), sort_keys=True).encode())
    digest.update(torch.__version__.encode())
    for path in sorted(CAPTIONS_DIR.iterdir()) + [ROOT / "helpers" / name for name in MODEL_SOURCES]:
        if path.is_file():
            digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def measure(seed: int, threads: int, steps: int = LESSON_STEPS) -> dict:
    """Train the lesson's model with ``seed`` on ``threads`` threads and measure what the lesson claims."""
    torch.set_num_threads(threads)
    train, val, test = (load_corpus("captions", split) for split in ("train", "val", "test"))
    unseen = [int(line) for line in (CAPTIONS_DIR / "test.unseen").read_text().split()]
    config = replace(LESSON_CONFIG, seed=seed)
    cpu = time.process_time()
    translator = build_translator(train, config, device="cpu")
    history = fit(translator, train, val, steps=steps, progress=False)
    train_cpu = time.process_time() - cpu

    scores, hypotheses = evaluate(translator, test)
    unseen_scores = score_translations([hypotheses[i] for i in unseen], [test.en[i] for i in unseen])
    example = translator.translate([RUNNING_EXAMPLE])[0]

    report = alignment_report(translator, test)
    crossing = alignment_report(translator, test, only_crossing=True)
    accuracy = report.accuracy  # (layers, h)
    best_layer, best_head = report.best_head()

    # The lesson's crossing example: does some head of the last layer follow every reordered word?
    k, link = crossing_example(test)
    crossing_translation = translator.translate([test.de[k]])[0]
    followed = crossing_followed(translator, test, k, link)

    full_bleu, without = head_ablation(translator, test, indices=range(ABLATION_SENTENCES))
    cost = full_bleu - without  # (layers, h) BLEU lost when one head is silenced
    last, first = cost[-1], cost[0]
    return {
        "seed": seed,
        "threads": threads,
        "train_cpu_s": round(train_cpu, 1),
        "final_loss": history.losses[-1],
        "val_bleu": history.best_score,
        "test_bleu": scores.bleu,
        "unseen_bleu": unseen_scores.bleu,
        "running_example_exact": example == test.en[test.de.index(RUNNING_EXAMPLE)],
        "crossing_example_exact": crossing_translation == test.en[k],
        "diagonal_baseline": round(report.diagonal_baseline, 4),
        "accuracy": [[round(float(x), 4) for x in row] for row in accuracy],
        "edge_share": [[round(float(x), 4) for x in row] for row in report.edge_share],
        "best_head": [best_layer, best_head],
        "best_accuracy": round(float(accuracy.max()), 4),
        "crossing_accuracy": [[round(float(x), 4) for x in row] for row in crossing.accuracy],
        "crossing_baseline": round(crossing.diagonal_baseline, 4),
        "crossing_words": crossing.words,
        "crossing_example": k,
        "crossing_link": list(link),
        "crossing_example_followed_by_a_last_layer_head": followed,
        "ablation_full_bleu": full_bleu,
        "ablation_cost": [[round(float(x), 2) for x in row] for row in cost],
        "best_aligner_is_costliest_in_its_layer": bool(cost[best_layer].argmax() == best_head),
        "best_aligner_cost_rank_in_its_layer": int((cost[best_layer] > cost[best_layer, best_head]).sum()),
        "last_layer_min_cost_above_first_layer_max": bool(last.min() > first.max()),
        "last_layer_aligns_better_on_average": bool(accuracy[-1].mean() > accuracy[0].mean()),
        "every_last_layer_head_beats_the_baseline": bool(accuracy[-1].min() > report.diagonal_baseline),
    }


def _without_source_bos(translator: Translator) -> Translator:
    """The variant measured against the lesson's model: the German side without ``<bos>`` (``w1 ... <eos>``)."""
    tokenizer = translator.source_tokenizer
    encode_batch = tokenizer.encode_batch
    tokenizer.encode_batch = (
        lambda texts, add_special=True: [  # what fit trains on, too
            ids[1:] if add_special else ids for ids in encode_batch(texts, add_special)
        ]
    )
    return translator


def measure_encoder(seed: int, threads: int, source_bos: bool, steps: int = LESSON_STEPS) -> dict:
    """Train the lesson's model (or its variant without the source ``<bos>``) and measure its encoder heads.

    Per encoder head, over the first ``ENCODER_SENTENCES`` test sentences: the mean weight a query puts on the
    key its head's queries favour most (the sink's share), on the first source position, on the query itself,
    and on its neighbours; then test BLEU on ``ABLATION_SENTENCES`` sentences with every encoder head silenced.
    """
    torch.set_num_threads(threads)
    train, val, test = (load_corpus("captions", split) for split in ("train", "val", "test"))
    config = replace(LESSON_CONFIG, seed=seed)
    translator = build_translator(train, config, device="cpu")
    if not source_bos:
        translator = _without_source_bos(translator)
    fit(translator, train, val, steps=steps, progress=False)
    scores, _ = evaluate(translator, test)
    h, layers = config.num_heads, config.num_encoder_layers
    sink = torch.zeros(layers, h)
    first = torch.zeros(layers, h)
    itself = torch.zeros(layers, h)
    neighbours = torch.zeros(layers, h)
    for sentence in test.de[:ENCODER_SENTENCES]:
        weights = attention_maps(translator, sentence).encoder  # (layers, h, S, S)
        S = weights.size(-1)
        sink += weights.mean(dim=-2).amax(dim=-1) / ENCODER_SENTENCES
        first += weights[..., 0].mean(dim=-1) / ENCODER_SENTENCES
        itself += weights.diagonal(dim1=-2, dim2=-1).mean(dim=-1) / ENCODER_SENTENCES
        near = weights.diagonal(offset=1, dim1=-2, dim2=-1).sum(-1) + weights.diagonal(offset=-1, dim1=-2, dim2=-1).sum(
            -1
        )
        neighbours += near / S / ENCODER_SENTENCES
    subset = range(ABLATION_SENTENCES)
    full = evaluate(translator, test, indices=subset)[0].bleu
    with ablated_heads(translator.model, {(layer, k) for layer in range(layers) for k in range(h)}, "encoder"):
        silenced = evaluate(translator, test, indices=subset)[0].bleu
    rounded = lambda t: [[round(float(x), 3) for x in row] for row in t]  # noqa: E731
    return {
        "seed": seed,
        "threads": threads,
        "source_bos": source_bos,
        "test_bleu": scores.bleu,
        "sink_share": rounded(sink),
        "first_position_share": rounded(first),
        "self_share": rounded(itself),
        "neighbour_share": rounded(neighbours),
        "bleu_200": full,
        "bleu_200_encoder_heads_silenced": silenced,
    }


def encoder_table(runs: list[dict]) -> str:
    """Markdown table of the encoder measurements, the lesson's model against the variant without source <bos>."""

    def span(values, fmt="{:.2f}"):
        return f"{fmt.format(min(values))} – {fmt.format(max(values))}"

    lines = [
        "| quantity (over runs; per head: lowest – highest head) | with source `<bos>` | without |",
        "|---|---|---|",
    ]
    groups = [[r for r in runs if r["source_bos"]], [r for r in runs if not r["source_bos"]]]

    def cell(group, key):
        if not group:
            return "–"
        values = [x for r in group for row in r[key] for x in row]
        return span(values)

    lines.append(
        "| runs (seed x threads) | "
        + " | ".join(", ".join(f"{r['seed']}x{r['threads']}" for r in g) or "–" for g in groups)
        + " |"
    )
    for key, name in [
        ("sink_share", "weight on each head's favourite key"),
        ("first_position_share", "weight on the first source position"),
        ("self_share", "weight on the query itself"),
        ("neighbour_share", "weight on the two neighbours"),
    ]:
        lines.append(f"| {name} | {cell(groups[0], key)} | {cell(groups[1], key)} |")
    for key, name in [
        ("test_bleu", "test BLEU"),
        ("bleu_200", "BLEU, first 200 test sentences"),
        ("bleu_200_encoder_heads_silenced", "the same with every encoder head silenced"),
    ]:
        values = [
            " – ".join(f"{v:.1f}" for v in (min(r[key] for r in g), max(r[key] for r in g))) if g else "–"
            for g in groups
        ]
        lines.append(f"| {name} | {values[0]} | {values[1]} |")
    return "\n".join(lines)


def crossing_followed(translator, corpus, k: int, link: tuple[int, int]) -> bool:
    """Whether some last-layer head attends most to German word i while the decoder writes English word j.

    ``link`` = (i, j) is the reordered gold link that ``crossing_example`` picked. Read with the reference
    translation (teacher forcing), as the lesson does, so the rows are the gold alignment's English words.
    """
    i, j = link
    looked_at = reference_word_attention(translator, corpus.de[k], corpus.en[k])[-1].argmax(dim=-1)  # (h, J)
    return bool((looked_at[:, j] == i).any())


def table(runs: list[dict]) -> str:
    """Markdown table: each quantity's min and max over the runs (and how many runs a yes/no held in)."""

    def span(values, fmt="{:.1f}"):
        return f"{fmt.format(min(values))} – {fmt.format(max(values))}"

    def held(key):
        return f"{sum(bool(r[key]) for r in runs)} of {len(runs)}"

    def per_layer(key, layer, scale=100.0, fmt="{:.0f}"):
        lows = [min(r[key][layer]) * scale for r in runs]
        highs = [max(r[key][layer]) * scale for r in runs]
        return f"lowest head {span(lows, fmt)}, highest head {span(highs, fmt)}"

    layers = len(runs[0]["accuracy"])
    rows = [
        ("runs (seed x threads)", ", ".join(f"{r['seed']}x{r['threads']}" for r in runs)),
        ("training CPU seconds", span([r["train_cpu_s"] for r in runs], "{:.0f}")),
        ("test BLEU", span([r["test_bleu"] for r in runs])),
        ("unseen-combination BLEU", span([r["unseen_bleu"] for r in runs])),
        ("running example exact", held("running_example_exact")),
        ("crossing example (test line {}) exact".format(runs[0]["crossing_example"]), held("crossing_example_exact")),
        ("diagonal baseline (%)", span([100 * r["diagonal_baseline"] for r in runs], "{:.0f}")),
    ]
    for layer in range(layers):
        rows.append((f"alignment accuracy, layer {layer} (%)", per_layer("accuracy", layer)))
    rows += [
        ("best head's alignment accuracy (%)", span([100 * r["best_accuracy"] for r in runs])),
        ("last layer aligns better than the first on average", held("last_layer_aligns_better_on_average")),
        ("every last-layer head beats the diagonal baseline", held("every_last_layer_head_beats_the_baseline")),
        ("best head in the last layer", held_value(runs, lambda r: r["best_head"][0] == layers - 1)),
        ("best head (layer, head) per run", ", ".join(f"{tuple(r['best_head'])}" for r in runs)),
        (
            "best accuracy on crossing words (%)",
            span([100 * max(max(row) for row in r["crossing_accuracy"]) for r in runs]),
        ),
        ("diagonal baseline on crossing words (%)", span([100 * r["crossing_baseline"] for r in runs], "{:.0f}")),
        ("the crossing link followed by a last-layer head", held("crossing_example_followed_by_a_last_layer_head")),
    ]
    for layer in range(layers):
        rows.append((f"BLEU lost without one head, layer {layer}", per_layer("ablation_cost", layer, 1.0, "{:.1f}")))
    rows += [
        (
            "every last-layer head costs more than every first-layer head",
            held("last_layer_min_cost_above_first_layer_max"),
        ),
        (
            "the costliest last-layer head costs more than every first-layer head",
            held_value(runs, lambda r: max(r["ablation_cost"][-1]) > max(r["ablation_cost"][0])),
        ),
        ("the best aligner is the costliest head of its layer", held("best_aligner_is_costliest_in_its_layer")),
        (
            "heads of its layer costing more than the best aligner",
            ", ".join(str(r["best_aligner_cost_rank_in_its_layer"]) for r in runs),
        ),
    ]
    lines = ["| quantity | over the runs |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in rows]
    return "\n".join(lines)


def held_value(runs: list[dict], predicate) -> str:
    return f"{sum(bool(predicate(r)) for r in runs)} of {len(runs)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--log", type=Path, default=ROOT / "benchmarks" / "lesson06_seeds.jsonl")
    parser.add_argument("--table", action="store_true", help="print the table from the log, train nothing")
    parser.add_argument("--steps", type=int, default=LESSON_STEPS, help="training steps (only to smoke-test)")
    parser.add_argument(
        "--encoder",
        action="store_true",
        help="measure the encoder heads instead (attention sink, ablation), with and without the source <bos>; "
        "log: benchmarks/lesson06_encoder.jsonl unless --log is given",
    )
    args = parser.parse_args()
    if args.encoder:
        encoder_sweep(args)
        return
    done = []
    if args.log.exists():
        done = [json.loads(line) for line in args.log.read_text().splitlines() if line.strip()]
    current = fingerprint()
    done = [r for r in done if r.get("fingerprint") == current]
    if not args.table:
        for threads in args.threads:
            for seed in args.seeds:
                if any(r["seed"] == seed and r["threads"] == threads for r in done):
                    continue
                with open("/proc/loadavg") as handle:
                    load = handle.read().split()[0]
                print(f"seed {seed}, {threads} thread(s): training (load average {load})", file=sys.stderr, flush=True)
                start = time.perf_counter()
                result = measure(seed, threads, args.steps)
                result["wall_s"] = round(time.perf_counter() - start, 1)
                result["fingerprint"] = current
                result["load_average_at_start"] = float(load)
                with open(args.log, "a") as handle:
                    handle.write(json.dumps(result, ensure_ascii=False) + "\n")
                done.append(result)
                print(
                    f"seed {seed}, {threads} thread(s): done in {result['wall_s']:.0f} s, test BLEU "
                    f"{result['test_bleu']}, best head {result['best_accuracy']:.1%}",
                    file=sys.stderr,
                    flush=True,
                )
    runs = [r for r in done if r["seed"] in args.seeds and r["threads"] in args.threads]
    if runs:
        print(table(sorted(runs, key=lambda r: (r["threads"], r["seed"]))))


def encoder_sweep(args: argparse.Namespace) -> None:
    log = (
        args.log
        if args.log != ROOT / "benchmarks" / "lesson06_seeds.jsonl"
        else ROOT / "benchmarks" / "lesson06_encoder.jsonl"
    )
    current = fingerprint()
    done = [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []
    done = [r for r in done if r.get("fingerprint") == current]
    if not args.table:
        for threads in args.threads:
            for seed in args.seeds:
                for source_bos in (True, False):
                    key = (seed, threads, source_bos)
                    if any((r["seed"], r["threads"], r["source_bos"]) == key for r in done):
                        continue
                    print(f"seed {seed}, {threads} thread(s), source <bos> {source_bos}", file=sys.stderr, flush=True)
                    start = time.perf_counter()
                    result = measure_encoder(seed, threads, source_bos, args.steps)
                    result["wall_s"], result["fingerprint"] = round(time.perf_counter() - start, 1), current
                    with open(log, "a") as handle:
                        handle.write(json.dumps(result) + "\n")
                    done.append(result)
    runs = [r for r in done if r["seed"] in args.seeds and r["threads"] in args.threads]
    if runs:
        print(encoder_table(sorted(runs, key=lambda r: (r["threads"], r["seed"]))))


if __name__ == "__main__":
    main()
