"""Lesson 09's speed: greedy generation of 200 tokens with our SmolLM2 and KV cache against transformers' generate,
side by side in one run on the same prompt and threads, and the memory-bandwidth limit of this machine for a
135M-parameter float32 model (every generated token reads every weight once).

    .venv/bin/python benchmarks/lm_generation.py [--tokens 200] [--threads 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

import torch

from helpers.gpt import generate
from helpers.models.language_model import chat_prompt, load_pretrained_lm, load_reference_lm


def bandwidth_gb_s(megabytes: int = 512, repeats: int = 5) -> float:
    """Copy bandwidth (read + write) of this machine, GB/s, the best of a few copies of a large tensor."""
    source = torch.ones(megabytes * 2**20 // 4)
    target = torch.empty_like(source)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        target.copy_(source)
        best = min(best, time.perf_counter() - start)
    return 2 * source.numel() * 4 / best / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = load_pretrained_lm()
    reference = load_reference_lm()
    prompt = chat_prompt(tokenizer, "Write a long story about a mother and her little son who spend a day outdoors.")
    ours, theirs = [], []
    for _ in range(args.repeats):  # alternate, so that a busy moment hits both
        start = time.perf_counter()
        tokens, _ = generate(model, prompt, args.tokens)
        ours.append(args.tokens / (time.perf_counter() - start))
        start = time.perf_counter()
        with torch.no_grad():
            expected = reference.generate(
                prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=args.tokens, min_new_tokens=args.tokens,
                do_sample=False, pad_token_id=tokenizer.eos_token_id,
            )  # fmt: skip
        theirs.append(args.tokens / (time.perf_counter() - start))
    same = torch.equal(tokens, expected)
    parameters = sum(p.numel() for p in model.parameters())
    bandwidth = bandwidth_gb_s()
    limit = bandwidth * 1e9 / (parameters * 4)
    best_ours, best_theirs = max(ours), max(theirs)
    print(f"threads {args.threads}, prompt {prompt.size(1)} tokens, {args.tokens} new tokens, best of {args.repeats}")
    print(f"ours (helpers.gpt + KV cache): {best_ours:.1f} tokens/s   runs {[round(x, 1) for x in ours]}")
    print(f"transformers generate:         {best_theirs:.1f} tokens/s   runs {[round(x, 1) for x in theirs]}")
    print(f"ratio ours / transformers: {best_ours / best_theirs:.2f}; same tokens: {same}")
    print(f"copy bandwidth {bandwidth:.1f} GB/s -> at most {limit:.1f} tokens/s for {parameters / 1e6:.0f}M fp32")


if __name__ == "__main__":
    main()
