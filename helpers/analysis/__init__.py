"""Measuring what heads do in a model: ``head_roles`` (lesson 08's role scores, ablation and pruning), ``sinks``
(lesson 09: a key hidden from later queries), ``circuits`` (lesson 10's induction heads), among others (README's
module table lists them all); ``lora_translation`` and ``lm_alignment`` are lesson 17's: SmolLM2 taught captions
through LoRA, and its heads' attention scored against the gold word alignments."""
