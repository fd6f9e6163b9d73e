"""A release that installs (issue 12, item 6): ``python -m build`` makes an sdist and a
wheel from a copy of the tree; the sdist carries LICENSE and README; the wheel, installed
into a fresh virtual environment, runs ``continuum`` and ``continuum-mcp`` and imports
``continuum`` from that environment, not from this repository.

No network: the build runs without isolation (setuptools and build come from the dev
extra), the fresh environment gets the dependencies from this interpreter's
site-packages through a ``.pth`` path line (which adds the directory only: the editable
install's own ``.pth`` there is not processed, so ``src/`` stays out of reach), and the
wheel is installed with ``--no-deps --no-index``.
"""

from __future__ import annotations

import email.parser
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

import continuum

ROOT = Path(__file__).resolve().parents[2]
DIST = "continuum-recovery"
pytestmark = pytest.mark.slow


def run(
    argv: list[str | Path], *, cwd: Path, env: dict[str, str], check: bool = True
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    if check:
        assert done.returncode == 0, f"{argv}\n{done.stdout}\n{done.stderr}"
    return done


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTHON", "CONTINUUM_", "VIRTUAL_ENV", "PIP_"))
    }
    return {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}


def copy_tree(dest: Path) -> Path:
    """What a release is built from: the project files, without build leftovers."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md"):
        shutil.copy2(ROOT / name, dest / name)
    shutil.copytree(
        ROOT / "src",
        dest / "src",
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"),
    )
    return dest


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(sdist, wheel) built by ``python -m build`` (the wheel from the unpacked sdist)."""
    base = tmp_path_factory.mktemp("release")
    tree = copy_tree(base / "tree")
    out = base / "dist"
    run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", out, tree],
        cwd=base,
        env=clean_env(),
    )
    sdists, wheels = sorted(out.glob("*.tar.gz")), sorted(out.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, sorted(p.name for p in out.iterdir())
    return sdists[0], wheels[0]


def test_the_sdist_carries_the_license_the_readme_and_the_sources(built: tuple[Path, Path]) -> None:
    sdist, _ = built
    version = continuum.__version__
    assert sdist.name == f"continuum_recovery-{version}.tar.gz"
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        pkg_info = tar.extractfile(f"continuum_recovery-{version}/PKG-INFO")
        assert pkg_info is not None
        meta = email.parser.Parser().parsestr(pkg_info.read().decode("utf-8"))
    for needed in (
        "LICENSE",
        "README.md",
        "pyproject.toml",
        "src/continuum/__init__.py",
        "src/continuum/py.typed",
        "src/continuum/cli/main.py",
    ):
        assert needed in names, needed
    assert not any(n.startswith("tests/") or "__pycache__" in n for n in names)
    assert (meta["Name"], meta["Version"]) == (DIST, version)
    assert meta["License-Expression"] == "Apache-2.0"


def test_the_wheel_has_both_commands_the_license_and_the_package_data(
    built: tuple[Path, Path],
) -> None:
    _, wheel = built
    version = continuum.__version__
    assert wheel.name == f"continuum_recovery-{version}-py3-none-any.whl"
    info = f"continuum_recovery-{version}.dist-info"
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry_points = z.read(f"{info}/entry_points.txt").decode("utf-8")
        meta = email.parser.Parser().parsestr(z.read(f"{info}/METADATA").decode("utf-8"))
        license_text = z.read(f"{info}/licenses/LICENSE").decode("utf-8")
    assert "continuum = continuum.cli.launch:main" in entry_points
    assert "continuum-mcp = continuum.mcp.__main__:main" in entry_points
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert (meta["Name"], meta["Version"], meta["Requires-Python"]) == (DIST, version, ">=3.11")
    assert "continuum/py.typed" in names
    assert any(n.startswith("continuum/hooks/") and n.endswith(".toml") for n in names)
    assert {n.split("/")[0] for n in names} == {"continuum", info}  # nothing else at the top


def test_the_wheel_installs_into_a_fresh_venv_and_passes_a_smoke_test(
    built: tuple[Path, Path], tmp_path: Path
) -> None:
    _, wheel = built
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python, bin_dir = env_dir / "bin" / "python", env_dir / "bin"
    site = Path(
        run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            cwd=tmp_path,
            env=clean_env(),
        ).stdout.strip()
    )
    # The dependencies: this interpreter's site-packages, as a plain path (no .pth in it
    # is processed, so the editable install's path to src/ is not added).
    deps = Path(sysconfig.get_paths()["purelib"])
    (site / "zz_dependencies.pth").write_text(f"{deps}\n", encoding="utf-8")
    env = clean_env(PATH=f"{bin_dir}{os.pathsep}/usr/bin:/bin")
    # Control: before the wheel is installed the dependencies import, continuum does not
    # (so what imports below is the wheel, not this repository).
    probe = "import pydantic, apsw, click, mcp\ntry:\n import continuum\nexcept ImportError:\n print('absent')"
    assert run([python, "-c", probe], cwd=tmp_path, env=env).stdout.strip() == "absent"

    run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
            "install",
            "--no-deps",
            "--no-index",
            "--quiet",
            wheel,
        ],
        cwd=tmp_path,
        env=env,
    )
    assert (bin_dir / "continuum").exists() and (bin_dir / "continuum-mcp").exists()

    version = run([bin_dir / "continuum", "--version"], cwd=tmp_path, env=env).stdout
    assert version.strip() == f"continuum, version {continuum.__version__}"
    db = tmp_path / "smoke.db"
    run([bin_dir / "continuum", "--db", db, "init"], cwd=tmp_path, env=env)
    run(
        [bin_dir / "continuum", "--db", db, "start", "r1", "--goal", "smoke"], cwd=tmp_path, env=env
    )
    verified = run(
        [bin_dir / "continuum", "--db", db, "--json", "verify", "r1"], cwd=tmp_path, env=env
    )
    assert json.loads(verified.stdout)["ok"] is True
    helped = run([bin_dir / "continuum-mcp", "--help"], cwd=tmp_path, env=env)
    assert "usage" in helped.stdout.lower() and "--db" in helped.stdout

    script = f"""
import importlib.metadata, json, continuum
from continuum import Continuum, InterceptStatus
with Continuum.open({str(db)!r}) as cx:
    r = cx.intercept("r1", "send", {{"n": 1}}, key="n1")
    assert r.status is InterceptStatus.STARTED
    cx.complete("r1", r.action_key)
    again = cx.intercept("r1", "send", {{"n": 1}}, key="n1").status
print(json.dumps({{"file": continuum.__file__, "again": again,
                  "dist": importlib.metadata.version({DIST!r}), "version": continuum.__version__}}))
"""
    answer = json.loads(run([python, "-c", script], cwd=tmp_path, env=env).stdout)
    assert Path(answer["file"]).is_relative_to(site), answer["file"]  # not the repo's src/
    assert not Path(answer["file"]).is_relative_to(ROOT)
    assert answer["again"] == "completed"
    assert answer["dist"] == answer["version"] == continuum.__version__
