"""``python -m continuum.hooks KIND ...``: the same as ``continuum hook KIND ...``."""

from __future__ import annotations

import sys

from continuum.hooks.entry import main

sys.exit(main(sys.argv[1:]))
