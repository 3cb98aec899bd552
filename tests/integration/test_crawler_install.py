"""fleet-crawler installed alone, as a crawler installs it: a fresh venv (`python -m venv`), `pip install ./crawler`
with the project's pins (PyPI for the build and the packages), then what came with it — nothing of the server's
stack (Celery, kombu, Kubernetes, Redis, OpenTelemetry, pydantic) — and what `import fleet_crawler` costs
(`python -X importtime`; the figures are printed: `pytest -s` shows them)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = re.compile(r"^(celery|kombu|kubernetes|redis|hiredis|opentelemetry.*|pydantic.*|egress-fleet|fleet)$")
# httpx and what it needs; pip (and setuptools on older Pythons) come with the venv.
EXPECTED = {"fleet-crawler", "httpx", "httpcore", "anyio", "certifi", "idna", "h11", "sniffio", "typing-extensions",
            "pip", "setuptools"}


def run(*argv: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert done.returncode == 0, f"{argv}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


def pinned(name: str) -> str | None:
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.startswith(f"{name}=="):
            return line.split("==", 1)[1].split(";")[0].strip()
    return None


def test_the_crawler_package_installs_alone_and_imports_quickly(tmp_path: Path):
    src = tmp_path / "crawler"  # a copy: the build writes nothing into the tree
    shutil.copytree(ROOT / "crawler", src, ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    py = venv / "bin" / "python"
    run(py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-c", ROOT / "constraints.txt", src, timeout=540)

    listed = {canonicalize_name(p["name"]): p["version"]
              for p in json.loads(run(py, "-m", "pip", "list", "--format", "json").stdout)}
    print(f"\nfleet-crawler pulled: {', '.join(f'{n} {v}' for n, v in sorted(listed.items()))}")
    assert not [n for n in listed if FORBIDDEN.match(n)], listed
    assert set(listed) <= EXPECTED, f"more than httpx's needs: {sorted(set(listed) - EXPECTED)}"
    assert listed["httpx"] == pinned("httpx")  # installed from the project's pins

    loaded = run(py, "-c", "import sys, fleet_crawler; print(' '.join(sorted(m.split('.')[0] for m in sys.modules)))")
    assert not {"scrapy", "twisted", "aiohttp", "playwright", "fleet"} & set(loaded.stdout.split())

    run(py, "-c", "import fleet_crawler")  # compile the bytecode once, as an installed crawler runs
    totals = []
    for _ in range(3):
        trace = run(py, "-X", "importtime", "-c", "import fleet_crawler").stderr
        rows = [line.split("|") for line in trace.splitlines() if line.startswith("import time:") and "|" in line]
        ours = {row[2].strip(): int(row[1]) for row in rows if row[1].strip().isdigit()}
        totals.append((ours["fleet_crawler"], ours["httpx"]))
    best = min(totals)
    print(f"import fleet_crawler: {best[0] / 1000:.1f} ms cumulative, of which httpx {best[1] / 1000:.1f} ms "
          f"(best of 3: {[f'{t / 1000:.1f}' for t, _ in totals]} ms)")
    assert best[0] < 1_000_000  # µs: generous for a loaded CI machine; typically about a tenth of it
