"""What an API server does to a custom object against its CRD's structural
schema, for the fake API (fleet/testing/kubeapi.py): drop nulls and unknown
fields (pruning), fill defaults, then validate -- types, required, enum,
minimum/maximum, minLength/maxLength, pattern, minItems/maxItems,
x-kubernetes-int-or-string and the keys of an
`x-kubernetes-list-type: map` -- so a write a real server would change or
refuse is changed or refused in tests too.

Not done: CEL rules (`x-kubernetes-validations`: the real server's tests,
tests/integration/test_apiserver_crds.py, cover them), formats, nullable,
`x-kubernetes-preserve-unknown-fields`, metadata's own rules (the root
`metadata` is kept as it is, as ObjectMeta is).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

CRD_DIR = Path(__file__).resolve().parents[2] / "deploy" / "crd"


def served_schemas(directory: Path = CRD_DIR) -> dict[str, dict[str, Any]]:
    """plural -> the openAPIV3Schema of each CRD in `directory` (its one version)."""
    out = {}
    for path in sorted(directory.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
            (version,) = doc["spec"]["versions"]
            out[doc["spec"]["names"]["plural"]] = version["schema"]["openAPIV3Schema"]
    return out


def served_scales(directory: Path = CRD_DIR) -> dict[str, tuple[str, str, str | None]]:
    """plural -> its scale subresource's (specReplicasPath, statusReplicasPath, labelSelectorPath)."""
    out = {}
    for path in sorted(directory.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
            (version,) = doc["spec"]["versions"]
            scale = (version.get("subresources") or {}).get("scale")
            if scale:
                out[doc["spec"]["names"]["plural"]] = (scale["specReplicasPath"], scale["statusReplicasPath"],
                                                       scale.get("labelSelectorPath"))
    return out


def admit(obj: dict[str, Any], schema: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`obj` pruned and defaulted (a copy), and what is invalid in it, each
    as the API server words a field error: `spec.port: Invalid value: 0: ...`."""
    out = copy.deepcopy(obj)
    meta = out.get("metadata")
    shaped = _shape(out, schema)
    if isinstance(shaped, dict) and meta is not None:
        shaped["metadata"] = meta  # ObjectMeta: neither pruned nor defaulted here
    errors: list[str] = []
    _validate(shaped, schema, "", errors, root=True)
    return shaped, errors


def _shape(value: Any, schema: dict[str, Any]) -> Any:
    """Prune unknown fields and nulls, then fill defaults, recursively."""
    if isinstance(value, dict) and schema.get("type") == "object":
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        out = {}
        for k, v in value.items():
            if v is None:
                continue  # a null of a non-nullable field is pruned
            if props is not None and k in props:
                out[k] = _shape(v, props[k])
            elif isinstance(extra, dict):
                out[k] = _shape(v, extra)
            # else: unknown, pruned
        for k, sub in (props or {}).items():
            if k not in out and "default" in sub:
                out[k] = _shape(copy.deepcopy(sub["default"]), sub)
        return out
    if isinstance(value, list) and schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        return [_shape(v, schema["items"]) for v in value if v is not None]
    return value


def _type_ok(value: Any, t: str | None) -> bool:
    if t is None:
        return True
    if t == "object":
        return isinstance(value, dict)
    if t == "array":
        return isinstance(value, list)
    if t == "string":
        return isinstance(value, str)
    if t == "boolean":
        return isinstance(value, bool)
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return True


def _shown(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)


def _validate(value: Any, schema: dict[str, Any], path: str, errors: list[str], root: bool = False) -> None:
    at = path or "<root>"
    t = schema.get("type")
    if schema.get("x-kubernetes-int-or-string") and not (isinstance(value, (int, str)) and not isinstance(value, bool)):
        got = type(value).__name__
        errors.append(f"{at}: Invalid value: \"{got}\": {at} in body must be of type integer or string: \"{got}\"")
        return
    if not _type_ok(value, t):
        got = type(value).__name__
        errors.append(f"{at}: Invalid value: \"{got}\": {at} in body must be of type {t}: \"{got}\"")
        return
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(f'"{v}"' for v in schema["enum"])
        errors.append(f"{at}: Unsupported value: {_shown(value)}: supported values: {allowed}")
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{at}: Too long: may not be more than {schema['maxLength']} bytes")
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(f"{at}: Invalid value: {_shown(value)}: {at} in body should be at least "
                          f"{schema['minLength']} chars long")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{at}: Invalid value: {_shown(value)}: {at} in body should match '{schema['pattern']}'")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{at}: Invalid value: {value}: {at} in body should be greater than or equal to {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{at}: Invalid value: {value}: {at} in body should be less than or equal to {schema['maximum']}")
    if isinstance(value, dict):
        for k in schema.get("required", ()):
            if k not in value:
                errors.append(f"{path + '.' if path else ''}{k}: Required value")
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for k, v in value.items():
            if root and k == "metadata":
                continue
            sub = props.get(k) if k in props else extra if isinstance(extra, dict) else None
            if sub is not None:
                _validate(v, sub, f"{path}.{k}" if path else k, errors)
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append(f"{at}: Invalid value: {len(value)}: {at} in body should have at least {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{at}: Too many: {len(value)}: must have at most {schema['maxItems']} items")
        items = schema.get("items")
        for i, v in enumerate(value):
            if isinstance(items, dict):
                _validate(v, items, f"{path}[{i}]", errors)
        if schema.get("x-kubernetes-list-type") == "map":
            keys = schema.get("x-kubernetes-list-map-keys") or []
            seen: set[tuple[Any, ...]] = set()
            for i, v in enumerate(value):
                if isinstance(v, dict):
                    ident = tuple(v.get(k) for k in keys)
                    if ident in seen:
                        shown = ",".join(f'"{k}":{_shown(v.get(k))}' for k in keys)
                        errors.append(f"{path}[{i}]: Duplicate value: map[string]interface {{}}{{{shown}}}")
                    seen.add(ident)
