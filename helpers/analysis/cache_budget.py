"""MHA, GQA, MQA and MLA trained side by side on lesson 10's repeated-token task (lesson 11).

Four small GPTs that differ only in their attention: multi-head (h key/value heads), grouped-query (h_kv),
multi-query (one) and multi-head latent attention (a latent of d_c numbers and a decoupled rotary key of d_R).
Each is trained for a fixed number of steps on random tokens with one segment repeated
(``helpers.analysis.circuits.repeated_batch``); what is recorded is lesson 10's: the loss on the predictable
tokens and every head's induction and previous-token scores, every ``every`` steps, plus what the attention
costs: cache numbers per token and layer, and training tokens per second.

Shapes (course notation): N sequences, T tokens, E embedding size, h heads, d = E / h, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from helpers.analysis.circuits import PhaseChange, repeated_loss, train_on_repeated_batches
from helpers.gpt import GPT, GPTConfig
from helpers.latent_attention import LatentConfig, latent_gpt

__all__ = ["KINDS", "TrainedVariant", "build_variant", "cache_numbers_per_layer", "train_repeated"]

KINDS = ("MHA", "GQA", "MQA", "MLA")


def build_variant(
    kind: str,
    vocab_size: int,
    embed_dim: int = 32,
    num_heads: int = 4,
    num_layers: int = 2,
    ff_dim: int = 64,
    num_kv_heads: int = 2,
    latent_dim: int = 12,
    rotary_dim: int = 4,
) -> GPT:
    """A small rotary GPT whose attention is ``kind``: "MHA" (h key/value heads), "GQA" (``num_kv_heads``),
    "MQA" (one) or "MLA" (every layer of kind "latent", ``latent_gpt``, with d_c = ``latent_dim``, d_R =
    ``rotary_dim``, d = E / h).
    Everything else (embeddings, LayerNorm, GELU feed-forward, read-out) is the same."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    h_kv = {"MHA": num_heads, "GQA": num_kv_heads, "MQA": 1, "MLA": num_heads}[kind]
    config = GPTConfig(
        vocab_size=vocab_size, embed_dim=embed_dim, num_heads=num_heads, num_kv_heads=h_kv,
        num_layers=num_layers, ff_dim=ff_dim, positions="rotary",
    )  # fmt: skip
    if kind != "MLA":
        return GPT(config)
    latent = LatentConfig(
        embed_dim=embed_dim, num_heads=num_heads, head_dim=embed_dim // num_heads, latent_dim=latent_dim,
        rotary_dim=rotary_dim,
    )  # fmt: skip
    return latent_gpt(config, latent)


def cache_numbers_per_layer(model: GPT) -> int:
    """Numbers one token adds to one layer's cache: 2·h_kv·d for a softmax layer, d_c + d_R for a latent one
    (each layer's kind counts its own, ``cache_numbers_per_token``; the model's layers must agree)."""
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a helpers.gpt.GPT, got {type(model).__name__}")
    numbers = {layer.cache_numbers_per_token() for layer in model.attention_layers}
    if len(numbers) != 1:
        raise ValueError(
            f"the model's layers cache different numbers per token ({sorted(numbers)}): count them by layer"
        )
    return numbers.pop()


@dataclass
class TrainedVariant:
    """What ``train_repeated`` measured: the ``history`` (lesson 10's ``PhaseChange``), the seconds spent in
    training steps alone (evaluations excluded) and the training tokens per second they give."""

    history: PhaseChange
    train_seconds: float
    tokens_per_second: float
    final_loss: float = field(default=float("nan"))


def train_repeated(
    model: GPT,
    steps: int,
    seq_len: int = 32,
    lengths: tuple[int, int] = (4, 12),
    batch_size: int = 32,
    lr: float = 3e-3,
    seed: int = 0,
    every: int = 50,
    eval_size: int = 256,
    progress: str | None = None,
) -> TrainedVariant:
    """Train on fresh repeated batches for ``steps`` AdamW steps, the loss on the predictable tokens only (as
    lesson 10's ``repeated_only``); measure on one fixed batch every ``every`` steps and at the end. The batches
    depend on ``seed`` alone, so every variant sees the same data. ``progress``: a label to print a line under at
    every tenth of the steps. The model is left in eval mode."""
    history, seconds = train_on_repeated_batches(
        model, steps, seq_len, model.config.vocab_size, lengths, batch_size, lr, seed, every, eval_size, repeated_loss,
        progress,
    )  # fmt: skip
    tokens = steps * batch_size * seq_len
    return TrainedVariant(history, seconds, tokens / seconds if seconds else float("nan"), history.loss[-1])
