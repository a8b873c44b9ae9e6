"""Lesson 16: the bytes attention moves between global memory and its programs, counted from the kernels' own
loads and stores under Triton's interpreter, for a range of T and block sizes.

For each length T and block size B (BM = BN = B queries and keys per block), one head (N = h = 1, d = 64,
float32, S = T) runs through

- the naive kernels (``helpers.kernels.naive_attention``: scores written to global memory, read back for the
  softmax, weights written, read back for P V), and
- the FlashAttention-2 forward kernel (``helpers.kernels.flash_forward``), without and with the causal early stop,

inside ``helpers.kernels.memory_traffic.count_memory_traffic``, which adds up every load's and store's unmasked
lanes times the element size. Beside the counts stand FlashAttention's IO analysis (Dao et al. 2022, theorem 2):
Θ(T²) for the naive kernel (its count / T² settles to a constant: 16 bytes for the four float32 round trips of
the scores and weights, plus 12 d / B for Q, K and V read once per block) and Θ(T² d² / M) for the tiled one,
where M is what a program holds on chip (``memory_traffic.on_chip_elements``): the count divided by 4 T² d² / M
stays within a constant band as T and B change. The count these kernels' loops predict (``flash_forward_elements``,
``naive_elements``) is checked to be met exactly, and each output against SDPA.

The interpreter runs every program in Python, so a pair with many (query block, key block) steps takes minutes:
pairs with more than ``--max-steps`` steps, (T / B)², are left out (by default T = 1024 at B = 16).
Counting needs the interpreter, so this script sets TRITON_INTERPRET=1 before anything imports Triton (on a GPU
machine too). One JSON line per (T, B) goes to ``--log``; the markdown table is printed.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/lesson16_bytes.py --log benchmarks/lesson16_bytes.jsonl
    .venv/bin/python benchmarks/lesson16_bytes.py --table benchmarks/lesson16_bytes.jsonl
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before any import of Triton: counting reads the interpreter's loads

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from helpers.kernels import TRITON_MISSING, triton_available  # noqa: E402


def count_one(T: int, block: int, d: int) -> dict:
    """Count the naive and the flash kernels' bytes for one (T, B), and check the outputs against SDPA."""
    from helpers.kernels.flash_forward import flash_forward
    from helpers.kernels.memory_traffic import (
        count_memory_traffic,
        flash_forward_elements,
        naive_elements,
        on_chip_elements,
    )
    from helpers.kernels.naive_attention import naive_attention_triton

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, T, d, generator=gen) for _ in range(3))
    started = time.perf_counter()
    counted = {}
    outputs = {}
    runs = {
        "naive": lambda: naive_attention_triton(q, k, v, block_q=block, block_k=block),
        "flash": lambda: flash_forward(q, k, v, block_q=block, block_k=block)[0],
        "flash causal": lambda: flash_forward(q, k, v, causal=True, block_q=block, block_k=block)[0],
    }
    for name, run in runs.items():
        with count_memory_traffic() as traffic:
            outputs[name] = run()
        counted[name] = traffic
    for name, out in outputs.items():  # the bytes belong to a right answer
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=name.endswith("causal"))
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)

    size = 4  # float32
    flash_formula = size * sum(flash_forward_elements(T, T, d, block).values())
    naive_formula = size * sum(naive_elements(T, T, d, block, block).values())
    assert counted["flash"].bytes_moved == flash_formula, (counted["flash"], flash_formula)
    assert counted["naive"].bytes_moved == naive_formula, (counted["naive"], naive_formula)
    M = on_chip_elements(d, block, block)
    flash_bytes = counted["flash"].bytes_moved
    naive_bytes = counted["naive"].bytes_moved
    return {
        "T": T,
        "d": d,
        "block": block,
        "dtype": "float32",
        "naive_bytes": naive_bytes,
        "naive_read": counted["naive"].bytes_read,
        "naive_written": counted["naive"].bytes_written,
        "flash_bytes": flash_bytes,
        "flash_read": counted["flash"].bytes_read,
        "flash_written": counted["flash"].bytes_written,
        "flash_causal_bytes": counted["flash causal"].bytes_moved,
        "naive_formula_bytes": naive_formula,
        "flash_formula_bytes": flash_formula,
        "on_chip_elements_M": M,
        "naive_per_T2": naive_bytes / T**2,
        "flash_per_T2d2_over_M": flash_bytes / (size * T**2 * d**2 / M),
        "naive_over_flash": naive_bytes / flash_bytes,
        "seconds": round(time.perf_counter() - started, 1),
        "load_average": os.getloadavg()[0],
        "torch_threads": torch.get_num_threads(),
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| T | B = BM = BN | M (elements) | naive bytes | flash bytes | flash, causal | naive / flash | naive / T² "
        "| flash / (4 T² d² / M) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(rows, key=lambda r: (r["T"], r["block"])):
        lines.append(
            f"| {r['T']} | {r['block']} | {r['on_chip_elements_M']:,} | {r['naive_bytes']:,} | {r['flash_bytes']:,} "
            f"| {r['flash_causal_bytes']:,} | {r['naive_over_flash']:.2f} | {r['naive_per_T2']:.2f} "
            f"| {r['flash_per_T2d2_over_M']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 512, 1024])
    parser.add_argument("--blocks", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--max-steps", type=int, default=1024, help="leave out pairs with more (T / B)² steps")
    parser.add_argument("--log", type=Path, default=None, help="JSON lines, one per (T, B), written afresh")
    parser.add_argument("--table", type=Path, default=None, help="print the table of a log and stop")
    args = parser.parse_args()
    if args.table:
        print(table([json.loads(line) for line in args.table.read_text().splitlines() if line.strip()]))
        return
    if not triton_available():
        print(f"nothing to count: {TRITON_MISSING}")
        return
    rows = []
    for T in args.lengths:
        for block in args.blocks:
            if (T // block) ** 2 > args.max_steps:
                print(f"T = {T}, B = {block}: left out, {(T // block) ** 2} steps > --max-steps {args.max_steps}")
                continue
            row = count_one(T, block, args.d)
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.log:
        args.log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(table(rows))


if __name__ == "__main__":
    main()
