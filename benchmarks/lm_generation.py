"""Lesson 09's speed: greedy generation with our SmolLM2 and KV cache against transformers' generate, side by
side in one run, and the memory-bandwidth limit of this machine for the model's float32 weights.

Both sides get the same chat prompt, the same thread count and the same number of new tokens: neither stops
at ``<|im_end|>`` (ours runs without ``eos_id``; transformers' generation config loses its ``eos_token_id``,
rather than ``min_new_tokens``, which would forbid the token and change what greedy decoding writes). After a
warm-up, the two alternate for ``--repeats`` rounds (the order swapped every round, so that a busy moment of a
shared machine hits both); tokens/s is the new tokens over the wall time of the whole call, prompt included.
The script prints the median and range of each side, the ratio of the medians, whether the tokens agree (and
where they first part if not), and the bound ``read bandwidth / bytes of weights read per token``: every new
token reads every weight once, the tied (V, E) matrix once as the output layer (the embedding reads one row).

    .venv/bin/python benchmarks/lm_generation.py [--tokens 200] [--threads 1 2] [--repeats 5]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time

import torch

from helpers.gpt import generate
from helpers.models.language_model import chat_prompt, load_pretrained_lm, load_reference_lm

QUESTION = "Write a long story about a mother and her little son who spend a day outdoors."


def bandwidth_gb_s(megabytes: int = 1024, repeats: int = 5) -> tuple[float, float]:
    """(read, copy) bandwidth of this machine in GB/s at the current thread count, the best of a few passes
    over a tensor far larger than the CPU's caches: read = ``x.sum()``, copy = bytes read + bytes written."""
    source = torch.ones(megabytes * 2**20 // 4)
    target = torch.empty_like(source)
    best_read = best_copy = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        source.sum()
        best_read = min(best_read, time.perf_counter() - start)
        start = time.perf_counter()
        target.copy_(source)
        best_copy = min(best_copy, time.perf_counter() - start)
    nbytes = source.numel() * source.element_size()
    return nbytes / best_read / 1e9, 2 * nbytes / best_copy / 1e9


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the distinct parameters (a tied matrix once)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())  # parameters() yields a tied one once


def first_difference(a: torch.Tensor, b: torch.Tensor) -> int | None:
    """The first position where two (1, T) token rows differ, or None if they are equal."""
    if torch.equal(a, b):
        return None
    n = min(a.size(1), b.size(1))
    differ = (a[0, :n] != b[0, :n]).nonzero()
    return int(differ[0]) if len(differ) else n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=200, help="new tokens per generation")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=5, help="alternating rounds per thread count")
    parser.add_argument(
        "--reference-attention", default="sdpa", choices=("sdpa", "eager"),
        help="transformers' attention (sdpa is its default and its fastest on CPU; eager returns weights)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.tokens < 1 or args.repeats < 1 or min(args.threads) < 1:
        parser.error("--tokens, --repeats and --threads must be positive")

    model, tokenizer = load_pretrained_lm()
    reference = load_reference_lm()
    reference.set_attn_implementation(args.reference_attention)
    no_stop = copy.deepcopy(reference.generation_config)
    no_stop.eos_token_id = None  # run the full length, and never forbid a token
    no_stop.do_sample, no_stop.pad_token_id = False, tokenizer.eos_token_id
    prompt = chat_prompt(tokenizer, QUESTION)
    T0, n = prompt.size(1), args.tokens

    def ours(count: int) -> torch.Tensor:
        return generate(model, prompt, count)[0]

    def theirs(count: int) -> torch.Tensor:
        no_stop.max_new_tokens = count  # in the config: transformers deprecates a config together with arguments
        with torch.no_grad():
            out = reference.generate(prompt, attention_mask=torch.ones_like(prompt), generation_config=no_stop)
        assert out.size(1) == T0 + count, f"transformers stopped after {out.size(1) - T0} of {count} tokens"
        return out

    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start (shared machine)")
    print(f"torch {torch.__version__}; prompt {T0} tokens, {n} new tokens, transformers {args.reference_attention}")
    nbytes = weight_bytes(model)
    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        ours(8), theirs(8)  # warm-up: first-call allocations and kernel choices
        rates = {"ours": [], "theirs": []}
        outputs = {}
        for round_ in range(args.repeats):
            order = ("ours", "theirs") if round_ % 2 == 0 else ("theirs", "ours")
            for side in order:
                start = time.perf_counter()
                outputs[side] = (ours if side == "ours" else theirs)(n)
                rates[side].append(n / (time.perf_counter() - start))
                print(f"  threads {threads}, round {round_ + 1}, {side}: {rates[side][-1]:.1f} tokens/s", flush=True)
        read, copied = bandwidth_gb_s()
        limit = read * 1e9 / nbytes
        mine, ref = statistics.median(rates["ours"]), statistics.median(rates["theirs"])
        diverge = first_difference(outputs["ours"], outputs["theirs"])
        rows.append((threads, mine, ref, rates, read, copied, limit, diverge))
        print(
            f"threads {threads}: ours {mine:.1f} tokens/s {[round(r, 1) for r in rates['ours']]}, "
            f"transformers {ref:.1f} {[round(r, 1) for r in rates['theirs']]}, ratio {mine / ref:.2f}; "
            f"read {read:.1f} GB/s (copy {copied:.1f}) -> at most {limit:.1f} tokens/s; "
            f"load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        if diverge is not None:
            ours_text, theirs_text = (tokenizer.decode(outputs[side][0, diverge : diverge + 8]) for side in rates)
            print(f"  tokens part at new token {diverge - T0}: ours {ours_text!r} vs theirs {theirs_text!r}")

    print(f"\nweights read per token: {nbytes / 1e6:.0f} MB ({nbytes // 4 / 1e6:.1f}M float32 parameters)\n")
    print("| threads | ours, tokens/s (median, range) | transformers | ratio | read GB/s | bound, tokens/s | tokens |")
    print("|---|---|---|---|---|---|---|")
    for threads, mine, ref, rates, read, _, limit, diverge in rows:
        spans = {side: f"{min(r):.1f}–{max(r):.1f}" for side, r in rates.items()}
        same = "equal" if diverge is None else f"part at new token {diverge - T0}"
        print(
            f"| {threads} | {mine:.1f} ({spans['ours']}) | {ref:.1f} ({spans['theirs']}) | {mine / ref:.2f} "
            f"| {read:.1f} | {limit:.1f} | {same} |"
        )
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
