"""Measuring what heads do in a model: ``head_roles`` (lesson 08's role scores, ablation and pruning), ``sinks``
(lesson 09: a key hidden from later queries), ``circuits`` (lesson 10's induction heads)."""
