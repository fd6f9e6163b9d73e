"""Layers import in one direction, and the fold imports no I/O (house style)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "continuum"

# Lower ranks are nearer the leaves; a module may import only strictly lower ranks,
# or modules of its own package (store/, cli/, mcp/, adapters/).
RANKS: dict[str, float] = {
    "continuum.errors": 0,
    "continuum.types": 0,
    "continuum.faults": 0,
    "continuum.log": 0,
    "continuum.version": 0,
    "continuum.canonical": 1,
    "continuum.limits": 1,  # one depth and size limit for every entry (pure)
    "continuum.untrusted": 1,
    "continuum.bounded": 1.2,  # bounds for reading files back: line size, JSON depth
    "continuum.rule_tables": 1,  # [[table]] entries of a TOML rules file (stdlib only)
    "continuum.events": 2,
    "continuum.contract": 2,
    "continuum.payloads": 2.5,
    "continuum.notices": 2.6,  # which events call for a person (pure), used by the store
    "continuum.archived": 2.6,  # what an archive marker says (pure), used by the store
    "continuum.safe_files": 1.5,  # private files written whole or not at all
    "continuum.chain": 3,
    "continuum.projection": 3,
    "continuum.validation": 4,
    "continuum.recovery": 5,
    "continuum.store": 6,
    "continuum.approval_rules": 2,  # parsing approvals.toml: which calls need a person
    "continuum.approvals": 6.5,  # the per-call check against the log, under the ledger
    "continuum.ledger": 7,
    "continuum.outbox": 7,  # delivering the notification outbox (over the store)
    "continuum.verification": 7,
    "continuum.checkpoints": 7.2,
    "continuum.signing": 7.1,  # signed anchors (Ed25519)
    "continuum.archive_file": 7.25,  # the archive file format
    "continuum.archive": 7.3,  # archiving a run's old history (over checkpoints, verification)
    "continuum.backup_file": 7.35,  # the backup file format (tar, manifest, JSONL data)
    "continuum.backup_checks": 7.37,  # a backup copy's schema and outbox against its log
    "continuum.backup": 7.4,  # backup, verify-backup, restore (over archive's verify)
    "continuum.operations": 7.6,  # what the facade does for long-lived stores
    "continuum.transfer": 7.22,  # export/import (over checkpoints: an import marker seals one)
    "continuum.prune": 7.3,  # archive then delete finished runs (over transfer)
    "continuum.migrate_original": 7.5,  # the original project's runs (over ledger, transfer)
    "continuum.environment": 7,
    "continuum.effect": 7.5,  # the effect seam over the ledger, under the facade and adapters
    "continuum.runtime": 8,
    "continuum.bench": 8.5,
    "continuum.hooks": 8.7,  # host hooks: used by the CLI and by their own lean entry point
    "continuum.ui": 8.9,  # the operator page (over the facade), mounted by cli.ui and mcp.http
    "continuum.cli": 9,
    "continuum.mcp": 9,
    "continuum.adapters": 9,
    "continuum": 10,  # the package __init__ re-exports the public API
    "continuum.__main__": 10,
}
EDGES = ("continuum.cli", "continuum.mcp", "continuum.adapters")
# `continuum ui` serves the page with the HTTP transport's listener, TLS and token-file
# checks: one implementation of each, shared with `continuum-mcp --ui`.
EDGE_IMPORTS_ALLOWED = {("continuum.cli.ui", "continuum.mcp.http")}
PURE = (
    "continuum.canonical",
    "continuum.limits",
    "continuum.untrusted",
    "continuum.bounded",
    "continuum.payloads",
    "continuum.notices",
    "continuum.archived",
    "continuum.events",
    "continuum.chain",
    "continuum.projection",
    "continuum.validation",
    "continuum.contract",
    "continuum.recovery",
)
IO_MODULES = {
    "os",
    "sys",
    "time",
    "datetime",
    "socket",
    "subprocess",
    "sqlite3",
    "apsw",
    "psycopg",
    "logging",
    "structlog",
    "random",
    "pathlib",
    "io",
    "shutil",
    "tempfile",
    "threading",
    "uuid",
    "continuum.store",
    "continuum.log",
    "continuum.faults",
}


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def rank_of(name: str) -> tuple[str, float]:
    best = ""
    for prefix in RANKS:
        if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > len(best):
            best = prefix
    assert best, f"module {name} has no layer: add it to RANKS"
    return best, RANKS[best]


def imports_of(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
    return out


MODULES = sorted(SRC.rglob("*.py"))


def layer_violations(name: str, imported: list[str]) -> list[str]:
    layer, rank = rank_of(name)
    bad = []
    for imp in imported:
        if not imp.startswith("continuum"):
            continue
        other_layer, other_rank = rank_of(imp)
        if other_layer == layer and layer != "continuum":
            continue  # inside one package
        if (name, imp) in EDGE_IMPORTS_ALLOWED:
            continue
        if other_rank >= rank:
            bad.append(
                f"{name} ({layer}, rank {rank}) imports {imp} ({other_layer}, rank {other_rank})"
            )
        if layer in EDGES and other_layer in EDGES and other_layer != layer:
            bad.append(f"edge {name} imports another edge {imp}")
    return bad


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_module_imports_only_lower_layers(path: Path) -> None:
    assert layer_violations(module_name(path), imports_of(path)) == []


@pytest.mark.parametrize("name", PURE)
def test_pure_core_imports_no_io(name: str) -> None:
    path = SRC / (name.split(".", 1)[1] + ".py")
    found = [
        i
        for i in imports_of(path)
        if i in IO_MODULES
        or i.split(".")[0] in IO_MODULES
        or any(i.startswith(m + ".") for m in IO_MODULES)
    ]
    assert found == [], f"{name} imports I/O modules {found}"


def test_layer_check_catches_an_upward_import() -> None:
    # Negative control: the checker must flag a pure module importing the store,
    # and an edge importing another edge.
    assert layer_violations("continuum.projection", ["continuum.store.sqlite"])
    assert layer_violations("continuum.cli.main", ["continuum.mcp.server"])
    assert layer_violations("continuum.cli.ui", ["continuum.mcp.server"])  # mcp.http only
    assert not layer_violations("continuum.runtime", ["continuum.store"])
