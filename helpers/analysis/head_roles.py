"""What the heads of a pretrained encoder do, measured (lesson 08): roles from attention maps, costs by ablation.

Two kinds of evidence about a head, kept apart on purpose:

* **where it looks** — role scores computed from its attention weights over many sentences: how much
  weight goes to the previous, next or same token, to ``[CLS]``, ``[SEP]`` or punctuation (the "sinks"),
  and how spread out its rows are (entropy);
* **what it is worth** — how much a task gets worse when the head is silenced (ablation), or the gradient
  of the task's score with respect to a gate on the head (a first-order estimate of the same).

Shapes (course notation): N sentences, T tokens (padded), h heads, layers = number of encoder layers,
R = number of roles. Attention weights are (n_layers, N, h, T, T): rows are queries, columns keys.
"""

from __future__ import annotations

import functools
import operator
import string
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor

from helpers.attention import unflatten_heads
from helpers.layers import EncoderLayer
from helpers.models.pretrained import PretrainedEncoder, encode, mean_pool, run_layer, sentence_embeddings
from helpers.tools.progress import ProgressLines

__all__ = [
    "PARAPHRASE_PAIRS",
    "ROLES",
    "HeadRoles",
    "SimilarityTask",
    "TaskScore",
    "ablation_costs",
    "contributions",
    "gated_heads",
    "gradient_importance",
    "head_gates",
    "measure_head_roles",
    "pruning_curve",
    "role_sums",
    "spearman",
    "token_kinds",
]


def _layers(model: PretrainedEncoder) -> list[EncoderLayer]:
    """The model's layers, the EncoderLayers its __init__ made (a ModuleList's items are typed as any Module)."""
    return cast(list[EncoderLayer], list(model.layers))


ROLES = ("previous", "next", "same", "[CLS]", "[SEP]", "punctuation", "entropy")
SINKS = ("[CLS]", "[SEP]", "punctuation")


# ---------------------------------------------------------------------------------------------
# Role scores from attention maps
# ---------------------------------------------------------------------------------------------
def token_kinds(tokens: Sequence[Sequence[str]], length: int) -> dict[str, Tensor]:
    """Boolean (N, T) flags for the sink roles: which positions hold ``[CLS]``, ``[SEP]``, punctuation.

    ``tokens`` are each sentence's real tokens (as ``helpers.models.pretrained.encode`` returns them); positions
    past a sentence's end (padding) are False everywhere.
    """
    kinds = {kind: torch.zeros(len(tokens), length, dtype=torch.bool) for kind in SINKS}
    for n, sentence in enumerate(tokens):
        for t, token in enumerate(sentence):
            if token in ("[CLS]", "[SEP]"):
                kinds[token][n, t] = True
            elif all(c in string.punctuation for c in token):
                kinds["punctuation"][n, t] = True
    return kinds


def role_sums(weights: Tensor, attention_mask: Tensor, kinds: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
    """Sum every role's score over the query rows of a batch, and count the rows: ``(sums, counts)``.

    weights (n_layers, N, h, T, T); attention_mask (N, T) 1 = real token; kinds from ``token_kinds``.
    Returns sums (R, layers, h) and counts (R,), roles in ``ROLES`` order; a role's mean is sums / counts.
    Only real query rows count; "previous" needs a token before the query, "next" a real token after it.
    """
    if weights.dim() != 5 or weights.size(-1) != weights.size(-2):
        raise ValueError(f"expected weights (n_layers, N, h, T, T), got shape {tuple(weights.shape)}")
    real = attention_mask.bool()  # (N, T)
    pair = real[:, 1:] & real[:, :-1]  # (N, T-1): queries t+1 and keys t both real
    rows = real[None, :, None, :].to(weights.dtype)  # (1, N, 1, T), broadcast over layers and heads
    pairs = pair[None, :, None, :].to(weights.dtype)

    def total(per_row: Tensor, valid: Tensor) -> Tensor:  # (n_layers, N, h, ·) -> (n_layers, h)
        return (per_row * valid).sum(dim=(1, 3))

    sums = [
        total(weights.diagonal(offset=-1, dim1=-2, dim2=-1), pairs),  # w[t+1, t]: looks one back
        total(weights.diagonal(offset=1, dim1=-2, dim2=-1), pairs),  # w[t, t+1]: looks one ahead
        total(weights.diagonal(dim1=-2, dim2=-1), rows),  # w[t, t]: looks at itself
    ]
    for kind in SINKS:
        on_kind = (weights * kinds[kind][None, :, None, None, :].to(weights.dtype)).sum(-1)  # (n_layers, N, h, T)
        sums.append(total(on_kind, rows))
    entropy = -(weights * weights.clamp_min(1e-12).log()).sum(-1)  # (n_layers, N, h, T), in nats
    sums.append(total(entropy, rows))
    n_rows, n_pairs = real.sum(), pair.sum()
    counts = torch.stack([n_pairs, n_pairs, *[n_rows] * (len(ROLES) - 2)]).to(weights.dtype)
    return torch.stack(sums), counts


@dataclass(frozen=True)
class HeadRoles:
    """Mean role scores of every head: ``scores`` (R, layers, h) in ``ROLES`` order, over ``sentences``.

    Every role but entropy is the mean attention weight a query gives that target (0 to 1); entropy is the
    mean entropy of a row in nats (0 = all weight on one key; ln T = spread evenly over T keys).
    """

    scores: Tensor
    sentences: int

    def __getitem__(self, role: str) -> Tensor:
        """One role's (n_layers, h) table."""
        if role not in ROLES:
            raise KeyError(f"unknown role {role!r}; the roles are {ROLES}")
        return self.scores[ROLES.index(role)]

    @property
    def sink(self) -> Tensor:
        """(n_layers, h): the mean weight on ``[CLS]``, ``[SEP]`` and punctuation together."""
        return functools.reduce(operator.add, (self[kind] for kind in SINKS))

    def specialists(self, threshold: float = 0.5) -> list[tuple[str, int, int, float]]:
        """Heads giving one kind of target at least ``threshold`` of their weight, on average over every query.

        Returns ``(role, layer, head, score)`` sorted by role, then score (highest first). Entropy is not a
        target and is not listed.
        """
        found = []
        for r, role in enumerate(ROLES[:-1]):
            for layer, head in (self.scores[r] >= threshold).nonzero().tolist():
                found.append((role, layer, head, float(self.scores[r, layer, head])))
        return sorted(found, key=lambda item: (ROLES.index(item[0]), -item[3]))


@torch.no_grad()
def contributions(model: PretrainedEncoder, input_ids: Tensor, attention_mask: Tensor) -> list[Tensor]:
    """How much each key adds to each query's output in every head, as a share: per layer (N, h, T, T).

    A weight says how much of token j's value a head takes, not how large that value is. What head k
    really adds at query t from key j is ``w[t, j] * W_o^k v_j`` (its value, through the head's columns of
    the output projection); this returns ``w[t, j] * ||W_o^k v_j||`` with every row scaled to sum to 1, so it
    reads like attention (the "norm-based" analysis of Kobayashi et al., 2020).
    """
    x = model.embeddings(input_ids)  # (N, T, E)
    padding = attention_mask == 0
    shares = []
    for layer in _layers(model):
        attn = layer.self_attn
        E, h = x.size(-1), attn.num_heads
        values = unflatten_heads(F.linear(x, attn.in_proj_weight[2 * E :], attn.in_proj_bias[2 * E :]), h)
        out_columns = unflatten_heads(attn.out_proj.weight, h)  # (E, h, d): head k owns columns k*d .. (k+1)*d - 1
        sizes = torch.einsum("nthd,ehd->nhte", values, out_columns).norm(dim=-1)  # (N, h, T): ||W_o^k v_j||
        x, weights = run_layer(layer, x, padding)
        added = weights * sizes[:, :, None, :]  # (N, h, T, T)
        shares.append(added / added.sum(-1, keepdim=True).clamp_min(1e-12))
    return shares


@torch.no_grad()
def measure_head_roles(
    model: PretrainedEncoder,
    tokenizer,
    sentences: Sequence[str],
    batch_size: int = 64,
    weighting: str = "attention",
) -> HeadRoles:
    """Run ``sentences`` through ``model`` in batches and average every head's role scores over them.

    ``weighting="attention"`` scores the attention weights; ``"contribution"`` scores the share each key
    really adds to the output (see ``contributions``).
    """
    if not sentences:
        raise ValueError("measure_head_roles needs at least one sentence")
    if weighting not in ("attention", "contribution"):
        raise ValueError(f'weighting must be "attention" or "contribution", got {weighting!r}')
    total: Tensor | None = None
    count: Tensor | None = None
    for start in range(0, len(sentences), batch_size):
        ids, mask, tokens = encode(tokenizer, list(sentences[start : start + batch_size]))
        if weighting == "attention":
            _, weights = model(ids, mask)
        else:
            weights = contributions(model, ids, mask)
        sums, counts = role_sums(torch.stack(weights), mask, token_kinds(tokens, ids.size(1)))
        total = sums if total is None else total + sums
        count = counts if count is None else count + counts
    assert total is not None and count is not None, "sentences is not empty"
    return HeadRoles(total / count[:, None, None], len(sentences))


# ---------------------------------------------------------------------------------------------
# Silencing heads
# ---------------------------------------------------------------------------------------------
def head_gates(model: PretrainedEncoder, silenced: Iterable[tuple[int, int]] = ()) -> Tensor:
    """A (n_layers, h) tensor of ones with zeros at the ``(layer, head)`` pairs in ``silenced``."""
    gates = torch.ones(model.config.num_layers, model.config.num_heads)
    for layer, head in silenced:
        gates[layer, head] = 0.0
    return gates


@contextmanager
def gated_heads(model: PretrainedEncoder, gates: Tensor) -> Iterator[None]:
    """Multiply each head's output by ``gates[layer, head]`` inside the block (0 = silenced).

    The gate acts before the output projection, so a silenced head's contribution vanishes exactly; a gate
    that requires grad gets the gradient of whatever is computed inside. On exit every head is on again.
    """
    expected = (model.config.num_layers, model.config.num_heads)
    if tuple(gates.shape) != expected:
        raise ValueError(f"gates must have shape (n_layers, h) = {expected}, got {tuple(gates.shape)}")
    try:
        for layer, gate in zip(_layers(model), gates, strict=True):
            layer.head_gate = gate
        yield
    finally:
        for layer in _layers(model):
            layer.head_gate = None


# ---------------------------------------------------------------------------------------------
# The task: does the model still tell paraphrases from unrelated sentences?
# ---------------------------------------------------------------------------------------------
# Pairs of captions that mean the same in other words (written for this lesson). Every first sentence is
# also compared with the second sentence of every *other* pair: those are the unrelated pairs.
PARAPHRASE_PAIRS = (
    (
        "A mother and her young son enjoying a beautiful day outdoors.",
        "A woman and her little boy spend a lovely day outside.",
    ),
    ("A man is riding a bicycle down the street.", "Someone cycles along the road."),
    ("Two dogs are playing in the snow.", "A pair of puppies play together on a snowy field."),
    ("A child is eating an ice cream.", "A kid enjoys a frozen dessert."),
    ("The woman is reading a book in the park.", "In the park, a lady reads a novel."),
    ("A group of people are dancing at a party.", "Several guests dance at a celebration."),
    ("An old man is sitting on a bench.", "An elderly gentleman rests on a seat."),
    ("A girl is jumping into a swimming pool.", "A young girl leaps into the water of a pool."),
    ("A chef is cooking in a busy kitchen.", "A cook prepares food in a crowded restaurant kitchen."),
    ("The boy kicks a ball across the field.", "A young boy is playing football on the grass."),
    ("A musician plays the guitar on stage.", "A guitarist performs in front of an audience."),
    ("A couple is walking along the beach at sunset.", "Two people stroll by the sea as the sun goes down."),
    ("A worker is repairing the roof of a house.", "A man fixes a house's roof."),
    ("Children are building a sandcastle.", "Kids make a castle out of sand."),
    ("A woman is painting a picture.", "A female artist works on a painting."),
    ("A cat is sleeping on the sofa.", "A kitten naps on the couch."),
    ("The students are listening to their teacher.", "Pupils pay attention to the lecture."),
    ("A man is climbing a steep rock wall.", "A climber scales a cliff."),
    ("A baby is laughing in its crib.", "An infant giggles in bed."),
    ("Firefighters are putting out a fire.", "Firemen extinguish a burning building."),
    ("A woman is selling fruit at a market.", "A vendor offers apples and bananas at a market stall."),
    ("Two men are shaking hands.", "A pair of men greet each other with a handshake."),
    ("A skier races down a snowy mountain.", "Someone skis quickly down a slope covered in snow."),
    ("A dog is catching a frisbee in the air.", "A dog leaps to grab a flying disc."),
    ("A man is talking on his phone.", "A guy makes a call on his mobile."),
    ("The family is having dinner together.", "Parents and children share an evening meal."),
    ("A horse is running across a meadow.", "A horse gallops through a grassy field."),
    ("A waiter is carrying plates of food.", "A server brings dishes to the table."),
    ("A little girl is brushing her teeth.", "A small child cleans her teeth."),
    ("People are waiting for the bus in the rain.", "Commuters stand at a bus stop on a rainy day."),
    ("A boy is flying a kite on the beach.", "On the sand, a child flies a kite."),
    ("A woman is typing on a laptop in a cafe.", "A lady works on her computer in a coffee shop."),
)


@dataclass(frozen=True)
class TaskScore:
    """How well sentence embeddings separate paraphrases from unrelated pairs.

    margin: mean cosine of the P paraphrase pairs minus the mean cosine of the P (P - 1) unrelated pairs.
    accuracy: share of first sentences whose nearest second sentence (by cosine) is their own paraphrase.
    """

    margin: float
    accuracy: float
    paraphrase_cosine: float
    unrelated_cosine: float


class SimilarityTask:
    """Paraphrase pairs tokenized once; ``score(model)`` embeds them and scores the model's similarities.

    All 2P sentences go through the model as one padded batch, first sentences then second sentences.
    """

    def __init__(self, tokenizer, pairs: Sequence[tuple[str, str]] = PARAPHRASE_PAIRS) -> None:
        if len(pairs) < 2:
            raise ValueError("a similarity task needs at least two pairs (the unrelated pairs mix them)")
        self.pairs = list(pairs)
        self.input_ids, self.attention_mask, _ = encode(tokenizer, [a for a, _ in pairs] + [b for _, b in pairs])

    def cosines(self, model: PretrainedEncoder, start: int = 0, layer_input: Tensor | None = None) -> Tensor:
        """(P, P) cosine of first sentence i with second sentence j: paraphrases on the diagonal.

        With ``layer_input`` (2P, T, E), the input of layer ``start`` from an earlier pass (see
        ``layer_inputs``), only layers ``start, ...`` run again.
        """
        if layer_input is None:
            vectors = sentence_embeddings(model, self.input_ids, self.attention_mask)  # (2P, E), unit length
        else:
            states, _ = model.run_layers(layer_input, self.attention_mask, start=start, need_weights=False)
            vectors = F.normalize(mean_pool(states, self.attention_mask), dim=-1)
        P = len(self.pairs)
        return vectors[:P] @ vectors[P:].T

    @torch.no_grad()
    def layer_inputs(self, model: PretrainedEncoder) -> list[Tensor]:
        """The input of every layer, (2P, T, E) each, with every head on: reused by ``ablation_costs``."""
        x = model.embeddings(self.input_ids)
        inputs = []
        for layer in _layers(model):
            inputs.append(x)
            x, _ = run_layer(layer, x, self.attention_mask == 0, need_weights=False)
        return inputs

    def margin(self, model: PretrainedEncoder) -> Tensor:
        """The differentiable score: mean paraphrase cosine minus mean unrelated cosine (a 0-d tensor)."""
        cos = self.cosines(model)
        P = cos.size(0)
        related = cos.diagonal().mean()
        unrelated = (cos.sum() - cos.diagonal().sum()) / (P * (P - 1))
        return related - unrelated

    @torch.no_grad()
    def score(self, model: PretrainedEncoder, start: int = 0, layer_input: Tensor | None = None) -> TaskScore:
        """The task's score (see ``TaskScore``); ``start`` and ``layer_input`` as in ``cosines``."""
        cos = self.cosines(model, start, layer_input)
        P = cos.size(0)
        related = float(cos.diagonal().mean())
        unrelated = float((cos.sum() - cos.diagonal().sum()) / (P * (P - 1)))
        accuracy = float((cos.argmax(dim=1) == torch.arange(P)).float().mean())
        return TaskScore(related - unrelated, accuracy, related, unrelated)


def ablation_costs(
    model: PretrainedEncoder, task: SimilarityTask, progress: str | None = None
) -> tuple[TaskScore, Tensor]:
    """Silence each head alone and measure the margin lost: ``(full score, costs (n_layers, h))``.

    cost[layer, head] = margin with every head - margin without that head (positive: the head helped).
    ``progress``: a label to print a line under at every tenth of the heads; None: silent.
    """
    full = task.score(model)
    inputs = task.layer_inputs(model)  # silencing a head in layer l leaves layers below l as they were
    layers, heads = model.config.num_layers, model.config.num_heads
    costs = torch.zeros(layers, heads)
    lines = ProgressLines(layers * heads, progress, "heads") if progress is not None else None
    for layer in range(layers):
        for head in range(heads):
            with gated_heads(model, head_gates(model, [(layer, head)])):
                costs[layer, head] = full.margin - task.score(model, layer, inputs[layer]).margin
            if lines is not None:
                lines.update(layer * heads + head + 1)
    return full, costs


def gradient_importance(model: PretrainedEncoder, task: SimilarityTask) -> Tensor:
    """First-order estimate of every head's ablation cost from one backward pass: (n_layers, h).

    With gates g (all 1) on the heads, silencing head k moves its gate from 1 to 0, so by a first-order
    Taylor expansion the margin drops by about d(margin)/d(g_k). (Michel et al., 2019, rank heads by the
    absolute value of this gradient; its sign says whether the head helps or hurts.)
    """
    gates = head_gates(model).requires_grad_(True)
    with torch.enable_grad(), gated_heads(model, gates):
        task.margin(model).backward()
    assert gates.grad is not None, "the backward pass above reached the gates"
    return gates.grad.detach().clone()


def pruning_curve(
    model: PretrainedEncoder,
    task: SimilarityTask,
    order: Sequence[tuple[int, int]],
    counts: Sequence[int],
    progress: str | None = None,
) -> list[TaskScore]:
    """Silence the first k heads of ``order`` for each k in ``counts``; the task's score at each k.
    ``progress``: a label to print a line under at every tenth of the counts; None: silent."""
    scores = []
    lines = ProgressLines(len(counts), progress, "points") if progress is not None and counts else None
    for k in counts:
        if not 0 <= k <= len(order):
            raise ValueError(f"cannot silence {k} heads: the order lists {len(order)}")
        with gated_heads(model, head_gates(model, order[:k])):
            scores.append(task.score(model))
        if lines is not None:
            lines.update(len(scores))
    return scores


def spearman(a: Tensor, b: Tensor) -> float:
    """Spearman's rank correlation of two equally shaped tensors (flattened; ties broken by position)."""
    if a.shape != b.shape:
        raise ValueError(f"spearman needs two tensors of one shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    ranks = [x.flatten().argsort().argsort().double() for x in (a, b)]
    ranks = [r - r.mean() for r in ranks]
    return float((ranks[0] * ranks[1]).sum() / (ranks[0].norm() * ranks[1].norm()))
