"""``python -m specdeploy.cli``: the same as ``specdeploy``."""

import sys

from . import main

sys.exit(main())
