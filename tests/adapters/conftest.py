"""The adapters' tests need their framework (an optional extra).

``make test`` installs every extra and sets ``CONTINUUM_REQUIRE_EXTRAS=1``: there a
missing framework fails the test instead of skipping it, so a broken install step cannot
hide the adapters' tests.
"""

from __future__ import annotations

import importlib.util
import os
from types import ModuleType

import pytest

MODULES = {
    "langgraph": "langgraph.checkpoint.sqlite",
    "langchain": "langchain.agents",
    "openai-agents": "agents",
    "pydantic-ai": "pydantic_ai",
}


def require(framework: str) -> None:
    """Skip (or, under ``CONTINUUM_REQUIRE_EXTRAS=1``, fail) without ``framework``."""
    module = MODULES[framework]
    if importlib.util.find_spec(module.split(".")[0]) is not None:
        return
    why = f"{framework} is not installed: pip install 'continuum-recovery[{framework}]'"
    if os.environ.get("CONTINUUM_REQUIRE_EXTRAS") == "1":
        pytest.fail(why)
    pytest.skip(why)


def framework_module(framework: str) -> ModuleType:
    require(framework)
    return importlib.import_module(MODULES[framework])
