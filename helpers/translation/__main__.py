"""``python -m helpers.translation``: see :mod:`helpers.translation.cli`."""

import sys

from helpers.translation.cli import main

sys.exit(main())
