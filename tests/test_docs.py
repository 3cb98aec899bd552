"""The docs site: each generated page (docs/reference/) is what docs/generate.py makes from its source,
every page is in mkdocs.yml's nav, the site builds with --strict, and user docs speak of the product
(no issue numbers, no "seed"). README's own checks are in tests/test_readme.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.docsgen import REFERENCE, ROOT, generator

DOCS = ROOT / "docs"
PAGES = sorted(generator().PAGES)


@pytest.mark.parametrize("name", PAGES)
def test_each_generated_page_is_fresh(name):
    page = REFERENCE / name
    assert page.exists(), f"docs/reference/{name} is missing: run python docs/generate.py"
    assert page.read_text(encoding="utf-8") == generator().PAGES[name](), (
        f"docs/reference/{name} is stale: run python docs/generate.py")


def test_generate_check_fails_on_a_stale_page_and_rewrites_it(tmp_path, monkeypatch, capsys):
    gen = generator()
    for name in PAGES:
        (tmp_path / name).write_text((REFERENCE / name).read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "alerts.md").write_text("# stale\n", encoding="utf-8")
    monkeypatch.setattr(gen, "REFERENCE", tmp_path)
    assert gen.main(["--check"]) == 1
    assert "alerts.md is stale" in capsys.readouterr().err
    assert gen.main([]) == 0 and gen.main(["--check"]) == 0


def test_the_pages_hold_every_command_alert_and_lease_path():
    from fleet.cli.subcommands import parser
    from fleet.leases.openapi import document

    commands = (REFERENCE / "commands.md").read_text(encoding="utf-8")
    sub = next(a for a in parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    assert {m for m in re.findall(r"^## fleet (\w+)$", commands, re.M)} == set(sub.choices)
    alerts = (REFERENCE / "alerts.md").read_text(encoding="utf-8")
    rules = yaml.safe_load((ROOT / "deploy/prometheus/rules.yaml").read_text())
    names = [r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r]
    assert re.findall(r"^## (\w+)$", alerts, re.M) == names
    api = (REFERENCE / "lease-api.md").read_text(encoding="utf-8")
    for path in document(3600.0, 300, 1, False)["paths"]:
        assert f"`{path}`" in api, path


def _nav_files(nav) -> list[str]:
    out: list[str] = []
    for item in nav:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            for value in item.values():
                out += _nav_files(value) if isinstance(value, list) else [value]
    return out


def _mkdocs() -> dict:
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    return yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)  # a SafeLoader that skips python/ tags


def test_every_page_is_in_the_nav_and_every_nav_entry_exists():
    """A page left out of the nav is reachable only by a link: every page but the decision records (listed
    by docs/decisions/index.md) is in mkdocs.yml's nav."""
    nav = _nav_files(_mkdocs()["nav"])
    for entry in nav:
        assert (DOCS / entry).exists(), entry
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    left_out = sorted(p for p in pages - set(nav) if not p.startswith("decisions/"))
    assert left_out == [], f"pages missing from mkdocs.yml's nav: {left_out}"
    assert "decisions/index.md" in nav


def test_architecture_links_every_decision_record():
    records = sorted(p.name for p in (DOCS / "decisions").glob("[0-9][0-9][0-9][0-9]-*.md"))
    architecture = (DOCS / "architecture.md").read_text(encoding="utf-8")
    index = (DOCS / "decisions/index.md").read_text(encoding="utf-8")
    assert records and [n for n in records if f"(decisions/{n})" not in architecture] == []
    assert [n for n in records if f"({n})" not in index] == []
    assert [int(n[:4]) for n in records] == list(range(1, len(records) + 1)), "numbered 0001… without gaps"


# "seed" is also a NoCloud seed ISO (the kvm provider's cloud-init disk): only those uses are allowed.
_SEED_OK = re.compile(r"NoCloud seed|seediso|-seed\.iso|overlays?,? (and )?seeds?|overlay and seed|and the seed;", re.I)


def _user_docs() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


@pytest.mark.parametrize("path", _user_docs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_user_docs_speak_of_the_product_not_of_issues_or_the_seed(path):
    bad = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if re.search(r"\bissues? #?\d+", line, re.I):
            bad.append((number, line.strip()[:120]))
        if re.search(r"\bseeds?\b", _SEED_OK.sub("", line), re.I):
            bad.append((number, line.strip()[:120]))
    assert bad == []


def test_the_site_builds_strict(tmp_path):
    """What `make docs` runs: a broken link, a missing anchor or a bad nav entry fails the build."""
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (make deps installs it)")
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp_path / "site/reference/metrics/index.html").exists()
