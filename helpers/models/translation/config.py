"""One dataclass for everything that decides a translation model's size and how it is trained.

Its size fields have the names of ``GPTConfig`` and ``nn.MultiheadAttention`` (the README's notation): ``embed_dim``
(E), ``num_heads`` (h), ``ff_dim`` (F), ``num_encoder_layers`` and ``num_decoder_layers`` (n_layers of each
stack). The names of earlier versions (``d_model``, ``heads``, ``feedforward``, ``encoder_layers``,
``decoder_layers``) are still accepted, with a ``DeprecationWarning``, as keywords, as attributes and in the
config dicts of checkpoints those versions saved.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from helpers.tools.renames import accepting_old_names, renamed_fields

#: Old field name -> the name it has now (one vocabulary with GPTConfig and the README's notation).
RENAMED_FIELDS = {
    "d_model": "embed_dim",
    "heads": "num_heads",
    "feedforward": "ff_dim",
    "encoder_layers": "num_encoder_layers",
    "decoder_layers": "num_decoder_layers",
    "tie_output_embedding": "tie_embeddings",  # GPTConfig's name for the same tie
}


@accepting_old_names(RENAMED_FIELDS)
@dataclass
class TranslationConfig:
    """Model size and training settings, saved inside every checkpoint.

    The defaults are lesson 06's model and training (``LESSON_CONFIG``, measured in ``benchmarks/RESULTS.md``):
    small (about 0.2 M parameters) because on the course's regular corpus the number of training steps a CPU
    can take in a minute, not the size of the model, is what buys quality. Larger corpora change the fields
    they need (see the command line's ``multi30k`` preset).
    """

    # --- tokenizers (one per language) ---
    tokenizer: str = "word"  # "word" or "bpe"
    vocab_size: int = 8000  # upper bound; a word-level vocabulary of the course corpus is far smaller
    # --- model ---
    embed_dim: int = 64  # E (nn.Transformer's d_model)
    num_heads: int = 4  # h (nn.Transformer's nhead), so d = E / h = 16
    num_encoder_layers: int = 1  # n_layers of the encoder
    num_decoder_layers: int = 2  # n_layers of the decoder
    ff_dim: int = 128  # F, the feed-forward block's hidden width (nn.Transformer's dim_feedforward)
    dropout: float = 0.0
    norm_first: bool = False  # pre-norm (LayerNorm before each sub-block) instead of the original post-norm
    # One (V, E) table for the target embedding and the output layer, as the original transformer has: each row
    # learns from a word's uses as input and as output, and there are V x E fewer weights to fit in a short run.
    tie_embeddings: bool = False
    max_len: int = 128  # longest sequence (in tokens, with BOS/EOS) the positional table holds
    # --- training ---
    steps: int = 2000  # optimiser steps, unless a time budget or an epoch count is given
    # Padded positions per batch, as make_batches budgets them: N pairs whose longest source has S tokens and
    # longest target T tokens take N * max(S, T) <= batch_tokens (not source + target: the two are not added).
    batch_tokens: int = 600
    lr: float = 8e-3  # peak learning rate after warm-up
    warmup_steps: int = 150
    min_lr_ratio: float = 0.05  # the learning rate decays (cosine) to this fraction of the peak
    weight_decay: float = 0.01
    label_smoothing: float = 0.1
    clip_norm: float = 1.0
    eval_every: int = 0  # validate every this many steps (0: only at the end); the best weights are kept
    val_sentences: int = 200  # validate BLEU on at most this many validation sentences
    seed: int = 0

    def __post_init__(self) -> None:
        if self.embed_dim % self.num_heads:
            raise ValueError(f"embed_dim ({self.embed_dim}) must be divisible by num_heads ({self.num_heads})")
        if self.tokenizer not in ("word", "bpe"):
            raise ValueError(f"tokenizer must be 'word' or 'bpe', got {self.tokenizer!r}")
        sizes = (
            "embed_dim",
            "num_heads",
            "num_encoder_layers",
            "num_decoder_layers",
            "ff_dim",
            "max_len",
            "batch_tokens",
        )
        for name in sizes:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    def to_dict(self) -> dict[str, Any]:
        """Plain Python values only, so a checkpoint can hold it under ``weights_only=True``."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TranslationConfig:
        """Rebuild a config, rejecting names it does not know (a foreign or newer checkpoint).

        A dict saved by an earlier version, with the old field names (``d_model``, ``heads``, ...), is read
        with a ``DeprecationWarning``.
        """
        values = renamed_fields("TranslationConfig", RENAMED_FIELDS, values)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown TranslationConfig fields {unknown}; known fields are {sorted(known)}")
        return cls(**values)


#: Lesson 06's model and training settings (the defaults, named), also the command line's ``captions`` preset
#: (with validation every 500 steps there). How they were chosen, by measuring: benchmarks/RESULTS.md, section
#: "Translation". The lesson trains ``LESSON_STEPS`` steps, never for a time budget.
LESSON_CONFIG = TranslationConfig()
LESSON_STEPS = LESSON_CONFIG.steps
