"""Where each host reads its MCP servers, in which format, and which client names it sends.

One table (``CLIENTS``) for `continuum mcp install|uninstall|doctor`, built from what the
real binaries did (tests/hosts/, references/mcp.md "Hosts"):

- Claude Code: ``.mcp.json``, ``{"mcpServers": {"continuum": {"type": "stdio", ...}}}``.
- Gemini CLI: ``.gemini/settings.json`` (comments allowed), ``mcpServers`` as well.
- Codex: ``.codex/config.toml``, a ``[mcp_servers.continuum]`` table with
  ``required = true`` (without it ``codex exec`` does not wait for the server, and its
  tools are missing from the first model request). Codex reads a project's ``.codex/``
  only once the project is trusted.
- Kilo Code: ``.kilo/kilo.jsonc``, ``{"mcp": {"continuum": {"type": "local", "command":
  [...], "environment": {...}}}}`` (comments allowed): the project file Kilo reads last
  (so it wins over ``kilo.jsonc``, ``opencode.json`` and ``.kilocode/``) and the one its
  own config writer uses; ``.kilocode/mcp.json`` is only a legacy import for it.

Each format has the same three operations: read (``{}`` when absent; a file that cannot
be merged into is refused and left untouched), put our entry in, take it out. Every other
server and setting is kept. TOML is edited as text (our table is replaced or appended,
nothing else is rewritten), so comments and layout in the rest of the file survive.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from continuum.errors import UsageError

SERVER_NAME = "continuum"
ALLOW_ENV = "CONTINUUM_MCP_MUTATING_CLIENTS"


@dataclass(frozen=True)
class ClientName:
    name: str  # clientInfo.name as sent in initialize
    sent_by: str  # which versions send it, and how that is known


@dataclass(frozen=True)
class ClientSpec:
    key: str  # --client
    label: str
    path: str  # the project file it reads
    format: str  # "json" (mcpServers), "jsonc-mcp" (Kilo's mcp), "toml" (Codex)
    names: tuple[ClientName, ...]
    note: str = ""  # said after writing: what the host still needs ({project}: quoted dir)
    comments: bool = False  # the host allows // and /* */ comments in the file


CLIENTS: dict[str, ClientSpec] = {
    "claude-code": ClientSpec(
        "claude-code",
        "Claude Code",
        ".mcp.json",
        "json",
        (ClientName("claude-code", "Claude Code 2.1.328 (tests/hosts, real binary)"),),
        "claude -p loads it as is; an interactive session asks once whether to use the "
        "project's servers",
    ),
    "gemini": ClientSpec(
        "gemini",
        "Gemini CLI",
        ".gemini/settings.json",
        "json",
        (ClientName("gemini-cli-mcp-client", "Gemini CLI 0.61.0 (tests/hosts, real binary)"),),
        "Gemini CLI starts a project's stdio MCP servers only in a trusted folder "
        "(headless, an untrusted folder exits 55): trust it once in an interactive "
        "session, or list it in ~/.gemini/trustedFolders.json",
        comments=True,
    ),
    "codex": ClientSpec(
        "codex",
        "Codex",
        ".codex/config.toml",
        "toml",
        (ClientName("codex-mcp-client", "Codex 0.171.0 (tests/hosts, real binary)"),),
        "Codex reads a project's .codex/ only once the project is trusted: add "
        '[projects.{project}] trust_level = "trusted" to ~/.codex/config.toml (an '
        "interactive codex in the project asks once), or install with --config "
        "~/.codex/config.toml",
    ),
    "kilo": ClientSpec(
        "kilo",
        "Kilo Code",
        ".kilo/kilo.jsonc",
        "jsonc-mcp",
        (
            ClientName("kilo", "Kilo CLI 7.7.7 (tests/hosts, real binary)"),
            ClientName("opencode", "Kilo CLI 7.0.x (built on OpenCode; reported)"),
            ClientName("Kilo Code", "the Kilo Code VS Code extension (its source)"),
        ),
        comments=True,
    ),
}


def all_names() -> list[str]:
    """Every client name of every host, in table order (doctor checks each)."""
    return [n.name for spec in CLIENTS.values() for n in spec.names]


def _refused(path: Path, problem: str, hint: str = "use --print and merge by hand") -> UsageError:
    return UsageError(
        f"{path} {problem}; it was left untouched", code="usage.bad_config_file", hint=hint
    )


def strip_json_comments(text: str) -> tuple[str, bool]:
    """``text`` without its ``//`` and ``/* */`` comments, and whether it had any.

    Only outside strings (``"http://x"`` keeps its slashes); a comment becomes spaces
    (its newlines kept), so a parse error still points at the right line and column. An
    unterminated ``/*`` is left as it is, for the parser to refuse."""
    out: list[str] = []
    i, n, found, in_string = 0, len(text), False, False
    while i < n:
        c = text[i]
        if in_string:
            if c == "\\":
                out.append(text[i : i + 2])
                i += 2
                continue
            in_string = c != '"'
        elif c == '"':
            in_string = True
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i, found = end, True
            continue
        elif text.startswith("/*", i) and (close := text.find("*/", i + 2)) >= 0:
            out.append("".join(ch if ch == "\n" else " " for ch in text[i : close + 2]))
            i, found = close + 2, True
            continue
        out.append(c)
        i += 1
    return "".join(out), found


_TRAILING_COMMA = re.compile(r",(\s*[}\]])")


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) else "it is not UTF-8"
        raise _refused(path, f"cannot be read ({reason})", "fix or move the file") from e


def servers_key(spec: ClientSpec) -> str:
    """The key of the servers' object in ``spec``'s file."""
    return {"json": "mcpServers", "jsonc-mcp": "mcp", "toml": "mcp_servers"}[spec.format]


def read(spec: ClientSpec, path: Path) -> tuple[dict[str, Any], bool, str]:
    """The configuration in ``path`` ({} when absent), whether it had comments, and its
    text ("" when absent)."""
    text = _read_text(path)
    if text is None or not text.strip():
        return {}, False, text or ""
    if spec.format == "toml":
        try:
            config = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise _refused(path, f"is not valid TOML ({e})") from e
        found = False
    else:
        plain, found = strip_json_comments(text) if spec.comments else (text, False)
        if spec.format == "jsonc-mcp":
            plain = _TRAILING_COMMA.sub(r"\1", plain)  # JSONC allows them
        try:
            config = json.loads(plain)
        except ValueError as e:
            raise _refused(
                path, f"is not valid JSON ({e})", "fix or move the file, or use --print"
            ) from e
    key = servers_key(spec)
    if not isinstance(config, dict) or not isinstance(config.get(key, {}), dict):
        raise _refused(path, f"does not hold an object with a {key!r} object")
    return config, found, text


def entry(spec: ClientSpec, command: list[str], db_arg: str, names: list[str]) -> dict[str, Any]:
    """Our server's entry in ``spec``'s format."""
    args = [*command[1:], "--db", db_arg]
    env = {ALLOW_ENV: ",".join(names)}
    if spec.key == "claude-code":
        return {"type": "stdio", "command": command[0], "args": args, "env": env}
    if spec.key == "gemini":
        return {"command": command[0], "args": args, "env": env, "timeout": 30000, "trust": False}
    if spec.key == "codex":
        return {"command": command[0], "args": args, "env": env, "required": True}
    return {"type": "local", "command": [command[0], *args], "environment": env, "enabled": True}


def present(spec: ClientSpec, config: dict[str, Any]) -> bool:
    return SERVER_NAME in config.get(servers_key(spec), {})


def with_server(spec: ClientSpec, config: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    key = servers_key(spec)
    return {**config, key: {**config.get(key, {}), SERVER_NAME: ours}}


def without_server(spec: ClientSpec, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` without our server; a servers object only ours filled goes too."""
    key = servers_key(spec)
    if SERVER_NAME not in config.get(key, {}):
        return dict(config)
    servers = {k: v for k, v in config[key].items() if k != SERVER_NAME}
    if servers:
        return {**config, key: servers}
    return {k: v for k, v in config.items() if k != key}


def render(
    spec: ClientSpec, config: dict[str, Any], before_text: str, name: str = SERVER_NAME
) -> str:
    """The file's new text. JSON formats are written whole (2-space indent); TOML keeps
    ``before_text`` as it was except for the server ``name``'s table (ours by default;
    the gateway rewrites another server's)."""
    if spec.format != "toml":
        return json.dumps(config, indent=2, ensure_ascii=False) + "\n"
    text = toml_without(before_text, name)
    ours = config.get("mcp_servers", {}).get(name)
    if ours is not None:
        text = text.rstrip("\n") + ("\n\n" if text.strip() else "") + toml_table(ours, name)
    out = text if text.endswith("\n") or not text else text + "\n"
    try:  # what we write must say exactly what we meant
        check = tomllib.loads(out)
    except tomllib.TOMLDecodeError:
        check = {}
    if check != config:  # the whole file: nothing else may have moved or gone
        raise UsageError(
            f"could not place the {name!r} server in this TOML file safely (it defines "
            "mcp_servers in a form this command does not edit); it was left untouched",
            code="usage.bad_config_file",
            hint=f"use --print and merge the [mcp_servers.{_toml_key(name)}] table by hand",
        )
    return out


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _toml_key(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else json.dumps(name, ensure_ascii=False)


def _header(name: str) -> re.Pattern[str]:
    """A table header of server ``name``: [mcp_servers.NAME] or [mcp_servers.NAME.env],
    with the key parts bare or quoted."""
    part = re.escape(name) + "|" + re.escape(json.dumps(name, ensure_ascii=False))
    return re.compile(
        r"""^\s*\[\s*(?:mcp_servers|"mcp_servers")\s*\.\s*(?:"""
        + part
        + r""")\s*(?:\.[^\]]*)?\]\s*(?:#.*)?$"""
    )


_ANY_HEADER = re.compile(r"^\s*\[")


def toml_without(text: str, name: str = SERVER_NAME) -> str:
    """``text`` without server ``name``'s tables (header to the next header); other lines
    unchanged."""
    header = _header(name)
    out: list[str] = []
    skipping = False
    for line in text.splitlines(keepends=True):
        if header.match(line):
            skipping = True
            continue
        if skipping and _ANY_HEADER.match(line):
            skipping = False
        if not skipping:
            out.append(line)
    return "".join(out).rstrip("\n") + ("\n" if out else "")


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and value == value and abs(value) != float("inf"):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # JSON's escapes are valid TOML
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
        )
    raise TypeError(f"no TOML form for {type(value).__name__}")


def toml_table(ours: dict[str, Any], name: str = SERVER_NAME) -> str:
    lines = [f"[mcp_servers.{_toml_key(name)}]"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in ours.items()]
    return "\n".join(lines) + "\n"
