"""Idle against one busy process beside it, side by side in one run: the CLI's default and the lessons, under
torch's old default threads and under helpers.tools.threads' choice.

    .venv/bin/python benchmarks/contention.py --quick      # representative workloads, about 5-10 minutes
    .venv/bin/python benchmarks/contention.py               # the CLI and all ten lessons executed, about an hour
    .venv/bin/python benchmarks/contention.py --lessons 09 10 --repeats 2

Every measurement runs in a fresh process (a fresh kernel for a lesson), because OpenMP reads its environment
once, when torch loads. The variants differ only in that environment:

- ``old``: torch's default as it was: every core (``OMP_NUM_THREADS`` = the usable cores) and GNU OpenMP's
  default wait (``GOMP_SPINCOUNT=300000``: idle threads spin about 3 ms before they sleep).
- ``passive``: the thread count from ``pick_threads()`` and ``OMP_WAIT_POLICY=PASSIVE`` (idle threads sleep at
  once), what the course set from 1 to 2 December, until this benchmark showed it 1.3-3x slower idle.
- ``new``: the thread count from ``pick_threads()`` and OpenMP's own default wait: what the course does now (the
  CLI re-chooses while it trains, a lesson's kernel before each cell).

"busy" runs each measurement beside a process this script starts and stops: a Python loop that keeps one core
busy. "idle" is the machine as it is without it: on a shared machine not idle, so the load average (1 min) and
``busy_cores()`` (what the policy saw) are printed with every measurement.

Workloads (``--quick``; each timed inside its process, imports and loading excluded):
- ``cli``: ``python -m helpers.models.translation train --corpus captions`` for a fixed number of steps (the
  preset's model and batches); the figure is the tokens/s the CLI itself prints, and its inverse is compared.
- ``lessons 01-05``: the attention of lessons 03-04 (``MultiHeadAttention``, E=64, h=4, N=8, T=32), forward and
  backward, repeated: their cells are many small ops of this size.
- ``lesson 06-08``: they fix one thread themselves (``torch.set_num_threads(1)`` in their first cells), so the
  policy leaves them alone; represented by the CLI's model on one thread (lesson 06's model and batches).
- ``lesson 09``: SmolLM2-135M (lesson 09's model) generating 24 tokens greedily with the KV cache, and one
  forward pass with attention weights over 64 tokens.
- ``lesson 10``: ``train_induction`` of lesson 10's two-layer attention-only model (V=T=E=32, h=4), 150 steps.
Without ``--quick`` the lessons are executed top to bottom instead (``jupyter nbconvert --execute``, wall time).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from helpers.tools.threads import busy_cores, usable_cores  # noqa: E402  (after the path: run from anywhere)

VARIANTS = ("old", "passive", "new")
CLEARED = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
# One core kept busy until the parent dies: a parent killed past its `finally` (SIGKILL, a crash) leaves the loop
# orphaned, re-parented to init or a subreaper, which it notices within a fifth of a second and stops.
BUSY_LOOP = """
import os, sys, time
parent, check = int(sys.argv[1]), 0.0
while True:
    if time.monotonic() > check:
        if os.getppid() != parent:
            break
        check = time.monotonic() + 0.2
"""

# Each workload prints one JSON line {"seconds": ..., "threads": ...}. The prelude is a lesson's first cell: torch
# first, then helpers, and the thread count the notebook's follower would set before the next cell.
PRELUDE = """
import json, time, torch, helpers
from helpers.tools.threads import pick_threads
torch.set_num_threads(pick_threads())
torch.manual_seed(0)
"""
WORKLOADS = {
    "lessons 01-05": """
from helpers.attention import MultiHeadAttention
attention = MultiHeadAttention(64, 4)
x = torch.randn(8, 32, 64, requires_grad=True)
start = time.perf_counter()
for _ in range(REPEATS * 300):
    out, _ = attention(x, x, x)
    out.sum().backward()
seconds = time.perf_counter() - start
""",
    "lessons 06-08": None,  # run_snippet: the CLI's model on one thread
    "lesson 09": """
from helpers.gpt import generate
from helpers.models.language_model import chat_prompt, load_pretrained_lm
model, tokenizer = load_pretrained_lm()
prompt = chat_prompt(tokenizer, "Translate into English: Ein Hund läuft im Schnee.")
text = torch.randint(0, 1000, (1, 64))
start = time.perf_counter()
with torch.no_grad():
    for _ in range(REPEATS):
        generate(model, prompt, 24)
        model(text, need_weights=True)
seconds = time.perf_counter() - start
""",
    "lesson 10": """
from helpers.analysis.circuits import AttentionOnlyTransformer, train_induction
model = AttentionOnlyTransformer(32, 32, 4, num_layers=2, max_len=32)
start = time.perf_counter()
train_induction(model, REPEATS * 150, lengths=(4, 12), lr=3e-3, seed=0, every=50, repeated_only=True)
seconds = time.perf_counter() - start
""",
}
EPILOGUE = 'print(json.dumps({"seconds": seconds, "threads": torch.get_num_threads()}))\n'
TOKENS_PER_S = re.compile(r"\| ([\d,]+) tok/s")


def environment(variant: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    env.setdefault("MPLBACKEND", "Agg")
    if variant == "old":
        env.update(OMP_NUM_THREADS=str(usable_cores()), GOMP_SPINCOUNT="300000")
    elif variant == "passive":
        env.update(OMP_WAIT_POLICY="PASSIVE")
    elif variant == "new":
        pass  # nothing set: what a learner's shell gives
    else:
        raise ValueError(f"expected a variant in {VARIANTS}, got {variant!r}")
    return env


def run_cli(variant: str, steps: int, threads: int | None = None) -> dict:
    """The CLI's captions training for ``steps`` steps: its own tokens/s, as seconds per million tokens."""
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "helpers.models.translation"]
        command += ["--threads", str(threads)] if threads else []
        command += ["train", "--corpus", "captions", "--steps", str(steps), "--eval-every", "0"]
        command += ["--val-sentences", "8", "--out", str(Path(folder) / "model.pt")]
        result = subprocess.run(command, env=environment(variant), capture_output=True, text=True, cwd=ROOT)
    rates = TOKENS_PER_S.findall(result.stdout + result.stderr)
    if result.returncode or not rates:
        raise RuntimeError(f"the CLI failed ({result.returncode}):\n{result.stderr[-3000:]}")
    tokens_per_s = float(rates[-1].replace(",", ""))
    return {"seconds": 1e6 / tokens_per_s, "tokens_per_s": tokens_per_s}


def run_snippet(variant: str, name: str, repeats: int) -> dict:
    if name == "lessons 06-08":  # the CLI's model on one thread, as these lessons fix it
        return run_cli(variant, steps=40 * repeats, threads=1)
    code = PRELUDE + WORKLOADS[name].replace("REPEATS", str(repeats)) + EPILOGUE
    result = subprocess.run(
        [sys.executable, "-c", code], env=environment(variant), capture_output=True, text=True, cwd=ROOT
    )
    if result.returncode:
        raise RuntimeError(f"{name} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def run_notebook(variant: str, path: Path) -> dict:
    """A lesson top to bottom in a fresh kernel (the kernel inherits the variant's environment): wall seconds."""
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute", str(path)]
        command += ["--output-dir", folder, "--ExecutePreprocessor.timeout=3600"]
        start = time.perf_counter()
        result = subprocess.run(command, env=environment(variant), capture_output=True, text=True, cwd=path.parent)
        seconds = time.perf_counter() - start
    if result.returncode:
        raise RuntimeError(f"{path.name} failed:\n{result.stderr[-3000:]}")
    return {"seconds": seconds}


class BusyProcess:
    """One core kept busy by a Python loop, for the length of a ``with`` block, and never past this script.

    The block's end stops it, also on Ctrl-C and, with ``exit_on_sigterm``, on SIGTERM; if this script dies
    without running its ``finally`` (SIGKILL), the loop sees its parent gone and stops itself.
    """

    def __init__(self, settle: float = 1.0) -> None:
        self.settle = settle  # seconds for the loop to be running before the measurement starts

    def __enter__(self):
        self.process = subprocess.Popen([sys.executable, "-c", BUSY_LOOP, str(os.getpid())])
        try:
            time.sleep(self.settle)
        except BaseException:  # interrupted before the block began: its __exit__ would never run
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        self.process.kill()
        self.process.wait()


def exit_on_sigterm() -> None:
    """Make SIGTERM (``kill``, a job's time limit) leave through SystemExit, so every ``finally`` and ``with``
    runs, as Ctrl-C's KeyboardInterrupt does: the busy loop and the measured processes stop with the script."""

    def leave(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, leave)


def measure(tasks: dict, variants: list[str], repeats: int, log) -> list[dict]:
    """Each task under each variant, idle then busy, interleaved so that the machine's drift hits all alike."""
    rows = []
    for _ in range(repeats):
        for name, task in tasks.items():
            for condition in ("idle", "busy"):
                with BusyProcess() if condition == "busy" else contextlib.nullcontext():
                    for variant in variants:
                        load, seen = os.getloadavg()[0], busy_cores()
                        row = {"task": name, "variant": variant, "condition": condition, "load1": load}
                        row |= {"busy_seen": seen, **task(variant)}
                        rows.append(row)
                        log(json.dumps(row))
    return rows


def table(rows: list[dict]) -> str:
    """Median seconds per (task, variant, condition); ratios busy/idle and against the old idle time."""
    from statistics import median

    def seconds(task, variant, condition):
        values = [r["seconds"] for r in rows if (r["task"], r["variant"], r["condition"]) == (task, variant, condition)]
        return median(values) if values else float("nan")

    def loads(task, variant, condition):
        values = [r["load1"] for r in rows if (r["task"], r["variant"], r["condition"]) == (task, variant, condition)]
        return f"{min(values):.1f}-{max(values):.1f}" if values else "-"

    lines = [
        "| workload | variant | idle (s) | busy (s) | busy / idle | idle / old idle | load1 idle | load1 busy |",
        "|---|---|---:|---:|---:|---:|---|---|",
    ]
    for task in dict.fromkeys(r["task"] for r in rows):
        old_idle = seconds(task, "old", "idle")
        for variant in dict.fromkeys(r["variant"] for r in rows if r["task"] == task):
            idle, busy = seconds(task, variant, "idle"), seconds(task, variant, "busy")
            cells = [idle, busy, busy / idle, idle / old_idle]
            lines.append(
                f"| {task} | {variant} | "
                + " | ".join("-" if math.isnan(c) else f"{c:.2f}" for c in cells)
                + f" | {loads(task, variant, 'idle')} | {loads(task, variant, 'busy')} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="representative workloads instead of whole lessons")
    parser.add_argument("--lessons", nargs="*", default=None, help="lesson numbers (default: all)")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--repeats", type=int, default=1, help="rounds of every measurement (medians are shown)")
    parser.add_argument("--cli-steps", type=int, default=None, help="CLI steps (default 60 quick, 200 full)")
    parser.add_argument("--no-cli", action="store_true", help="leave the CLI out (lessons only)")
    parser.add_argument("--json", type=Path, default=None, help="also write every measurement here, one a line")
    args = parser.parse_args()
    exit_on_sigterm()

    steps = args.cli_steps or (60 if args.quick else 200)
    tasks = {} if args.no_cli else {"cli": lambda variant: run_cli(variant, steps)}
    if args.quick:
        for name in WORKLOADS:
            numbers = re.findall(r"\d\d", name)
            first, last = int(numbers[0]), int(numbers[-1])
            if args.lessons is None or any(first <= int(n) <= last for n in args.lessons):
                tasks[name] = lambda variant, name=name: run_snippet(variant, name, 1)
    else:
        for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
            if args.lessons is None or path.name[:2] in args.lessons:
                tasks[f"lesson {path.name[:2]}"] = lambda variant, path=path: run_notebook(variant, path)

    print(f"{usable_cores()} usable cores; load average at start {os.getloadavg()}; {time.strftime('%F %T %Z')}")
    out = args.json.open("w") if args.json else None

    def log(line: str) -> None:
        print(line, flush=True)
        if out:
            print(line, file=out, flush=True)

    rows = measure(tasks, args.variants, args.repeats, log)
    print(f"load average at end {os.getloadavg()}")
    print(table(rows))


if __name__ == "__main__":
    main()
