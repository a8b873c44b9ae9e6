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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields, replace

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from helpers.data.batching import Batch, make_batches
from helpers.data.tokenization import PAD_ID
from helpers.models.translation.checkpoint import check_dense, check_state_dict
from helpers.models.translation.config import TranslationConfig
from helpers.models.translation.distributed import Ranks, current_ranks
from helpers.models.translation.model import Seq2SeqTransformer
from helpers.tools.progress import ProgressLines, in_notebook

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

    def budget_s(self) -> float:
        """The time budget in seconds, for a clock that counts no steps."""
        assert self.budget is not None, "a clock counts steps or seconds: one of total_steps and budget is given"
        return self.budget

    def progress(self, step: int) -> float:
        """Fraction of training done, in [0, 1]: drives the learning-rate schedule."""
        if self.total_steps is not None:
            return step / self.total_steps
        return self.elapsed() / self.budget_s()

    def finished(self, step: int) -> bool:
        if self.total_steps is not None:
            return step >= self.total_steps
        return self.elapsed() >= self.budget_s()

    def seconds_left(self, step: int) -> float:
        if self.total_steps is None:
            return max(0.0, self.budget_s() - self.elapsed())
        return self.elapsed() / max(step, 1) * max(0, self.total_steps - step)


def _terminal() -> bool:
    """A progress bar suits a terminal; a notebook gets a line every tenth of the run (``ProgressLines``: a bar
    there is a widget or a stream of carriage returns in the saved notebook); a file or a CI log gets one summary
    line a minute."""
    return sys.stderr.isatty() and not in_notebook()


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


@dataclass(frozen=True)
class StepResult:
    """What one optimiser step measured: its mean loss over its batches and the real target tokens it read."""

    loss: float
    tokens: int


def epoch_batches(examples: Sequence[Example], config: TranslationConfig, epoch: int) -> list[Batch]:
    """The batches of pass ``epoch`` (0, 1, ...) over ``examples``, in the order the training loop takes them.

    A new order of batches (and of equal-length pairs) every epoch, repeatable from ``config.seed``.
    """
    src_ids, tgt_ids = [src for src, _ in examples], [tgt for _, tgt in examples]
    return make_batches(src_ids, tgt_ids, config.batch_tokens, shuffle=True, seed=config.seed * 100_003 + epoch)


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Sequence[Batch],
    config: TranslationConfig,
    lr: float,
    precision: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> StepResult:
    """One optimiser step: forward, loss, backward over ``batches`` (gradients averaged), clip, update.

    ``model`` maps (src (N, S), tgt_in (N, L)) to logits (N, L, V); it may be wrapped in
    ``DistributedDataParallel``, which then averages the gradients over ranks during the last backward.
    ``lr``: this step's learning rate. ``precision()``: the context the forward runs in (autocast on a GPU).
    """
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    device = next(model.parameters()).device
    loss_sum, tokens = 0.0, 0
    for i, batch in enumerate(batches):
        src, tgt = batch.src.to(device), batch.tgt.to(device)
        tgt_in, tgt_out = teacher_forcing(tgt)  # (N, L) each
        with _gradient_sync(model, last=i == len(batches) - 1):
            with precision():
                loss = translation_loss(model(src, tgt_in), tgt_out, config.label_smoothing)
            (loss / len(batches)).backward()
        loss_sum += float(loss.detach())
        tokens += int(tgt_out.ne(PAD_ID).sum())
    torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
    optimizer.step()
    return StepResult(loss_sum / len(batches), tokens)


def _gradient_sync(model: torch.nn.Module, last: bool) -> contextlib.AbstractContextManager:
    """DDP averages gradients during the backward of a step's last batch only; the others skip it."""
    if isinstance(model, DistributedDataParallel) and not last:
        return model.no_sync()
    return contextlib.nullcontext()


def make_optimizer(model: torch.nn.Module, config: TranslationConfig) -> torch.optim.AdamW:
    """AdamW with the transformer's usual betas; ``fused`` (one kernel for every parameter) on CPU and CUDA."""
    device = next(model.parameters()).device
    return torch.optim.AdamW(
        model.parameters(),
        lr=config.lr,
        betas=(0.9, 0.98),
        eps=1e-9,
        weight_decay=config.weight_decay,
        fused=device.type in ("cpu", "cuda"),
    )


def _precision(device: torch.device) -> Callable[[], contextlib.AbstractContextManager]:
    """bf16 autocast on a GPU (about twice the matmul speed, no loss scaling needed); full precision elsewhere."""
    if device.type == "cuda":
        return lambda: torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext


def _step_batches(
    examples: Sequence[Example], config: TranslationConfig, per_step: int, first: int, accumulate: int, start: tuple
) -> Iterator[tuple[int, int, list[Batch]]]:
    """From ``start`` = (epoch, position) on, for each step: its (epoch, position after it, this rank's batches).

    A step takes ``per_step`` consecutive batches of the epoch; this rank's share starts ``first`` batches in.
    """
    epoch, position = start
    while True:
        batches = epoch_batches(examples, config, epoch)
        for group in range(position, len(batches) // per_step):
            begin = group * per_step + first
            yield epoch, group + 1, batches[begin : begin + accumulate]
        epoch, position = epoch + 1, 0


def _over_ranks(result: StepResult, ranks: Ranks, device: torch.device) -> StepResult:
    """The step's mean loss and total tokens over all ranks (for the history and the log)."""
    if not ranks.distributed:
        return result
    totals = torch.tensor([result.loss, float(result.tokens)], dtype=torch.float64, device=device)
    dist.all_reduce(totals)
    return StepResult(float(totals[0]) / ranks.world_size, int(totals[1]))


def _read_clock(clock: _Clock, step: int, ranks: Ranks, device: torch.device) -> tuple[bool, float]:
    """(finished, progress) after ``step`` steps. With a time budget under DDP, rank 0's reading on every rank:
    each rank's own clock would stop the ranks at different steps (one would wait forever for the others) and give
    them different learning rates for one step, so that their copies of the weights drift apart."""
    finished, progress = clock.finished(step), clock.progress(step)
    if ranks.distributed and clock.budget is not None:
        reading = torch.tensor([float(finished), progress], dtype=torch.float64, device=device)
        dist.broadcast(reading, src=0)
        finished, progress = bool(reading[0]), float(reading[1])
    return finished, progress


class _Reporter:
    """A progress bar in a terminal; in a notebook, a line at every tenth of the run; in a log file, one summary
    line every ``every_minutes``."""

    def __init__(self, clock: _Clock, speaking: bool, step: int, every_minutes: float) -> None:
        self.clock, self.every = clock, every_minutes * 60
        self.lines = speaking and not _terminal() and not in_notebook()
        by_steps = clock.total_steps is not None
        total = clock.total_steps if clock.total_steps is not None else clock.budget_s()  # steps, or seconds
        self.tenths = (
            ProgressLines(total, "training", "steps" if by_steps else "s", done=step if by_steps else clock.elapsed())
            if speaking and in_notebook() and total > 0
            else None
        )
        self.bar = tqdm(
            total=clock.total_steps if by_steps else round(clock.budget_s()),
            initial=step if by_steps else round(clock.elapsed()),
            disable=not (speaking and _terminal()),
            unit="step" if by_steps else "s",
            desc="training",
        )
        # The first step reports at once: a log that stays silent for its first minute looks like a hung run.
        self.last = -math.inf

    def step(self, step: int, loss: float, history: TrainingHistory, logged: bool) -> None:
        if logged:
            self.bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{history.tokens_per_second:.0f}")
        if self.tenths is not None:
            by_steps = self.clock.total_steps is not None
            self.tenths.update(step if by_steps else self.clock.elapsed(), note=f"loss {loss:.3f}")
        if self.clock.total_steps is not None:
            self.bar.update(1)
        else:
            self.bar.n = min(round(self.clock.elapsed()), self.bar.total)
            self.bar.refresh()

    def due(self, now: float) -> bool:
        if self.lines and now - self.last >= self.every:
            self.last = now
            return True
        return False

    def line(self, step: int, loss: float, history: TrainingHistory) -> None:
        best = f" | val BLEU best {history.best_score:.1f} @ {history.best_step}" if history.val_steps else ""
        of = f"/{self.clock.total_steps}" if self.clock.total_steps is not None else ""
        print(
            f"step {step}{of} | loss {loss:.3f} | {history.tokens_per_second:,.0f} tok/s{best} | "
            f"{_minutes(self.clock.elapsed())} elapsed, {_minutes(self.clock.seconds_left(step))} left",
            file=sys.stderr,
            flush=True,
        )

    def close(self, step: int, history: TrainingHistory) -> None:
        self.bar.close()
        if self.lines and history.losses:
            self.line(step, history.losses[-1], history)


def _length(
    steps: int | None, epochs: int | None, minutes: float | None, config: TranslationConfig, batches: int, per_step: int
) -> tuple[int | None, float | None]:
    """(total steps, budget in seconds): what ends the run; at most one of steps, epochs, minutes is given."""
    if sum(x is not None for x in (steps, epochs, minutes)) > 1:
        raise ValueError(
            f"give at most one of steps, epochs, minutes; got steps={steps}, epochs={epochs}, minutes={minutes}"
        )
    if steps is None and epochs is None and minutes is None:
        steps = config.steps
    total_steps = steps if steps is not None else (epochs * (batches // per_step) if epochs else None)
    return total_steps, minutes * 60.0 if minutes is not None else None


@dataclass(frozen=True)
class TrainingOptions:
    """How one :func:`train` run goes, beside the model's ``TranslationConfig``.

    Its length: ``steps`` optimiser steps, or ``epochs`` passes over the examples, or ``minutes`` of wall-clock time
    (at most one; none: ``config.steps``). ``validate(model) -> score`` (higher is better, e.g. validation BLEU)
    runs every ``config.eval_every`` steps and at the end; ``on_best(model, history)`` sees each better model.
    ``accumulate`` batches per optimiser step (per rank under ``torchrun``). ``progress``: a bar and a line every
    ``report_every_minutes``; ``log_every``: steps between the history's loss records. ``on_state(state)`` receives
    the whole training state every ``state_every_minutes``, after each validation and at the end; ``resume`` takes
    such a state back.
    """

    steps: int | None = None
    epochs: int | None = None
    minutes: float | None = None
    validate: Callable[[Seq2SeqTransformer], float] | None = None
    on_best: Callable[[Seq2SeqTransformer, TrainingHistory], None] | None = None
    progress: bool = True
    log_every: int = 10
    accumulate: int = 1
    resume: dict | None = None
    on_state: Callable[[dict], None] | None = None
    state_every_minutes: float = 5.0
    report_every_minutes: float = 1.0

    def __post_init__(self):
        if self.accumulate < 1:
            raise ValueError(f"accumulate must be at least 1, got {self.accumulate}")


def _options(options: TrainingOptions | None, keywords: dict) -> TrainingOptions:
    """``options`` with ``keywords`` (the fields of TrainingOptions, as train's callers pass them) put in."""
    names = [option.name for option in fields(TrainingOptions)]
    unknown = sorted(set(keywords) - set(names))
    if unknown:
        known = ", ".join(names)
        raise TypeError(f"train() got unknown options {unknown}; TrainingOptions has: {known}")
    return replace(options or TrainingOptions(), **keywords)


def _run_length(
    examples: Sequence[Example], config: TranslationConfig, options: TrainingOptions, ranks: Ranks
) -> tuple[int, int | None, float | None]:
    """(batches per optimiser step over all ranks, total steps, budget in seconds), the examples checked."""
    if not examples:
        raise ValueError("no training examples")
    per_step = options.accumulate * ranks.world_size  # batches in one optimiser step, over all ranks
    batches_per_epoch = len(epoch_batches(examples, config, 0))
    if batches_per_epoch < per_step:
        raise ValueError(
            f"{batches_per_epoch} batches per epoch cannot feed {per_step} batches a step "
            f"({ranks.world_size} processes x accumulate {options.accumulate}): use fewer processes or smaller batches"
        )
    total_steps, budget = _length(options.steps, options.epochs, options.minutes, config, batches_per_epoch, per_step)
    return per_step, total_steps, budget


def train(
    model: Seq2SeqTransformer,
    examples: Sequence[Example],
    config: TranslationConfig,
    options: TrainingOptions | None = None,
    **keywords,
) -> TrainingHistory:
    """Train ``model`` in place with :func:`train_step` and leave it holding the best validated weights.

    ``options`` (:class:`TrainingOptions`) says how long, what validates, what is reported and saved; its fields
    can also be given as keywords, ``train(model, examples, config, steps=100, progress=False)``. The weights with
    the best validation score are restored at the end. Seeded by ``config.seed``: the same call on the same
    machine gives the same weights.

    Under ``torchrun`` (a process group joined with :func:`helpers.models.translation.distributed.start`) every
    rank takes ``accumulate`` of each step's batches and DDP averages over ranks, so P ranks equal one process
    with ``accumulate=P``. Rank 0 alone validates, reports and calls ``on_best`` and ``on_state``.
    ``train(..., resume=state)``, with a state ``on_state`` received, continues that run to the same end as if it
    had never stopped.
    """
    options = _options(options, keywords)
    ranks = current_ranks()
    device = next(model.parameters()).device
    per_step, total_steps, budget = _run_length(examples, config, options, ranks)
    optimizer = make_optimizer(model, config)
    net = DistributedDataParallel(model) if ranks.distributed else model  # DDP averages gradients over ranks
    if options.resume is None:
        state = TrainingState.fresh(model, optimizer, per_step, total_steps, budget)
    else:
        state = TrainingState.resumed(model, optimizer, per_step, options.resume)
    reporter = _Reporter(state.clock, options.progress and ranks.is_main, state.step, options.report_every_minutes)
    precision = _precision(device)
    last_state = time.perf_counter()
    speaking = ranks.is_main  # rank 0 alone validates, reports and saves
    on_state = options.on_state if speaking else None

    finished, fraction_done = _read_clock(state.clock, state.step, ranks, device)
    accumulate = options.accumulate
    schedule = _step_batches(
        examples, config, per_step, ranks.rank * accumulate, accumulate, (state.epoch, state.position)
    )
    model.train()
    while not finished:
        state.epoch, state.position, mine = next(schedule)  # this rank's share of the step's batches
        torch.manual_seed(dropout_seed(config, state.step, ranks.rank))
        lr = config.lr * learning_rate_factor(state.step, fraction_done, config)
        result = _over_ranks(train_step(net, optimizer, mine, config, lr, precision), ranks, device)
        logged = state.took_step(result, options.log_every)
        reporter.step(state.step, result.loss, state.history, logged)
        validated = bool(config.eval_every and state.step % config.eval_every == 0)
        if validated and speaking:
            state.validate(options.validate, options.on_best)
        finished, fraction_done = _read_clock(state.clock, state.step, ranks, device)
        now = time.perf_counter()
        if reporter.due(now):
            reporter.line(state.step, result.loss, state.history)
        if on_state is not None and (validated or now - last_state >= options.state_every_minutes * 60):
            on_state(state.to_dict())
            last_state = now
    if speaking and (not state.history.val_steps or state.history.val_steps[-1] != state.step):
        state.validate(options.validate, options.on_best)
    reporter.close(state.step, state.history)
    if on_state is not None:
        on_state(state.to_dict())
    return state.finish()


@dataclass(eq=False)  # holds a model and an optimiser: two states are never compared
class TrainingState:
    """Everything a run changes as it goes: the model and its optimiser, where the run stands (step, epoch and
    position in the epoch's batches), its clock, history and best weights so far.

    Built by :meth:`fresh` for a new run or :meth:`resumed` from a saved state; :meth:`to_dict` is what
    ``on_state`` receives and ``train(..., resume=...)`` takes back (plain values and tensors only).
    """

    model: Seq2SeqTransformer
    optimizer: torch.optim.Optimizer
    per_step: int  # batches in one optimiser step, over all ranks
    clock: _Clock
    history: TrainingHistory = field(default_factory=TrainingHistory)
    best_weights: dict | None = None
    step: int = 0
    epoch: int = 0
    position: int = 0  # steps taken in this epoch
    cpu_start: float = 0.0  # process_time() at which this run's CPU seconds would have started

    def __post_init__(self) -> None:
        self.cpu_start = time.process_time() - self.history.cpu_seconds  # a resumed run counts the CPU time spent

    @classmethod
    def fresh(
        cls,
        model: Seq2SeqTransformer,
        optimizer: torch.optim.Optimizer,
        per_step: int,
        total_steps: int | None,
        budget: float | None,
    ) -> TrainingState:
        """A run at step 0 that ends after ``total_steps`` steps or ``budget`` seconds."""
        return cls(model, optimizer, per_step, _Clock(total_steps, budget))

    @classmethod
    def resumed(
        cls, model: Seq2SeqTransformer, optimizer: torch.optim.Optimizer, per_step: int, saved: dict
    ) -> TrainingState:
        """The run that ``saved`` (a :meth:`to_dict`) describes, checked first; it keeps its own end."""
        check_training_state(saved, per_step, model)  # every tensor against its parameter, before loading
        optimizer.load_state_dict(saved["optimizer"])
        history, best_weights = TrainingHistory(**saved["history"]), saved["best_weights"]
        clock = _Clock(saved["total_steps"], saved["budget"], saved["elapsed"])
        return cls(model, optimizer, per_step, clock, history, best_weights, *(saved[k] for k in _POSITION))

    def to_dict(self) -> dict:
        """The state to save for :meth:`resumed`; also brings the history's times up to now."""
        self.history.seconds, self.history.cpu_seconds = self.clock.elapsed(), time.process_time() - self.cpu_start
        return {
            "step": self.step,
            "epoch": self.epoch,
            "position": self.position,
            "elapsed": self.clock.elapsed(),
            "total_steps": self.clock.total_steps,
            "budget": self.clock.budget,
            "batches_per_step": self.per_step,
            "optimizer": self.optimizer.state_dict(),
            "history": asdict(self.history),
            "best_weights": self.best_weights,
        }

    def took_step(self, result: StepResult, log_every: int) -> bool:
        """Count a step and its tokens; log its loss every ``log_every`` steps (and the first). True if logged."""
        self.step += 1
        self.history.steps_done, self.history.seconds = self.step, self.clock.elapsed()
        self.history.target_tokens += result.tokens
        logged = self.step % log_every == 0 or self.step == 1
        if logged:
            self.history.steps.append(self.step)
            self.history.losses.append(round(result.loss, 4))
        return logged

    def validate(
        self,
        validate: Callable[[Seq2SeqTransformer], float] | None,
        on_best: Callable[[Seq2SeqTransformer, TrainingHistory], None] | None,
    ) -> None:
        """Score the model now; keep a copy of its weights (and call ``on_best``) when the score is the best yet."""
        if validate is None:
            return
        score = float(validate(self.model))
        self.model.train()
        self.history.val_steps.append(self.step)
        self.history.val_scores.append(score)
        if score > self.history.best_score:
            self.history.best_score, self.history.best_step = score, self.step
            self.best_weights = copy.deepcopy(self.model.state_dict())
            if on_best is not None:
                on_best(self.model, self.history)

    def finish(self) -> TrainingHistory:
        """Leave the model holding the best weights, in eval mode; the history with the run's final times."""
        if self.best_weights is not None:
            self.model.load_state_dict(self.best_weights)
        self.model.eval()
        self.history.seconds = self.clock.elapsed()
        self.history.cpu_seconds = time.process_time() - self.cpu_start
        return self.history


_POSITION = ("step", "epoch", "position")  # where a saved run stands, in TrainingState's field order


#: The fields of a training state and the types each must have (checked before a run resumes from it).
STATE_FIELDS: dict[str, tuple[type, ...]] = {
    "step": (int,),
    "epoch": (int,),
    "position": (int,),
    "elapsed": (int, float),
    "total_steps": (int, type(None)),
    "budget": (int, float, type(None)),
    "batches_per_step": (int,),
    "optimizer": (dict,),
    "history": (dict,),
    "best_weights": (dict, type(None)),
}


def check_training_state(
    state: object, batches_per_step: int | None = None, model: torch.nn.Module | None = None
) -> None:
    """Raise ValueError naming the field unless ``state`` is a training state :func:`train` can resume.

    ``batches_per_step``: the run resuming it must take as many batches a step (processes x accumulate).
    ``model``: the model it resumes, whose parameters the optimiser state and the best weights must fit
    (:func:`check_optimizer_state`).
    """
    if not isinstance(state, dict):
        raise ValueError(f"the training state must be a dict, got {type(state).__name__}")
    missing = sorted(set(STATE_FIELDS) - set(state))
    if missing:
        raise ValueError(f"the training state lacks {', '.join(missing)}")
    for name, kinds in STATE_FIELDS.items():
        value = state[name]
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise ValueError(f"training state field {name!r} has a {type(value).__name__}: {value!r}")
    for name in ("step", "epoch", "position", "elapsed"):
        if state[name] < 0 or (name == "elapsed" and not math.isfinite(state[name])):
            raise ValueError(f"training state field {name!r} must be a finite number >= 0, got {state[name]}")
    if state["batches_per_step"] < 1:
        raise ValueError(f"training state field 'batches_per_step' must be at least 1, got {state['batches_per_step']}")
    if (state["total_steps"] is None) == (state["budget"] is None):
        raise ValueError("a training state ends by exactly one of total_steps and budget")
    for name in ("total_steps", "budget"):
        value = state[name]
        if value is not None and not (value > 0 and math.isfinite(value)):
            raise ValueError(f"training state field {name!r} must be positive, got {value}")
    if state["total_steps"] is not None and state["step"] > state["total_steps"]:
        raise ValueError(f"training state step {state['step']} is past its end, total_steps {state['total_steps']}")
    try:
        TrainingHistory(**state["history"])
    except TypeError as error:
        raise ValueError(f"training state field 'history' is not a TrainingHistory: {error}") from None
    if batches_per_step is not None and state["batches_per_step"] != batches_per_step:
        raise ValueError(
            f"the run being resumed took {state['batches_per_step']} batches a step; this one would take "
            f"{batches_per_step} (processes x accumulate must stay the same)"
        )
    if model is not None:
        check_optimizer_state(state["optimizer"], model)
        if state["best_weights"] is not None:
            check_state_dict(state["best_weights"], model.state_dict(), "the stored best weight")


#: What AdamW keeps per parameter: the step count and two running averages of the parameter's shape.
ADAM_STATE = ("step", "exp_avg", "exp_avg_sq")


def check_optimizer_state(state: object, model: torch.nn.Module) -> None:
    """Raise ValueError unless ``state`` is an AdamW state dict for ``model``'s parameters, tensor by tensor.

    ``optimizer.load_state_dict`` checks only the number of parameters; a running average of the wrong shape is
    then read and written out of bounds by the fused AdamW kernel, which crashes the process (or worse) at the
    first step. So every tensor is compared with its parameter here, before it is loaded.
    """
    named = list(model.named_parameters())  # the order make_optimizer gives them to AdamW (shared ones once)
    if not isinstance(state, dict) or not isinstance(state.get("state"), dict):
        raise ValueError("training state field 'optimizer' is not an optimiser state dict (no 'state' dict)")
    groups = state.get("param_groups")
    if not isinstance(groups, list) or not all(
        isinstance(g, dict) and isinstance(g.get("params"), list) for g in groups
    ):
        raise ValueError("the optimiser state's 'param_groups' must be a list of dicts with 'params' lists")
    ids = [i for group in groups for i in group["params"]]
    if ids != list(range(len(named))):
        raise ValueError(
            f"the optimiser state holds parameters {_briefly(ids)}, but the model has {len(named)}, 0..{len(named) - 1}"
        )
    for index, values in state["state"].items():
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(named):
            raise ValueError(f"the optimiser state has an entry for parameter {index!r}; the model has {len(named)}")
        name, parameter = named[index]
        if not isinstance(values, dict) or sorted(values) != sorted(ADAM_STATE):
            found = sorted(values) if isinstance(values, dict) else type(values).__name__
            raise ValueError(f"the optimiser state of {name} holds {found}, expected {list(ADAM_STATE)}")
        step = values["step"]
        if not isinstance(step, Tensor) or step.numel() != 1 or not bool(torch.isfinite(step).all()) or step < 0:
            raise ValueError(f"the optimiser state's step of {name} must be one finite number >= 0, got {step!r}")
        for key in ADAM_STATE[1:]:
            tensor = values[key]
            if not isinstance(tensor, Tensor) or tensor.shape != parameter.shape or not tensor.is_floating_point():
                found = (
                    f"of shape {tuple(tensor.shape)}, {tensor.dtype}" if isinstance(tensor, Tensor) else "not a tensor"
                )
                raise ValueError(
                    f"the optimiser state's {key} of {name} is {found}; expected a floating-point tensor of the "
                    f"parameter's shape {tuple(parameter.shape)}"
                )
            check_dense(tensor, f"the optimiser state's {key} of {name}")


def _briefly(ids: list) -> str:
    return f"{ids[:6]}{' ...' if len(ids) > 6 else ''} ({len(ids)})"
