"""Training the translator: label smoothing, AdamW with warm-up, clipping, validation, best weights kept.

Shapes: N sentences in a batch, S source length, L target length, V target vocabulary.
A training example is a pair of id lists ``(source_ids, target_ids)``, each with BOS ... EOS.
The decoder reads the target without its last token (``tgt_in``, starting with BOS) and learns to
predict the target without its first one (``tgt_out``, ending with EOS): teacher forcing.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm.auto import tqdm

from helpers.batching import make_batches
from helpers.translation.config import TranslationConfig
from helpers.translation.model import PAD, Seq2SeqTransformer

Example = tuple[list[int], list[int]]  # (source ids, target ids), both with BOS ... EOS


@dataclass
class TrainingHistory:
    """What happened during training, for loss curves and reports (plain Python values only)."""

    steps_done: int = 0  # optimiser steps taken
    steps: list[int] = field(default_factory=list)  # optimiser step of each logged loss
    losses: list[float] = field(default_factory=list)  # training loss (label-smoothed cross-entropy)
    val_steps: list[int] = field(default_factory=list)
    val_scores: list[float] = field(default_factory=list)  # validation score (BLEU, higher is better)
    best_step: int = 0
    best_score: float = float("-inf")
    seconds: float = 0.0  # wall-clock time spent training (validation included)
    cpu_seconds: float = 0.0  # process CPU time spent (all threads), a steadier measure on a shared machine
    target_tokens: int = 0  # real target tokens seen (padding excluded)

    @property
    def tokens_per_second(self) -> float:
        return self.target_tokens / self.seconds if self.seconds else 0.0

    def to_dict(self) -> dict:
        return {
            "steps": self.steps_done,
            "final_loss": self.losses[-1] if self.losses else None,
            "best_step": self.best_step,
            "best_val_score": self.best_score,
            "seconds": round(self.seconds, 2),
            "cpu_seconds": round(self.cpu_seconds, 2),
            "target_tokens_per_second": round(self.tokens_per_second, 1),
        }


def teacher_forcing(tgt: Tensor) -> tuple[Tensor, Tensor]:
    """Split a padded target batch (N, L+1) into decoder input and expected output, each (N, L).

    ``tgt_in`` = ``tgt[:, :-1]`` (BOS, y1 ... yL), ``tgt_out`` = ``tgt[:, 1:]`` (y1 ... yL, EOS):
    position t reads the tokens up to t and is scored on token t + 1.
    """
    return tgt[:, :-1], tgt[:, 1:]


def translation_loss(logits: Tensor, tgt_out: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """Mean cross-entropy over real target tokens: logits (N, L, V), tgt_out (N, L); padding ignored."""
    return F.cross_entropy(
        logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1), ignore_index=PAD, label_smoothing=label_smoothing
    )


def learning_rate_factor(step: int, progress: float, config: TranslationConfig) -> float:
    """Multiplier of the peak learning rate: linear warm-up over ``warmup_steps``, then cosine decay.

    ``progress`` in [0, 1] is the fraction of training done (by steps, epochs or minutes), so the
    same schedule serves a step count and a time budget. Warm-up matters because Adam's early
    updates, made with poor estimates of the gradient's scale, can wreck a post-norm transformer
    at a high learning rate.
    """
    warmup = min(1.0, (step + 1) / max(1, config.warmup_steps))
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, max(0.0, progress))))
    return warmup * (config.min_lr_ratio + (1.0 - config.min_lr_ratio) * cosine)


def default_device() -> torch.device:
    """A GPU when one is present, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def train(
    model: Seq2SeqTransformer,
    examples: Sequence[Example],
    config: TranslationConfig,
    *,
    steps: int | None = None,
    epochs: int | None = None,
    minutes: float | None = None,
    validate: Callable[[Seq2SeqTransformer], float] | None = None,
    on_best: Callable[[Seq2SeqTransformer, TrainingHistory], None] | None = None,
    progress: bool = True,
    log_every: int = 10,
) -> TrainingHistory:
    """Train ``model`` in place and leave it holding the best validated weights.

    Stop after ``steps`` optimiser steps, or ``epochs`` passes over ``examples``, or ``minutes`` of
    wall-clock time (give at most one; default ``config.steps``). ``validate(model) -> score``
    (higher is better, e.g. validation BLEU) runs every ``config.eval_every`` steps and at the end;
    the weights with the best score are restored at the end and passed to ``on_best`` (e.g. to save a
    checkpoint) whenever they improve. Seeded by ``config.seed``: the same call on the same machine
    gives the same weights.
    """
    if sum(x is not None for x in (steps, epochs, minutes)) > 1:
        raise ValueError(
            f"give at most one of steps, epochs, minutes; got steps={steps}, epochs={epochs}, minutes={minutes}"
        )
    if not examples:
        raise ValueError("no training examples")
    if steps is None and epochs is None and minutes is None:
        steps = config.steps
    device = next(model.parameters()).device
    src_ids, tgt_ids = [src for src, _ in examples], [tgt for _, tgt in examples]
    torch.manual_seed(config.seed)  # dropout masks
    # fused: one kernel updates every parameter; on the lesson's small model it saves about 8 % of each step
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=config.lr,
        betas=(0.9, 0.98),
        eps=1e-9,
        weight_decay=config.weight_decay,
        fused=device.type in ("cpu", "cuda"),
    )
    history = TrainingHistory()
    batches_per_epoch = len(make_batches(src_ids, tgt_ids, config.batch_tokens, shuffle=False))
    total_steps = steps if steps is not None else (epochs * batches_per_epoch if epochs is not None else None)
    budget = minutes * 60.0 if minutes is not None else None
    best_state = None
    start, cpu_start = time.perf_counter(), time.process_time()
    bar = tqdm(
        total=total_steps if total_steps is not None else round(budget),
        disable=not progress,
        unit="step" if total_steps is not None else "s",
        desc="training",
    )

    def progress_done(step: int) -> float:
        if total_steps is not None:
            return step / total_steps
        return (time.perf_counter() - start) / budget

    def run_validation(step: int) -> None:
        nonlocal best_state
        if validate is None:
            return
        score = float(validate(model))
        model.train()
        history.val_steps.append(step)
        history.val_scores.append(score)
        if score > history.best_score:
            history.best_score, history.best_step = score, step
            best_state = copy.deepcopy(model.state_dict())
            if on_best is not None:
                on_best(model, history)

    step, epoch = 0, 0
    finished = False
    model.train()
    while not finished:
        # a new order of batches (and of equal-length pairs) every epoch, repeatable from the seed
        batches = make_batches(src_ids, tgt_ids, config.batch_tokens, shuffle=True, seed=config.seed * 100_003 + epoch)
        epoch += 1
        for batch in batches:
            src, tgt = batch.src.to(device), batch.tgt.to(device)
            tgt_in, tgt_out = teacher_forcing(tgt)  # (N, L) each
            for group in optimizer.param_groups:
                group["lr"] = config.lr * learning_rate_factor(step, progress_done(step), config)
            loss = translation_loss(model(src, tgt_in), tgt_out, config.label_smoothing)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
            optimizer.step()
            step += 1
            history.steps_done = step
            history.target_tokens += int(tgt_out.ne(PAD).sum())
            if step % log_every == 0 or step == 1:
                history.steps.append(step)
                history.losses.append(round(float(loss.detach()), 4))
                elapsed = time.perf_counter() - start
                bar.set_postfix(
                    loss=f"{float(loss.detach()):.3f}", tok_s=f"{history.target_tokens / max(elapsed, 1e-9):.0f}"
                )
            if total_steps is not None:
                bar.update(1)
            else:
                bar.n = min(round(time.perf_counter() - start), bar.total)
                bar.refresh()
            if config.eval_every and step % config.eval_every == 0:
                run_validation(step)
            finished = step >= total_steps if total_steps is not None else time.perf_counter() - start >= budget
            if finished:
                break
    if not history.val_steps or history.val_steps[-1] != step:
        run_validation(step)
    bar.close()
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    history.seconds = time.perf_counter() - start
    history.cpu_seconds = time.process_time() - cpu_start
    return history
