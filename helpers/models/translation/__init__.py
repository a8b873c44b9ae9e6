"""German -> English translation with a small transformer whose decoder heads can be inspected.

config.py       TranslationConfig: model size and training settings
model.py        Seq2SeqTransformer (helpers.layers.Transformer: the course's own layers and attention), head ablation
training.py     the training loop (label smoothing, AdamW + warm-up, clipping, best weights kept), TrainingState
decoding.py     greedy search and beam search, with per-head cross-attention of the output
translator.py   Translator: a model and its tokenizers, text in and text out
evaluation.py   sacreBLEU scores, heads against gold alignments, head ablation
checkpoint.py   save / load (weights_only) of weights, config, tokenizers and metrics
pipeline.py     corpus -> tokenizers -> model -> trained translator
cli.py          ``python -m helpers.models.translation train | evaluate | translate``
"""

from helpers.models.translation.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from helpers.models.translation.config import TranslationConfig
from helpers.models.translation.decoding import Decoded, beam_search, greedy_decode, teacher_forced_attention
from helpers.models.translation.evaluation import (
    AlignmentReport,
    Scores,
    alignment_report,
    evaluate,
    head_ablation,
    score_translations,
    word_attention,
)
from helpers.models.translation.model import Seq2SeqTransformer, ablated_heads
from helpers.models.translation.pipeline import build_translator, encode_pairs, fit
from helpers.models.translation.training import (
    TrainingHistory,
    TrainingOptions,
    TrainingState,
    teacher_forcing,
    train,
    translation_loss,
)
from helpers.models.translation.translator import Translation, Translator

__all__ = [
    "AlignmentReport",
    "CheckpointError",
    "Decoded",
    "Scores",
    "Seq2SeqTransformer",
    "TrainingHistory",
    "TrainingOptions",
    "TrainingState",
    "Translation",
    "TranslationConfig",
    "Translator",
    "ablated_heads",
    "alignment_report",
    "beam_search",
    "build_translator",
    "encode_pairs",
    "evaluate",
    "fit",
    "greedy_decode",
    "head_ablation",
    "load_checkpoint",
    "save_checkpoint",
    "score_translations",
    "teacher_forced_attention",
    "teacher_forcing",
    "train",
    "translation_loss",
    "word_attention",
]
