"""Saving and loading a trained translator: weights, config, both tokenizers and metrics in one file.

The file is a ``torch.save`` of plain values only (tensors, str, numbers, lists, dicts), so it loads
with ``torch.load(..., weights_only=True)``: opening a checkpoint never runs code from the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from helpers.files import atomic_target
from helpers.tokenization import Tokenizer
from helpers.translation.config import TranslationConfig
from helpers.translation.model import Seq2SeqTransformer
from helpers.translation.translator import Translator

FORMAT = "attention-course translation checkpoint"
VERSION = 1


class CheckpointError(ValueError):
    """A file that is not a usable translation checkpoint (truncated, foreign, or inconsistent)."""


def save_checkpoint(
    path: str | Path, translator: Translator, metrics: dict[str, Any] | None = None, info: dict[str, Any] | None = None
) -> Path:
    """Write ``translator`` (and ``metrics``, ``info``: plain values) to ``path``, atomically.

    The file is written under a temporary name in the same folder and renamed into place only when
    complete, so an interrupted save never leaves a half-written checkpoint under the real name.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": FORMAT,
        "version": VERSION,
        "config": translator.model.config.to_dict(),
        "weights": {name: tensor.detach().cpu() for name, tensor in translator.model.state_dict().items()},
        "source_tokenizer": translator.source_tokenizer.to_json(),
        "target_tokenizer": translator.target_tokenizer.to_json(),
        "metrics": dict(metrics or {}),
        "info": dict(info or {}),
    }
    with atomic_target(path) as temporary:  # readable by everyone the umask allows: a class shares it
        torch.save(payload, temporary)
    return path


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The checkpoint's contents as plain values, checked to be ours; raises :class:`CheckpointError`."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch.load fails in many ways on a cut-off or foreign file: name them all one way
        raise CheckpointError(
            f"{path} is not a readable checkpoint (truncated, corrupt, or not written by torch.save "
            f"with plain values): {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        ) from error
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        found = sorted(payload)[:8] if isinstance(payload, dict) else type(payload).__name__
        raise CheckpointError(
            f"{path} is not a translation checkpoint: expected a dict with format {FORMAT!r} "
            f"(written by helpers.translation.save_checkpoint), found {found}"
        )
    if payload.get("version") != VERSION:
        raise CheckpointError(
            f"{path}: checkpoint version {payload.get('version')} is not supported (expected {VERSION})"
        )
    missing = [key for key in ("config", "weights", "source_tokenizer", "target_tokenizer") if key not in payload]
    if missing:
        raise CheckpointError(f"{path}: checkpoint lacks {missing}")
    return payload


def load_checkpoint(path: str | Path, device: torch.device | str | None = None) -> tuple[Translator, dict[str, Any]]:
    """Rebuild the translator saved at ``path``; returns it (in eval mode) and the checkpoint's contents."""
    payload = read_checkpoint(path)
    try:
        config = TranslationConfig.from_dict(payload["config"])
        source = Tokenizer.from_json(payload["source_tokenizer"])
        target = Tokenizer.from_json(payload["target_tokenizer"])
        model = Seq2SeqTransformer(config, source.vocab_size, target.vocab_size)
        model.load_state_dict(payload["weights"])
    except (ValueError, TypeError, KeyError, RuntimeError) as error:
        raise CheckpointError(f"{path}: inconsistent checkpoint: {error}") from error
    model.to(device or "cpu").eval()
    return Translator(model, source, target), payload
