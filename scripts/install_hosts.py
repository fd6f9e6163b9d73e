"""Install the pinned coding hosts (tests/hosts/hosts.toml) and the published MCP servers
the gateway's tests use (tests/gateway/servers.toml) from the npm registry.

    python scripts/install_hosts.py [--root DIR] [NAME ...]

Each host goes into ROOT/NAME-VERSION/ (default ROOT: .cache/hosts in the checkout, or
$CONTINUUM_HOSTS_DIR). npm runs the packages' install scripts as it does for any user:
Claude Code's copies its native binary out of its platform package (which npm fetched
from the registry as an optional dependency); none fetches from elsewhere. A host
already installed at its pinned version is left alone, so a second run costs a
stat per host. Exit 0 when every host's binary answers ``--version`` with its pinned
version; otherwise 1, naming the host and what went wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PINS = ROOT / "tests" / "hosts" / "hosts.toml"
SERVERS = ROOT / "tests" / "gateway" / "servers.toml"
STAMP = ".installed"
NPM_SECONDS = 900


def pins() -> dict[str, dict[str, str]]:
    table: dict[str, dict[str, str]] = {}
    for path in (PINS, SERVERS):
        with path.open("rb") as f:
            table.update(tomllib.load(f))
    return table


def default_root() -> Path:
    return Path(os.environ.get("CONTINUUM_HOSTS_DIR") or ROOT / ".cache" / "hosts")


def host_dir(root: Path, name: str, pin: dict[str, str]) -> Path:
    return root / f"{name}-{pin['version']}"


def binary(root: Path, name: str, pin: dict[str, str]) -> Path:
    return host_dir(root, name, pin) / "node_modules" / ".bin" / pin["bin"]


def installed_version(path: Path) -> str:
    done = subprocess.run(
        [str(path), "--version"], capture_output=True, text=True, timeout=120, check=False
    )
    return (done.stdout or done.stderr).strip()


def install(root: Path, name: str, pin: dict[str, str]) -> str | None:
    """Install one host; None when it is in place, else what went wrong."""
    target = host_dir(root, name, pin)
    exe = binary(root, name, pin)
    if (target / STAMP).exists() and exe.exists():
        return None
    npm = shutil.which("npm")
    if npm is None:
        return "npm is not on PATH (this machine kind has Node.js and npm; install them)"
    print(f"installing {pin['package']}@{pin['version']} into {target} (npm registry)", flush=True)
    target.mkdir(parents=True, exist_ok=True)
    spec = f"{pin['package']}@{pin['version']}"
    cmd = [npm, "install", "--prefix", str(target), "--no-audit", "--no-fund"]
    cmd += ["--no-save", "--loglevel=error", spec]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=NPM_SECONDS, check=False)
    except subprocess.TimeoutExpired:
        return f"npm install {spec} took longer than {NPM_SECONDS} s"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"npm install {spec} failed (exit {done.returncode}): {last}"
    if not exe.exists():
        return f"npm installed {spec} but {exe} is missing"
    if pin.get("check") == "package":
        manifest = target / "node_modules" / pin["package"] / "package.json"
        version = json.loads(manifest.read_text(encoding="utf-8")).get("version", "")
    else:
        version = installed_version(exe)
    if pin["version"] not in version:
        return f"{exe} --version says {version!r}, not {pin['version']}"
    (target / STAMP).write_text(version + "\n", encoding="utf-8")
    return None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=None, help="where hosts go")
    parser.add_argument("names", nargs="*", help="hosts to install (default: all)")
    args = parser.parse_args(argv)
    root = args.root or default_root()
    table = pins()
    unknown = [n for n in args.names if n not in table]
    if unknown:
        print(f"unknown host(s) {', '.join(unknown)}; known: {', '.join(table)}", file=sys.stderr)
        return 1
    failed = 0
    for name in args.names or list(table):
        problem = install(root, name, table[name])
        if problem:
            print(f"{name}: {problem}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
