"""Training the translator: label smoothing, AdamW with warm-up, clipping, validation, best weights kept.

Shapes: N sentences in a batch, S source length, L target length, V target vocabulary.
A training example is a pair of id lists ``(source_ids, target_ids)``, each with BOS ... EOS.
The decoder reads the target without its last token (``tgt_in``, starting with BOS) and learns to
predict the target without its first one (``tgt_out``, ending with EOS): teacher forcing.
"""

from __future__ import annotations

import contextlib
import copy
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from helpers.data.batching import make_batches
from helpers.data.tokenization import PAD_ID
from helpers.models.translation.config import TranslationConfig
from helpers.models.translation.distributed import current_ranks
from helpers.models.translation.model import Seq2SeqTransformer

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
        logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1), ignore_index=PAD_ID, label_smoothing=label_smoothing
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


def dropout_seed(config: TranslationConfig, step: int, rank: int = 0) -> int:
    """The seed of step ``step``'s dropout masks on rank ``rank``.

    Seeding every step from (seed, step, rank) rather than once at the start makes the random state a
    function of the step: a resumed run draws exactly the masks the uninterrupted run would have, and
    ranks draw different masks for their different batches.
    """
    return (config.seed * 1_000_003 + step) * 1_009 + rank


class _Clock:
    """When training ends and how far it has got, for a step count or a wall-clock budget."""

    def __init__(self, total_steps: int | None, budget: float | None, elapsed_before: float = 0.0) -> None:
        self.total_steps, self.budget = total_steps, budget
        self.start = time.perf_counter() - elapsed_before  # a resumed run counts the time already spent

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def progress(self, step: int) -> float:
        """Fraction of training done, in [0, 1]: drives the learning-rate schedule."""
        if self.total_steps is not None:
            return step / self.total_steps
        return self.elapsed() / self.budget

    def finished(self, step: int) -> bool:
        if self.total_steps is not None:
            return step >= self.total_steps
        return self.elapsed() >= self.budget

    def seconds_left(self, step: int) -> float:
        if self.total_steps is None:
            return max(0.0, self.budget - self.elapsed())
        return self.elapsed() / max(step, 1) * max(0, self.total_steps - step)


def _terminal() -> bool:
    """A progress bar suits a terminal or a notebook; a file or a CI log gets one summary line a minute."""
    return sys.stderr.isatty() or type(sys.stderr).__module__.startswith("ipykernel")  # a notebook's output


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


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
    accumulate: int = 1,
    resume: dict | None = None,
    on_state: Callable[[dict], None] | None = None,
    state_every_minutes: float = 5.0,
    report_every_minutes: float = 1.0,
) -> TrainingHistory:
    """Train ``model`` in place and leave it holding the best validated weights.

    Stop after ``steps`` optimiser steps, or ``epochs`` passes over ``examples``, or ``minutes`` of
    wall-clock time (give at most one; default ``config.steps``). ``validate(model) -> score``
    (higher is better, e.g. validation BLEU) runs every ``config.eval_every`` steps and at the end;
    the weights with the best score are restored at the end and passed to ``on_best`` (e.g. to save a
    checkpoint) whenever they improve. Seeded by ``config.seed``: the same call on the same machine
    gives the same weights.

    Each optimiser step averages the gradients of ``accumulate`` batches. Under ``torchrun`` (a process
    group joined with :func:`helpers.models.translation.distributed.start`) every rank takes ``accumulate`` of
    each step's batches and DDP averages over ranks, so P ranks equal one process with ``accumulate=P``.
    Rank 0 alone validates, reports and calls ``on_best`` and ``on_state``.

    Resuming: ``on_state(state)`` receives the whole training state (plain values and tensors: weights
    are the caller's to save) every ``state_every_minutes``, after each validation and at the end;
    ``train(..., resume=state)`` continues that run to the same end as if it had never stopped.
    """
    ranks = current_ranks()
    if sum(x is not None for x in (steps, epochs, minutes)) > 1:
        raise ValueError(
            f"give at most one of steps, epochs, minutes; got steps={steps}, epochs={epochs}, minutes={minutes}"
        )
    if not examples:
        raise ValueError("no training examples")
    if accumulate < 1:
        raise ValueError(f"accumulate must be at least 1, got {accumulate}")
    if steps is None and epochs is None and minutes is None:
        steps = config.steps
    device = next(model.parameters()).device
    src_ids, tgt_ids = [src for src, _ in examples], [tgt for _, tgt in examples]
    per_step = accumulate * ranks.world_size  # batches in one optimiser step, over all ranks
    batches_per_epoch = len(make_batches(src_ids, tgt_ids, config.batch_tokens, shuffle=False))
    if batches_per_epoch < per_step:
        raise ValueError(
            f"{batches_per_epoch} batches per epoch cannot feed {per_step} batches a step "
            f"({ranks.world_size} processes x accumulate {accumulate}): use fewer processes or smaller batches"
        )
    total_steps = steps if steps is not None else (epochs * (batches_per_epoch // per_step) if epochs else None)
    budget = minutes * 60.0 if minutes is not None else None
    # fused: one kernel updates every parameter; on the lesson's small model it saves about 8 % of each step
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=config.lr,
        betas=(0.9, 0.98),
        eps=1e-9,
        weight_decay=config.weight_decay,
        fused=device.type in ("cpu", "cuda"),
    )
    net = DistributedDataParallel(model) if ranks.distributed else model  # DDP averages gradients over ranks
    history, best_state = TrainingHistory(), None
    step, epoch, position, elapsed_before = 0, 0, 0, 0.0
    if resume is not None:
        optimizer.load_state_dict(resume["optimizer"])
        history = TrainingHistory(**resume["history"])
        best_state = resume["best_weights"]
        step, epoch, position = resume["step"], resume["epoch"], resume["position"]
        total_steps, budget, elapsed_before = resume["total_steps"], resume["budget"], resume["elapsed"]
        if resume["batches_per_step"] != per_step:
            raise ValueError(
                f"the run being resumed took {resume['batches_per_step']} batches a step; this one would take "
                f"{per_step} (processes x accumulate must stay the same)"
            )
    clock = _Clock(total_steps, budget, elapsed_before)
    cpu_start = time.process_time() - history.cpu_seconds
    speaking = progress and ranks.is_main
    bar = tqdm(
        total=total_steps if total_steps is not None else round(budget),
        initial=step if total_steps is not None else round(elapsed_before),
        disable=not (speaking and _terminal()),
        unit="step" if total_steps is not None else "s",
        desc="training",
    )
    last_report = last_state = time.perf_counter()
    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
    )  # bf16 on GPUs: about twice the matmul speed, and no loss scaling needed (unlike fp16)

    def training_state() -> dict:
        history.seconds, history.cpu_seconds = clock.elapsed(), time.process_time() - cpu_start
        return {
            "step": step,
            "epoch": epoch,
            "position": position,
            "elapsed": clock.elapsed(),
            "total_steps": total_steps,
            "budget": budget,
            "batches_per_step": per_step,
            "optimizer": optimizer.state_dict(),
            "history": asdict(history),
            "best_weights": best_state,
        }

    def run_validation() -> None:
        nonlocal best_state
        if validate is None or not ranks.is_main:
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

    def report(loss: float) -> None:
        best = f" | val BLEU best {history.best_score:.1f} @ {history.best_step}" if history.val_steps else ""
        of = f"/{total_steps}" if total_steps is not None else ""
        print(
            f"step {step}{of} | loss {loss:.3f} | {history.tokens_per_second:,.0f} tok/s{best} | "
            f"{_minutes(clock.elapsed())} elapsed, {_minutes(clock.seconds_left(step))} left",
            file=sys.stderr,
            flush=True,
        )

    finished = clock.finished(step)
    model.train()
    while not finished:
        # a new order of batches (and of equal-length pairs) every epoch, repeatable from the seed
        batches = make_batches(src_ids, tgt_ids, config.batch_tokens, shuffle=True, seed=config.seed * 100_003 + epoch)
        for group in range(position, len(batches) // per_step):
            first = group * per_step + ranks.rank * accumulate
            mine = batches[first : first + accumulate]  # this rank's share of the step's batches
            torch.manual_seed(dropout_seed(config, step, ranks.rank))
            for param_group in optimizer.param_groups:
                param_group["lr"] = config.lr * learning_rate_factor(step, clock.progress(step), config)
            optimizer.zero_grad(set_to_none=True)
            loss_sum, tokens = 0.0, 0
            for i, batch in enumerate(mine):
                src, tgt = batch.src.to(device), batch.tgt.to(device)
                tgt_in, tgt_out = teacher_forcing(tgt)  # (N, L) each
                # DDP averages gradients during the backward of the last batch only
                last = i == len(mine) - 1
                sync = net.no_sync() if ranks.distributed and not last else contextlib.nullcontext()
                with sync:
                    with autocast:
                        loss = translation_loss(net(src, tgt_in), tgt_out, config.label_smoothing)
                    (loss / len(mine)).backward()
                loss_sum += float(loss.detach())
                tokens += int(tgt_out.ne(PAD_ID).sum())
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
            optimizer.step()
            step, position = step + 1, group + 1
            loss_mean = loss_sum / len(mine)
            if ranks.distributed:  # the step's loss and tokens over all ranks, for the history and the log
                totals = torch.tensor([loss_mean, float(tokens)], dtype=torch.float64, device=device)
                dist.all_reduce(totals)
                loss_mean, tokens = float(totals[0]) / ranks.world_size, int(totals[1])
            history.steps_done = step
            history.target_tokens += tokens
            history.seconds = clock.elapsed()
            if step % log_every == 0 or step == 1:
                history.steps.append(step)
                history.losses.append(round(loss_mean, 4))
                bar.set_postfix(loss=f"{loss_mean:.3f}", tok_s=f"{history.tokens_per_second:.0f}")
            if total_steps is not None:
                bar.update(1)
            else:
                bar.n = min(round(clock.elapsed()), bar.total)
                bar.refresh()
            validated = bool(config.eval_every and step % config.eval_every == 0)
            if validated:
                run_validation()
            finished = clock.finished(step)
            if ranks.distributed and budget is not None:  # rank 0's clock decides, so all stop at one step
                flag = torch.tensor([float(finished)], device=device)
                dist.broadcast(flag, src=0)
                finished = bool(flag.item())
            now = time.perf_counter()
            if speaking and not _terminal() and now - last_report >= report_every_minutes * 60:
                report(loss_mean)
                last_report = now
            if on_state is not None and ranks.is_main and (validated or now - last_state >= state_every_minutes * 60):
                on_state(training_state())
                last_state = now
            if finished:
                break
        else:
            epoch, position = epoch + 1, 0
    if not history.val_steps or history.val_steps[-1] != step:
        run_validation()
    bar.close()
    if speaking and not _terminal() and history.losses:
        report(history.losses[-1])
    if on_state is not None and ranks.is_main:
        on_state(training_state())
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    history.seconds = clock.elapsed()
    history.cpu_seconds = time.process_time() - cpu_start
    return history
