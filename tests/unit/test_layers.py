"""Layers import in one direction, and the fold imports no I/O (house style).

Two levels. Packages (``PACKAGES``): a module may import the leaves, modules of a lower
package, and modules of its own package; packages of one rank are independent of each
other (ledger and recovery), and the edges never import one another. Modules
(``RANKS``): inside the core, a module imports only strictly lower ranks, so no two
modules import each other, however indirectly (``test_no_import_circle`` checks the
whole graph, imports inside functions included).
"""

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
    "continuum.digest": 0,
    "continuum.json_text": 0,  # json.loads without importing json (the hooks per call)  # sha256 without loading OpenSSL (the hooks per call)
    "continuum.eventlog.canonical": 1,
    "continuum.eventlog.limits": 1,  # one depth and size limit for every entry (pure)
    "continuum.untrusted": 1,
    "continuum.ops.bounded": 1.2,  # bounds for reading files back: line size, JSON depth
    "continuum.rule_tables": 1,  # [[table]] entries of a TOML rules file (stdlib only)
    "continuum.eventlog.events": 2,
    "continuum.eventlog.event_model": 2.1,  # Event, the pydantic model for the API edge
    "continuum.eventlog.reports": 2.1,  # what a verification reports (pydantic models)
    "continuum.recovery.contract": 2,
    "continuum.eventlog.payloads": 2.5,
    "continuum.eventlog.notices": 2.6,  # which events call for a person (pure), used by the store
    "continuum.eventlog.archived": 2.6,  # what an archive marker says (pure), used by the store
    "continuum.safe_files": 1.5,  # private files written whole or not at all
    "continuum.eventlog.chain": 3,
    "continuum.state.components": 2.7,
    "continuum.state.action_fields": 2.75,  # an action record checked as plain data  # the state's components (plain constants)
    "continuum.state.records": 2.8,  # the state's models (frozen pydantic)
    "continuum.state.perception": 2.9,  # how far an observation is verified (pure)
    "continuum.state.projection": 3,
    "continuum.state.validation": 4,
    "continuum.recovery.engine": 5,
    "continuum.recovery.versions": 5,  # drift of recorded versions at resume (pure)
    "continuum.recovery.revalidation": 5,  # when the environment is checked during a run (pure)
    "continuum.store": 6,  # its modules import each other (one package), in no circle
    "continuum.ledger.budget": 6.25,  # what effects cost and a run's limits (pure)
    "continuum.ledger.approval_rules": 2,  # parsing approvals.toml: which calls need a person
    "continuum.ledger.approvals": 6.5,  # the per-call check against the log, under the ledger
    "continuum.ledger.owners": 6.1,  # who performs an action, alive or not (/proc, leases)
    "continuum.ledger.identity": 6.2,  # an action's normalized arguments and dedup key
    "continuum.ledger.answers": 6.7,  # what an intercept answers, as plain data
    "continuum.ledger.gate": 6.8,  # what an intercept answers; its approval gate
    "continuum.ledger.core": 7,
    "continuum.ledger.outbox": 7,  # delivering the notification outbox (over the store)
    "continuum.ledger.deliverer": 7.05,  # its background deliverer in the servers
    "continuum.recovery.verification": 7,
    "continuum.recovery.plain_state": 7.1,  # a run's state without its actions, plain data
    "continuum.recovery.checkpoints": 7.2,
    "continuum.ops.signing": 7.1,  # signed anchors (Ed25519)
    "continuum.ops.archive_file": 7.25,  # the archive file format
    "continuum.ops.archive": 7.3,  # archiving a run's old history (over checkpoints, verification)
    "continuum.ops.backup_file": 7.35,  # the backup file format (tar, manifest, JSONL data)
    "continuum.ops.backup_checks": 7.37,  # a backup copy's schema and outbox against its log
    "continuum.ops.backup": 7.4,  # backup, verify-backup, restore (over archive's verify)
    "continuum.ops.operations": 7.6,  # what the facade does for long-lived stores
    "continuum.ops.transfer": 7.22,  # export/import (over checkpoints: an import marker seals one)
    "continuum.ops.audit": 7.22,  # audit export of human decisions (over signing, the store)
    "continuum.ops.audit_verify": 7.23,  # verifying an audit file offline
    "continuum.ops.prune": 7.3,  # archive then delete finished runs (over transfer)
    "continuum.ops.fork": 7.3,  # a new run from a verified prefix of another (over transfer)
    "continuum.ops.migrate_original": 7.5,  # the original project's runs (over ledger, transfer)
    "continuum.state.environment": 7,
    "continuum.ledger.effect": 7.5,  # the effect seam over the ledger, under the facade and adapters
    "continuum.telemetry": 7.65,  # OpenTelemetry spans from committed events (over the store)
    "continuum.runtime.results": 7.7,  # what the facade returns (models)
    "continuum.runtime.runs": 7.8,  # the facade's first layer: runs, events, state, checkpoints
    "continuum.runtime.effects": 7.9,  # its second: the ledger, approvals, the outbox
    "continuum.runtime.perception": 7.95,  # its third: observations and plan branches
    "continuum.runtime.facade": 8,  # Continuum: the two layers plus recovery
    "continuum.runtime.verdicts": 8.05,  # a server's watch: verdicts that turn request_human
    "continuum.bench": 8.5,
    "continuum.hooks": 8.7,  # host hooks: used by the CLI and by their own lean entry point
    "continuum.serving": 8.7,  # what an HTTP server needs (flags, tokens, TLS), for mcp and cli.ui
    "continuum.gateway": 8.9,  # gateways in front of MCP servers and HTTP APIs (over the facade)
    "continuum.ui": 8.9,  # the operator page (over the facade), mounted by cli.ui and mcp.server
    "continuum.cli": 9,
    "continuum.mcp": 9,
    "continuum.adapters": 9,
    "continuum": 10,  # the package __init__ re-exports the public API
    "continuum.__main__": 10,
}
EDGES = ("continuum.cli", "continuum.mcp", "continuum.adapters")
EDGE_IMPORTS_ALLOWED: set[tuple[str, str]] = set()

# The package map (references/architecture.md opens with it), lowest first. "" is the
# leaves: the top-level modules (errors, types, version, faults, log, untrusted,
# safe_files, rule_tables), which import no package.
PACKAGES: dict[str, int] = {
    "": 0,
    "continuum.eventlog": 1,
    "continuum.state": 2,
    "continuum.store": 3,
    "continuum.ledger": 4,
    "continuum.recovery": 4,
    "continuum.ops": 5,
    "continuum.telemetry": 5,
    "continuum.runtime": 6,
    "continuum.bench": 7,
    "continuum.hooks": 8,
    "continuum.serving": 8,
    "continuum.ui": 9,
    "continuum.gateway": 9,
    "continuum.cli": 10,
    "continuum.mcp": 10,
    "continuum.adapters": 10,
    "continuum": 11,
}


def package_of(module: str) -> str:
    if module in ("continuum", "continuum.__main__"):
        return "continuum"
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or f"{parts[0]}.{parts[1]}" in PACKAGES else ""


def package_violation(name: str, imported: str) -> str | None:
    mine, theirs = package_of(name), package_of(imported)
    assert mine in PACKAGES, f"{name}: package {mine} has no place in PACKAGES"
    assert theirs in PACKAGES, f"{imported}: package {theirs} has no place in PACKAGES"
    if mine == theirs:
        return None
    if PACKAGES[theirs] < PACKAGES[mine]:
        return None
    return (
        f"{name} (package {mine or 'leaves'}, {PACKAGES[mine]}) imports {imported} "
        f"(package {theirs or 'leaves'}, {PACKAGES[theirs]})"
    )


PURE = (
    "continuum.eventlog.canonical",
    "continuum.eventlog.limits",
    "continuum.untrusted",
    "continuum.ops.bounded",
    "continuum.eventlog.payloads",
    "continuum.eventlog.notices",
    "continuum.eventlog.archived",
    "continuum.eventlog.events",
    "continuum.eventlog.event_model",
    "continuum.eventlog.reports",
    "continuum.eventlog.chain",
    "continuum.state.components",
    "continuum.state.records",
    "continuum.state.perception",
    "continuum.state.projection",
    "continuum.state.validation",
    "continuum.recovery.contract",
    "continuum.recovery.engine",
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


def _type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(path: Path, *, typing_only: bool = True, names: bool = False) -> list[str]:
    """The modules ``path`` imports; with ``typing_only=False`` not those imported only
    for type checking (``if TYPE_CHECKING:``), which never run; with ``names``, also
    ``pkg.name`` for each ``from pkg import name`` (the name may be a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: list[str] = []
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if not typing_only and _type_checking(node):
            todo += [n for n in getattr(node, "orelse", [])]
            continue
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = [f"{node.module}.{a.name}" for a in node.names]
            if names and all(sub in KNOWN for sub in subs):
                out += subs  # `from continuum.ui import page`: the modules, not the package
            else:
                out.append(node.module)
        todo += list(ast.iter_child_nodes(node))
    return out


MODULES = sorted(SRC.rglob("*.py"))
KNOWN = {module_name(p) for p in MODULES}


def layer_violations(name: str, imported: list[str]) -> list[str]:
    layer, rank = rank_of(name)
    bad = []
    for imp in imported:
        if not imp.startswith("continuum"):
            continue
        if (problem := package_violation(name, imp)) is not None:
            bad.append(problem)
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
    path = SRC / (name.split(".", 1)[1].replace(".", "/") + ".py")
    found = [
        i
        for i in imports_of(path)
        if i in IO_MODULES
        or i.split(".")[0] in IO_MODULES
        or any(i.startswith(m + ".") for m in IO_MODULES)
    ]
    assert found == [], f"{name} imports I/O modules {found}"


def test_layer_check_catches_an_upward_import() -> None:
    # Negative control: the checker must flag a pure module importing the store, an edge
    # importing another edge, a package importing its sibling, and a leaf a package.
    assert layer_violations("continuum.state.projection", ["continuum.store.sqlite"])
    assert layer_violations("continuum.cli.main", ["continuum.mcp.server"])
    assert layer_violations("continuum.cli.ui", ["continuum.mcp.http"])
    assert layer_violations("continuum.ledger.core", ["continuum.recovery.engine"])
    assert layer_violations("continuum.untrusted", ["continuum.eventlog.events"])
    assert not layer_violations("continuum.runtime.facade", ["continuum.store"])


def _graph() -> dict[str, set[str]]:
    names = {module_name(p) for p in MODULES}
    graph: dict[str, set[str]] = {}
    for path in MODULES:
        name = module_name(path)
        deps = set()
        for imp in imports_of(path, typing_only=False, names=True):
            # "from continuum.hooks import gate" names a module too: resolve to the longest
            # module the import names.
            while imp and imp not in names:
                imp = imp.rpartition(".")[0]
            if imp and imp != name and imp.startswith("continuum") and imp != "continuum":
                deps.add(imp)
        graph[name] = deps
    return graph


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (module -> modules it imports), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep) :] + [dep]
            if dep not in state and (found := visit(dep)) is not None:
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_no_import_circle() -> None:
    """Imports inside functions count: a lazy import is still an arrow (imports for type
    checking alone do not: they never run)."""
    circle = find_circle(_graph())
    assert circle is None, " -> ".join(circle or [])


def test_the_circle_check_finds_a_circle() -> None:
    # Negative control.
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b"}, "b": set()}) is None
