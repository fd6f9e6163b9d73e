"""``python -m continuum.hooks KIND ...``: the same as ``continuum hook KIND ...``."""

from __future__ import annotations

import sys

from continuum.hooks.entry import process_main

sys.exit(process_main(sys.argv[1:]))
