"""The course's own machinery, kept apart from ``helpers`` (the code the lessons graduate into).

- ``course.exercises``: the checks behind every lesson's exercises (a pass, a hint that names the learner's
  mistake, or "not attempted yet");
- ``course.assignments``: student copies without solutions, checking handed-in copies, nbgrader export,
  folding solutions away in the lessons (``python -m course.assignments --help``);
- ``course.site``: the executed lessons as one offline website (``python -m course.site``, or ``make site``);
- ``course.grading``: grading handed-in lessons: the locked cell that runs a graded check (``graded``), the
  ``check`` command's supervised runs and gradebook, nbgrader's configuration template;
- ``course.corpus``: the generator of the German-English corpus in ``data/captions``
  (``python -m course.corpus``, or ``make corpus``).

It serves teaching rather than attention: a learner never needs to read it. It imports ``helpers``; ``helpers``
never imports it.
"""

import sys

# Every process of the course's machinery reads notebooks with nbformat, whose validator imports jsonschema, which
# imports rfc3987_syntax when it is installed (jupyter-events asks for it) and compiles its IRI grammar with lark:
# 1.9 of the 2.2 s that `import nbformat, nbclient` takes, paid again by the checker, each notebook's supervisor
# and each worker. Only the "iri" and "iri-reference" format checks need it, and nbformat's schemas use no format.
# A None in sys.modules makes that one optional import fail as if the package were absent; nothing else changes.
if "jsonschema" not in sys.modules:
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]  # None on purpose: see above
