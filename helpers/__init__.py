"""Helpers for the multi-head attention course: the code each lesson graduates into.

Shape notation used everywhere (as in ``torch.nn.MultiheadAttention``; the full table is in README.md):
N batch, L target length, S source length, T one sequence attending to itself (L = S = T), E embedding
size, h heads, d = E / h head size, h_kv key/value heads and g = h / h_kv query heads per key/value head in
grouped-query attention, F feed-forward width, n_layers layers in a stack, V vocabulary, K beam width,
τ softmax temperature. A hidden state is x, never h.

The course's machinery (exercise checks, assignments, the corpus generator) lives in the separate package
``course``, which imports this one; this package never imports it.

Layout: the ideas a lesson graduates into sit at the top level (``attention`` and the ``masks`` it re-exports,
``kv_cache`` (the one cache and what it costs), ``layers``, ``flash``, ``gpt``, ``latent_attention``, ``delta_rule``,
``rotary``, ``embeddings``, ``norms``, ``swiglu``, ``lora``); the subpackages are the layers built on them: ``data``
(corpora, tokenization, batching), ``models`` (the translator and the pretrained models), ``analysis``
(measuring what heads do), ``viewing`` (plots, the head view, widgets) and ``tools`` (files, cost). A layer
imports only the ones below it.

The names below are exported lazily (PEP 562): ``import helpers.attention`` loads torch and that module alone,
and a name such as ``helpers.viewing.head_view`` imports its module (here matplotlib with it) only when first used.
Importing it changes nothing else: a lesson installs what it wants in its kernel by a call in its first cell
(``follow_load_in_notebook``: torch's threads follow the machine's load; ``use_compact_png``: smaller figures).
"""

import importlib

# name -> the module that defines it, imported on first use (PEP 562).
_EXPORTS = {
    # helpers.attention
    "AttentionCore": "helpers.attention",
    "attend": "helpers.attention",
    "masked_softmax": "helpers.attention",
    "GroupedQueryAttention": "helpers.attention",
    "MaskConventionWarning": "helpers.attention",
    "MultiHeadAttention": "helpers.attention",
    "merge_heads": "helpers.attention",
    "repeat_kv_heads": "helpers.attention",
    "split_heads": "helpers.attention",
    "unflatten_heads": "helpers.attention",
    "scaled_dot_product_attention": "helpers.attention",
    # helpers.masks (also importable from helpers.attention): True = blocked
    "causal_mask": "helpers.masks",
    "causal_mask_at": "helpers.masks",
    "merge_masks": "helpers.masks",
    "padding_mask": "helpers.masks",
    "sdpa_mask": "helpers.masks",
    "sdpa_mask_from_padding": "helpers.masks",
    "sliding_window_mask": "helpers.masks",
    "streaming_mask": "helpers.masks",
    # helpers.data.batching
    "Batch": "helpers.data.batching",
    "make_batches": "helpers.data.batching",
    "pad": "helpers.data.batching",
    # helpers.tools.cost
    "median_time": "helpers.tools.cost",
    "peak_memory": "helpers.tools.cost",
    # helpers.tools.threads
    "choose_threads": "helpers.tools.threads",
    "pick_threads": "helpers.tools.threads",
    "follow_load_in_notebook": "helpers.tools.threads",
    # helpers.data.corpus
    "ParallelCorpus": "helpers.data.corpus",
    "download_multi30k": "helpers.data.corpus",
    "load_corpus": "helpers.data.corpus",
    # helpers.embeddings
    "PositionalEncoding": "helpers.embeddings",
    "TokenEmbedding": "helpers.embeddings",
    "cosine_similarity_matrix": "helpers.embeddings",
    "one_hot_embedding": "helpers.embeddings",
    "sinusoidal_positional_encoding": "helpers.embeddings",
    # helpers.flash
    "flash_attention": "helpers.flash",
    "online_softmax": "helpers.flash",
    "online_softmax_update": "helpers.flash",
    # helpers.gpt
    "GPT": "helpers.gpt",
    "GPTConfig": "helpers.gpt",
    "generate": "helpers.gpt",
    # helpers.kv_cache: the one cache, and the one count of what a cache costs
    "KVCache": "helpers.kv_cache",
    "cache_bytes_per_token": "helpers.kv_cache",
    "kv_cache_bytes": "helpers.kv_cache",
    "layer_cache_numbers": "helpers.kv_cache",
    "recurrent_state_bytes": "helpers.kv_cache",
    "rolling_kv_cache_bytes": "helpers.kv_cache",
    # helpers.layer_kind: a layer's kind, and the one way to change what a layer may see
    "seeing": "helpers.layer_kind",
    # helpers.delta_rule (lesson 14): linear attention and the (gated) delta rule, a state instead of a cache
    "DeltaRuleAttention": "helpers.delta_rule",
    "delta_rule_chunked": "helpers.delta_rule",
    "delta_rule_recurrent": "helpers.delta_rule",
    "delta_rule_step": "helpers.delta_rule",
    "delta_rule_weights": "helpers.delta_rule",
    "linear_attention": "helpers.delta_rule",
    "linear_attention_recurrent": "helpers.delta_rule",
    "linear_attention_step": "helpers.delta_rule",
    "linear_attention_weights": "helpers.delta_rule",
    # helpers.streaming (lesson 14): StreamingLLM's window plus the first tokens, with the course's mask and cache
    "StreamingCache": "helpers.streaming",
    "nll_by_position": "helpers.streaming",
    "streaming_attention": "helpers.streaming",
    "streaming_logits": "helpers.streaming",
    # helpers.latent_attention (lesson 11), and its trained comparison in helpers.analysis.cache_budget
    "DEEPSEEK_V2": "helpers.latent_attention",
    "SMOLLM2": "helpers.latent_attention",
    "pca_basis": "helpers.latent_attention",
    "record_keys_values": "helpers.latent_attention",
    "build_variant": "helpers.analysis.cache_budget",
    "cache_numbers_per_layer": "helpers.analysis.cache_budget",
    "train_repeated": "helpers.analysis.cache_budget",
    "LatentConfig": "helpers.latent_attention",
    "latent_gpt": "helpers.latent_attention",
    "set_absorbed": "helpers.latent_attention",
    "MultiHeadLatentAttention": "helpers.latent_attention",
    "gpt_to_latent": "helpers.latent_attention",
    # helpers.kernels (lesson 16), beside the lesson's own names at the end: the sparse kernel, its PyTorch
    # references (which never import Triton) and what a count returns
    "sparse_attention_triton": "helpers.kernels.sparse_attention",
    "topk_attention_dense": "helpers.kernels.topk_reference",
    "topk_attention_gather": "helpers.kernels.topk_reference",
    "MemoryTraffic": "helpers.kernels.memory_traffic",
    "measure_traffic": "helpers.kernels.memory_traffic",
    # helpers.selection, .lightning_indexer, .topk_attention and helpers.analysis.key_selection (lesson 15)
    "SelectionCost": "helpers.selection",
    "block_topk": "helpers.selection",
    "causal_topk": "helpers.selection",
    "recall": "helpers.selection",
    "recent_and_first_keys": "helpers.selection",
    "recent_keys": "helpers.selection",
    "selected_mask": "helpers.selection",
    "summed_attention": "helpers.selection",
    "LightningIndexer": "helpers.lightning_indexer",
    "SparseLatentAttention": "helpers.lightning_indexer",
    "indexer_from_transformers": "helpers.lightning_indexer",
    "sparse_latent_attention_from_transformers": "helpers.lightning_indexer",
    "TopKAttention": "helpers.topk_attention",
    "TopKSettings": "helpers.topk_attention",
    "indexer_kl": "helpers.analysis.key_selection",
    "indexer_top_k": "helpers.analysis.key_selection",
    "layer_targets": "helpers.analysis.key_selection",
    "mean_loss": "helpers.analysis.key_selection",
    "moba": "helpers.analysis.key_selection",
    "oracle_per_head": "helpers.analysis.key_selection",
    "oracle_shared": "helpers.analysis.key_selection",
    "recall_by_layer": "helpers.analysis.key_selection",
    "recent_window": "helpers.analysis.key_selection",
    "selected_attention": "helpers.analysis.key_selection",
    "train_indexers": "helpers.analysis.key_selection",
    "window_and_first": "helpers.analysis.key_selection",
    # helpers.lora (lesson 17): LoRA from scratch, the adapter saved and loaded alone
    "PROJECTIONS": "helpers.lora",
    "AdapterError": "helpers.lora",
    "LoRALinear": "helpers.lora",
    "adapter_state_dict": "helpers.lora",
    "add_lora": "helpers.lora",
    "count_trainable": "helpers.lora",
    "freeze_all_but_lora": "helpers.lora",
    "load_adapter": "helpers.lora",
    "lora_layers": "helpers.lora",
    "merge_lora": "helpers.lora",
    "remove_lora": "helpers.lora",
    "resolve_targets": "helpers.lora",
    "save_adapter": "helpers.lora",
    "unmerge_lora": "helpers.lora",
    # helpers.analysis.lora_translation and .lm_alignment (lesson 17): SmolLM2 taught captions, what its heads learn
    "CaptionPair": "helpers.analysis.lora_translation",
    "TrainingRecord": "helpers.analysis.lora_translation",
    "UpdateSizes": "helpers.analysis.lora_translation",
    "answer_loss": "helpers.analysis.lora_translation",
    "caption_scores": "helpers.analysis.lora_translation",
    "effective_rank": "helpers.analysis.lora_translation",
    "encode_corpus": "helpers.analysis.lora_translation",
    "encode_pair": "helpers.analysis.lora_translation",
    "energy_rank": "helpers.analysis.lora_translation",
    "pad_right": "helpers.analysis.lora_translation",
    "rank_for_budget": "helpers.analysis.lora_translation",
    "train_adapters": "helpers.analysis.lora_translation",
    "translate_captions": "helpers.analysis.lora_translation",
    "update_singular_values": "helpers.analysis.lora_translation",
    "update_sizes": "helpers.analysis.lora_translation",
    "AlignmentScores": "helpers.analysis.lm_alignment",
    "alignment_scores": "helpers.analysis.lm_alignment",
    "query_words": "helpers.analysis.lm_alignment",
    "word_hits": "helpers.analysis.lm_alignment",
    # helpers.analysis.circuits
    "AttentionOnlyTransformer": "helpers.analysis.circuits",
    "induction_score": "helpers.analysis.circuits",
    "repeated_batch": "helpers.analysis.circuits",
    "train_induction": "helpers.analysis.circuits",
    # helpers.analysis.ioi, .attribution, .patching (lesson 12)
    "direct_logit_attribution": "helpers.analysis.attribution",
    "ioi_batch": "helpers.analysis.ioi",
    "logit_difference": "helpers.analysis.ioi",
    "logit_lens": "helpers.analysis.attribution",
    "query_attribution": "helpers.analysis.attribution",
    "name_pairs": "helpers.analysis.ioi",
    "knock_out": "helpers.analysis.patching",
    "path_patching": "helpers.analysis.patching",
    "path_patching_map": "helpers.analysis.patching",
    "query_heads_moved": "helpers.analysis.patching",
    "residual_patching": "helpers.analysis.patching",
    # helpers.analysis.attention_distance, .passkey (lesson 13)
    "KindDistance": "helpers.analysis.attention_distance",
    "attention_distances": "helpers.analysis.attention_distance",
    "distance_by_kind": "helpers.analysis.attention_distance",
    "layer_kinds": "helpers.analysis.attention_distance",
    "mean_distance": "helpers.analysis.attention_distance",
    "PASSKEY_HEAD": "helpers.analysis.passkey",
    "PASSKEY_QUESTION": "helpers.analysis.passkey",
    "PasskeyPrompt": "helpers.analysis.passkey",
    "PasskeyTrial": "helpers.analysis.passkey",
    "answer_greedily": "helpers.analysis.passkey",
    "count_fetched": "helpers.analysis.passkey",
    "global_layers": "helpers.analysis.passkey",
    "is_fetched": "helpers.analysis.passkey",
    "made_local": "helpers.analysis.passkey",
    "passkey_prompt": "helpers.analysis.passkey",
    "passkey_trials": "helpers.analysis.passkey",
    "passkey_variants": "helpers.analysis.passkey",
    # helpers.analysis.head_roles
    "HeadRoles": "helpers.analysis.head_roles",
    "SimilarityTask": "helpers.analysis.head_roles",
    "measure_head_roles": "helpers.analysis.head_roles",
    # helpers.viewing.head_view
    "HeadView": "helpers.viewing.head_view",
    "export_html": "helpers.viewing.head_view",
    "head_view": "helpers.viewing.head_view",
    # helpers.layers
    "EncoderLayer": "helpers.layers",
    "InspectableDecoderLayer": "helpers.layers",
    "Transformer": "helpers.layers",
    # helpers.models.pretrained
    "PretrainedEncoder": "helpers.models.pretrained",
    "load_pretrained_encoder": "helpers.models.pretrained",
    "sentence_embeddings": "helpers.models.pretrained",
    # helpers.rotary
    "apply_rotary": "helpers.rotary",
    "rotary_angles": "helpers.rotary",
    # helpers.norms, helpers.swiglu (lesson 09's Llama pieces)
    "RMSNorm": "helpers.norms",
    "SwiGLU": "helpers.swiglu",
    # helpers.models.reference_attention (lesson 14): transformers' attention modules as the course's layer
    "attention_from_gpt_oss": "helpers.models.reference_attention",
    "attention_from_qwen3_next": "helpers.models.reference_attention",
    # helpers.models.language_model
    "load_pretrained_lm": "helpers.models.language_model",
    "load_reference_lm": "helpers.models.language_model",
    # helpers.data.tokenization
    "Tokenizer": "helpers.data.tokenization",
    "train_tokenizer": "helpers.data.tokenization",
    "train_tokenizers": "helpers.data.tokenization",
    # helpers.models.translation
    "Seq2SeqTransformer": "helpers.models.translation",
    "TranslationConfig": "helpers.models.translation",
    "Translator": "helpers.models.translation",
    "load_checkpoint": "helpers.models.translation",
    "save_checkpoint": "helpers.models.translation",
    # ... and every other name a lesson imports (README: importable from helpers itself; tests/test_lesson_imports.py)
    # helpers.analysis.circuits
    "composition_scores": "helpers.analysis.circuits",
    "corrupt_first_copy": "helpers.analysis.circuits",
    "duplicate_token_score": "helpers.analysis.circuits",
    "head_hooks": "helpers.analysis.circuits",
    "head_scores": "helpers.analysis.circuits",
    "output_projections": "helpers.analysis.circuits",
    "patching_map": "helpers.analysis.circuits",
    "previous_token_score": "helpers.analysis.circuits",
    "repeated_log_prob": "helpers.analysis.circuits",
    "repeated_loss": "helpers.analysis.circuits",
    # helpers.analysis.head_roles
    "ablation_costs": "helpers.analysis.head_roles",
    "gradient_importance": "helpers.analysis.head_roles",
    "pruning_curve": "helpers.analysis.head_roles",
    # helpers.analysis.sinks
    "sink_removal_effect": "helpers.analysis.sinks",
    # helpers.gpt
    "train_gpt": "helpers.gpt",
    # helpers.layers
    "cross_attention_weights": "helpers.layers",
    "recording": "helpers.layers",
    # helpers.models.language_model
    "chat_prompt": "helpers.models.language_model",
    "chat_translate": "helpers.models.language_model",
    # helpers.models.pretrained
    "attention_views": "helpers.models.pretrained",
    "load_reference_bert": "helpers.models.pretrained",
    "load_reference_sentence_transformer": "helpers.models.pretrained",
    # helpers.models.translation
    "alignment_report": "helpers.models.translation",
    "head_ablation": "helpers.models.translation",
    "score_translations": "helpers.models.translation",
    # helpers.models.translation.evaluation
    "crossing_example": "helpers.models.translation.evaluation",
    "reference_word_attention": "helpers.models.translation.evaluation",
    # helpers.viewing.plotting
    "attention_heatmap": "helpers.viewing.plotting",
    "attention_kinds_figure": "helpers.viewing.plotting",
    "head_grid": "helpers.viewing.plotting",
    "head_split_diagram": "helpers.viewing.plotting",
    "layer_head_heatmap": "helpers.viewing.plotting",
    "layer_head_tables": "helpers.viewing.plotting",
    "mask_plot": "helpers.viewing.plotting",
    "position_similarity_plot": "helpers.viewing.plotting",
    "positional_encoding_heatmap": "helpers.viewing.plotting",
    "readable_head_grid": "helpers.viewing.plotting",
    "scaling_experiment_plot": "helpers.viewing.plotting",
    "transformer_diagram": "helpers.viewing.plotting",
    "use_compact_png": "helpers.viewing.plotting",
    "word_alignment_grid": "helpers.viewing.plotting",
    # helpers.viewing.widgets
    "attention_explorer": "helpers.viewing.widgets",
    "cross_attention_explorer": "helpers.viewing.widgets",
    "head_browser": "helpers.viewing.widgets",
    "sharpness_figure": "helpers.viewing.widgets",
    "show_attention": "helpers.viewing.widgets",
    "show_cross_attention": "helpers.viewing.widgets",
    "temperature_explorer": "helpers.viewing.widgets",
    # helpers.kernels (lesson 16): Triton kernels; the package imports without Triton, a kernel module needs it
    "TRITON_MISSING": "helpers.kernels",
    "triton_available": "helpers.kernels",
    "flash_attention_triton": "helpers.kernels.flash_attention",
    "flash_forward": "helpers.kernels.flash_forward",
    "count_memory_traffic": "helpers.kernels.memory_traffic",
    "flash_forward_elements": "helpers.kernels.memory_traffic",
    "naive_elements": "helpers.kernels.memory_traffic",
    "naive_attention_triton": "helpers.kernels.naive_attention",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value  # later look-ups skip this function
        return value
    raise AttributeError(f"module 'helpers' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
