"""The part of `kubectl kustomize` that deploy/ uses, so tests need no
kubectl: each kustomization.yaml lists `resources` (files or directories
holding their own kustomization.yaml), rendered depth-first in order.

Anything else in a kustomization (generators, patches, a namespace
transformer, ...) is refused rather than ignored: the rendering here must
stay what kubectl would apply. When kubectl is installed, a test compares
both renderings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

SUPPORTED = {"resources", "apiVersion", "kind"}


def render(directory: Path) -> list[dict[str, Any]]:
    kfile = directory / "kustomization.yaml"
    spec = yaml.safe_load(kfile.read_text()) or {}
    unsupported = set(spec) - SUPPORTED
    if unsupported:
        raise ValueError(f"{kfile}: {sorted(unsupported)} not supported by tests/deploy/kustomize.py")
    out: list[dict[str, Any]] = []
    for entry in spec.get("resources", ()):
        path = (directory / entry).resolve()
        if not path.is_relative_to(directory.resolve()):
            raise ValueError(f"{kfile}: {entry} is outside the kustomization root")
        if path.is_dir():
            out.extend(render(path))
        else:
            out.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return out


def key(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    meta = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])
