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

# The PostgreSQL suites use the server this machine kind runs (the Makefile and .ci/run set
# the same default); a plain `pytest` run should exercise them too, not skip them.
os.environ.setdefault("CONTINUUM_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
