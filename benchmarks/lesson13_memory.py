"""What Gemma 3's local layers save in the KV cache: bytes counted against T, and peak memory measured.

Counted (``helpers.kv_cache.rolling_kv_cache_bytes``, per layer 2 × h_kv × d × min(T, W) numbers, W the layer's
window or T for a global layer) for T = 512 .. 32,768, float32 as the course's models hold them (16-bit numbers
halve every figure and no ratio), for:

- Gemma 3 270M as it is, with the rolling cache: 15 local layers keep 512 tokens, the 3 global ones all T;
- the same model with every layer global: 18 layers keep all T (also what the hybrid costs with a plain cache,
  which keeps every token whatever the mask: a window mask alone saves compute, not memory);
- SmolLM2-135M: 30 layers, h_kv = 3, d = 64, all global.

Measured (``helpers.tools.cost.peak_memory``: the resident memory's high-water mark added while the cache is
filled) at the lengths the CPU allows (``--measure``, default 512 .. 4,096): random ids fed in chunks of 256
tokens (so that the chunk's attention weights, (1, h, 256, T) per layer, stay small beside the cache), the cache
kept alive to the end, for the four set-ups: Gemma with the rolling cache, Gemma (windows as they are) with a
plain cache, Gemma with every layer global and a plain cache, SmolLM2. The peak holds the cache plus the last
chunk's activations and one layer's copy while its entry is extended.

One JSON line per measurement and one with the counted table go to ``--log``; the tables are printed.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/lesson13_memory.py --log benchmarks/lesson13_memory.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from helpers.kv_cache import rolling_kv_cache_bytes  # noqa: E402
from helpers.layer_kind import seeing  # noqa: E402
from helpers.tools.cost import peak_memory  # noqa: E402

COUNTED = (512, 1024, 2048, 4096, 8192, 16384, 32768)
MEASURED = (512, 1024, 2048, 4096)
CHUNK = 256
MIB = 2**20


def windows(model) -> list[int | None]:
    return [block.attention.window for block in model.blocks]


@contextmanager
def every_layer_global(model):
    """Within the ``with``, no layer of ``model`` has a window; restored on leaving."""
    with seeing(model, range(len(model.blocks)), window=None):
        yield model


def counted(model, tokens: int, bytes_per_number: int = 4) -> int:
    c = model.config
    return rolling_kv_cache_bytes(windows(model), c.num_kv_heads, c.head_dim, tokens, bytes_per_number)


@torch.no_grad()
def fill(model, ids: torch.Tensor, rolling: bool):
    """A cache filled with ids (1, T), fed ``CHUNK`` tokens a call."""
    cache = model.new_cache(rolling=rolling)
    for chunk in ids.split(CHUNK, dim=1):
        model(chunk, cache, last_only=True)
    return cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", type=int, nargs="*", default=list(MEASURED), help="lengths to measure")
    parser.add_argument("--log", type=Path, default=None)
    args = parser.parse_args()
    from helpers.models.language_model import load_pretrained_lm

    gemma, _ = load_pretrained_lm("gemma-3-270m")
    smollm2, _ = load_pretrained_lm()

    def log(line: dict) -> None:
        print(json.dumps(line), flush=True)
        if args.log:
            with args.log.open("a") as file:
                file.write(json.dumps(line) + "\n")

    rows = {"Gemma 3 270M, rolling cache": [counted(gemma, t) for t in COUNTED]}
    with every_layer_global(gemma):
        rows["Gemma 3 270M, every layer global"] = [counted(gemma, t) for t in COUNTED]
    rows["SmolLM2-135M"] = [counted(smollm2, t) for t in COUNTED]
    log({"counted_bytes": rows, "T": list(COUNTED), "bytes_per_number": 4})

    setups = {
        "Gemma, rolling cache": (gemma, True, False),
        "Gemma, plain cache": (gemma, False, False),
        "Gemma, every layer global": (gemma, False, True),
        "SmolLM2, plain cache": (smollm2, False, False),
    }
    measured: dict[str, dict[int, tuple[int, int]]] = {}
    for name, (model, rolling, all_global) in setups.items():
        for tokens in args.measure:
            ids = torch.randint(model.config.vocab_size, (1, tokens), generator=torch.Generator().manual_seed(0))
            start = time.perf_counter()
            if all_global:
                with every_layer_global(model):
                    cache, peak = peak_memory(lambda m=model, i=ids: fill(m, i, False))
            else:
                cache, peak = peak_memory(lambda m=model, i=ids, r=rolling: fill(m, i, r))
            held = cache.nbytes()
            del cache
            if rolling:
                expected = counted(model, tokens)
            else:  # a plain cache keeps every token in every layer, whatever the windows
                with every_layer_global(model):
                    expected = counted(model, tokens)
            if held != expected:
                raise AssertionError(f"{name}, T = {tokens}: the cache holds {held} bytes, counted {expected}")
            measured.setdefault(name, {})[tokens] = (held, peak)
            log({
                "setup": name, "T": tokens, "cache_bytes": held, "peak_bytes": peak,
                "seconds": round(time.perf_counter() - start, 1), "threads": torch.get_num_threads(),
                "load": [round(x, 2) for x in os.getloadavg()],
            })  # fmt: skip

    print("\nKV cache counted, MiB (float32)\n| model | " + " | ".join(f"T = {t}" for t in COUNTED) + " |")
    print("|---" * (len(COUNTED) + 1) + "|")
    for name, sizes in rows.items():
        print(f"| {name} | " + " | ".join(f"{b / MIB:.1f}" for b in sizes) + " |")
    hybrid, full = rows["Gemma 3 270M, rolling cache"], rows["Gemma 3 270M, every layer global"]
    for t in (8192, 32768):
        i = COUNTED.index(t)
        print(f"T = {t}: rolling {hybrid[i] / MIB:.1f} MiB against {full[i] / MIB:.1f} MiB, "
              f"{1 - hybrid[i] / full[i]:.1%} saved ({full[i] / hybrid[i]:.2f}x less)")  # fmt: skip
    print("\nMeasured: cache held / peak added, MiB\n| set-up | " + " | ".join(f"T = {t}" for t in args.measure) + " |")
    print("|---" * (len(args.measure) + 1) + "|")
    for name, by_length in measured.items():
        cells = [f"{held / MIB:.1f} / {peak / MIB:.1f}" for held, peak in by_length.values()]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
