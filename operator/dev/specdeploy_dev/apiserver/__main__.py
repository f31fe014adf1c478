"""``python -m specdeploy_dev.apiserver``: the same as ``specdeploy dev apiserver``."""

import sys

from .server import main

sys.exit(main())
