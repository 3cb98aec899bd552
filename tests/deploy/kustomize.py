"""The part of `kubectl kustomize` that deploy/ uses, so tests need no
kubectl: each kustomization.yaml lists `resources` (files inside its
directory, or directories holding their own kustomization.yaml, such as an
overlay's base), rendered depth-first in order; an overlay may then set
`namespace` and `images`, as kustomize's transformers do:

- `namespace`: every namespaced object is moved into it, a Namespace object
  renamed to it, and a (Cluster)RoleBinding's ServiceAccount subjects moved
  too when named `default` (kustomize's default) or naming a ServiceAccount
  of the kustomization (its name references); other subjects keep theirs;
- `images`: each `{name, newName, newTag, digest}` rewrites the `image` of
  every container and init container (anywhere in the object) whose image
  is `name`, `name:TAG` or `name@DIGEST`.

Anything else in a kustomization (generators, patches, labels, replicas,
...) or in these entries is refused rather than ignored, and so are the
kinds kustomize's namespace transformer treats specially beyond the above
(webhook configurations, APIServices, a CRD with a conversion webhook): the
rendering here must stay what kubectl would apply. When kubectl is
installed, a test compares both renderings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

SUPPORTED = {"resources", "namespace", "images", "apiVersion", "kind"}
IMAGE_FIELDS = {"name", "newName", "newTag", "digest"}
# Kinds the namespace transformer leaves alone (cluster-scoped), as far as deploy/ and its likely growth go.
CLUSTER_SCOPED = {
    "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "PersistentVolume", "StorageClass",
    "PriorityClass", "IngressClass", "RuntimeClass", "CSIDriver", "Node",
}
# Kinds whose namespace references kustomize also rewrites: not implemented here.
REFUSED_KINDS = {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "APIService"}


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
        if Path(entry).is_absolute():
            raise ValueError(f"{kfile}: {entry}: a resource cannot be absolute (kustomize's new root rule)")
        path = (directory / entry).resolve()
        if path.is_dir():
            out.extend(render(path, (*_visiting, root)))
        elif not path.is_relative_to(root):
            raise ValueError(f"{kfile}: {entry} is outside the kustomization root")
        else:
            out.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    if "namespace" in spec:
        accounts = {(o["metadata"]["name"], o["metadata"].get("namespace", "")) for o in out if o["kind"] == "ServiceAccount"}
        out = [set_namespace(obj, spec["namespace"], kfile, accounts) for obj in out]
    for image in spec.get("images", ()):
        if not set(image) <= IMAGE_FIELDS or "name" not in image:
            raise ValueError(f"{kfile}: images entry {image} not supported by tests/deploy/kustomize.py")
        out = [set_image(obj, image) for obj in out]
    return out


def set_namespace(obj: dict[str, Any], namespace: str, kfile: Path, accounts: set[tuple[str, str]]) -> dict[str, Any]:
    """kustomize's NamespaceTransformer (its default `setRoleBindingSubjects: defaultOnly`) on one object, and
    what its name references do to a binding's subjects: one naming a ServiceAccount of `accounts` (the
    kustomization's own, by name and namespace) follows it into the namespace."""
    kind = obj["kind"]
    if kind in REFUSED_KINDS or (kind == "CustomResourceDefinition" and (obj.get("spec") or {}).get("conversion", {}).get("webhook")):
        raise ValueError(f"{kfile}: namespace on a {kind} with service references is not supported by tests/deploy/kustomize.py")
    obj = {**obj, "metadata": dict(obj["metadata"])}
    if kind == "Namespace":
        obj["metadata"]["name"] = namespace
    elif kind not in CLUSTER_SCOPED:
        obj["metadata"]["namespace"] = namespace
    if kind in ("RoleBinding", "ClusterRoleBinding") and obj.get("subjects"):
        obj["subjects"] = [{**s, "namespace": namespace}
                           if s.get("kind") == "ServiceAccount" and (s.get("name") == "default"
                                                                     or (s.get("name"), s.get("namespace", "")) in accounts)
                           else s for s in obj["subjects"]]
    return obj


def set_image(node: Any, image: dict[str, str]) -> Any:
    """kustomize's ImageTagTransformer: every `containers` / `initContainers` entry's image, at any depth."""
    if isinstance(node, list):
        return [set_image(item, image) for item in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if k in ("containers", "initContainers") and isinstance(v, list):
            v = [{**c, "image": new_image(c["image"], image)} if isinstance(c, dict) and "image" in c else c for c in v]
        out[k] = set_image(v, image)
    return out


def new_image(current: str, image: dict[str, str]) -> str:
    name = image["name"]
    if current == name:
        suffix = ""
    elif current.startswith((name + ":", name + "@")):
        suffix = current[len(name):]
    else:
        return current
    if "@" in suffix and ":" in suffix.split("@", 1)[0]:
        raise ValueError(f"image {current}: a tag and a digest together are not supported by tests/deploy/kustomize.py")
    if image.get("digest"):
        suffix = "@" + image["digest"]
    elif image.get("newTag"):
        suffix = ":" + str(image["newTag"])
    return image.get("newName", name) + suffix


def key(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    meta = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])
