"""One reader of GGUF files for every pretrained model of the course (SmolLM2, lesson 09; Gemma 3, lesson 13).

A GGUF file holds a header of metadata fields (the model's sizes under ``<architecture>.<key>``) and its tensors,
often quantized. ``open_gguf`` opens a file, refuses one that is not GGUF or holds another architecture, and
returns its fields; ``header_size`` reads one size from them within ``LIMITS``; ``read_tensors`` de-quantizes
the tensors that ``expected_shapes`` names for a model's config, each checked against its shape and for NaN;
``course_name`` gives each file tensor's place in ``helpers.gpt.GPT``. The models' own modules
(``helpers.models.language_model``, ``helpers.models.gemma``) only say which fields make their config.

Shapes: E embedding, h query heads, h_kv key/value heads, d head size, F feed-forward width, V vocabulary.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from helpers.gpt import GPTConfig

__all__ = ["GGUF_TO_COURSE", "LIMITS", "course_name", "expected_shapes", "header_size", "open_gguf", "read_tensors"]

# Upper bounds checked against a file's header before anything is allocated (SmolLM2: 30, 576, 1536, 49152).
LIMITS = {"block_count": 256, "embedding_length": 16384, "feed_forward_length": 65536, "vocab": 1_000_000}


def _gguf():
    try:
        import gguf
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError("reading a GGUF file needs the package gguf: `pip install gguf`") from error
    return gguf


def _open_reader(gguf, path: Path):
    """gguf's ``GGUFReader`` over a plain-array view of the file's memory map (the same bytes, nothing copied).

    The reader slices its data once per metadata value, about 100,000 times for SmolLM2's vocabulary and merges;
    slicing an ``np.memmap`` runs memmap's bookkeeping each time, slicing a plain view does not (several times
    faster in all: benchmarks/RESULTS.md). The reader only reads, so it needs nothing a memmap adds."""
    return _plain_view_reader(gguf)(str(path))


def _plain_view_reader(gguf: Any) -> type:
    """gguf's ``GGUFReader`` class, reading through a plain-array view of the memory map (``_open_reader``)."""
    import numpy as np

    class PlainViewReader(gguf.GGUFReader):
        @property
        def data(self):
            return self._plain

        @data.setter
        def data(self, mapped):
            self._plain = mapped.view(np.ndarray)

    return PlainViewReader


def _value(name: str, field, path: Path):
    """A GGUF metadata field's value (a number, a string, or a list of them); a string that is not UTF-8 (GGUF's
    encoding) is refused naming the field, not with a bare ``UnicodeDecodeError``."""
    try:
        if hasattr(field, "contents"):
            return field.contents()
        part = field.parts[field.data[0]]
        return bytes(part).decode() if field.types and field.types[0].name == "STRING" else part.tolist()[0]
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: metadata field {name} is not valid UTF-8 text ({error.reason})") from None


def _not_a_file(path: Path) -> str:
    """What a path that is not a regular file is: missing, a folder, or something else that exists."""
    if not path.exists():
        return "missing"
    return "a folder" if path.is_dir() else "not a regular file (a pipe, socket or device)"


def _positive_finite(path: Path, meta: dict, key: str, default: float) -> float:
    """A float setting of the header that must be finite and > 0 (an infinite RMSNorm epsilon would silently
    turn every normalised vector into zeros, a NaN one into NaN)."""
    value = meta.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{path}: {key} must be a finite number > 0, got {value!r}")
    return float(value)


def _go_offline() -> None:
    """``transformers`` and the hub read only what is on disk: no network at run time."""
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_PROGRESS_BARS"):
        os.environ[name] = "1"


def expected_shapes(config: GPTConfig) -> dict[str, tuple[int, ...]]:
    """Each tensor a file of a model with ``config`` must hold, with its shape (rows = output features): the
    Llama tensors, and with ``qk_norm`` and ``post_norms`` (Gemma 3) the QK-norms and the norms after each block."""
    E, F_dim, V, d = config.embed_dim, config.ff_dim, config.vocab_size, config.head_dim
    q, kv = config.num_heads * d, config.num_kv_heads * d
    shapes = {"token_embd.weight": (V, E), "output_norm.weight": (E,)}
    if not config.tie_embeddings:
        shapes["output.weight"] = (V, E)
    for i in range(config.num_layers):
        b = f"blk.{i}."
        shapes |= {
            b + "attn_norm.weight": (E,), b + "attn_q.weight": (q, E), b + "attn_k.weight": (kv, E),
            b + "attn_v.weight": (kv, E), b + "attn_output.weight": (E, q), b + "ffn_norm.weight": (E,),
            b + "ffn_gate.weight": (F_dim, E), b + "ffn_up.weight": (F_dim, E), b + "ffn_down.weight": (E, F_dim),
        }  # fmt: skip
        if config.qk_norm:
            shapes |= {b + "attn_q_norm.weight": (d,), b + "attn_k_norm.weight": (d,)}
        if config.post_norms:
            shapes |= {b + "post_attention_norm.weight": (E,), b + "post_ffw_norm.weight": (E,)}
    return shapes


# Each tensor's name in a file -> its place in helpers.gpt.GPT (block i's names with {i}): the Llama names, and
# Gemma's QK-norms and the norms after each block.
GGUF_TO_COURSE = {
    "token_embd.weight": "token_embedding.weight",
    "output_norm.weight": "norm.weight",
    "output.weight": "lm_head.weight",
    "blk.{i}.attn_norm.weight": "blocks.{i}.norm1.weight",
    "blk.{i}.attn_q.weight": "blocks.{i}.attention.projections.q_proj.weight",
    "blk.{i}.attn_k.weight": "blocks.{i}.attention.projections.k_proj.weight",
    "blk.{i}.attn_v.weight": "blocks.{i}.attention.projections.v_proj.weight",
    "blk.{i}.attn_output.weight": "blocks.{i}.attention.projections.out_proj.weight",
    "blk.{i}.ffn_norm.weight": "blocks.{i}.norm2.weight",
    "blk.{i}.ffn_gate.weight": "blocks.{i}.feed_forward.gate_proj.weight",
    "blk.{i}.ffn_up.weight": "blocks.{i}.feed_forward.up_proj.weight",
    "blk.{i}.ffn_down.weight": "blocks.{i}.feed_forward.down_proj.weight",
    "blk.{i}.attn_q_norm.weight": "blocks.{i}.attention.q_norm.weight",
    "blk.{i}.attn_k_norm.weight": "blocks.{i}.attention.k_norm.weight",
    "blk.{i}.post_attention_norm.weight": "blocks.{i}.attention_out_norm.weight",
    "blk.{i}.post_ffw_norm.weight": "blocks.{i}.feed_forward_out_norm.weight",
}


def course_name(gguf_name: str) -> str:
    """The parameter of ``GPT`` that a tensor of the file becomes, e.g. blk.3.attn_q.weight ->
    blocks.3.attention.projections.q_proj.weight."""
    parts = gguf_name.split(".")
    if parts[0] == "blk":
        return GGUF_TO_COURSE["blk.{i}." + ".".join(parts[2:])].format(i=parts[1])
    return GGUF_TO_COURSE[gguf_name]


def open_gguf(path: Path, architecture: str, label: str, hints: dict[str, str] | None = None):
    """Open the GGUF file at ``path``: ``(gguf module, reader, metadata fields)`` (the tokenizer's fields left
    out). Refuses, naming what was expected, a path that is not a file, a file that is not GGUF or is truncated,
    and a model of another architecture than ``architecture`` (``label`` names its models in the message,
    ``hints`` says what to do for a known other one)."""
    gguf = _gguf()
    if not path.is_file():
        raise FileNotFoundError(f"expected a GGUF file, but {path} is {_not_a_file(path)}")
    try:
        reader = _open_reader(gguf, path)
    except Exception as error:  # the reader's own errors (bad magic, short reads) do not name the file
        raise ValueError(f"{path} is not a readable GGUF file (truncated or another format): {error}") from error
    meta = {
        name: _value(name, field, path)
        for name, field in reader.fields.items()
        if not name.startswith("tokenizer.ggml.")
    }
    found = meta.get("general.architecture")
    if found != architecture:
        hint = (hints or {}).get(found, "") if isinstance(found, str) else ""
        raise ValueError(f"{path} holds a {found!r} model; this loader builds {label} ({architecture!r}){hint}")
    return gguf, reader, meta


def header_size(path: Path, meta: dict, key: str, limit: str | None = None) -> int:
    """A size of the header (``<architecture>.<key>``, the full name given), a positive int (at most
    ``LIMITS[limit]``)."""
    value = meta.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or (limit and value > LIMITS[limit]):
        bound = f" at most {LIMITS[limit]}" if limit else ""
        raise ValueError(f"{path}: {key} must be a positive int{bound}, got {value!r}")
    return value


def vocabulary_size(path: Path, reader, meta: dict, fallback_key: str) -> int:
    """V: the tokenizer's tokens in the file (or ``fallback_key`` of the header), 1 .. ``LIMITS["vocab"]``."""
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    V = len(tokens.data) if tokens is not None else meta.get(fallback_key, 0)
    if not 1 <= V <= LIMITS["vocab"]:
        raise ValueError(f"{path}: the vocabulary must hold 1 .. {LIMITS['vocab']} tokens, got {V}")
    return V


def read_tensors(gguf, reader, expected: dict[str, tuple[int, ...]], path: Path, kind: str) -> dict[str, Tensor]:
    """The tensors ``expected`` names, de-quantized to float32, each checked against its expected shape and for
    NaN or infinite numbers (``kind`` names the model in the message about missing tensors)."""
    by_name = {t.name: t for t in reader.tensors}
    missing = sorted(set(expected) - set(by_name), key=_natural)
    if missing:
        raise ValueError(f"{path} lacks the tensors {missing[:5]}{' …' if len(missing) > 5 else ''} of {kind}")
    tensors = {}
    for name, shape in expected.items():
        t = by_name[name]
        stored = tuple(int(n) for n in reversed(t.shape.tolist()))  # GGUF lists sizes innermost first
        if stored != shape:
            raise ValueError(f"{path}: tensor {name} has shape {stored}, expected {shape} from the header's sizes")
        try:
            array = gguf.quants.dequantize(t.data, t.tensor_type)
        except Exception as error:
            raise ValueError(f"{path}: cannot de-quantize {name} ({t.tensor_type.name}): {error}") from error
        tensor = torch.from_numpy(array.reshape(shape).astype("float32", copy=False).copy())
        if not torch.isfinite(tensor).all():  # a NaN weight would load silently and turn every logit into NaN
            bad = int((~torch.isfinite(tensor)).sum())
            raise ValueError(f"{path}: tensor {name} holds {bad} NaN or infinite numbers; the file is damaged")
        tensors[name] = tensor
    return tensors


def _natural(name: str):
    return [int(p) if p.isdigit() else p for p in name.split(".")]
