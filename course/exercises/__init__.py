"""Checks for the lessons' exercises, one module per lesson.

Every check takes the learner's answer (usually a function), runs it on small inputs, and prints
one clear verdict: a pass, a specific hint naming the likely mistake, or "not attempted yet" when
the answer still raises ``NotImplementedError`` (as it does in a student copy).
Each check also returns a ``Verdict`` so tests and graders can read the result; in a notebook the
returned verdict does not show a second time, so a check cell is just ``check_x(x)``. Checks run in
``torch.random.fork_rng()`` and never move the notebook's random numbers (see ``feedback.py``).
"""

from course.exercises.feedback import Verdict

__all__ = ["Verdict"]

# Lesson 08's checks, importable from the package as well as from their module.
from course.exercises.lesson08 import check_previous_token_score, check_similarity_scores, check_stack_qkv

__all__ += ["check_previous_token_score", "check_similarity_scores", "check_stack_qkv"]

# Lesson 10's checks.
from course.exercises.lesson10 import check_induction_score, check_patch_hook, check_repeated_batch  # noqa: E402

__all__ += ["check_induction_score", "check_patch_hook", "check_repeated_batch"]

# Lesson 11's checks.
from course.exercises.lesson11 import check_absorbed_weights, check_cache_bytes, check_cache_entry  # noqa: E402

__all__ += ["check_absorbed_weights", "check_cache_bytes", "check_cache_entry"]

# Lesson 12's checks.
from course.exercises.lesson12 import check_head_attribution, check_logit_difference, check_logit_lens  # noqa: E402

__all__ += ["check_head_attribution", "check_logit_difference", "check_logit_lens"]
