"""Lesson 06's translator, built from the course's own attention, against the same model on torch's layers.

    python benchmarks/translator_speed.py            # training steps, alternating, and inference passes

Both models hold the same weights: ``Seq2SeqTransformer`` (``helpers.layers``: every attention a
``helpers.MultiHeadAttention``) and a copy whose ``transformer`` is ``nn.Transformer`` (torch's layers,
``nn.MultiheadAttention``, the fused encoder path at inference), loaded from the same state dict. They train
on the same batches in alternating blocks of steps, so that a busy shared machine slows both alike, and the
ratio of their process CPU times is the number to read (one thread, as the lesson trains).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from helpers.data.batching import make_batches  # noqa: E402 (the repository root goes on the path first)
from helpers.data.corpus import load_corpus  # noqa: E402
from helpers.data.tokenization import train_tokenizers  # noqa: E402
from helpers.models.translation import Seq2SeqTransformer, teacher_forcing, translation_loss  # noqa: E402
from helpers.models.translation.config import LESSON_CONFIG  # noqa: E402
from helpers.models.translation.model import on_torch_layers  # noqa: E402


def train_block(model, optimizer, batches) -> float:
    """Process CPU seconds for one optimiser step per batch."""
    model.train()
    start = time.process_time()
    for batch in batches:
        tgt_in, tgt_out = teacher_forcing(batch.tgt)
        loss = translation_loss(model(batch.src, tgt_in), tgt_out, LESSON_CONFIG.label_smoothing)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), LESSON_CONFIG.clip_norm)
        optimizer.step()
    return time.process_time() - start


@torch.no_grad()
def inference_block(model, batches) -> float:
    """Process CPU seconds for the encoder on every batch (eval + no_grad: torch's fused encoder path)."""
    model.eval()
    start = time.process_time()
    for batch in batches:
        model.encode(batch.src)
        model(batch.src, batch.tgt[:, :-1])
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block", type=int, default=100, help="training steps per block")
    parser.add_argument("--rounds", type=int, default=4, help="blocks per model, alternating")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with open("/proc/loadavg") as handle:
        load = float(handle.read().split()[0])
    train_corpus = load_corpus("captions", "train")
    de, en = train_tokenizers(train_corpus, kind="word", min_frequency=1)
    batches = make_batches(
        de.encode_batch(train_corpus.de), en.encode_batch(train_corpus.en), LESSON_CONFIG.batch_tokens, seed=0
    )
    torch.manual_seed(0)
    ours = Seq2SeqTransformer(LESSON_CONFIG, de.vocab_size, en.vocab_size)
    theirs = on_torch_layers(ours)
    optimizers = {
        name: torch.optim.AdamW(m.parameters(), lr=1e-3, fused=True) for name, m in (("ours", ours), ("torch", theirs))
    }
    seconds = {"ours": 0.0, "torch": 0.0}
    inference = {"ours": 0.0, "torch": 0.0}
    for r in range(args.rounds):
        block = batches[r * args.block : (r + 1) * args.block]
        order = [("ours", ours), ("torch", theirs)] if r % 2 == 0 else [("torch", theirs), ("ours", ours)]
        for name, model in order:
            seconds[name] += train_block(model, optimizers[name], block)
        for name, model in order:
            inference[name] += inference_block(model, block)
    steps = args.block * args.rounds
    print(
        json.dumps(
            {
                "load_average_at_start": load,
                "steps_each": steps,
                "train_cpu_s": {k: round(v, 2) for k, v in seconds.items()},
                "train_ms_per_step": {k: round(1000 * v / steps, 2) for k, v in seconds.items()},
                "train_ratio_ours_over_torch": round(seconds["ours"] / seconds["torch"], 3),
                "inference_cpu_s": {k: round(v, 2) for k, v in inference.items()},
                "inference_ratio_ours_over_torch": round(inference["ours"] / inference["torch"], 3),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
