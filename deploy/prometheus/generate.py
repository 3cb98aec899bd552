"""Render `prometheusrule.yaml` (a monitoring.coreos.com/v1 PrometheusRule)
from `rules.yaml`, the one source of fleet's alert rules.

    python deploy/prometheus/generate.py                 # rewrite prometheusrule.yaml
    python deploy/prometheus/generate.py --check         # exit 1 if it is stale
    python deploy/prometheus/generate.py --runbook-base https://git.example/fleet/blob/main/ \\
        --format rules                                   # print, with absolute runbook links

`tests/deploy/test_alerts.py` asserts the committed file is what this prints.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
RULES = HERE / "rules.yaml"
PROMETHEUS_RULE = HERE / "prometheusrule.yaml"
RUNBOOK_PREFIX = "docs/runbooks/"
HEADER = "# Generated from rules.yaml by deploy/prometheus/generate.py: edit rules.yaml, then run it.\n"

METADATA = {
    "name": "fleet",
    "namespace": "fleet-system",
    # Prometheus Operator loads rules matching its ruleSelector: add the label
    # yours selects on (kube-prometheus-stack: `release: <its release name>`).
    "labels": {"app.kubernetes.io/name": "fleet", "app.kubernetes.io/component": "alerts"},
}


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the expressions) as literal blocks, as in rules.yaml."""


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)


def load_rules(path: Path = RULES) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def with_runbook_base(rules: dict[str, Any], base: str) -> dict[str, Any]:
    """`docs/runbooks/X.md` → `<base>docs/runbooks/X.md`."""
    for group in rules["groups"]:
        for rule in group["rules"]:
            url = rule.get("annotations", {}).get("runbook_url", "")
            if url.startswith(RUNBOOK_PREFIX):
                rule["annotations"]["runbook_url"] = base.rstrip("/") + "/" + url
    return rules


def prometheus_rule(rules: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "metadata": METADATA, "spec": rules}


def dump(doc: dict[str, Any]) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=10_000, allow_unicode=True)


def render(rules: dict[str, Any]) -> str:
    return HEADER + dump(prometheus_rule(rules))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 if prometheusrule.yaml is not what rules.yaml renders to")
    p.add_argument("--runbook-base", help="prefix the repo-relative runbook_url with this URL (prints instead of writing)")
    p.add_argument("--format", choices=("prometheusrule", "rules"), default="prometheusrule", help="what to print with --runbook-base")
    args = p.parse_args(argv)
    rules = load_rules()
    if args.runbook_base:
        rules = with_runbook_base(rules, args.runbook_base)
        sys.stdout.write(render(rules) if args.format == "prometheusrule" else dump(rules))
        return 0
    text = render(rules)
    if args.check:
        if PROMETHEUS_RULE.read_text() != text:
            print(f"{PROMETHEUS_RULE} is stale: run python {__file__}", file=sys.stderr)
            return 1
        return 0
    PROMETHEUS_RULE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
