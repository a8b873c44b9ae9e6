"""Reading a decoder's residual stream (lesson 12): the logit lens and direct logit attribution.

In a pre-norm decoder (``helpers.gpt.GPT``, lesson 09's SmolLM2) the residual stream is a sum: the token
embedding, plus every layer's attention output, plus every layer's feed-forward (MLP) output. The logits are
``lm_head(norm(x))`` of the last residual x. Two ways to ask "where does the answer come from":

* the **logit lens** reads every intermediate residual as if it were the last: through the final norm and the
  output layer. When a metric (the IOI logit difference) jumps from one layer to the next, that layer wrote it.
* **direct logit attribution** (DLA) splits the last residual into its parts — the embedding, each head's
  output (its slice of the output projection), each MLP — and asks how much each part alone pushes the metric.
  The final norm is not linear: it divides by the root mean square of the *whole* residual. Freezing that scale
  at the value the full residual has makes it linear, so the parts then add up exactly to the metric. (Recomputing
  the scale for each part alone is a common mistake: the parts then no longer add up.)

Both work on any ``helpers.gpt.GPT`` (RMSNorm or LayerNorm; for LayerNorm each part is also centred, and its
bias is a part of its own). Shapes: N prompts, T tokens, E embedding size, h heads, d head size, n_layers layers,
V vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor, nn

from helpers.analysis.circuits import record_head_outputs
from helpers.analysis.ioi import IOIBatch
from helpers.attention import unflatten_heads
from helpers.gpt import GPT, CausalSelfAttention, DecoderBlock
from helpers.norms import RMSNorm
from helpers.rotary import rotary_cos_sin, rotate_pairs

__all__ = [
    "Attribution",
    "ScoreAttribution",
    "direct_logit_attribution",
    "logit_lens",
    "query_attribution",
    "residual_stream",
]


def _check_model(model) -> None:
    if not isinstance(model, GPT):
        raise TypeError(f"expected a helpers.gpt.GPT (e.g. lesson 09's SmolLM2), got {type(model).__name__}")


def _blocks(model: GPT) -> list[DecoderBlock]:
    """The model's decoder blocks, in order. nn.ModuleList yields plain Modules to a type checker, whose
    attributes read as ``Tensor | Module``; GPT builds its list from DecoderBlocks only."""
    return cast(list[DecoderBlock], list(model.blocks))


def _attentions(model: GPT) -> list[CausalSelfAttention]:
    """Each block's softmax attention, in order. Attribution reads each head's weights and projections, which a
    "linear" or "delta" layer (a recurrent state, lesson 14) does not have: such a model is refused by name."""
    attentions = [block.attention for block in _blocks(model)]
    others = [i for i, attention in enumerate(attentions) if not isinstance(attention, CausalSelfAttention)]
    if others:
        raise ValueError(f"attribution reads softmax attention heads; layers {others} are of another kind")
    return cast(list[CausalSelfAttention], attentions)


@contextmanager
def _recording(model: GPT) -> Iterator[dict[str, list[Tensor]]]:
    """Inside the block, every forward pass records the residual entering each block and the final norm
    ("residual": n_layers + 1 tensors (N, T, E)) and each block's MLP output ("mlp": n_layers tensors (N, T, E))."""
    recorded: dict[str, list[Tensor]] = {"residual": [], "mlp": []}
    handles = [module.register_forward_pre_hook(lambda _, args: recorded["residual"].append(args[0].detach()))
               for module in [*_blocks(model), model.norm]]  # fmt: skip
    handles += [
        block.feed_forward.register_forward_hook(lambda _, __, out: recorded["mlp"].append(out.detach()))
        for block in _blocks(model)
    ]
    try:
        yield recorded
    finally:
        for handle in handles:
            handle.remove()


@torch.no_grad()
def residual_stream(model: GPT, ids: Tensor) -> Tensor:
    """The residual entering each block and, last, the final norm: (n_layers + 1, N, T, E). Entry 0 is the
    token embedding; entry l + 1 is entry l plus block l's attention and MLP outputs."""
    _check_model(model)
    with _recording(model) as recorded:
        model(ids)
    return torch.stack(recorded["residual"])


def _direction(model: GPT, batch: IOIBatch) -> Tensor:
    """W_U[IO] − W_U[S] for each prompt, (N, E): the direction in the final norm's output that the logit
    difference reads."""
    weight = model.lm_head.weight  # (V, E)
    return weight[batch.io] - weight[batch.s]


@torch.no_grad()
def logit_lens(model: GPT, batch: IOIBatch, per_prompt: bool = False) -> Tensor:
    """The logit difference read from each residual at END, as if the model stopped there: the final norm
    (its scale computed for that residual) and the output layer. (n_layers + 1,) means over the prompts, or
    (n_layers + 1, N) with ``per_prompt``; the last entry is the model's own logit difference."""
    _check_model(model)
    residuals = residual_stream(model, batch.ids)[:, :, -1]  # (n_layers + 1, N, E) at END
    read = (model.norm(residuals) * _direction(model, batch)).sum(-1)  # (n_layers + 1, N)
    return read if per_prompt else read.mean(dim=1)


@dataclass
class Attribution:
    """Each part's direct push on the logit difference (means over prompts): ``embedding`` (a number),
    ``heads`` (n_layers, h), ``mlps`` (n_layers,), ``bias`` (the final LayerNorm's bias; 0 for RMSNorm) and
    ``total``, the model's logit difference, which the parts add up to."""

    embedding: Tensor
    heads: Tensor
    mlps: Tensor
    bias: Tensor
    total: Tensor

    def parts_sum(self) -> Tensor:
        return self.embedding + self.heads.sum() + self.mlps.sum() + self.bias


def _frozen_norm(norm: nn.Module, full: Tensor):
    """The final norm made linear at the full residual ``full`` (N, E): a function of one part (..., N, E) and
    the part of the output that does not come from the residual (the LayerNorm bias)."""
    if isinstance(norm, RMSNorm):
        scale = torch.rsqrt(full.pow(2).mean(-1, keepdim=True) + norm.eps)  # (N, 1): the whole residual's
        return (lambda part: part * scale * norm.weight), torch.zeros_like(full)
    if isinstance(norm, nn.LayerNorm):
        scale = torch.rsqrt(full.var(-1, keepdim=True, unbiased=False) + norm.eps)
        centred = lambda part: part - part.mean(-1, keepdim=True)  # noqa: E731 (centring is linear too)
        bias = norm.bias.expand_as(full) if norm.bias is not None else torch.zeros_like(full)
        return (lambda part: centred(part) * scale * norm.weight), bias
    raise TypeError(f"direct logit attribution knows RMSNorm and LayerNorm, not {type(norm).__name__}")


@torch.no_grad()
def direct_logit_attribution(model: GPT, batch: IOIBatch, per_prompt: bool = False) -> Attribution:
    """Split the logit difference at END over the embedding, every head and every MLP (the final norm's scale
    frozen at the full residual's, so that the parts add up exactly). Means over prompts, or each part with a
    last dim N with ``per_prompt``.

    A head's part is its output at END through its own d columns of its layer's output projection: head k of
    layer l writes ``out_proj.weight[:, k·d:(k+1)·d] @ o_k`` into the residual (the GPT's attention has no
    biases, so the heads' writes are the whole attention output)."""
    _check_model(model)
    projections = [attention.projections.out_proj for attention in _attentions(model)]
    h = model.config.num_heads
    with _recording(model) as recorded, record_head_outputs(projections, h) as heads_out:
        logits = model(batch.ids)
    full = recorded["residual"][-1][:, -1]  # (N, E): the residual the final norm sees at END
    linear, bias = _frozen_norm(model.norm, full)
    direction = _direction(model, batch)  # (N, E)

    def push(part: Tensor) -> Tensor:  # (..., N, E) -> (..., N)
        return (linear(part) * direction).sum(-1)

    embedding = push(recorded["residual"][0][:, -1])
    mlps = push(torch.stack([m[:, -1] for m in recorded["mlp"]]))  # (n_layers, N)
    weights = torch.stack([unflatten_heads(p.weight, h) for p in projections])  # (n_layers, E, h, d)
    outputs = torch.stack([o[:, -1] for o in heads_out])  # (n_layers, N, h, d) at END
    written = torch.einsum("lnhd,lehd->lhne", outputs, weights)  # (n_layers, h, N, E): each head's write
    heads = push(written)  # (n_layers, h, N)
    rows = torch.arange(full.size(0))
    total = logits[rows, -1, batch.io] - logits[rows, -1, batch.s]
    final_bias = (bias * direction).sum(-1)
    parts = Attribution(embedding, heads, mlps, final_bias, total)
    if per_prompt:
        return parts
    return Attribution(*(t.mean(dim=-1) for t in (embedding, heads, mlps, final_bias, total)))


@dataclass
class ScoreAttribution:
    """One receiver head's score difference, split over the parts of the residual that make its query (means over
    prompts, or with a last dim N): ``embedding``, ``heads`` (layer, h) for the receiver's earlier layers, ``mlps``
    (layer,), ``bias`` (the receiver's pre-attention LayerNorm bias; 0 for RMSNorm) and ``total``, the score
    difference the model computed, which the parts add up to. Scores are pre-softmax, q·k / √d."""

    embedding: Tensor
    heads: Tensor
    mlps: Tensor
    bias: Tensor
    total: Tensor

    def parts_sum(self) -> Tensor:
        return self.embedding + self.heads.sum(dim=(0, 1)) + self.mlps.sum(dim=0) + self.bias


def _at(x: Tensor, positions: Tensor) -> Tensor:
    """x (N, T, ...) read at one position per prompt, positions (N,) -> (N, ...)."""
    return x[torch.arange(x.size(0)), positions]


def _per_prompt_positions(value, N: int, T: int, name: str) -> Tensor:
    positions = torch.full((N,), value) if isinstance(value, int) else torch.as_tensor(value)
    if positions.shape != (N,) or positions.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"{name} must be an int or an (N,) = ({N},) tensor of positions, got {value!r}")
    if bool((positions < 0).any()) or bool((positions >= T).any()):
        raise ValueError(f"{name} must be positions in 0 .. {T - 1}, got {positions.tolist()}")
    return positions.long()


@torch.no_grad()
def query_attribution(
    model: GPT,
    ids: Tensor,
    receiver: tuple[int, int],
    query_position,
    keys: tuple,
    per_prompt: bool = False,
) -> ScoreAttribution:
    """Split query head ``receiver`` = (layer L, head k)'s score for key position ``keys[0]`` minus its score for
    ``keys[1]``, both from ``query_position``, over the parts of the residual entering layer L there: the
    embedding, every head of layers 0 .. L − 1 and every MLP before L (lesson 12: a name mover's score for S2
    minus its score for the IO, from END).

    ids (N, T); positions are ints (one for every prompt) or (N,) tensors. The keys are the clean run's, as the
    model computed them (rotated at their positions; query head k reads key/value head k // g); only the query is
    split. The query is linear in the residual once block L's first norm has its scale frozen at the full
    residual's value (as direct logit attribution freezes the final norm's): each part goes through that frozen
    norm, W_Q's rows of head k and the rotation at the query's position, so the parts add up to the score
    difference exactly. Returns a ``ScoreAttribution``, means over the prompts unless ``per_prompt``."""
    _check_model(model)
    if ids.dim() != 2:
        raise ValueError(f"ids must be token ids (N, T), got shape {tuple(ids.shape)}")
    N, T = ids.shape
    config = model.config
    layer, head = receiver
    if not (isinstance(layer, int) and 0 < layer < config.num_layers and isinstance(head, int)):
        raise ValueError(f"receiver must be (layer, head) with a layer in 1 .. {config.num_layers - 1}, got {receiver}")
    if not 0 <= head < config.num_heads:
        raise ValueError(f"receiver head must be in 0 .. {config.num_heads - 1}, got {head}")
    if not (isinstance(keys, tuple | list) and len(keys) == 2):
        raise ValueError(f"keys must be two key positions (the score of the first minus the second's), got {keys!r}")
    query_at = _per_prompt_positions(query_position, N, T, "query_position")
    first, second = (_per_prompt_positions(p, N, T, "a key position") for p in keys)
    if bool((first > query_at).any()) or bool((second > query_at).any()):
        raise ValueError("a causal query reads only keys at or before it: every key position must be <= the query's")
    block = _blocks(model)[layer]
    attentions = _attentions(model)
    projections = [a.projections.out_proj for a in attentions[:layer]]
    h, d = config.num_heads, config.head_dim
    with _recording(model) as recorded, record_head_outputs(projections, h) as heads_out:
        model(ids)
    full = _at(recorded["residual"][layer], query_at)  # (N, E): the residual block L's norm sees at the query
    linear, bias = _frozen_norm(block.norm1, full)
    p = attentions[layer].projections
    w_q = p.q_proj.weight[head * d : (head + 1) * d]  # (d, E): head k's rows of W_Q (no bias in the GPT)
    if config.positions == "rotary":
        positions = torch.arange(T)
        cos, sin = rotary_cos_sin(positions, d, config.rotary_base, full.dtype)  # (T, d / 2)

        def rotate(x: Tensor, at: Tensor) -> Tensor:  # (..., N, d) at (N,) positions: rotation is linear
            return rotate_pairs(x[..., None, :], cos[at][:, None], sin[at][:, None])[..., 0, :]
    else:

        def rotate(x: Tensor, at: Tensor) -> Tensor:
            return x

    # The keys, as the model computes them: block L's norm of the residual at each key position, W_K's rows of
    # key/value head k // g, rotated at that position.
    kv = head // (h // config.num_kv_heads)
    w_k = p.k_proj.weight[kv * d : (kv + 1) * d]  # (d, E)

    def key(at: Tensor) -> Tensor:
        return rotate(block.norm1(_at(recorded["residual"][layer], at)) @ w_k.T, at)  # (N, d)

    difference = (key(first) - key(second)) / d**0.5  # (N, d): the score difference reads the query along this

    def push(part: Tensor) -> Tensor:  # (..., N, E) -> (..., N)
        return (rotate(linear(part) @ w_q.T, query_at) * difference).sum(-1)

    embedding = push(_at(recorded["residual"][0], query_at))
    mlps = push(torch.stack([_at(m, query_at) for m in recorded["mlp"][:layer]]))  # (L, N)
    weights = torch.stack([o.weight.view(o.out_features, h, d) for o in projections])  # (L, E, h, d)
    outputs = torch.stack([_at(o, query_at) for o in heads_out])  # (L, N, h, d)
    heads = push(torch.einsum("lnhd,lehd->lhne", outputs, weights))  # (L, h, N)
    query = rotate(block.norm1(full) @ w_q.T, query_at)  # (N, d): the query the model computed
    total = (query * difference).sum(-1)
    score_bias = (rotate(bias @ w_q.T, query_at) * difference).sum(-1)
    parts = ScoreAttribution(embedding, heads, mlps, score_bias, total)
    if per_prompt:
        return parts
    return ScoreAttribution(*(t.mean(dim=-1) for t in (embedding, heads, mlps, score_bias, total)))
