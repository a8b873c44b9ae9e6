"""What lesson 10 may claim: its three small models trained with several seeds, every claim judged on every run.

What a small model learns depends on the seed (and, through the float sums, on the machine), so the lesson
states only what held in every run here and prints its own numbers for the rest. This script runs the lesson's
cells with ``SEED = seed`` (settings in ``LESSON`` below, copied from the notebook's first cells; every generator
derives from the seed as in the notebook: keep the two in step, ``tests/course/test_exercises_lesson_10.py``
compares them). Per run it logs, among others:

- the two-layer model's phase change (first step whose repeated-token loss is below half of chance), its
  final loss, every head's previous-token and induction scores on the lesson's test batch, and the heads the
  lesson picks from them (previous-token head, induction head, weakest other layer-0 head);
- the loss with those heads zeroed, and with every layer-1 head scoring above 0.3 zeroed;
- the whole K-composition map and the whole patching map (fraction recovered by each head);
- the one-layer control's final loss; the fixed-length model's loss on fixed and on varied lengths and its
  best previous-token score; the run's CPU and wall seconds and the load average before and after.

``claims`` judges each of the lesson's statements (its prose and its asserts) on one run; the table says in how
many runs each held. Claims that failed in any run are not made by the lesson.

    OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE nice .venv/bin/python benchmarks/lesson10_seeds.py \\
        --seeds 0 7 1 2 3 4 5 6 8 9 --threads 1 --log benchmarks/lesson10_seeds.jsonl

Each run appends one JSON line to ``--log``; runs already there (same settings) are skipped, so a sweep resumes.
``--table`` prints the tables from the log without training.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from helpers.analysis.circuits import (  # noqa: E402  (after the path set-up above)
    AttentionOnlyTransformer,
    composition_scores,
    corrupt_first_copy,
    head_hooks,
    head_scores,
    induction_score,
    patching_map,
    previous_token_score,
    repeated_batch,
    repeated_log_prob,
    repeated_loss,
    train_induction,
)

# The lesson's settings (notebooks/10_induction_heads.ipynb). "seeding" names how every generator derives from the
# lesson's one SEED (models and training: SEED; the test batch: 1000 + SEED; the fixed-length test: 1 + SEED; the
# corruption: 7 + SEED), so runs logged under an earlier scheme are not mixed in.
LESSON = {
    "vocab_size": 32,
    "seq_len": 32,
    "embed_dim": 32,
    "num_heads": 4,
    "lengths": [4, 12],
    "lr": 3e-3,
    "repeated_only": True,
    "steps": 1200,
    "control_steps": 1200,
    "trap_length": 8,
    "trap_steps": 400,
    "every": 50,
    "seeding": "one SEED",
}


@torch.no_grad()
def loss_on(model: AttentionOnlyTransformer, batch, heads=()) -> float:
    with head_hooks(model.output_projections(), model.num_heads, heads):
        return float(repeated_loss(model(batch.ids), batch))


def one_run(seed: int, threads: int) -> dict:
    """The lesson's cells with ``SEED = seed``; every score matrix is kept, so a claim can be checked against
    the log later without training again."""
    torch.set_num_threads(threads)
    c = LESSON
    V, T, E, h, lengths = c["vocab_size"], c["seq_len"], c["embed_dim"], c["num_heads"], tuple(c["lengths"])
    kwargs = {"lengths": lengths, "lr": c["lr"], "seed": seed, "repeated_only": c["repeated_only"]}
    started = time.process_time(), time.perf_counter(), os.getloadavg()[0]

    torch.manual_seed(seed)
    control = AttentionOnlyTransformer(V, E, h, 1, T)
    train_induction(control, c["control_steps"], every=c["every"], **kwargs)
    test = repeated_batch(512, T, V, lengths, torch.Generator().manual_seed(1000 + seed))

    torch.manual_seed(seed)
    model = AttentionOnlyTransformer(V, E, h, 2, T)
    history = train_induction(model, c["steps"], every=c["every"], **kwargs)
    with torch.no_grad():
        _, weights = model(test.ids, need_weights=True)
    previous = head_scores(weights, previous_token_score)  # (2, h), as the lesson's section 4 computes them
    induction = head_scores(weights, induction_score, test.ids)
    p, i = int(previous[0].argmax()), int(induction[1].argmax())
    other = min((k for k in range(h) if k != p), key=lambda k: float(previous[0, k]))
    inductive = [k for k in range(h) if float(induction[1, k]) > 0.3]
    k_scores = composition_scores(model, "K")
    corrupted = corrupt_first_copy(test, V, torch.Generator().manual_seed(7 + seed))
    recovered = patching_map(
        model, model.output_projections(), h, test.ids, corrupted, lambda logits: repeated_log_prob(logits, test)
    )

    torch.manual_seed(seed)
    trap = AttentionOnlyTransformer(V, E, h, 2, T)
    fixed = (c["trap_length"], c["trap_length"])
    train_induction(trap, c["trap_steps"], every=100, **{**kwargs, "lengths": fixed})
    fixed_test = repeated_batch(512, T, V, fixed, torch.Generator().manual_seed(1 + seed))
    with torch.no_grad():
        _, trap_weights = trap(fixed_test.ids, need_weights=True)

    def matrix(x):
        return [[round(float(v), 4) for v in row] for row in x]

    return {
        "seed": seed,
        "threads": threads,
        "settings": c,
        "phase_change_step": history.first_step_below(math.log(V) / 2),
        "loss_at_step_100": history.loss[history.steps.index(100)],
        "loss_at_step_300": history.loss[history.steps.index(300)],
        "induction_score_step0": float(history.induction[0].max()),  # both layers, as the lesson asserts
        "induction_score_end_history": float(history.induction[-1][1].max()),
        "final_loss": loss_on(model, test),
        "previous_scores": matrix(previous),
        "induction_scores": matrix(induction),
        "previous_head": p,
        "induction_head": i,
        "other_head": other,
        "inductive_heads": inductive,
        "loss_without_previous": loss_on(model, test, [(0, p)]),
        "loss_without_other_layer0": loss_on(model, test, [(0, other)]),
        "loss_without_induction": loss_on(model, test, [(1, i)]),
        "loss_without_all_induction_heads": loss_on(model, test, [(1, k) for k in inductive]),
        "loss_without_layer0": loss_on(model, test, [(0, k) for k in range(h)]),
        "k_composition": matrix(k_scores),
        "recovered": matrix(recovered),
        "control_final_loss": loss_on(control, test),
        "trap_loss_fixed": loss_on(trap, fixed_test),
        "trap_loss_varied": loss_on(trap, test),
        "trap_previous_score": float(head_scores(trap_weights, previous_token_score)[0].max()),
        "cpu_s": round(time.process_time() - started[0], 1),
        "wall_s": round(time.perf_counter() - started[1], 1),
        "load_average_1min_at_start": started[2],
        "load_average_1min_at_end": os.getloadavg()[0],
    }


def claims(run: dict) -> dict[str, bool]:
    """Each claim lesson 10 makes (its prose and its asserts), judged on one logged run."""
    chance = math.log(run["settings"]["vocab_size"])
    previous, induction = run["previous_scores"], run["induction_scores"]
    k, recovered = run["k_composition"], run["recovered"]
    p, i, final = run["previous_head"], run["induction_head"], run["final_loss"]
    h = len(k)
    flat_k = sorted(v for row in k for v in row)
    median_k = (flat_k[(len(flat_k) - 1) // 2] + flat_k[len(flat_k) // 2]) / 2
    largest_k = max(range(h * h), key=lambda n: k[n // h][n % h])
    largest_recovered = max(range(2 * h), key=lambda n: recovered[n // h][n % h])
    return {
        "control above 2.0": run["control_final_loss"] > 2.0,
        "final loss < 1 and 1.5 below the control": final < 1.0 and final < run["control_final_loss"] - 1.5,
        "induction scores < 0.15 at step 0, > 0.5 at the end": run["induction_score_step0"] < 0.15
        and run["induction_score_end_history"] > 0.5,
        "previous-token head > 0.4, induction head > 0.5": previous[0][p] > 0.4 and induction[1][i] > 0.5,
        "previous-token head zeroed: loss x2; weakest other: less than half that rise": (
            run["loss_without_previous"] > 2 * final
            and run["loss_without_other_layer0"] < final + 0.5 * (run["loss_without_previous"] - final)
        ),
        "every induction head zeroed: loss > ln V - 0.3": run["loss_without_all_induction_heads"] > chance - 0.3,
        "all four layer-1 heads score > 0.3 as induction heads": len(run["inductive_heads"]) == h,
        "K: the pair is the largest entry": largest_k == p * h + i,
        "K: the largest entry is in the previous-token head's row": largest_k // h == p,
        "K: the pair > 1.1 x the median": k[p][i] > 1.1 * median_k,
        "K: every entry < 0.5": flat_k[-1] < 0.5,
        "trap: loss < 0.2 on its lengths, previous-token score < 0.25": run["trap_loss_fixed"] < 0.2
        and run["trap_previous_score"] < 0.25,
        "trap: worse than chance on varied lengths": run["trap_loss_varied"] > chance,
        "patching: the most is recovered in layer 1": largest_recovered // h == 1,
        "patching: previous-token head < 0.1": recovered[0][p] < 0.1,
        "patching: every layer-1 head recovers 0.25 - 0.75": all(0.25 < v < 0.75 for v in recovered[1]),
        "patching: layer 1's heads add up to more than 1": sum(recovered[1]) > 1,
    }


def table(runs: list[dict]) -> str:
    def span(values, digits=2):
        missing = sum(v is None for v in values)
        values = [v for v in values if v is not None]
        text = f"{min(values):.{digits}f} – {max(values):.{digits}f}" if values else "–"
        return text + (f" (never in {missing} runs)" if missing else "")

    def key(name, digits=2):
        return span([r[name] for r in runs], digits)

    n = len(runs)
    rows = [
        (
            "runs (seeds × threads)",
            f"{n}: seeds {sorted({r['seed'] for r in runs})}, threads {sorted({r['threads'] for r in runs})}",
        ),
        ("chance loss ln V", f"{math.log(LESSON['vocab_size']):.2f}"),
        ("phase change: first step with loss < ln V / 2", key("phase_change_step", 0)),
        ("loss at step 100", key("loss_at_step_100")),
        ("loss at step 300", key("loss_at_step_300")),
        ("final loss on repeated tokens", key("final_loss")),
        ("best induction score at step 0 (both layers)", key("induction_score_step0")),
        ("best layer-0 previous-token score", span([max(r["previous_scores"][0]) for r in runs])),
        (
            "layer-0 heads with previous-token score > 0.4",
            span([sum(v > 0.4 for v in r["previous_scores"][0]) for r in runs], 0),
        ),
        ("best layer-1 induction score", span([max(r["induction_scores"][1]) for r in runs])),
        ("weakest layer-1 induction score", span([min(r["induction_scores"][1]) for r in runs])),
        ("loss, previous-token head zeroed", key("loss_without_previous")),
        ("loss, weakest other layer-0 head zeroed", key("loss_without_other_layer0")),
        ("loss, best induction head zeroed", key("loss_without_induction")),
        ("loss, every layer-1 head scoring > 0.3 zeroed", key("loss_without_all_induction_heads")),
        ("loss, every layer-0 head zeroed", key("loss_without_layer0")),
        (
            "K-composition of the pair",
            span([r["k_composition"][r["previous_head"]][r["induction_head"]] for r in runs]),
        ),
        ("K-composition, largest entry", span([max(max(row) for row in r["k_composition"]) for r in runs])),
        ("patching: recovered by one layer-1 head", span([v for r in runs for v in r["recovered"][1]])),
        ("patching: layer-1 heads' sum", span([sum(r["recovered"][1]) for r in runs])),
        ("patching: recovered by the previous-token head", span([r["recovered"][0][r["previous_head"]] for r in runs])),
        ("one-layer control, final loss", key("control_final_loss")),
        ("fixed length: loss on fixed lengths", key("trap_loss_fixed")),
        ("fixed length: loss on varied lengths", key("trap_loss_varied")),
        ("fixed length: best previous-token score", key("trap_previous_score")),
        ("wall seconds per run (loaded machine)", key("wall_s", 0)),
        ("1-min load average at the start of a run", key("load_average_1min_at_start", 1)),
    ]
    lines = ["| quantity | min – max over the runs |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in rows]
    judged = [claims(r) for r in runs]
    lines += ["", "| the lesson's claim | held in |", "|---|---|"]
    lines += [f"| {claim} | {sum(j[claim] for j in judged)} of {n} |" for claim in judged[0]] if judged else []
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--log", type=Path, default=ROOT / "benchmarks" / "lesson10_seeds.jsonl")
    parser.add_argument("--table", action="store_true", help="print the table from the log, train nothing")
    args = parser.parse_args()
    done = []
    if args.log.exists():
        done = [json.loads(line) for line in args.log.read_text().splitlines() if line.strip()]
        done = [r for r in done if r["settings"] == LESSON]
    if not args.table:
        for threads in args.threads:
            for seed in args.seeds:
                if any(r["seed"] == seed and r["threads"] == threads for r in done):
                    continue
                run = one_run(seed, threads)
                print(json.dumps(run), file=sys.stderr)
                with args.log.open("a") as handle:
                    handle.write(json.dumps(run) + "\n")
                done.append(run)
    print(table(done))


if __name__ == "__main__":
    main()
