"""The floors pyproject admits are the versions .ci/run pins in its oldest legs: a floor raised or
lowered in one place and not the other would claim a version no test runs."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CI = (ROOT / ".ci" / "run").read_text()


def floor(requirements: list[str], name: str) -> str:
    found = [m.group(1) for r in requirements if (m := re.fullmatch(rf"{name}(?:\[[^\]]*\])?>=([\d.]+)(?:,.*)?", r))]
    assert len(found) == 1, (name, requirements)
    return found[0]


def ci_value(variable: str) -> str:
    found = re.findall(rf'^{variable}="([^"]+)"', CI, flags=re.M)
    assert len(found) == 1, variable
    return found[0]


def test_pyarrow_floor_is_the_one_the_pyspark35_leg_pins():
    assert floor(PYPROJECT["project"]["dependencies"], "pyarrow") == ci_value("PYARROW_OLDEST")
    assert floor(PYPROJECT["project"]["optional-dependencies"]["spark35"], "pyarrow") == ci_value("PYARROW_OLDEST")
    assert 'pins+=("pyarrow==$PYARROW_OLDEST.*")' in CI


def test_openai_floor_is_the_one_the_openai_oldest_leg_pins():
    assert floor(PYPROJECT["project"]["optional-dependencies"]["openai"], "openai") == ci_value("OPENAI_OLDEST")
