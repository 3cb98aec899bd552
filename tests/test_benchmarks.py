"""The benchmarks import the project (its harnesses are `fleet.testing`), never its tests: a benchmark runs from a
checkout or an installed tree that has no tests package, and a test's fixture is not a benchmark's harness."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.name)
def test_a_benchmark_imports_no_test_module(path):
    assert {n for n in imported(path) if n == "tests" or n.startswith("tests.")} == set()


def test_the_benchmarks_are_found():
    assert len(BENCHMARKS) > 5
