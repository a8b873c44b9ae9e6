"""Measuring what heads do in a model: ``head_roles`` (lesson 08's role scores, ablation and pruning)."""
