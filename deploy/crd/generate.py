"""Write the CRDs in deploy/crd/ from the schema tables, the one source of
each field's type, bounds and description: `fleet.proxies.schema` (Proxy),
`fleet.health.schema` (ProviderHealth) and `fleet.pools.schema` (ProxyPool).
The docs' tables of their fields (docs/reference/resources.md) are written
from the same tables, and `CRDS` below, by docs/generate.py.

    python deploy/crd/generate.py            # rewrite the CRDs
    python deploy/crd/generate.py --check    # exit 1 if any is stale

`tests/deploy/test_crd.py` asserts the committed files are what this writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from fleet.health import schema as health_schema  # noqa: E402
from fleet.kube.crd import Crd  # noqa: E402
from fleet.pools import schema as pool_schema  # noqa: E402
from fleet.proxies import schema as proxy_schema  # noqa: E402

GENERATED = "Generated from {source} by deploy/crd/generate.py: edit the table there, then run it."
# (the CRD, the module holding its table, the roots the docs' table of its fields lists)
CRDS: tuple[tuple[Crd, str, tuple[str, ...]], ...] = (
    (proxy_schema.CRD, "fleet/proxies/schema.py", ("spec", "status")),
    (health_schema.CRD, "fleet/health/schema.py", ("status",)),
    (pool_schema.CRD, "fleet/pools/schema.py", ("spec", "status")),
)


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the descriptions) as `|-` blocks, as controller-gen writes them."""


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)


def render_crd(crd: Crd, source: str) -> str:
    comment = "".join(f"# {line}".rstrip() + "\n" for line in crd.comment.splitlines())
    header = f"# {GENERATED.format(source=source)}\n" + comment
    return header + yaml.dump(crd.document(), Dumper=_Dumper, sort_keys=False, allow_unicode=True)


def outputs() -> dict[Path, str]:
    """Every generated file and its text."""
    return {HERE / crd.file: render_crd(crd, source) for crd, source, _ in CRDS}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 if a CRD is not what the tables make")
    args = p.parse_args(argv)
    stale = [path for path, text in outputs().items() if not path.exists() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"{path} is stale: run python {Path(__file__).relative_to(ROOT)}", file=sys.stderr)
        return 1 if stale else 0
    for path, text in outputs().items():
        if path in stale:
            path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
