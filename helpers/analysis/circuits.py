"""Heads that work together (lesson 10): induction heads, trained in a toy model and found in a real one.

An induction head completes "A B … A → B": at the second A it attends to the token *after* the first A (the
B) and copies it. It needs a partner in an earlier layer, a previous-token head, which writes "the token
before me was A" into B's position; the induction head's keys read that (K-composition).

This module holds what the lesson measures, all in plain PyTorch:

* a small attention-only transformer (``AttentionOnlyTransformer``) and batches of random tokens with a
  repeated segment (``repeated_batch``), and a fixed-step training loop that records the phase change;
* per-head scores from attention weights: previous-token, duplicate-token and induction scores;
* the weights' view of two heads working together: composition scores (Q, K and V) between heads;
* hooks on each layer's output projection, whose input is the concatenated head outputs (N, T, h·d): record,
  zero, mean-ablate or patch one head's output (``head_hooks``), and activation patching
  (``patching_map``). The same hooks work on any model that has such a projection per layer (lesson 09's
  SmolLM2 included): they take the list of projections and the number of heads.

Shapes (course notation): N sequences, T tokens, E embedding size, h heads, d = E / h, V vocabulary,
n_layers layers. Attention weights are (N, h, T, T): rows are queries i, columns keys j.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeGuard, TypeVar, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.attention import AttentionCore, causal_mask, merge_heads, split_heads, unflatten_heads
from helpers.tools.progress import ProgressLines

__all__ = [
    "AttentionOnlyTransformer",
    "PhaseChange",
    "RepeatedBatch",
    "composition_scores",
    "corrupt_first_copy",
    "duplicate_token_score",
    "head_hooks",
    "head_scores",
    "induction_score",
    "mean_head_outputs",
    "output_projections",
    "patching_map",
    "previous_token_score",
    "record_head_outputs",
    "repeated_batch",
    "repeated_log_prob",
    "repeated_loss",
    "train_induction",
    "train_on_repeated_batches",
]


# ---------------------------------------------------------------------------------------------
# The task: random tokens with one segment repeated
# ---------------------------------------------------------------------------------------------
@dataclass
class RepeatedBatch:
    """``ids`` (N, T) random tokens where ``segment`` tokens starting at ``start`` are repeated right after
    themselves; ``predictable`` (N, T) is True at the queries whose *next* token is known from the first copy
    (the first ``length - 1`` positions of the second copy). ``start`` and ``length`` are (N,) tensors."""

    ids: Tensor
    predictable: Tensor
    start: Tensor
    length: Tensor


def repeated_batch(
    batch_size: int,
    seq_len: int,
    vocab_size: int,
    lengths: tuple[int, int] = (8, 24),
    generator: torch.Generator | None = None,
) -> RepeatedBatch:
    """Random tokens (N, T) in which each row repeats one random segment once, right after itself.

    The segment's length is drawn uniformly from ``lengths`` (both ends included) and its place uniformly, so
    the distance between the two copies varies: only the tokens themselves tell where the copy is. With a
    fixed length (``lengths=(L, L)``) the distance is always L and a model can find the copy by position
    alone, the shortcut lesson 10 warns about.
    """
    low, high = lengths
    if not 2 <= low <= high or 2 * high > seq_len:
        raise ValueError(f"lengths must satisfy 2 <= low <= high <= seq_len / 2 = {seq_len / 2}, got {lengths}")
    ids = torch.randint(vocab_size, (batch_size, seq_len), generator=generator)
    length = torch.randint(low, high + 1, (batch_size,), generator=generator)
    start = (torch.rand(batch_size, generator=generator) * (seq_len - 2 * length + 1)).long()  # in [0, T - 2L]
    positions = torch.arange(seq_len)
    offset = positions[None, :] - (start + length)[:, None]  # (N, T): position within the second copy
    second = (offset >= 0) & (offset < length[:, None])
    source = (positions[None, :] - length[:, None]).clamp(min=0)
    ids = torch.where(second, ids.gather(1, source), ids)
    predictable = second & (offset < length[:, None] - 1)
    return RepeatedBatch(ids, predictable, start, length)


# ---------------------------------------------------------------------------------------------
# The model: attention only, so every computation is a head's
# ---------------------------------------------------------------------------------------------
class HeadAttention(AttentionCore):
    """Causal multi-head self-attention with separate W_Q, W_K, W_V and an output projection ``out_proj``
    whose input is the h head outputs side by side, (N, T, h·d): a hook there sees every head apart.

    A thin layer over the course's attention core (``helpers.attention.AttentionCore``): its own projections,
    the course's causal mask, the core's scores, softmax and weighted sum."""

    def __init__(self, embed_dim: int, num_heads: int) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} must be a multiple of num_heads {num_heads}")
        self.num_heads, self.head_dim = num_heads, embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=False)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x (N, T, E) -> (output (N, T, E), weights (N, h, T, T))."""
        q, k, v = (split_heads(p(x), self.num_heads) for p in self.projections())  # (N, h, T, d) each
        may_attend = ~causal_mask(x.size(1), device=x.device)  # (T, T): query i reads keys 0..i
        heads, weights = self.attend_heads(q, k, v, may_attend, need_weights=True)  # (N, h, T, d), (N, h, T, T)
        assert weights is not None, "asked for with need_weights"
        return self.out_proj(merge_heads(heads)), weights  # (N, T, h·d): head 0's d numbers first

    def projections(self) -> tuple[nn.Linear, nn.Linear, nn.Linear]:
        return self.q_proj, self.k_proj, self.v_proj


class AttentionOnlyTransformer(nn.Module):
    """Token and learned position embeddings, ``num_layers`` residual attention layers, a linear read-out.

    No feed-forward blocks and no normalisation, so the residual stream is the embeddings plus the heads'
    outputs and nothing else. ``model(ids, need_weights=True)`` returns (logits (N, T, V), a list of
    ``num_layers`` weight tensors (N, h, T, T)), the interface of lesson 09's SmolLM2.
    """

    def __init__(
        self, vocab_size: int, embed_dim: int = 64, num_heads: int = 4, num_layers: int = 2, max_len: int = 64
    ) -> None:
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("embed_dim", embed_dim), ("num_heads", num_heads),
                            ("num_layers", num_layers), ("max_len", max_len)):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.num_heads, self.max_len = num_heads, max_len
        self.embed = nn.Embedding(vocab_size, embed_dim)
        self.position = nn.Embedding(max_len, embed_dim)
        self.layers = nn.ModuleList(HeadAttention(embed_dim, num_heads) for _ in range(num_layers))
        self.unembed = nn.Linear(embed_dim, vocab_size, bias=False)

    def output_projections(self) -> list[nn.Linear]:
        """Each layer's ``out_proj``, whose input is (N, T, h·d): where ``head_hooks`` attach."""
        return [_remember_heads(layer.out_proj, self.num_heads) for layer in _layers(self)]

    def forward(self, ids: Tensor, need_weights: bool = False) -> Tensor | tuple[Tensor, list[Tensor]]:
        """ids (N, T) -> logits (N, T, V), and with ``need_weights`` the per-layer weights (N, h, T, T)."""
        T = ids.size(1)
        if self.max_len < T:
            raise ValueError(f"sequences of at most {self.max_len} tokens, got {T}")
        x = self.embed(ids) + self.position(torch.arange(T, device=ids.device))
        all_weights = []
        for layer in self.layers:
            out, weights = layer(x)
            x = x + out
            all_weights.append(weights)
        logits = self.unembed(x)
        return (logits, all_weights) if need_weights else logits


def corrupt_first_copy(batch: RepeatedBatch, vocab_size: int, generator: torch.Generator | None = None) -> Tensor:
    """``batch.ids`` (N, T) with each row's first copy replaced by fresh random tokens: nothing left to copy."""
    ids = batch.ids.clone()
    for n, (start, length) in enumerate(zip(batch.start.tolist(), batch.length.tolist(), strict=True)):
        ids[n, start : start + length] = torch.randint(vocab_size, (length,), generator=generator)
    return ids


def repeated_log_prob(logits: Tensor, batch: RepeatedBatch) -> Tensor:
    """Mean log-probability of the predictable next tokens (higher is better): logits (N, T, V) -> ()."""
    keep = batch.predictable[:, :-1]
    chosen = logits[:, :-1].log_softmax(-1).gather(-1, batch.ids[:, 1:, None])[..., 0]  # (N, T - 1)
    return chosen[keep].mean()


def repeated_loss(logits: Tensor, batch: RepeatedBatch) -> Tensor:
    """Mean cross-entropy of the predictable next tokens only (chance: ln V): logits (N, T, V) -> ()."""
    targets = batch.ids[:, 1:]
    keep = batch.predictable[:, :-1]
    return F.cross_entropy(logits[:, :-1][keep], targets[keep])


# ---------------------------------------------------------------------------------------------
# Scores from attention weights
# ---------------------------------------------------------------------------------------------
def _expect_weights(weights: Tensor, ids: Tensor | None = None) -> None:
    if weights.dim() != 4 or weights.size(-1) != weights.size(-2):
        raise ValueError(f"weights should be (N, h, T, T), got {tuple(weights.shape)}")
    if ids is not None and (ids.dim() != 2 or tuple(ids.shape) != (weights.size(0), weights.size(-1))):
        raise ValueError(f"ids should be (N, T) = {(weights.size(0), weights.size(-1))}, got {tuple(ids.shape)}")


def _masked_score(weights: Tensor, targets: Tensor) -> Tensor:
    """Per head, the weight on ``targets`` (N, T, T) summed per query, averaged over queries that have one."""
    targets = targets.to(weights.dtype)
    has_target = targets.sum(-1) > 0  # (N, T)
    per_query = (weights * targets[:, None]).sum(-1)  # (N, h, T)
    count = has_target.sum()
    if count == 0:
        raise ValueError("no query in this batch has a target key (no token occurs twice)")
    return (per_query * has_target[:, None]).sum(dim=(0, 2)) / count


def previous_token_score(weights: Tensor) -> Tensor:
    """Mean weight of query i on key i - 1 over queries i >= 1: (N, h, T, T) -> (h,)."""
    _expect_weights(weights)
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, 2))


def induction_score(weights: Tensor, ids: Tensor) -> Tensor:
    """How much each head attends to the token *after* an earlier occurrence of the current one.

    Key j is an induction target of query i when j < i and ids[j - 1] == ids[i]. Per head: the weight on a
    query's targets, summed, averaged over the queries that have at least one target. (N, h, T, T), (N, T)
    -> (h,).
    """
    _expect_weights(weights, ids)
    T = ids.size(1)
    same_as_previous = torch.zeros(ids.size(0), T, T, dtype=torch.bool, device=ids.device)
    same_as_previous[:, :, 1:] = ids[:, :, None] == ids[:, None, :-1]  # [n, i, j] = ids[i] == ids[j - 1]
    earlier = torch.ones(T, T, dtype=torch.bool, device=ids.device).tril(-1)  # j < i
    return _masked_score(weights, same_as_previous & earlier)


def duplicate_token_score(weights: Tensor, ids: Tensor) -> Tensor:
    """Like ``induction_score`` but on the earlier occurrence itself: key j < i with ids[j] == ids[i]."""
    _expect_weights(weights, ids)
    T = ids.size(1)
    earlier = torch.ones(T, T, dtype=torch.bool, device=ids.device).tril(-1)
    return _masked_score(weights, (ids[:, :, None] == ids[:, None, :]) & earlier)


def head_scores(weights: Sequence[Tensor], score: Callable[..., Tensor], *args: Tensor) -> Tensor:
    """One score for every head of every layer: a list of n_layers (N, h, T, T) -> (n_layers, h)."""
    return torch.stack([score(w, *args) for w in weights])


# ---------------------------------------------------------------------------------------------
# Composition: what one head writes, another reads
# ---------------------------------------------------------------------------------------------
def _head_matrices(layer: HeadAttention, head: int) -> dict[str, Tensor]:
    """W_QK (E, E) and W_OV (E, E) of one head, for row vectors: scores = x W_QK xᵀ, output = a x W_OV."""
    d = layer.head_dim
    rows = slice(head * d, (head + 1) * d)
    w_q, w_k, w_v = (p.weight[rows].T for p in layer.projections())  # (E, d) each
    w_o = layer.out_proj.weight[:, rows].T  # (d, E)
    return {"QK": w_q @ w_k.T, "OV": w_v @ w_o}


@torch.no_grad()
def composition_scores(model: AttentionOnlyTransformer, kind: str, earlier: int = 0, later: int = 1) -> Tensor:
    """How strongly each head of layer ``later`` reads what each head of layer ``earlier`` writes.

    ``kind`` is "Q", "K" or "V": the earlier head's W_OV feeds the later head's queries, keys or values. The
    score is ‖A B‖_F / (‖A‖_F ‖B‖_F) for the two matrices chained (1 when they line up perfectly, about
    1 / √E for unrelated random ones). Returns (h earlier, h later).
    """
    if kind not in ("Q", "K", "V"):
        raise ValueError(f"kind must be 'Q', 'K' or 'V', got {kind!r}")
    if not 0 <= earlier < later < len(model.layers):
        raise ValueError(f"need 0 <= earlier < later < {len(model.layers)}, got {earlier}, {later}")
    h = model.num_heads
    scores = torch.zeros(h, h)
    for i in range(h):
        ov = _head_matrices(_layers(model)[earlier], i)["OV"]
        for j in range(h):
            reader = _head_matrices(_layers(model)[later], j)
            first, second = {"Q": (ov, reader["QK"]), "K": (reader["QK"], ov.T), "V": (ov, reader["OV"])}[kind]
            scores[i, j] = (first @ second).norm() / (first.norm() * second.norm())
    return scores


# ---------------------------------------------------------------------------------------------
# Hooks on the output projections: read, silence or replace one head's output
# ---------------------------------------------------------------------------------------------
# The head count of each output projection that ``output_projections`` handed out. A wrong ``num_heads`` would cut
# (N, T, h·d) into blocks of the wrong width and "head 0" would silently be two heads, or half of one.
_HEADS_OF: weakref.WeakKeyDictionary[nn.Module, int] = weakref.WeakKeyDictionary()


M = TypeVar("M", bound=nn.Module)  # a projection, returned as itself


def _layers(model: AttentionOnlyTransformer) -> list[HeadAttention]:
    """The model's layers, the HeadAttentions its __init__ made (a ModuleList's items are typed as any Module)."""
    return cast(list[HeadAttention], list(model.layers))


def _remember_heads(projection: M, num_heads: int) -> M:
    _HEADS_OF[projection] = num_heads
    return projection


def _check_num_heads(projections: Sequence[nn.Module], num_heads: int) -> None:
    """``num_heads`` must be a positive int that splits each projection's input, and the model's own count
    where it is known."""
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"num_heads must be a positive int, got {num_heads!r}")
    for layer, projection in enumerate(projections):
        known = _HEADS_OF.get(projection)
        if known is not None and known != num_heads:
            raise ValueError(f"layer {layer}'s attention has {known} heads, but num_heads={num_heads} was given")
        features = getattr(projection, "in_features", None)
        if features is not None and features % num_heads:
            raise ValueError(f"layer {layer}'s {features} head features do not split into {num_heads} heads")


def _is_index(value) -> TypeGuard[int]:
    """A position in a list: an int, and not a bool (True would silently be 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


@contextmanager
def record_head_outputs(projections: Sequence[nn.Module], num_heads: int) -> Iterator[list[Tensor]]:
    """Record the head outputs of every layer inside the block: the list yielded holds, per layer, the
    input of its output projection in the latest forward pass, split by head, (N, T, h, d) (detached)."""
    _check_num_heads(projections, num_heads)
    recorded: list[Tensor] = [torch.empty(0)] * len(projections)
    handles = []

    def make(layer: int):
        def hook(module, args):
            recorded[layer] = unflatten_heads(args[0], num_heads).detach().clone()  # (N, T, h, d)

        return hook

    try:
        for layer, projection in enumerate(projections):
            handles.append(projection.register_forward_pre_hook(make(layer)))
        yield recorded
    finally:
        for handle in handles:
            handle.remove()


@torch.no_grad()
def mean_head_outputs(model: nn.Module, projections: Sequence[nn.Module], num_heads: int, ids: Tensor) -> list[Tensor]:
    """Each head's output averaged over sequences and positions of ``ids``: per layer an (h, d) tensor."""
    with record_head_outputs(projections, num_heads) as recorded:
        model(ids)
    return [outputs.mean(dim=(0, 1)) for outputs in recorded]


@contextmanager
def head_hooks(
    projections: Sequence[nn.Module],
    num_heads: int,
    heads: Iterable[tuple[int, int]],
    replacement: str | Sequence[Tensor] = "zero",
) -> Iterator[None]:
    """Replace the output of the given (layer, head) pairs inside the block.

    ``replacement`` is "zero" (ablation), a list of per-layer (h, d) means (mean ablation, see
    ``mean_head_outputs``) or a list of per-layer (N, T, h, d) outputs recorded on another input (activation
    patching). The hooks are forward pre-hooks on the output projections; on exit they are removed.
    """
    _check_num_heads(projections, num_heads)
    chosen: dict[int, list[int]] = {}
    for layer, head in heads:
        if not (_is_index(layer) and _is_index(head) and 0 <= layer < len(projections) and 0 <= head < num_heads):
            raise ValueError(
                f"no head ({layer!r}, {head!r}): (layer, head) are ints in 0 .. {len(projections) - 1} and "
                f"0 .. {num_heads - 1} ({len(projections)} layers of {num_heads} heads)"
            )
        chosen.setdefault(layer, []).append(head)
    if isinstance(replacement, str) and replacement != "zero":
        raise ValueError(f"replacement must be 'zero' or a list of per-layer tensors, got {replacement!r}")

    def make(layer: int, which: list[int]):
        def hook(module, args):
            outputs = unflatten_heads(args[0], num_heads).clone()  # (N, T, h, d)
            if isinstance(replacement, str):
                outputs[:, :, which] = 0.0
            else:
                source = replacement[layer]
                if source.dim() == 2:  # (h, d) means: the same at every position
                    if source.shape != outputs.shape[2:]:  # an (h, 1) would broadcast over d without a word
                        raise ValueError(
                            f"mean for layer {layer} is {tuple(source.shape)}, expected (h, d) = "
                            f"{tuple(outputs.shape[2:])}: one mean vector per head (see mean_head_outputs)"
                        )
                    outputs[:, :, which] = source[which].to(outputs.dtype)
                elif source.shape != outputs.shape:
                    raise ValueError(
                        f"patch source for layer {layer} is {tuple(source.shape)}, the run's outputs "
                        f"are {tuple(outputs.shape)}: record it on inputs of the same shape"
                    )
                else:
                    outputs[:, :, which] = source[:, :, which].to(outputs.dtype)
            return (outputs.flatten(-2), *args[1:])

        return hook

    handles = []
    try:
        for layer, which in chosen.items():
            handles.append(projections[layer].register_forward_pre_hook(make(layer, which)))
        yield
    finally:
        for handle in handles:
            handle.remove()


@torch.no_grad()
def patching_map(
    model: nn.Module,
    projections: Sequence[nn.Module],
    num_heads: int,
    clean: Tensor,
    corrupted: Tensor,
    metric: Callable[[Tensor], Tensor],
    heads: Iterable[tuple[int, int]] | None = None,
) -> Tensor:
    """Activation patching, one head at a time: run ``corrupted`` with one head's output taken from the run
    on ``clean`` and report how much of the metric comes back.

    ``metric`` maps logits (N, T, V) to a number (higher = better). Entry [layer, head] is
    (metric patched − metric corrupted) / (metric clean − metric corrupted): 1 means that head alone
    restores the clean behaviour, 0 that it does nothing. ``heads`` limits the (layer, head) pairs patched
    (one forward pass each; the others are NaN). Returns (n_layers, h).
    """
    if clean.shape != corrupted.shape:
        raise ValueError(f"clean {tuple(clean.shape)} and corrupted {tuple(corrupted.shape)} must have one shape")
    with record_head_outputs(projections, num_heads) as recorded:
        clean_metric = float(metric(_logits(model(clean))))
    corrupted_metric = float(metric(_logits(model(corrupted))))
    result = torch.full((len(projections), num_heads), float("nan"))
    everything = [(layer, head) for layer in range(len(projections)) for head in range(num_heads)]
    for layer, head in everything if heads is None else heads:
        with head_hooks(projections, num_heads, [(layer, head)], recorded):
            patched = float(metric(_logits(model(corrupted))))
        result[layer, head] = (patched - corrupted_metric) / (clean_metric - corrupted_metric)
    return result


def output_projections(model: nn.Module) -> list[nn.Module]:
    """Every submodule named ``out_proj``, in the order of the model's layers: where ``head_hooks`` attach.

    Works for this module's ``AttentionOnlyTransformer`` and for ``helpers.gpt.GPT`` (lesson 09's SmolLM2),
    whose attention's output projection takes the heads' outputs side by side, (N, T, h·d).
    """
    found = [(name, module) for name, module in model.named_modules() if name.split(".")[-1] == "out_proj"]
    if not found:
        raise ValueError(f"{type(model).__name__} has no submodule named out_proj")
    for name, module in found:  # the attention that owns the projection knows its head count
        owner = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
        heads = getattr(owner, "num_heads", None)
        if _is_index(heads):
            _remember_heads(module, heads)
    return [module for _, module in found]


def _logits(output: Tensor | tuple) -> Tensor:
    return output[0] if isinstance(output, tuple) else output


# ---------------------------------------------------------------------------------------------
# Training, with the phase change recorded
# ---------------------------------------------------------------------------------------------
@dataclass
class PhaseChange:
    """What ``train_induction`` recorded every ``every`` steps on a fixed evaluation batch: the loss on the
    predictable tokens, and per (layer, head) the induction and previous-token scores (steps, n_layers, h)."""

    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    induction: list[Tensor] = field(default_factory=list)
    previous: list[Tensor] = field(default_factory=list)

    def first_step_below(self, loss: float) -> int | None:
        """The first recorded step whose loss is below ``loss`` (None if none is)."""
        return next((s for s, value in zip(self.steps, self.loss, strict=True) if value < loss), None)


@torch.no_grad()
def _evaluate(model: nn.Module, batch: RepeatedBatch) -> tuple[float, Tensor, Tensor]:
    model.eval()
    logits, weights = model(batch.ids, need_weights=True)
    model.train()
    return (
        float(repeated_loss(logits, batch)),
        head_scores(weights, induction_score, batch.ids),
        head_scores(weights, previous_token_score),
    )


def _next_token_loss(logits: Tensor, batch: RepeatedBatch) -> Tensor:
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), batch.ids[:, 1:].flatten())


def train_on_repeated_batches(
    model: nn.Module,
    steps: int,
    seq_len: int,
    vocab_size: int,
    lengths: tuple[int, int],
    batch_size: int = 32,
    lr: float = 1e-3,
    seed: int = 0,
    every: int = 100,
    eval_size: int = 256,
    loss: Callable[[Tensor, RepeatedBatch], Tensor] = _next_token_loss,
    progress: str | None = None,
) -> tuple[PhaseChange, float]:
    """The loop behind ``train_induction`` (lesson 10) and ``cache_budget.train_repeated`` (lesson 11): AdamW
    on a fresh repeated batch (N = ``batch_size``, T = ``seq_len``) each step, ``loss(logits, batch)``.

    ``model(ids, need_weights=True)`` must give (logits (N, T, V), one (N, h, T, T) weights tensor per layer).
    Every ``every`` steps and at the end it is measured on one fixed batch of ``eval_size`` sequences; the
    batches depend on ``seed`` alone. Returns the ``PhaseChange`` and the seconds spent in training steps
    (measurements excluded); the model is left in eval mode. ``progress``: a label, to print a line under it at
    every tenth of the steps (``helpers.tools.progress``); None: silent."""
    lines = ProgressLines(steps, progress) if progress is not None and steps > 0 else None
    generator = torch.Generator().manual_seed(seed)
    evaluation = repeated_batch(eval_size, seq_len, vocab_size, lengths, generator)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    history, seconds = PhaseChange(), 0.0
    model.train()
    for step in range(steps + 1):
        if step % every == 0 or step == steps:
            measured_loss, induction, previous = _evaluate(model, evaluation)
            history.steps.append(step)
            history.loss.append(measured_loss)
            history.induction.append(induction)
            history.previous.append(previous)
        if step == steps:
            break
        batch = repeated_batch(batch_size, seq_len, vocab_size, lengths, generator)
        started = time.perf_counter()
        step_loss = loss(model(batch.ids), batch)
        optimizer.zero_grad(set_to_none=True)
        step_loss.backward()
        optimizer.step()
        seconds += time.perf_counter() - started
        if lines is not None:
            lines.update(step + 1)
    model.eval()
    return history, seconds


def train_induction(
    model: AttentionOnlyTransformer,
    steps: int,
    lengths: tuple[int, int] = (8, 24),
    batch_size: int = 32,
    lr: float = 1e-3,
    seed: int = 0,
    every: int = 100,
    eval_size: int = 256,
    repeated_only: bool = False,
    progress: str | None = None,
) -> PhaseChange:
    """Train on fresh repeated batches for a fixed number of steps (AdamW; next-token loss on every position).

    Every ``every`` steps (and at step 0) the model is measured on one fixed batch of ``eval_size`` sequences
    drawn with the same ``lengths``. With ``repeated_only`` the training loss counts only the predictable
    targets (the random ones teach nothing but add noise). ``progress``: a label to print a line under at every
    tenth of the steps. The model is left in eval mode.
    """
    history, _ = train_on_repeated_batches(
        model, steps, model.max_len, model.embed.num_embeddings, lengths, batch_size, lr, seed, every, eval_size,
        repeated_loss if repeated_only else _next_token_loss, progress,
    )  # fmt: skip
    return history
