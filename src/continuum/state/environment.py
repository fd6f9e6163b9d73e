"""Environment providers: observe what a declared dependency is now (does I/O).

Providers: ``static`` (the caller says ``name=version``), ``file`` (SHA-256 of the
content), ``git`` (HEAD commit of a work tree) and ``callable`` (a function registered
with the runtime). Nothing observable -> ``None``: the dependency is ``unknown``, never
assumed unchanged.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from continuum.errors import UsageError
from continuum.untrusted import as_typed

if TYPE_CHECKING:
    from continuum.state.records import Dependency
    from continuum.state.validation import Observation

Probe = Callable[[], str | None]
PROVIDERS = ("static", "file", "git", "callable")


def file_checksum(path: str | Path) -> str | None:
    """``sha256:<hex>`` of a regular file's content, or None if it is not there."""
    p = Path(path)
    if not p.is_file():
        return None
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def git_head(path: str | Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def observe(
    dep: Dependency, given: Mapping[str, str], probes: Mapping[str, Probe]
) -> Observation | None:
    """What ``dep`` is now; a caller-given value always wins over a provider."""
    from continuum.state.validation import Observation

    if dep.name in given:
        value = given[dep.name]
        return Observation(version=value, checksum=value if dep.checksum is not None else None)
    if dep.provider == "file" and dep.locator:
        if not Path(dep.locator).exists():
            return Observation(present=False)
        checksum = file_checksum(dep.locator)
        return Observation(checksum=checksum) if checksum else None
    if dep.provider == "git" and dep.locator:
        if not Path(dep.locator).exists():
            return Observation(present=False)
        head = git_head(dep.locator)
        return Observation(version=head) if head else None
    if dep.provider == "callable" and dep.name in probes:
        probed = probes[dep.name]()
        return Observation(version=probed) if probed is not None else None
    return None


def declarations(
    *,
    env: Mapping[str, str] | None = None,
    files: list[str] | None = None,
    git: list[str] | None = None,
    probes: Mapping[str, Probe] | None = None,
    callables: list[str] | None = None,
) -> list[dict[str, str | None]]:
    """Dependency declarations as they go into a ``dependency_declared`` event."""
    out: list[dict[str, str | None]] = []
    for name, version in sorted((env or {}).items()):
        _check_name(name)
        if not isinstance(version, str):
            raise UsageError(
                f"env value for {name!r} must be a string",
                code="usage.bad_env",
                hint="pass name=version pairs",
            )
        out.append({"name": name, "provider": "static", "version": version})
    for path in files or []:
        checksum = file_checksum(path)
        if checksum is None:
            raise UsageError(
                f"file dependency {as_typed(path)} is not a readable regular file",
                code="usage.bad_dependency",
                hint="name an existing file",
            )
        out.append(
            {
                "name": f"file:{path}",
                "provider": "file",
                "checksum": checksum,
                "locator": str(Path(path).absolute()),
            }
        )
    for path in git or []:
        head = git_head(path)
        if head is None:
            raise UsageError(
                f"git dependency {as_typed(path)} is not a git work tree with a commit",
                code="usage.bad_dependency",
                hint="name a git repository directory",
            )
        out.append(
            {
                "name": f"git:{path}",
                "provider": "git",
                "version": head,
                "locator": str(Path(path).absolute()),
            }
        )
    for name in callables or []:
        probe = (probes or {}).get(name)
        if probe is None:
            raise UsageError(
                f"no callable provider registered as {name!r}",
                code="usage.bad_dependency",
                hint="register it with the runtime first",
            )
        out.append({"name": name, "provider": "callable", "version": probe()})
    return out


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name or len(name) > 200 or "=" in name:
        raise UsageError(
            f"dependency name {name!r} is not valid",
            code="usage.bad_env",
            hint="use name=version with a non-empty name without '='",
        )
