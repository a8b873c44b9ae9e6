"""Helpers for the multi-head attention course: the code each lesson graduates into.

Shape notation used everywhere (as in ``torch.nn.MultiheadAttention``; the full table is in README.md):
N batch, L target length, S source length, T one sequence attending to itself (L = S = T), E embedding
size, h heads, d = E / h head size, h_kv key/value heads and g = h / h_kv query heads per key/value head in
grouped-query attention, F feed-forward width, n_layers layers in a stack, V vocabulary, K beam width,
τ softmax temperature. A hidden state is x, never h.

The course's machinery (exercise checks, assignments, the corpus generator) lives in the separate package
``course``, which imports this one; this package never imports it.
"""

from helpers.attention import (
    GroupedQueryAttention,
    MaskConventionWarning,
    MultiHeadAttention,
    causal_mask,
    merge_masks,
    padding_mask,
    scaled_dot_product_attention,
    sdpa_mask_from_padding,
    sliding_window_mask,
)
from helpers.batching import Batch, make_batches, pad
from helpers.cost import median_time, peak_memory
from helpers.data import ParallelCorpus, download_multi30k, load_corpus
from helpers.embeddings import (
    PositionalEncoding,
    TokenEmbedding,
    cosine_similarity_matrix,
    one_hot_embedding,
    sinusoidal_positional_encoding,
)
from helpers.flash import flash_attention, online_softmax, online_softmax_update
from helpers.gpt import GPT, GPTConfig, KVCache, generate, kv_cache_bytes
from helpers.head_roles import HeadRoles, SimilarityTask, measure_head_roles
from helpers.head_view import HeadView, export_html, head_view
from helpers.layers import EncoderLayer, InspectableDecoderLayer, Transformer
from helpers.pretrained import PretrainedEncoder, load_pretrained_encoder, sentence_embeddings
from helpers.rotary import apply_rotary, rotary_angles
from helpers.tokenization import Tokenizer, train_tokenizer, train_tokenizers
from helpers.translation import Seq2SeqTransformer, TranslationConfig, Translator, load_checkpoint, save_checkpoint

__all__ = [
    "GPT",
    "Batch",
    "EncoderLayer",
    "GPTConfig",
    "GroupedQueryAttention",
    "HeadRoles",
    "HeadView",
    "InspectableDecoderLayer",
    "KVCache",
    "MaskConventionWarning",
    "MultiHeadAttention",
    "ParallelCorpus",
    "PositionalEncoding",
    "PretrainedEncoder",
    "Seq2SeqTransformer",
    "SimilarityTask",
    "TokenEmbedding",
    "Tokenizer",
    "Transformer",
    "TranslationConfig",
    "Translator",
    "apply_rotary",
    "causal_mask",
    "cosine_similarity_matrix",
    "download_multi30k",
    "export_html",
    "flash_attention",
    "generate",
    "head_view",
    "kv_cache_bytes",
    "load_checkpoint",
    "load_corpus",
    "load_pretrained_encoder",
    "make_batches",
    "measure_head_roles",
    "median_time",
    "merge_masks",
    "one_hot_embedding",
    "online_softmax",
    "online_softmax_update",
    "pad",
    "padding_mask",
    "peak_memory",
    "rotary_angles",
    "save_checkpoint",
    "scaled_dot_product_attention",
    "sdpa_mask_from_padding",
    "sentence_embeddings",
    "sinusoidal_positional_encoding",
    "sliding_window_mask",
    "train_tokenizer",
    "train_tokenizers",
]
