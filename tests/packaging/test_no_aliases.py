"""No alias modules: every module path is where its code lives.

The package's top level holds the facade (``aiospark/__init__.py``) and the layers' packages only;
no module re-exports another from an old path. The applications run from their one home,
``python -m aiospark.app.<module>`` and the ``aiospark`` command.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
ROOT = SRC / "aiospark"

#: the top level's files besides packages: the facade and the PEP 561 marker
TOP_LEVEL_FILES = {"__init__.py", "py.typed"}

#: paths that were aliases of moved modules: none may come back
OLD_PATHS = [
    "aiospark._moved", "aiospark.cli", "aiospark.cli_errors", "aiospark.demo", "aiospark.demo_cpu",
    "aiospark.demo_service", "aiospark.enrich", "aiospark.enrich_checks", "aiospark.progress",
    "aiospark.spark_submit", "aiospark.connectors._common", "aiospark.connectors.shared",
    "aiospark.connectors.http_client", "aiospark.connectors.http_transport",
    "aiospark.connectors.openai_chat", "aiospark.connectors.redis_ratelimit",
    "aiospark.connectors.postgres_keys",
]


def test_the_top_level_holds_only_the_facade_and_packages():
    stray = sorted(p.name for p in ROOT.iterdir()
                   if p.name not in TOP_LEVEL_FILES and p.name != "__pycache__"
                   and not (p.is_dir() and (p / "__init__.py").is_file()))
    assert stray == [], f"modules at aiospark's top level (put them in a layer's package): {stray}"


def _alias_like(path: Path) -> bool:
    """A module whose body is only a docstring, imports and a ``__getattr__`` redirect, or that
    imports the old alias helper."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("_moved"):
            return True
        if isinstance(node, ast.Import) and any(a.name.endswith("._moved") for a in node.names):
            return True
    if path.name == "__init__.py":
        return False
    names = {t.id for node in tree.body if isinstance(node, ast.Assign)
             for target in node.targets for t in ast.walk(target) if isinstance(t, ast.Name)}
    return "__getattr__" in names


def test_no_module_is_an_alias_of_another():
    aliases = sorted(str(p.relative_to(SRC)) for p in ROOT.rglob("*.py") if _alias_like(p))
    assert aliases == [], f"alias modules (import from the module's real home instead): {aliases}"


def test_the_alias_detector_sees_an_alias(tmp_path):
    old = tmp_path / "old.py"
    old.write_text('"""Moved."""\nfrom ._moved import alias\n__getattr__, __dir__ = alias(__name__, "x")\n')
    assert _alias_like(old)
    redirect = tmp_path / "redirect.py"
    redirect.write_text("import importlib\n__getattr__ = importlib.import_module('x').__getattr__\n")
    assert _alias_like(redirect)
    assert not _alias_like(ROOT / "core" / "queues.py")


def test_old_paths_do_not_import():
    assert [p for p in OLD_PATHS if importlib.util.find_spec(p) is not None] == []


def test_the_command_and_module_entry_points_run():
    scripts = {e.name: e.value for e in importlib.metadata.entry_points(group="console_scripts")
               if e.value.startswith("aiospark.")}
    assert scripts == {"aiospark": "aiospark.app.cli:main"}
    out = subprocess.run([sys.executable, "-m", "aiospark.app.cli", "--help"], capture_output=True,
                         text=True, timeout=300, cwd=SRC.parent)
    assert out.returncode == 0, out.stderr
    assert "{demo,enrich,journal,batch}" in out.stdout
