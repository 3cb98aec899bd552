"""docs/generate.py, the generator of the docs site's reference pages, loaded once for the tests that
pin a page to its source (it is a script beside the pages, not a module of the project)."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"


@functools.cache
def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fleet_docs_generate", ROOT / "docs" / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
