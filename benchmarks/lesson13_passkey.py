"""A pass key past the window (prototype for lesson 13): can Gemma 3 270M fetch a number stated before more than
512 tokens of filler, and which layers let it?

The prompt states a five-digit pass key, then repeats a filler paragraph until the key lies more than 512 tokens
(the local layers' window) before the question, then asks "What is the pass key? The pass key is". A local layer
cannot read the key from there; only the global layers (5, 11, 17) can, or a local layer reading what an earlier
global layer wrote at a later position. The script answers greedily with the course's KV cache, for:

- the intact model;
- every layer local (the three global layers given the window 512; each keeps its own rotary base, so that only
  what a layer may read changes);
- each global layer made local alone.

A key is fetched when the greedy answer's first digits are the key. One JSON line per (variant, key) goes to
``--log`` when given; the table is printed.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/lesson13_passkey.py --keys 5 --log /tmp/passkey.jsonl

First run (2 December, ``--keys 4``, seed 13; prompts of 667 tokens, the key 627 tokens before the question's end):
intact 4 of 4; every layer local 0; layer 5 local 0; layer 11 local 0; layer 17 local 4 of 4. Without layer 5 or
11 reading past the window the model answers with words ("a key that is used to open a"); layer 17, the last,
is not needed to fetch the key.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from helpers.gpt import generate  # noqa: E402
from helpers.models.language_model import load_pretrained_lm  # noqa: E402

FILLER = (
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
    "The river flows to the sea, and the wind moves the clouds over the hills. "
)
WINDOW = 512


def passkey_prompt(tokenizer, key: int, past: int = 600) -> tuple[torch.Tensor, int]:
    """ids (1, T) of the prompt, and how many tokens lie between the key's last token and the question's end."""
    head = (
        f"There is a pass key hidden in this text. Remember it. The pass key is {key}. Remember it. "
        f"{key} is the pass key.\n"
    )
    question = "\nWhat is the pass key? The pass key is"
    filler = ""
    while True:
        ids = tokenizer(head + filler + question, return_tensors="pt").input_ids
        distance = ids.size(1) - tokenizer(head, return_tensors="pt").input_ids.size(1)
        if distance >= past:
            return ids, distance
        filler += FILLER


def set_local(model, layers: list[int], window: int | None) -> None:
    for layer in layers:
        model.blocks[layer].attention.window = window


def answer(model, tokenizer, ids: torch.Tensor, new: int = 8) -> str:
    tokens, _ = generate(model, ids, new)
    return tokenizer.decode(tokens[0, ids.size(1) :], skip_special_tokens=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=5, help="how many random five-digit keys")
    parser.add_argument("--past", type=int, default=600, help="tokens between the key and the question's end")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--log", type=Path, default=None)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    model, tokenizer = load_pretrained_lm("gemma-3-270m")
    global_layers = [i for i, block in enumerate(model.blocks) if block.attention.window is None]
    variants = {"intact": [], "every layer local": global_layers} | {
        f"layer {layer} local": [layer] for layer in global_layers
    }
    keys = random.Random(args.seed).sample(range(10000, 100000), args.keys)
    results: dict[str, list[bool]] = {}
    for name, layers in variants.items():
        set_local(model, layers, WINDOW)
        try:
            for key in keys:
                ids, distance = passkey_prompt(tokenizer, key, args.past)
                text = answer(model, tokenizer, ids)
                digits = "".join(re.findall(r"\d", text))[:5]
                fetched = digits == str(key)
                results.setdefault(name, []).append(fetched)
                line = {"variant": name, "key": key, "T": ids.size(1), "distance": distance, "answer": text}
                print(json.dumps(line | {"fetched": fetched}), flush=True)
                if args.log:
                    with args.log.open("a") as log:
                        log.write(json.dumps(line | {"fetched": fetched}) + "\n")
        finally:
            set_local(model, layers, None)
    print(f"\n| variant | keys fetched (of {len(keys)}) |\n|---|---|")
    for name, fetched in results.items():
        print(f"| {name} | {sum(fetched)} |")


if __name__ == "__main__":
    main()
