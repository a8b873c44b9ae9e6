"""Greedy decoding with the translator's KV cache (``model.decode_step``, what greedy and beam search use: projected
keys and values, the memory's projected once) against no cache (``model.decode`` on the whole prefix at every step),
side by side in one run, on lesson 06's untrained translator: 32 sentences, 30 steps, one thread, process CPU time,
alternating, median of 7. (Until the translator had one cache, this compared a cache of the layers' inputs.)

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/decoder_cache_speed.py
"""

import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers.data.tokenization import BOS_ID
from helpers.models.translation import Seq2SeqTransformer
from helpers.models.translation.config import LESSON_CONFIG
from helpers.models.translation.decoding import never_special

print("load before", os.getloadavg(), LESSON_CONFIG)
torch.manual_seed(0)
model = Seq2SeqTransformer(LESSON_CONFIG, 200, 200).eval()
src = torch.randint(4, 200, (32, 16))
src[:, 0] = BOS_ID
STEPS = 30


@torch.no_grad()
def run(cached):
    memory, padding = model.encode(src)
    tokens, cache = torch.full((32, 1), BOS_ID), None
    for _ in range(STEPS):
        if cached:
            logits, cache = model.decode_step(tokens[:, -1:], memory, padding, cache)
        else:
            logits = model.decode(tokens, memory, padding)[:, -1]  # (N, V): every position again
        tokens = torch.cat((tokens, never_special(logits).argmax(-1, keepdim=True)), 1)
    return tokens


assert torch.equal(run(True), run(False))
times = {True: [], False: []}
for _ in range(7):
    for c in (False, True):
        t = time.process_time()
        run(c)
        times[c].append(time.process_time() - t)
old, new = statistics.median(times[False]), statistics.median(times[True])
print(
    f"32 sentences x {STEPS} steps: no cache {old * 1e3:.0f} ms CPU, "
    f"KV cache {new * 1e3:.0f} ms CPU, ratio {new / old:.2f}"
)
print("load after", os.getloadavg())
