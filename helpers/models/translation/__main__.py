"""``python -m helpers.models.translation``: see :mod:`helpers.models.translation.cli`."""

import sys

from helpers.models.translation.cli import main

sys.exit(main())
