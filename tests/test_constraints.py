"""constraints.txt is fresh: every range in pyproject.toml is pinned there by a version inside it, and the
environment the tests run in was installed from those pins (`make deps` passes `-c constraints.txt`).

Offline on purpose: re-resolving against the index would fail whenever upstream releases something, which is
what the pins are there to keep out of CI. `make lock` refreshes the file."""

from __future__ import annotations

import tomllib
from collections import defaultdict
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def pins(text: str) -> dict[str, list[tuple[Version, Requirement]]]:
    """Each package's pins (a universal lock may pin one package twice, under exclusive markers)."""
    out: dict[str, list[tuple[Version, Requirement]]] = defaultdict(list)
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        req = Requirement(line)
        (spec,) = req.specifier
        assert spec.operator == "==", f"constraints.txt pins exactly: {line!r}"
        out[canonicalize_name(req.name)].append((Version(spec.version), req))
    return out


PROJECTS = ("pyproject.toml", "crawler/pyproject.toml")  # the server's and the crawler's package (`make lock` pins both)


def project_requirements() -> list[tuple[str, Requirement]]:
    reqs = []
    for path in PROJECTS:
        project = tomllib.loads((ROOT / path).read_text())["project"]
        reqs += [(f"{project['name']} dependencies", Requirement(r)) for r in project["dependencies"]]
        for extra, items in project["optional-dependencies"].items():
            reqs += [(f"{project['name']}[{extra}]", Requirement(r)) for r in items]
    return reqs


def test_make_lock_resolves_every_project():
    makefile = (ROOT / "Makefile").read_text()
    assert f"uv pip compile {' '.join(PROJECTS)} --all-extras" in makefile


LOCK = pins((ROOT / "constraints.txt").read_text())


def test_the_lock_says_how_to_refresh_it():
    assert "make lock" in (ROOT / "constraints.txt").read_text().splitlines()[1]


@pytest.mark.parametrize(("where", "req"), project_requirements(), ids=lambda v: str(v))
def test_every_range_in_pyproject_is_pinned_inside_it(where, req):
    got = LOCK.get(canonicalize_name(req.name))
    assert got, f"{req} ({where}) is not in constraints.txt: run `make lock`"
    assert any(req.specifier.contains(v, prereleases=True) for v, _ in got), (
        f"{req} ({where}) admits none of constraints.txt's pins {[str(v) for v, _ in got]}: run `make lock`")


def test_the_environment_was_installed_from_the_pins():
    wrong = []
    for name, choices in LOCK.items():
        try:
            installed = Version(metadata.version(name))
        except metadata.PackageNotFoundError:
            continue  # an extra this environment does not install
        meant = [v for v, req in choices if req.marker is None or req.marker.evaluate()]
        if meant and installed not in meant:
            wrong.append(f"{name} {installed} (pinned {meant[0]})")
    assert not wrong, "installed without -c constraints.txt (`make deps`): " + ", ".join(wrong)
