"""Saving and loading a trained translator: weights, config, both tokenizers and metrics in one file.

The file is a ``torch.save`` of plain values only (tensors, str, numbers, lists, dicts), so it loads
with ``torch.load(..., weights_only=True)``: opening a checkpoint never runs code from the file. Nor can a
crafted config make loading allocate more than the file holds: its sizes are bounded (``CONFIG_LIMITS``), so is
the model's parameter count (``MAX_PARAMETERS``), and the model it describes is first built without memory (on
PyTorch's ``meta`` device) and compared, tensor by tensor, with the weights actually stored, before the real model
is built. Each stored tensor must also hold its own numbers: a tensor of stride 0 (or otherwise overlapping) has a
shape of millions of numbers on a storage of a few bytes, so shapes alone would let a small file describe a model
of any size. And each must hold finite numbers: one NaN weight loads silently and turns every translation into
the same garbage (the GGUF reader of lesson 09 refuses such a tensor too).
"""

from __future__ import annotations

import io
import pickle
import re
from pathlib import Path
from typing import Any

import torch

from helpers.data.tokenization import Tokenizer
from helpers.models.translation.config import TranslationConfig
from helpers.models.translation.model import Seq2SeqTransformer
from helpers.models.translation.translator import Translator
from helpers.tools.files import atomic_target

FORMAT = "attention-course translation checkpoint"
VERSION = 1


#: Largest model sizes a checkpoint may describe (far above anything a CPU course trains). Checked before the
#: model is built, so a crafted config cannot ask for gigabytes (the positional table, max_len x embed_dim, is
#: computed rather than stored, so it is bounded here alone).
CONFIG_LIMITS = {
    "embed_dim": 4096,
    "num_heads": 128,
    "num_encoder_layers": 48,
    "num_decoder_layers": 48,
    "ff_dim": 32768,
    "max_len": 8192,
    "vocab_size": 1_000_000,
}


#: Most parameters a checkpoint's model may have (4 GB of float32): over a hundred times the multi30k preset, and far
#: below what a crafted file of repeated (stride-0) tensors could describe within ``CONFIG_LIMITS`` (35 G).
MAX_PARAMETERS = 1_000_000_000


class CheckpointError(ValueError):
    """A file that is not a usable translation checkpoint (truncated, foreign, or inconsistent)."""


def save_checkpoint(
    path: str | Path,
    translator: Translator,
    metrics: dict[str, Any] | None = None,
    info: dict[str, Any] | None = None,
    training: dict[str, Any] | None = None,
) -> Path:
    """Write ``translator`` (and ``metrics``, ``info``: plain values) to ``path``, atomically.

    ``training``: the state of an unfinished run (optimiser, step, data position, history; see
    :func:`helpers.models.translation.training.train`), which makes the file a resume checkpoint.

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
    if training is not None:
        payload["training"] = training
    with atomic_target(path) as temporary:  # readable by everyone the umask allows: a class shares it
        torch.save(payload, temporary)
    return path


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The checkpoint's contents as plain values, checked to be ours; raises :class:`CheckpointError`."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"{path} is a folder; expected a checkpoint file written by `train --out`")
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        data = path.read_bytes()  # read first, so that a permission problem is reported as one, not as corruption
    except OSError as error:
        raise CheckpointError(f"cannot read checkpoint {path}: {error.strerror or error}") from error
    try:
        payload = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        # torch's own message advises retrying with weights_only=False, i.e. running code from the file: not ours.
        found = re.search(r"GLOBAL (\S+)", str(error))
        raise CheckpointError(
            f"{path} is refused: it holds Python objects{f' ({found.group(1)})' if found else ''}, not only plain "
            "values (tensors, numbers, strings, lists, dicts), so it was not written by save_checkpoint and "
            "loading it could run code from the file"
        ) from None
    except Exception as error:  # torch.load fails in many ways on a cut-off or foreign file: name them all one way
        raise CheckpointError(
            f"{path} is not a readable checkpoint (truncated, corrupt, or not written by torch.save "
            f"with plain values): {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        ) from error
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        held = sorted(map(str, payload))[:8] if isinstance(payload, dict) else type(payload).__name__
        raise CheckpointError(
            f"{path} is not a translation checkpoint: expected a dict with format {FORMAT!r} "
            f"(written by helpers.models.translation.save_checkpoint), found {held}"
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
        _check_sizes(config, source.vocab_size, target.vocab_size, payload["weights"])
        model = Seq2SeqTransformer(config, source.vocab_size, target.vocab_size)
        model.load_state_dict(payload["weights"])
    except (ValueError, TypeError, KeyError, RuntimeError) as error:
        raise CheckpointError(f"{path}: inconsistent checkpoint: {error}") from error
    model.to(device or "cpu").eval()
    return Translator(model, source, target), payload


def _check_sizes(config: TranslationConfig, source_vocab: int, target_vocab: int, weights: Any) -> None:
    """Refuse a config larger than ``CONFIG_LIMITS`` or one whose model does not match the stored weights.

    The model is built on the ``meta`` device (shapes only, no memory) and each of its tensors is compared
    with the stored one, so the real model is built only when the file holds every number it needs.
    """
    sizes = {name: getattr(config, name) for name in CONFIG_LIMITS if name != "vocab_size"}
    sizes |= {"source vocabulary": source_vocab, "target vocabulary": target_vocab}
    for name, value in sizes.items():
        limit = CONFIG_LIMITS.get(name, CONFIG_LIMITS["vocab_size"])
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= limit:
            raise ValueError(f"{name} {value!r} is outside 1..{limit:,}; refusing to build such a model")
    if not isinstance(weights, dict) or not all(isinstance(t, torch.Tensor) for t in weights.values()):
        raise ValueError("the weights must be a dict of tensors")
    with torch.device("meta"):
        described = Seq2SeqTransformer(config, source_vocab, target_vocab)
    if described.num_parameters() > MAX_PARAMETERS:
        raise ValueError(
            f"the config describes a model of {described.num_parameters():,} parameters, more than the "
            f"{MAX_PARAMETERS:,} a checkpoint may hold; refusing to build it"
        )
    check_state_dict(weights, described.state_dict(), "the stored weight")


def check_state_dict(stored: Any, expected: dict[str, torch.Tensor], what: str) -> None:
    """Raise ValueError unless ``stored`` has a tensor of ``expected``'s shape under each of its names, each holding
    its own numbers (:func:`check_dense`), all finite (:func:`check_finite`). ``what`` names the stored tensors in
    the message."""
    if not isinstance(stored, dict):
        raise ValueError(f"{what}s must be a dict of tensors, got {type(stored).__name__}")
    for name, tensor in expected.items():
        found = stored.get(name)
        if not isinstance(found, torch.Tensor) or found.shape != tensor.shape:
            shape = "missing" if found is None else f"of shape {tuple(found.shape)}"
            shape = shape if found is None or isinstance(found, torch.Tensor) else f"a {type(found).__name__}"
            raise ValueError(f"the config describes {name} of shape {tuple(tensor.shape)}, but {what} is {shape}")
        check_dense(found, f"{what} {name}")
        check_finite(found, f"{what} {name}")


def check_finite(tensor: torch.Tensor, what: str) -> None:
    """Raise ValueError if ``tensor`` holds a NaN or an infinity: such a weight loads without complaint, and a
    single one makes every output NaN (or the same token everywhere) with nothing to say why."""
    if not (tensor.is_floating_point() or tensor.is_complex()):
        return  # integers (a step count, token ids) are always finite
    finite = torch.isfinite(tensor)
    if not bool(finite.all()):
        nan, total = int(torch.isnan(tensor).sum()), int((~finite).sum())
        raise ValueError(
            f"{what} holds {nan:,} NaN and {total - nan:,} infinite numbers among its {tensor.numel():,}; expected "
            "finite weights (the run that wrote it had diverged, or the file is damaged)"
        )


def check_dense(tensor: torch.Tensor, what: str) -> None:
    """Raise ValueError unless ``tensor``'s storage holds at least its ``numel`` numbers (not a stride-0 view).

    A copy of such a tensor (what loading does) allocates ``numel`` numbers, however few the file holds.
    """
    needed = tensor.numel() * tensor.element_size()
    held = tensor.untyped_storage().nbytes() - tensor.storage_offset() * tensor.element_size()
    if held < needed:
        raise ValueError(
            f"{what} of shape {tuple(tensor.shape)} has strides {tensor.stride()} over {max(held, 0):,} bytes of "
            f"storage, not the {needed:,} bytes of its {tensor.numel():,} numbers: the file does not hold the numbers "
            "its shapes describe"
        )
