"""Helpers for the multi-head attention course: the code each lesson graduates into.

Shape notation used everywhere (as in ``torch.nn.MultiheadAttention``): N batch, L target length,
S source length, E embedding size, h heads, d = E / h head size.
"""

from helpers.attention import (
    GroupedQueryAttention,
    MultiHeadAttention,
    causal_mask,
    merge_masks,
    padding_mask,
    scaled_dot_product_attention,
    sdpa_mask_from_padding,
)
from helpers.batching import Batch, make_batches, pad
from helpers.data import ParallelCorpus, download_multi30k, load_corpus

# Lesson modules add their public names below, one import line each.
from helpers.embeddings import (
    PositionalEncoding,
    TokenEmbedding,
    cosine_similarity_matrix,
    one_hot_embedding,
    sinusoidal_positional_encoding,
)
from helpers.head_view import HeadView, export_html, head_view
from helpers.layers import InspectableDecoderLayer
from helpers.tokenization import Tokenizer, train_tokenizer, train_tokenizers
from helpers.translation import Seq2SeqTransformer, TranslationConfig, Translator, load_checkpoint, save_checkpoint
