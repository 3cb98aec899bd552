"""The part of `kubectl kustomize` that deploy/ uses, so tests need no
kubectl: each kustomization.yaml lists `resources` (files inside its
directory, or directories holding their own kustomization.yaml), rendered
depth-first in order.

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


def render(directory: Path, _visiting: tuple[Path, ...] = ()) -> list[dict[str, Any]]:
    """As kustomize's default load restrictor: a file must be inside the
    kustomization's root; a directory (a kustomization of its own) may be
    anywhere but in an ancestor of a root being rendered (a cycle)."""
    root = directory.resolve()
    if any(v.is_relative_to(root) for v in _visiting):
        raise ValueError(f"cycle detected: {root} contains a kustomization being rendered")
    kfile = directory / "kustomization.yaml"
    spec = yaml.safe_load(kfile.read_text()) or {}
    unsupported = set(spec) - SUPPORTED
    if unsupported:
        raise ValueError(f"{kfile}: {sorted(unsupported)} not supported by tests/deploy/kustomize.py")
    out: list[dict[str, Any]] = []
    for entry in spec.get("resources", ()):
        path = (directory / entry).resolve()
        if path.is_dir():
            out.extend(render(path, (*_visiting, root)))
        elif not path.is_relative_to(root):
            raise ValueError(f"{kfile}: {entry} is outside the kustomization root")
        else:
            out.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return out


def key(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    meta = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])
