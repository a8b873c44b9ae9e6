"""What lesson 10 may claim: its three small models trained with several seeds and thread counts, claims measured.

The phase change of the two-layer model comes at a step that depends on the seed and on the machine (the
thread count changes the float sums), so the lesson states only what held in every run here and prints its
own numbers for the rest. This script repeats the lesson's experiments with its exact settings (``LESSON``
below, copied from the notebook's first cells: keep the two in step) for every seed and thread count:

- the two-layer model's phase change (first step whose repeated-token loss is below half of chance), its
  final loss, its best previous-token head (layer 0) and induction head (layer 1) with their scores;
- the loss with the previous-token head, the induction head, or the weakest other layer-0 head zeroed;
- the K-composition score of the (previous-token, induction) pair, and its rank among all layer-0 × layer-1
  pairs (1 = the largest);
- the one-layer control's final loss; the fixed-length model's loss on fixed and on varied lengths and its
  best previous-token score.

    OMP_WAIT_POLICY=PASSIVE nice .venv/bin/python benchmarks/lesson10_seeds.py --seeds 0 1 2 3 4 --threads 1 2 \\
        --log benchmarks/lesson10_seeds.jsonl

Each run appends one JSON line to ``--log``; runs already there (same settings) are skipped, so a sweep resumes.
``--table`` prints the min-max table from the log without training.
"""

from __future__ import annotations

import argparse
import json
import math
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
    patching_map,
    repeated_batch,
    repeated_log_prob,
    repeated_loss,
    train_induction,
)

# The lesson's settings (notebooks/10_induction_heads.ipynb).
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
}


@torch.no_grad()
def loss_on(model: AttentionOnlyTransformer, batch, heads=()) -> float:
    with head_hooks(model.output_projections(), model.num_heads, heads):
        return float(repeated_loss(model(batch.ids), batch))


def one_run(seed: int, threads: int) -> dict:
    torch.set_num_threads(threads)
    c = LESSON
    V, T, E, h, lengths = c["vocab_size"], c["seq_len"], c["embed_dim"], c["num_heads"], tuple(c["lengths"])
    started = time.process_time(), time.perf_counter()

    torch.manual_seed(seed)
    model = AttentionOnlyTransformer(V, E, h, 2, T)
    kwargs = {"lengths": lengths, "lr": c["lr"], "seed": seed, "repeated_only": c["repeated_only"]}
    history = train_induction(model, c["steps"], every=c["every"], **kwargs)
    test = repeated_batch(512, T, V, lengths, torch.Generator().manual_seed(1000 + seed))
    previous, induction = history.previous[-1][0], history.induction[-1][1]
    p, i = int(previous.argmax()), int(induction.argmax())
    weakest_other = min((k for k in range(h) if k != p), key=lambda k: float(previous[k]))
    k_scores = composition_scores(model, "K")
    rank = int((k_scores.flatten() > k_scores[p, i]).sum()) + 1
    inductive = [k for k in range(h) if float(induction[k]) > 0.3]
    looking_back = [k for k in range(h) if float(previous[k]) > 0.2]
    corrupted = corrupt_first_copy(test, V, torch.Generator().manual_seed(7))
    recovered = patching_map(
        model, model.output_projections(), h, test.ids, corrupted, lambda logits: repeated_log_prob(logits, test)
    )

    torch.manual_seed(seed)
    control = AttentionOnlyTransformer(V, E, h, 1, T)
    control_history = train_induction(control, c["control_steps"], every=500, **kwargs)

    torch.manual_seed(seed)
    trap = AttentionOnlyTransformer(V, E, h, 2, T)
    fixed = (c["trap_length"], c["trap_length"])
    trap_history = train_induction(trap, c["trap_steps"], every=100, **{**kwargs, "lengths": fixed})
    return {
        "seed": seed,
        "threads": threads,
        "settings": c,
        "phase_change_step": history.first_step_below(math.log(V) / 2),
        "loss_at_step_100": history.loss[history.steps.index(100)],
        "loss_at_step_300": history.loss[history.steps.index(300)],
        "final_loss": loss_on(model, test),
        "previous_head": p,
        "previous_score": float(previous[p]),
        "induction_head": i,
        "induction_score": float(induction[i]),
        "induction_score_step0": float(history.induction[0][1].max()),
        "loss_without_previous": loss_on(model, test, [(0, p)]),
        "loss_without_induction": loss_on(model, test, [(1, i)]),
        "loss_without_other_layer0": loss_on(model, test, [(0, weakest_other)]),
        "induction_heads_above_0.3": len(inductive),
        "loss_without_all_induction_heads": loss_on(model, test, [(1, k) for k in inductive]),
        "previous_heads_above_0.2": len(looking_back),
        "loss_without_all_previous_heads": loss_on(model, test, [(0, k) for k in looking_back]),
        "loss_without_layer0": loss_on(model, test, [(0, k) for k in range(h)]),
        "patch_recovered_induction": float(recovered[1, i]),
        "patch_recovered_previous": float(recovered[0, p]),
        "patch_induction_is_max": bool(recovered[1, i] == recovered.max()),
        "patch_max_is_layer1": bool(recovered[1].max() == recovered.max()),
        "patch_recovered_layer1_sum": float(recovered[1].sum()),
        "k_composition_pair": float(k_scores[p, i]),
        "k_composition_rank": rank,
        "k_composition_median": float(k_scores.median()),
        "control_final_loss": loss_on(control, test),
        "control_min_recorded_loss": min(control_history.loss),
        "trap_loss_fixed": loss_on(trap, repeated_batch(512, T, V, fixed, torch.Generator().manual_seed(1))),
        "trap_loss_varied": loss_on(trap, test),
        "trap_previous_score": float(trap_history.previous[-1][0].max()),
        "cpu_s": round(time.process_time() - started[0], 1),
        "wall_s": round(time.perf_counter() - started[1], 1),
    }


def table(runs: list[dict]) -> str:
    def span(key, digits=2):
        values = [r[key] for r in runs if r[key] is not None]
        missing = len(runs) - len(values)
        text = f"{min(values):.{digits}f} – {max(values):.{digits}f}" if values else "–"
        return text + (f" (never in {missing} runs)" if missing else "")

    n = len(runs)
    chance = math.log(LESSON["vocab_size"])
    rows = [
        (
            "runs (seeds × threads)",
            f"{n}: seeds {sorted({r['seed'] for r in runs})}, threads {sorted({r['threads'] for r in runs})}",
        ),
        ("chance loss ln V", f"{chance:.2f}"),
        ("phase change: first step with loss < ln V / 2", span("phase_change_step", 0)),
        ("loss at step 100", span("loss_at_step_100")),
        ("loss at step 300", span("loss_at_step_300")),
        ("final loss on repeated tokens", span("final_loss")),
        ("best layer-1 induction score, step 0", span("induction_score_step0")),
        ("best layer-1 induction score, end", span("induction_score")),
        ("best layer-0 previous-token score, end", span("previous_score")),
        ("loss, previous-token head zeroed", span("loss_without_previous")),
        ("loss, induction head zeroed", span("loss_without_induction")),
        ("loss, weakest other layer-0 head zeroed", span("loss_without_other_layer0")),
        ("layer-1 heads with induction score > 0.3", span("induction_heads_above_0.3", 0)),
        ("loss, all those heads zeroed", span("loss_without_all_induction_heads")),
        ("layer-0 heads with previous-token score > 0.2", span("previous_heads_above_0.2", 0)),
        ("loss, all those heads zeroed", span("loss_without_all_previous_heads")),
        ("loss, every layer-0 head zeroed", span("loss_without_layer0")),
        ("patching: recovered by the best induction head", span("patch_recovered_induction")),
        ("patching: recovered by the previous-token head", span("patch_recovered_previous")),
        ("patching: best induction head recovers the most", f"{sum(r['patch_induction_is_max'] for r in runs)} of {n}"),
        ("patching: the most is in layer 1", f"{sum(r['patch_max_is_layer1'] for r in runs)} of {n}"),
        ("patching: layer-1 heads' sum", span("patch_recovered_layer1_sum")),
        ("K-composition of the pair", span("k_composition_pair")),
        ("K-composition, median of all pairs", span("k_composition_median")),
        ("the pair has the largest K-composition", f"{sum(r['k_composition_rank'] == 1 for r in runs)} of {n}"),
        ("one-layer control, final loss", span("control_final_loss")),
        ("fixed length: loss on fixed lengths", span("trap_loss_fixed")),
        ("fixed length: loss on varied lengths", span("trap_loss_varied")),
        ("fixed length: best previous-token score", span("trap_previous_score")),
        ("wall seconds per run (loaded machine)", span("wall_s", 0)),
    ]
    lines = ["| quantity | min – max over the runs |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in rows]
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
