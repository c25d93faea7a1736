"""A fresh copy of the repository, a fresh virtual environment: the wheel and the README's first command.

The copy holds what a clone would (tracked and untracked-but-not-ignored files, as ``git ls-files``
lists them, so work not committed yet is included). The venv is made from this interpreter's base
Python without system site-packages, so nothing the development environment happens to have can
hide a missing dependency; pip's cache makes the installs quick. Slow (a few minutes) but run by CI.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def run(cmd, *, cwd, env, timeout=900) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          shell=isinstance(cmd, str), executable="/bin/bash" if isinstance(cmd, str) else None)
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done


def clean_env(venv: Path) -> dict:
    """The environment of a user who activated ``venv``: none of the test run's Python settings."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    return env


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """(copy of the repository, a fresh venv with the built wheel installed, the wheel)."""
    base = tmp_path_factory.mktemp("fresh")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    clone = base / "aiospark"
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():  # tracked files deleted in the working tree are not in a clone of it
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / name)
    venv = base / "venv"
    run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(venv)], cwd=base, env=dict(os.environ))
    env = clean_env(venv)
    run("python -m pip install -q --disable-pip-version-check build", cwd=base, env=env)
    run(f"python -m build --outdir {base / 'dist'} {clone}", cwd=base, env=env)  # sdist, then the wheel from it
    [wheel] = (base / "dist").glob("aiospark-*.whl")
    run(f"python -m pip install -q --disable-pip-version-check {wheel}", cwd=base, env=env)
    return clone, venv, wheel


def test_wheel_contents_and_metadata(fresh):
    _clone, _venv, wheel = fresh
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "aiospark/py.typed" in names and "aiospark/app/demo_service.py" in names and "aiospark/app/spark_submit.py" in names
    assert not [n for n in names if n.startswith(("aiospark/testing", "tests/"))], "test servers in the wheel"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "License-Expression: Apache-2.0" in metadata.splitlines()


def test_every_module_of_the_wheel_imports_in_a_fresh_venv(fresh, tmp_path):
    """The wheel alone, with the dependencies pyproject declares, holds a working package: every
    module imports and the console script runs. (The demo itself runs in the same venv through the
    README's command below; running it from the wheel too would repeat that coverage.)"""
    _clone, venv, _wheel = fresh
    env = clean_env(venv)
    code = ("import importlib, pkgutil, aiospark; "
            "names = [m.name for m in pkgutil.walk_packages(aiospark.__path__, 'aiospark.')]; "
            "[importlib.import_module(n) for n in names]; print(aiospark.__file__, len(names))")
    where, count = run(["python", "-c", code], cwd=tmp_path, env=env).stdout.split()
    assert where.startswith(str(venv)), where  # the installed wheel, not the checkout
    assert int(count) == len(list((ROOT / "src" / "aiospark").rglob("*.py"))) - 1  # all but aiospark/__init__
    assert "{demo,enrich,journal,batch}" in run(["aiospark", "--help"], cwd=tmp_path, env=env).stdout


def test_readme_first_command_word_for_word(fresh):
    """``pip install -e . && aiospark demo`` at the root of the copy, as the README says (full size)."""
    clone, venv, _wheel = fresh
    readme = (clone / "README.md").read_text()
    command = "pip install -e . && aiospark demo"
    assert f"\n{command} " in readme
    done = run(command, cwd=clone, env=clean_env(venv), timeout=1200)
    out = done.stdout
    assert "aiospark unordered_wait  | 100,000 |" in out, out[-3000:]
    assert "metrics: calls=100000 ok=100000" in out
    assert "where the time went" in out and "\n=> " in out
    speedup = float(out.split("speed-up: ")[1].split("x")[0].replace(",", ""))
    assert speedup > 5, out[-3000:]
