"""Which keys does a query need? Lesson 15's experiments on a whole model: every layer reads only k keys per query.

A selection rule (``helpers.selection`` gives the pieces) names, per layer, the k keys each query may read; within
``selected_attention(model, rule)`` every softmax layer of a ``helpers.gpt.GPT`` then softmaxes over those keys
only, through the one hook the attention core offers (``weights_from_scores``, as lesson 14's
``helpers.streaming`` does). The rest measures what that costs and how a trained selector compares:

* rules, each a small factory: ``oracle_per_head(k)`` (each head's own top k), ``oracle_shared(k)`` (one top k
  for all of a layer's heads, by their summed attention: DeepSeek V3.2's DSA shape with a perfect indexer),
  ``recent_window(k)``, ``window_and_first(k)`` (StreamingLLM), ``moba(k, block)`` (MoBA's blocks, per head) and
  ``indexer_top_k(indexers, k)`` (trained lightning indexers' top k, shared by the heads: DSA itself);
* ``mean_loss``: the mean next-token loss under a rule, from one prefill; ``recall_by_layer``: the share of the
  full model's attention mass that a rule's keys hold, layer by layer (``recalls_by_layer``: several rules);
* ``layer_targets``, ``indexer_kl``, ``train_indexers``: DSA's warm-up, one ``helpers.lightning_indexer``
  per layer trained by KL(the heads' summed attention ‖ the indexer's softmax) with the model frozen.

A rule is a function ``rule(layer, scores, positions, x) -> indices``: ``layer`` the layer's index, ``scores``
(N, h, L, S) its scaled attention scores, ``positions`` (L,) its queries' positions, ``x`` (N, L, E) the
attention layer's input (after its norm: what its projections read, and what an indexer reads). It returns
``helpers.selection``'s indices: (N, h, L, k) per head, (N, 1, L, k) shared by the heads, or (L, k) shared by
the batch too; -1 = no key. The top-k rules choose with ``helpers.selection.causal_topk``.

Shapes: N batch, h heads, L queries, S keys, E embedding size, k keys kept per query, n_layers layers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor

from helpers.attention import AttentionCore, masked_softmax
from helpers.gpt import GPT
from helpers.lightning_indexer import LightningIndexer
from helpers.selection import (
    block_topk,
    causal_topk,
    check_budget,
    recall,
    recent_and_first_keys,
    recent_keys,
    selected_mask,
    summed_attention,
)

__all__ = [
    "SelectionRule",
    "indexer_kl",
    "indexer_top_k",
    "layer_targets",
    "mean_loss",
    "moba",
    "oracle_per_head",
    "oracle_shared",
    "recall_by_layer",
    "recalls_by_layer",
    "recent_window",
    "selected_attention",
    "train_indexers",
    "window_and_first",
]

SelectionRule = Callable[[int, Tensor, Tensor, Tensor], Tensor]
"""``(layer, scores (N, h, L, S), positions (L,), x (N, L, E)) -> indices (N, h | 1, L, k) or (L, k)``."""

# What the one hook receives and gives back: a layer's scores, mask and positions -> its weights (N, h, L, S).
_LayerWeights = Callable[[int, Tensor, Tensor, Tensor, Tensor], Tensor]


# ---------------------------------------------------------------------------------------------
# The hook: every layer's softmax replaced, with the layer's input at hand
# ---------------------------------------------------------------------------------------------
def _softmax_layers(model: GPT, layers: Iterable[int] | None = None) -> dict[int, AttentionCore]:
    """{index: attention layer} of ``layers`` (None: every layer), refused unless each is full causal softmax
    attention: a layer with a window of its own reads fewer keys than a rule names, a delta or linear layer has
    no scores to select from. Refused too if one already has its weights replaced (another hook)."""
    if not isinstance(model, GPT):
        raise TypeError(f"key selection needs a helpers.gpt.GPT, got {type(model).__name__}")
    n_layers = len(model.blocks)
    chosen = list(range(n_layers)) if layers is None else sorted(set(layers))
    bad = [i for i in chosen if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n_layers]
    if bad or not chosen:
        raise ValueError(f"layers must be ints in 0 .. {n_layers - 1} (at least one), got {bad or chosen}")
    cores = {i: model.blocks[i].attention for i in chosen}
    odd = [i for i, core in cores.items() if not isinstance(core, AttentionCore)]
    windowed = [i for i, core in cores.items() if getattr(core, "window", None) is not None]
    if odd or windowed:
        raise ValueError(
            f"key selection needs full causal softmax attention in each layer it changes; layers {odd} are not "
            f"softmax attention and layers {windowed} have a window of their own"
        )
    busy = [i for i, core in cores.items() if getattr(core, "weights_from_scores", None) is not None]
    if busy:
        raise RuntimeError(f"layers {busy} already have their attention weights replaced (another hook is set)")
    return {i: core for i, core in cores.items() if isinstance(core, AttentionCore)}


@contextmanager
def _each_layer(model: GPT, layer_weights: _LayerWeights, layers: Iterable[int] | None = None) -> Iterator[GPT]:
    """Within the ``with``, layer i's weights (i in ``layers``, None: all) are ``layer_weights(i, scores,
    may_attend, positions, x)``, x its input (N, L, E), read by a forward pre-hook. Hooks and weights are removed
    on leaving, also after an error."""
    cores = _softmax_layers(model, layers)
    inputs: dict[int, Tensor] = {}

    def keep_input(index: int) -> Callable:
        def hook(module, args, kwargs) -> None:
            inputs[index] = args[0] if args else kwargs["x"]  # x (N, L, E): what the attention projects

        return hook

    def weights_of(index: int) -> Callable[[Tensor, Tensor | None, Tensor | None], Tensor]:
        def weights(scores: Tensor, may_attend: Tensor | None, positions: Tensor | None) -> Tensor:
            if may_attend is None or positions is None:  # the GPT's attention passes both; another caller may not
                raise ValueError("key selection needs the layer's mask and its queries' positions")
            if int(positions[-1]) != scores.size(-1) - 1:
                raise ValueError(
                    f"key selection needs every key since position 0 (no cache or a full one): the last query is "
                    f"at {int(positions[-1])} but the layer holds {scores.size(-1)} keys"
                )
            return layer_weights(index, scores, may_attend, positions, inputs[index])

        return weights

    handles = []
    try:
        for index, core in cores.items():
            handles.append(core.register_forward_pre_hook(keep_input(index), with_kwargs=True))
            core.weights_from_scores = weights_of(index)
        yield model
    finally:
        for handle in handles:
            handle.remove()
        for core in cores.values():
            core.weights_from_scores = None
        inputs.clear()


def _chosen(rule: SelectionRule, layer: int, scores: Tensor, positions: Tensor, x: Tensor) -> Tensor:
    """The rule's indices, checked and made (N, h | 1, L, k): one shape for the mask and for ``recall``."""
    indices = rule(layer, scores, positions, x)
    N, h, L, _ = scores.shape
    if not isinstance(indices, Tensor) or indices.dim() not in (2, 4) or indices.shape[-2] != L:
        shape = tuple(indices.shape) if isinstance(indices, Tensor) else type(indices).__name__
        raise ValueError(f"a rule returns indices (N, h | 1, L, k) or (L, k) with L = {L}; layer {layer}'s: {shape}")
    if indices.dim() == 2:
        indices = indices[None, None]
    if indices.shape[0] not in (1, N) or indices.shape[1] not in (1, h):
        raise ValueError(f"a rule's indices (N, h | 1, L, k) must fit scores {(N, h, L)}; got {tuple(indices.shape)}")
    return indices


def _softmax_over(scores: Tensor, allowed: Tensor) -> Tensor:
    """``masked_softmax(scores, allowed)`` in two passes over the (N, h, L, S) scores instead of five, when every
    query may read some key (always, under a causal rule: a query reads at least one key); else ``masked_softmax``
    itself, whose rows with no key get zero weights. A model with 30 layers of 1,024² scores per head spends
    most of a selected prefill here."""
    if not bool(allowed.any(dim=-1).all()):
        return masked_softmax(scores, allowed)
    return scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)


@contextmanager
def selected_attention(model: GPT, rule: SelectionRule, layers: Iterable[int] | None = None) -> Iterator[GPT]:
    """Within the ``with``, every layer's query reads only the keys ``rule`` names (and that causality allows):
    its softmax runs over ``may_attend & selected_mask(indices)``. ``layers``: the layers that select (None:
    every layer; each must be full causal: Gemma's global layers, say, while its local ones keep their window).
    For a prefill without a cache or a step with a full one (generation; not an indexer's rule, which needs every
    token's input); the model's layers are restored on leaving, also after an error."""

    def weights(layer: int, scores: Tensor, may_attend: Tensor, positions: Tensor, x: Tensor) -> Tensor:
        indices = _chosen(rule, layer, scores, positions, x)
        return _softmax_over(scores, may_attend & selected_mask(indices, scores.size(-1)))

    with _each_layer(model, weights, layers):
        yield model


# ---------------------------------------------------------------------------------------------
# The rules
# ---------------------------------------------------------------------------------------------
def _causal(positions: Tensor, S: int) -> Tensor:
    """(L, S), True where query t may read key j: j <= positions[t]."""
    return torch.arange(S, device=positions.device)[None, :] <= positions[:, None]


def _same_positions(choose: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    """``choose(positions)``, computed once per forward pass: the GPT hands every layer the same positions
    tensor, and a rule that reads nothing else (a window) names the same keys in every layer."""
    last: list[tuple[Tensor, Tensor]] = []

    def chosen(positions: Tensor) -> Tensor:
        if not last or last[0][0] is not positions:
            last[:] = [(positions, choose(positions))]
        return last[0][1]

    return chosen


def oracle_per_head(k: int) -> SelectionRule:
    """Each head's own k highest scores (its largest weights): the best any per-head top-k can do."""
    check_budget(k)

    def rule(layer: int, scores: Tensor, positions: Tensor, x: Tensor) -> Tensor:
        return causal_topk(scores, k, positions)  # (N, h, L, k)

    rule.__qualname__ = f"oracle_per_head({k})"
    return rule


def oracle_shared(k: int) -> SelectionRule:
    """One selection for all of a layer's heads: the k keys with the most attention summed over the heads (each
    head's causal softmax of its own scores). DSA's shape, chosen by the weights an indexer is trained towards."""
    check_budget(k)

    def rule(layer: int, scores: Tensor, positions: Tensor, x: Tensor) -> Tensor:
        weights = _softmax_over(scores, _causal(positions, scores.size(-1)))  # (N, h, L, S)
        return causal_topk(summed_attention(weights), k, positions).unsqueeze(1)  # (N, 1, L, k)

    rule.__qualname__ = f"oracle_shared({k})"
    return rule


def recent_window(k: int) -> SelectionRule:
    """The k most recent keys (the query's own among them): a sliding window."""
    check_budget(k)
    keys = _same_positions(lambda positions: recent_keys(positions, k))

    def rule(layer: int, scores: Tensor, positions: Tensor, x: Tensor) -> Tensor:
        return keys(positions)  # (L, k)

    rule.__qualname__ = f"recent_window({k})"
    return rule


def window_and_first(k: int, first: int = 4) -> SelectionRule:
    """The first ``first`` tokens (attention sinks) and the k - first most recent keys: StreamingLLM at k keys."""
    recent_and_first_keys(torch.zeros(1, dtype=torch.long), k, first)  # refuses a bad k or first now, not mid-run

    keys = _same_positions(lambda positions: recent_and_first_keys(positions, k, first))

    def rule(layer: int, scores: Tensor, positions: Tensor, x: Tensor) -> Tensor:
        return keys(positions)  # (L, k)

    rule.__qualname__ = f"window_and_first({k}, first={first})"
    return rule


def moba(k: int, block: int) -> SelectionRule:
    """MoBA's selection, per head: the query's own block and the k / block - 1 earlier blocks of ``block`` keys
    whose mean-pooled key scores highest against the head's query (``helpers.selection.block_topk``)."""
    block_topk(torch.zeros(1, 1), k, block)  # refuses a k that is not a multiple of the block now

    def rule(layer: int, scores: Tensor, positions: Tensor, x: Tensor) -> Tensor:
        return block_topk(scores, k, block, positions)  # (N, h, L, k)

    rule.__qualname__ = f"moba({k}, block={block})"
    return rule


def indexer_top_k(indexers: Sequence[LightningIndexer], k: int) -> SelectionRule:
    """The k keys a layer's lightning indexer scores highest, shared by the layer's heads (DSA): the indexer of
    layer i reads that layer's input x and scores every key for every query; its scores are all it uses."""
    check_budget(k)
    if not all(isinstance(indexer, LightningIndexer) for indexer in indexers):
        raise TypeError("indexers must be one helpers.lightning_indexer.LightningIndexer per layer")

    def rule(layer: int, scores: Tensor, positions: Tensor, x: Tensor) -> Tensor:
        if layer >= len(indexers):
            raise ValueError(f"layer {layer} has no indexer: {len(indexers)} given, one per layer needed")
        if x.size(1) != scores.size(-1):
            raise ValueError("an indexer scores the keys from their inputs: use it in a prefill without a cache")
        index_scores = indexers[layer](x.to(next(indexers[layer].parameters()).dtype), positions)  # (N, L, S)
        return causal_topk(index_scores.to(scores.dtype), k, positions).unsqueeze(1)  # (N, 1, L, k)

    rule.__qualname__ = f"indexer_top_k({k})"
    return rule


# ---------------------------------------------------------------------------------------------
# Measurements
# ---------------------------------------------------------------------------------------------
def _check_ids(ids: Tensor, start: int) -> None:
    if not isinstance(ids, Tensor) or ids.dim() != 2:
        shape = tuple(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__
        raise ValueError(f"ids must be (N, T) token ids, got {shape}")
    if isinstance(start, bool) or not isinstance(start, int) or not 1 <= start < ids.size(1):
        raise ValueError(f"start must be an int in 1 .. T - 1 = {ids.size(1) - 1} (a token to predict), got {start!r}")


@torch.no_grad()
def mean_loss(model: GPT, ids: Tensor, rule: SelectionRule | None = None, start: int = 512) -> float:
    """ids (N, T) -> the mean next-token NLL of tokens start .. T - 1 (each predicted from those before it), in
    one prefill; every layer reads only the keys ``rule`` names (None: full causal attention)."""
    _check_ids(ids, start)
    if rule is None:
        logits = model(ids)
    else:
        with selected_attention(model, rule):
            logits = model(ids)
    predicted = logits[:, start - 1 : -1]  # (N, T - start, V): position t - 1 predicts token t
    predicted = predicted.to(torch.promote_types(predicted.dtype, torch.float32))  # half precision: summed wide
    return float(F.cross_entropy(predicted.transpose(1, 2), ids[:, start:]))


@torch.no_grad()
def recall_by_layer(model: GPT, ids: Tensor, rule: SelectionRule, start: int = 512) -> Tensor:
    """ids (N, T) -> (n_layers,): per layer, the share of its heads' attention mass that the keys ``rule``
    chooses hold, averaged over heads and the queries from ``start``. Measured in the *full* model (every layer
    attends as usual): how much of what the heads read a rule would keep, layer by layer, without the drift that
    a selection in earlier layers would add."""
    return recalls_by_layer(model, ids, {"rule": rule}, start)["rule"]


@torch.no_grad()
def recalls_by_layer(
    model: GPT, ids: Tensor, rules: Mapping[str, SelectionRule], start: int = 512
) -> dict[str, Tensor]:
    """``recall_by_layer`` of several rules from one forward pass: {name: (n_layers,)}."""
    _check_ids(ids, start)
    if not isinstance(rules, Mapping) or not rules:
        raise ValueError(f"rules must be a non-empty mapping from a name to a rule, got {rules!r:.80}")
    held: dict[str, dict[int, Tensor]] = {name: {} for name in rules}

    def weights(layer: int, scores: Tensor, may_attend: Tensor, positions: Tensor, x: Tensor) -> Tensor:
        full = _softmax_over(scores, may_attend)  # (N, h, L, S): what the layer reads, unchanged
        late = positions >= start  # (L,)
        for name, rule in rules.items():
            indices = _chosen(rule, layer, scores, positions, x)
            held[name][layer] = recall(full[:, :, late], indices[:, :, late]).mean()
        return full

    with _each_layer(model, weights):
        model(ids)
    return {name: torch.stack([by_layer[i] for i in range(len(by_layer))]) for name, by_layer in held.items()}


# ---------------------------------------------------------------------------------------------
# Lightning indexers trained by KL to the heads' summed attention (DSA's warm-up)
# ---------------------------------------------------------------------------------------------
@torch.no_grad()
def layer_targets(model: GPT, ids: Tensor) -> list[tuple[Tensor, Tensor]]:
    """ids (N, T) -> per layer (x (N, T, E), target (N, T, T)): the attention layer's input and the KL target,
    ``summed_attention`` of its heads' weights, from one forward with ``need_weights``."""
    _check_ids(ids, 1)
    cores = _softmax_layers(model)
    inputs: dict[int, Tensor] = {}
    handles = [
        core.register_forward_pre_hook(
            lambda module, args, kwargs, i=i: inputs.__setitem__(i, args[0] if args else kwargs["x"]),
            with_kwargs=True,
        )
        for i, core in cores.items()
    ]
    try:
        _, weights = model(ids, need_weights=True)
    finally:
        for handle in handles:
            handle.remove()
    return [(inputs[i], summed_attention(w)) for i, w in enumerate(weights)]


def indexer_kl(scores: Tensor, target: Tensor, positions: Tensor | None = None) -> Tensor:
    """KL(target ‖ softmax of ``scores`` over each query's causal keys), averaged over the N·L queries: DSA's
    warm-up loss. scores, target (N, L, S); ``positions`` (L,) the queries' positions (default the last L).

    Terms where the target is zero are zero (0 · log 0 = 0), so the future keys, which the target never reads,
    add nothing and give no NaN."""
    if not isinstance(scores, Tensor) or scores.dim() != 3 or not isinstance(target, Tensor):
        raise ValueError(f"scores must be (N, L, S), got {getattr(scores, 'shape', type(scores).__name__)}")
    if target.shape != scores.shape:
        raise ValueError(f"target must have the scores' shape {tuple(scores.shape)}, got {tuple(target.shape)}")
    L, S = scores.shape[-2:]
    where = torch.arange(S - L, S, device=scores.device) if positions is None else positions
    log_q = torch.log_softmax(scores.masked_fill(~_causal(where, S), float("-inf")), dim=-1)
    read = target > 0
    terms = torch.where(read, target * (target.where(read, 1.0).log() - log_q.where(read, 0.0)), 0.0)
    return terms.sum(-1).mean()


def _trained_indexer(
    captured: Sequence[tuple[Tensor, Tensor]], make: Callable[[], LightningIndexer], steps: int, lr: float, queries: int
) -> LightningIndexer:
    """One layer's indexer, trained alone by ``indexer_kl`` on its captured (x (1, T, E), target (1, T, T)) pairs,
    one text a step, ``queries`` random queries of it (every key scored for each): the cost of a step grows with
    the queries, and a few hundred give the gradient of the whole text's loss closely enough."""
    indexer = make()
    optimizer = torch.optim.AdamW(indexer.parameters(), lr=lr, weight_decay=0.0)
    for step in range(steps):
        x, target = captured[step % len(captured)]
        T = x.size(1)
        positions = torch.arange(T, device=x.device)
        rows = torch.randperm(T, device=x.device)[:queries].sort().values  # (q,), in order
        keys = indexer.index_keys(x, positions)  # (N, T, d)
        scores = indexer.index_scores(x[:, rows], keys, positions[rows])  # (N, q, T)
        loss = indexer_kl(scores, target[:, rows], positions[rows])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return indexer.eval()


def train_indexers(
    model: GPT,
    training_ids: Sequence[Tensor],
    heads: int = 4,
    dim: int = 64,
    rotary_dim: int | None = None,
    steps: int = 150,
    lr: float = 1e-3,
    queries: int = 256,
    seed: int = 0,
) -> list[LightningIndexer]:
    """One ``LightningIndexer`` (``heads`` ReLU heads of ``dim``, rotating ``rotary_dim`` of them by the layer's
    rotary base) per layer, trained by ``indexer_kl`` towards that layer's summed attention on ``training_ids``
    (a list of (1, T) texts), the model frozen: DSA's dense warm-up, layer by layer.

    Every layer's inputs and targets are captured once, with the model unchanged (``layer_targets``), so each
    layer's indexer trains alone on them: ``steps`` AdamW steps at ``lr``, one text and ``queries`` random
    queries a step. ``seed`` fixes each indexer's initial weights and its queries (layer i draws from
    seed · 10,000 + i), without touching the caller's random state."""
    cores = _softmax_layers(model)
    if not training_ids or not all(
        isinstance(ids, Tensor) and ids.dim() == 2 and ids.size(0) == 1 for ids in training_ids
    ):
        raise ValueError("training_ids must be a non-empty list of (1, T) token-id tensors, one text each")
    for name, value in (("steps", steps), ("queries", queries)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "steps" else 1):
            raise ValueError(f"{name} must be a {'non-negative' if name == 'steps' else 'positive'} int, got {value!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    captured = [layer_targets(model, ids) for ids in training_ids]  # per text, per layer (x, target)
    weight = model.lm_head.weight
    indexers = []
    for layer, core in cores.items():

        def make(base: float = float(getattr(core, "rotary_base", 10000.0) or 10000.0)) -> LightningIndexer:
            indexer = LightningIndexer(model.config.embed_dim, heads, dim, rotary_dim=rotary_dim, rotary_base=base)
            return indexer.to(dtype=weight.dtype, device=weight.device)

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed * 10_000 + layer)
            layer_data = [(text[layer][0].detach(), text[layer][1].detach()) for text in captured]
            indexers.append(_trained_indexer(layer_data, make, steps, lr, queries))
    return indexers
