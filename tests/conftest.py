"""Shared test configuration.

Hypothesis: the ``continuum`` profile (default) keeps the property suite to about a
minute on two cores; ``HYPOTHESIS_PROFILE=thorough`` runs many more examples.
``deadline=None`` because a shared CI box makes per-example timings meaningless.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("continuum", max_examples=100, deadline=None)
settings.register_profile("thorough", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "continuum"))
