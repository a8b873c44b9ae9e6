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

import torch
from torch import Tensor, nn

from helpers.analysis.circuits import record_head_outputs
from helpers.analysis.ioi import IOIBatch
from helpers.attention import unflatten_heads
from helpers.gpt import GPT
from helpers.norms import RMSNorm

__all__ = ["Attribution", "direct_logit_attribution", "logit_lens", "residual_stream"]


def _check_model(model) -> None:
    if not isinstance(model, GPT):
        raise TypeError(f"expected a helpers.gpt.GPT (e.g. lesson 09's SmolLM2), got {type(model).__name__}")


@contextmanager
def _recording(model: GPT) -> Iterator[dict[str, list[Tensor]]]:
    """Inside the block, every forward pass records the residual entering each block and the final norm
    ("residual": n_layers + 1 tensors (N, T, E)) and each block's MLP output ("mlp": n_layers tensors (N, T, E))."""
    recorded: dict[str, list[Tensor]] = {"residual": [], "mlp": []}
    handles = [module.register_forward_pre_hook(lambda _, args: recorded["residual"].append(args[0].detach()))
               for module in [*model.blocks, model.norm]]  # fmt: skip
    handles += [
        block.feed_forward.register_forward_hook(lambda _, __, out: recorded["mlp"].append(out.detach()))
        for block in model.blocks
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
    projections = [block.attention.projections.out_proj for block in model.blocks]
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
