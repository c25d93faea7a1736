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
    # name[extras]>=X, then an upper bound (",<3") or an environment marker ("; python_version ...")
    pattern = rf"{name}(?:\[[^\]]*\])?>=([\d.]+)(?:\s*[,;].*)?"
    found = [m.group(1) for r in requirements if (m := re.fullmatch(pattern, r))]
    assert len(found) == 1, (name, requirements)
    return found[0]


def ci_value(variable: str) -> str:
    found = re.findall(rf'^{variable}="([^"]+)"', CI, flags=re.M)
    assert len(found) == 1, variable
    return found[0]


def test_pyarrow_floor_is_the_one_the_pyspark35_leg_pins():
    assert floor(PYPROJECT["project"]["dependencies"], "pyarrow") == ci_value("PYARROW_OLDEST")
    assert floor(PYPROJECT["project"]["optional-dependencies"]["spark35"], "pyarrow") == ci_value("PYARROW_OLDEST")
    assert 'pins+=("pyarrow==$PYARROW_OLDEST.*"' in CI


def test_openai_floor_is_the_one_the_openai_oldest_leg_pins():
    assert floor(PYPROJECT["project"]["optional-dependencies"]["openai"], "openai") == ci_value("OPENAI_OLDEST")


# Every other dependency's floor: pyproject's requirement, the variable .ci/run pins it with.
FLOORS = {"pandas": "PANDAS_OLDEST", "aiohttp": "AIOHTTP_OLDEST", "orjson": "ORJSON_OLDEST",
          "pyreqwest": "PYREQWEST_OLDEST", "uvloop": "UVLOOP_OLDEST", "redis": "REDIS_OLDEST",
          "asyncpg": "ASYNCPG_OLDEST"}


@pytest.mark.parametrize("name", sorted(FLOORS))
def test_each_dependency_floor_is_the_one_the_pyspark35_leg_pins(name):
    assert floor(PYPROJECT["project"]["dependencies"], name) == ci_value(FLOORS[name])
    assert f'"{name}==${FLOORS[name]}"' in CI  # pinned exactly in the leg's pins


def test_every_dependency_with_a_floor_is_pinned_by_the_pyspark35_leg():
    names = {re.match(r"[A-Za-z0-9_.-]+", r).group(0) for r in PYPROJECT["project"]["dependencies"] if ">=" in r}
    assert names - {"pyspark", "pyarrow"} == set(FLOORS)  # PySpark's floor is the leg itself (3.5.*)


def test_the_uvloop_extra_says_the_same_floor():
    assert floor(PYPROJECT["project"]["optional-dependencies"]["uvloop"], "uvloop") == ci_value("UVLOOP_OLDEST")
