"""The real hosts the tests run, in one list each (a host joins when its harness works)."""

from __future__ import annotations

from tests.hosts.harness import Host
from tests.hosts.host_claude import ClaudeCode
from tests.hosts.host_codex import Codex
from tests.hosts.host_gemini import GeminiCli
from tests.hosts.host_kilo import Kilo

CLAUDE, GEMINI, CODEX, KILO = ClaudeCode(), GeminiCli(), Codex(), Kilo()
MCP_HOSTS: list[Host] = [CLAUDE, GEMINI, CODEX, KILO]
HOOK_HOSTS: list[Host] = [CLAUDE, GEMINI, CODEX, KILO]
# Hosts with a hook before they compact their context (Kilo's plugin has none yet).
COMPACTING_HOSTS: list[Host] = [CLAUDE, GEMINI, CODEX]
