"""The import graph of ``src/aiospark``: no cycle anywhere, and layers that point inward.

The graph is read from the source (``ast``): every ``import`` / ``from ... import`` of an aiospark
module, at module level and inside functions alike (a function-level import is a dependency that
runs later, not a missing one). Imports under ``if TYPE_CHECKING:`` never run: they count for the
layers, not for cycles.

Layers, inner to outer::

    core  <-  runtime  <-  lookup  <-  connectors, journal, budget  <-  spark  <-  applications

``journal`` and ``budget`` sit in the connectors' ring (no pyspark, never spark/ or app/): they
define the interfaces a store or a lease source implements (``journal/store.py``,
``budget/source.py``), and a system's implementation lives with the rest of that system's code in
``connectors/`` (the Redis journal store and budget leases in ``connectors/redis/``), importing
those interfaces; journal/budget use ``connectors/``'s secrets and redaction, and reach an
implementation only inside a function, chosen by a location's scheme (``journal/schemes.py``).
The two directions never close a loop: no-cycle (below) counts function-level imports too.
Talking to a system's client library is ``connectors/``' job: only its modules import
``redis`` (:func:`test_one_package_speaks_redis`), and one module of ``spark/`` serves the
driver's HTTP endpoint.

Applications are ``aiospark.app.*`` (the top level holds only the facade and the layers' packages,
``tests/packaging/test_no_aliases.py``). A rule broken (or a
cycle) in a part that is still being moved is listed in ``KNOWN`` (``KNOWN_CYCLES``) with why: it is
reported (a warning in the test summary), not failed on; anything else fails. The top-level ``aiospark/__init__.py`` is the
public facade: it may import any layer (lazily).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import warnings
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
ROOT = SRC / "aiospark"

#: (importer, imported) pairs that break a layer rule today, each with the reason it is not fixed here
KNOWN: dict[tuple[str, str], str] = {}

#: import cycles known today, reported rather than failed on (none: keep it so)
KNOWN_CYCLES: dict[frozenset[str], str] = {}

#: packages that only an extra (or a platform marker) brings: a module may fail to import without them
OPTIONAL_PACKAGES = {"openai", "tiktoken", "IPython", "pyreqwest", "uvloop", "httpx", "httpx2"}

APP_MODULES: tuple[str, ...] = ()  # every application lives in aiospark.app
APP_PREFIXES: tuple[str, ...] = ()


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def _resolve(module: str, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    base = module.split(".") if _is_package(module) else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _known_module(name: str) -> str | None:
    """The aiospark module ``name`` refers to (itself, else its closest parent that is a module)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                inside.update(id(n) for n in ast.walk(sub))
    return inside


def _imports(module: str) -> tuple[set[str], set[str], set[str]]:
    """(aiospark modules imported at run time, those imported only for type checking, third-party
    top-level packages) of one module."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"), str(MODULES[module]))
    typing_only = _type_checking_nodes(tree)
    run, typed, external = set(), set(), set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, node.level, node.module)
            # "from pkg import sub" imports the submodule; "from mod import name" the module
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for target in targets:
            if target.split(".")[0] != "aiospark":
                external.add(target.split(".")[0])
                continue
            found = _known_module(target)
            if found and found != module:
                (typed if id(node) in typing_only else run).add(found)
    return run, typed, external


GRAPH = {m: _imports(m) for m in MODULES}


def _layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "facade"
    top = parts[1]
    if top == "app" or top in APP_MODULES or top.startswith(APP_PREFIXES):
        return "app"
    return top


#: layer -> the layers it may import (itself included); None: anything
ALLOWED: dict[str, set[str] | None] = {
    "core": {"core"},
    "runtime": {"core", "runtime"},
    "lookup": {"core", "runtime", "lookup"},
    "connectors": {"core", "runtime", "lookup", "connectors", "journal", "budget"},
    "spark": {"core", "runtime", "lookup", "connectors", "journal", "budget", "spark"},
    # the connectors' ring (see the module docstring); no pyspark (checked below)
    "journal": {"core", "runtime", "lookup", "connectors", "journal", "budget"},
    "budget": {"core", "runtime", "lookup", "connectors", "journal", "budget"},
    "app": None, "facade": None,
}


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_the_graph_covers_the_tree():
    assert len(MODULES) > 50 and "aiospark.core" in MODULES and "aiospark.connectors.http" in MODULES
    # the reader resolves relative imports: connectors/http/lookup.py uses core only through ...lookup
    assert "aiospark.lookup.source" in GRAPH["aiospark.connectors.http.lookup"][0]
    assert "aiospark.connectors.http.transport" in GRAPH["aiospark.connectors.http._pyreqwest"][0]
    # and sees function-level imports: the choice of transport imports pyreqwest's only when asked
    assert "aiospark.connectors.http._pyreqwest" in GRAPH["aiospark.connectors.http.choose"][0]


def test_no_import_cycle_anywhere():
    cycles = []
    for cycle in _cycles({m: GRAPH[m][0] for m in MODULES}):
        if frozenset(cycle) in KNOWN_CYCLES:
            warnings.warn(f"import cycle (known, see KNOWN_CYCLES in {Path(__file__).name}): "
                          + " <-> ".join(cycle), stacklevel=1)
        else:
            cycles.append(cycle)
    assert cycles == [], "import cycles (module-level and function-level imports): " + "; ".join(
        " <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_layers_point_inward():
    broken, known = [], []
    for module in sorted(MODULES):
        run, typed, external = GRAPH[module]
        layer = _layer(module)
        allowed = ALLOWED[layer]
        for target in sorted(run | typed):
            target_layer = _layer(target)
            bad = (allowed is not None and target_layer not in allowed) or (
                layer in ("journal", "budget") and target_layer in ("spark", "app")) or (
                layer != "app" and layer != "facade" and target_layer == "facade")
            if bad:
                (known if (module, target) in KNOWN else broken).append(f"{module} ({layer}) -> {target} ({target_layer})")
        if layer in ("core", "runtime", "lookup", "journal", "budget") and "pyspark" in external:
            broken.append(f"{module} ({layer}) imports pyspark")
    for line in known:
        warnings.warn(f"layer rule broken (known, see KNOWN in {Path(__file__).name}): {line}", stacklevel=1)
    stale = [pair for pair in KNOWN if pair[1] not in GRAPH.get(pair[0], (set(), set()))[0] | GRAPH.get(
        pair[0], (set(), set()))[1]]
    for pair in stale:
        warnings.warn(f"KNOWN entry no longer needed: {pair}", stacklevel=1)
    assert broken == [], "imports against the layers:\n" + "\n".join(broken)


def test_the_layer_rules_catch_an_outward_import():
    assert _layer("aiospark.app.cli") == _layer("aiospark.app.demo_service") == "app"
    assert "spark" not in ALLOWED["connectors"] and "connectors" not in ALLOWED["core"]


def test_one_package_speaks_redis():
    # the Redis client library is used in connectors/redis/ only: the journal store, the budget
    # leases, the lookup and the rate limit (the journal and budget packages hold interfaces)
    speakers = sorted(m for m in MODULES if "redis" in GRAPH[m][2])
    assert speakers and all(m.startswith("aiospark.connectors.redis.") for m in speakers), speakers
    assert {"aiospark.connectors.redis.journal_store", "aiospark.connectors.redis.budget_leases"} <= set(speakers)


def test_the_driver_endpoint_is_one_module_shared_by_metrics_and_budgets():
    servers = sorted(m for m in MODULES if "http" in GRAPH[m][2] and m.startswith("aiospark.spark."))
    assert servers == ["aiospark.spark.endpoint"], servers
    for user in ("aiospark.spark.metrics", "aiospark.spark.budget"):
        assert "aiospark.spark.endpoint" in GRAPH[user][0], user


def test_stores_are_chosen_by_scheme_without_a_module_level_import_of_connectors():
    # journal/ reaches the Redis store inside a function only (a user's Journal("redis://...")), and
    # the store imports journal's interface, never back
    tree = ast.parse(MODULES["aiospark.journal.schemes"].read_text(encoding="utf-8"))
    top = {_resolve("aiospark.journal.schemes", n.level, n.module) for n in tree.body if isinstance(n, ast.ImportFrom)}
    assert not any(t.startswith("aiospark.connectors") for t in top), top
    assert "aiospark.connectors.redis.journal_store" in GRAPH["aiospark.journal.schemes"][0]
    assert "aiospark.journal.store" in GRAPH["aiospark.connectors.redis.journal_store"][0]
    assert "aiospark.budget.source" in GRAPH["aiospark.connectors.redis.budget_leases"][0]


def test_every_module_imports():
    # in a fresh interpreter, as a user would: each module on its own
    code = ("import importlib, sys, warnings\n"
            "warnings.simplefilter('ignore', DeprecationWarning)\n"
            "failed = []\n"
            f"for name in {sorted(MODULES)!r}:\n"
            "    try:\n"
            "        importlib.import_module(name)\n"
            "    except ImportError as exc:\n"
            "        if (exc.name or '').split('.')[0] == 'aiospark' or exc.name is None:\n"
            "            failed.append(f'{name}: {exc!r}')\n"
            "        else:\n"
            "            print('SKIPPED', name, 'needs', exc.name)\n"
            "    except Exception as exc:\n"
            "        failed.append(f'{name}: {exc!r}')\n"
            "print('FAILED', failed)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=SRC.parent)
    assert out.returncode == 0 and "FAILED []" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]
    # a module may need a package only an extra installs (or, on 3.10, pyreqwest, which has no wheel
    # there); any other missing package is a dependency pyproject forgot
    missing = {line.split()[-1].split(".")[0] for line in out.stdout.splitlines() if line.startswith("SKIPPED")}
    assert missing <= OPTIONAL_PACKAGES, out.stdout[-3000:]
