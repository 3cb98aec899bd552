"""A CRD's schema as a table: the one place a custom resource's fields are
described (type, bounds, pattern, default, CEL rules, description), from
which `deploy/crd/generate.py` writes the CustomResourceDefinition and the
the docs' table of fields, and the parsers take their limits.

The tables themselves sit with their features: `fleet.proxies.schema`
(Proxy) and `fleet.health.schema` (ProviderHealth). This module is the
vocabulary (`Field`, `Column`, `Crd`) and the pieces both share: the
`apiVersion`/`kind` boilerplate and `metav1.Condition`.

`Field.openapi()` is the OpenAPI v3 structural schema Kubernetes expects,
keys as controller-gen writes them; `Crd.document()` the whole object;
`Crd.fields_table()` the Markdown table of documented fields.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from fleet.kube.resources import Resource
from providers import names


@dataclass(frozen=True)
class Rule:
    """One CEL rule (`x-kubernetes-validations`)."""

    rule: str
    message: str


@dataclass(frozen=True, kw_only=True)
class Field:
    """One node of a structural schema. `document=False` leaves its children
    out of the docs' table (metav1.Condition's are Kubernetes' own)."""

    type: str  # string | integer | boolean | object | array
    description: str = ""
    format: str | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    enum: tuple[str, ...] | None = None
    minimum: int | None = None
    maximum: int | None = None
    default: Any = None
    properties: Mapping[str, Field] | None = None
    required: tuple[str, ...] = ()
    additional: Field | None = None  # additionalProperties
    items: Field | None = None
    max_items: int | None = None
    min_items: int | None = None
    int_or_string: bool = False  # x-kubernetes-int-or-string (`type` is left out of the schema)
    list_type: str | None = None  # x-kubernetes-list-type
    list_map_keys: tuple[str, ...] = ()
    rules: tuple[Rule, ...] = ()
    document: bool = True

    def __getitem__(self, key: str) -> Field:
        """A child by its name (`spec["placement"]["zone"]`)."""
        if self.properties is None or key not in self.properties:
            raise KeyError(key)
        return self.properties[key]

    def at(self, path: str) -> Field:
        """A descendant by a dotted path (`"spec.placement.zone"`)."""
        node = self
        for key in path.split("."):
            node = node[key]
        return node

    def bound(self, name: str) -> int:
        """An integer bound the parsers take (`"max_length"`, `"minimum"` …);
        a table without it is a programming error, raised at import."""
        value = getattr(self, name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"the schema field has no {name}")
        return value

    def names(self) -> tuple[str, ...]:
        """Its properties' names, in the table's order."""
        return tuple(self.properties or ())

    def openapi(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.additional is not None:
            out["additionalProperties"] = self.additional.openapi()
        if self.default is not None:
            out["default"] = self.default
        if self.description:
            out["description"] = self.description
        if self.enum is not None:
            out["enum"] = list(self.enum)
        if self.format is not None:
            out["format"] = self.format
        if self.items is not None:
            out["items"] = self.items.openapi()
        for key, value in (("maxItems", self.max_items), ("maxLength", self.max_length), ("maximum", self.maximum),
                           ("minItems", self.min_items), ("minLength", self.min_length), ("minimum", self.minimum),
                           ("pattern", self.pattern)):
            if value is not None:
                out[key] = value
        if self.properties is not None:
            out["properties"] = {k: v.openapi() for k, v in sorted(self.properties.items())}
        if self.required:
            out["required"] = sorted(self.required)
        if self.int_or_string:
            out = {"anyOf": [{"type": "integer"}, {"type": "string"}], **out, "x-kubernetes-int-or-string": True}
        else:
            out["type"] = self.type
        if self.list_map_keys:
            out["x-kubernetes-list-map-keys"] = list(self.list_map_keys)
        if self.list_type is not None:
            out["x-kubernetes-list-type"] = self.list_type
        if self.rules:
            out["x-kubernetes-validations"] = [{"message": r.message, "rule": r.rule} for r in self.rules]
        return out

    def limits(self) -> str:
        """The bounds in words, for the docs' table."""
        parts = []
        if self.enum is not None:
            parts.append(" \\| ".join(f"`{v}`" for v in self.enum))
        if self.min_length is not None or self.max_length is not None:
            low, high = self.min_length or 0, self.max_length
            parts.append(f"at least {low} character{'s' * (low != 1)}" if high is None
                         else f"at most {high} characters" if not low else f"{low}–{high} characters")
        if self.minimum is not None or self.maximum is not None:
            parts.append(f"{self.minimum}–{self.maximum}" if self.maximum is not None else f"≥ {self.minimum}")
        if self.pattern is not None:
            parts.append(f"`{self.pattern}`")
        if self.min_items is not None:
            parts.append(f"at least {self.min_items} item{'s' * (self.min_items != 1)}")
        if self.max_items is not None:
            parts.append(f"at most {self.max_items} items")
        parts += [f"{r.message} (`{r.rule}`)" for r in self.rules]
        return "; ".join(parts)

    def kind(self) -> str:
        if self.int_or_string:
            return "integer or percent"
        if self.type == "array" and self.items is not None:
            return f"list of {self.items.kind()}"
        if self.type == "object" and self.additional is not None:
            return f"map of {self.additional.kind()}"
        return self.format if self.format in ("date-time",) else self.type


def int_or_percent(description: str, **kw: Any) -> Field:
    """An integer or a percent string (`1`, `"25%"`), as a Deployment's maxSurge."""
    return Field(type="int-or-string", int_or_string=True, description=description, **kw)


def string(description: str, **kw: Any) -> Field:
    return Field(type="string", description=description, **kw)


def integer(description: str, **kw: Any) -> Field:
    return Field(type="integer", description=description, **kw)


def boolean(description: str, **kw: Any) -> Field:
    return Field(type="boolean", description=description, **kw)


def obj(description: str, properties: Mapping[str, Field] | None, **kw: Any) -> Field:
    return Field(type="object", description=description, properties=properties, **kw)


def array(description: str, items: Field, **kw: Any) -> Field:
    return Field(type="array", description=description, items=items, **kw)


@dataclass(frozen=True)
class Column:
    """One `additionalPrinterColumns` entry (`kubectl get`); a priority above 0 shows it with `-o wide` only."""

    name: str
    json_path: str
    type: str = "string"
    priority: int = 0

    def openapi(self) -> dict[str, Any]:
        out: dict[str, Any] = {"jsonPath": self.json_path, "name": self.name}
        if self.priority:
            out["priority"] = self.priority
        return {**out, "type": self.type}


@dataclass(frozen=True)
class Scale:
    """The scale subresource (`kubectl scale`, an HPA): where the replicas are."""

    spec_replicas: str
    status_replicas: str
    label_selector: str | None = None

    def openapi(self) -> dict[str, str]:
        out = {"specReplicasPath": self.spec_replicas, "statusReplicasPath": self.status_replicas}
        if self.label_selector is not None:
            out["labelSelectorPath"] = self.label_selector
        return out


@dataclass(frozen=True, kw_only=True)
class Crd:
    """One CustomResourceDefinition with one served, stored version, the
    status subresource and optionally the scale subresource."""

    resource: Resource
    singular: str
    schema: Field
    columns: tuple[Column, ...]
    comment: str = ""  # the file's leading comment, without '# '
    annotations: Mapping[str, str] = field(default_factory=dict)
    scale: Scale | None = None

    @property
    def file(self) -> str:
        """Its file under deploy/crd/."""
        return f"{self.resource.group}_{self.resource.plural}.yaml"

    def document(self) -> dict[str, Any]:
        r = self.resource
        meta: dict[str, Any] = {"name": r.crd_name}
        if self.annotations:
            meta = {"annotations": dict(self.annotations), **meta}
        return {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": meta,
            "spec": {
                "group": r.group,
                "names": {"kind": r.kind, "listKind": f"{r.kind}List", "plural": r.plural,
                          "shortNames": list(r.short_names), "singular": self.singular},
                "scope": "Namespaced" if r.namespaced else "Cluster",
                "versions": [{
                    "additionalPrinterColumns": [c.openapi() for c in self.columns],
                    "name": r.version,
                    "schema": {"openAPIV3Schema": self.schema.openapi()},
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}, **({"scale": self.scale.openapi()} if self.scale else {})},
                }],
            },
        }

    def fields_table(self, *roots: str) -> str:
        """The Markdown table of the fields under `roots` (e.g. "spec", "status")."""
        lines = ["| field | type | limits | default | description |", "|---|---|---|---|---|"]
        for root in roots:
            for path, node in _walk(self.schema[root], root):
                default = "" if node.default is None else f"`{node.default}`"
                desc = " ".join(node.description.split()).replace("|", "\\|")
                lines.append(f"| `{path}` | {node.kind()} | {node.limits()} | {default} | {desc} |")
        return "\n".join(lines) + "\n"


def _walk(node: Field, path: str) -> Iterator[tuple[str, Field]]:
    yield path, node
    if not node.document:
        return
    if node.properties is not None:
        for key, child in node.properties.items():
            yield from _walk(child, f"{path}.{key}")
    elif node.items is not None and node.items.properties is not None:
        yield from _walk(node.items, f"{path}[]")


# --- shared pieces ---------------------------------------------------------------

_API_CONVENTIONS = "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md"

API_VERSION = string(
    "APIVersion defines the versioned schema of this representation of an object.\n"
    "Servers should convert recognized schemas to the latest internal value, and\n"
    "may reject unrecognized values.\n"
    f"More info: {_API_CONVENTIONS}#resources")
KIND = string(
    "Kind is a string value representing the REST resource this object represents.\n"
    "Servers may infer this from the endpoint the client submits requests to.\n"
    "Cannot be updated.\n"
    "In CamelCase.\n"
    f"More info: {_API_CONVENTIONS}#types-kinds")
METADATA = Field(type="object")

CONDITION_STATUSES = ("True", "False", "Unknown")

CONDITION = obj(
    "Condition contains details for one aspect of the current state of this API Resource.",
    {
        "lastTransitionTime": string(
            "lastTransitionTime is the last time the condition transitioned from one status to another.\n"
            "This should be when the underlying condition changed.  If that is not known, then using the time "
            "when the API field changed is acceptable.",
            format="date-time"),
        "message": string(
            "message is a human readable message indicating details about the transition.\n"
            "This may be an empty string.",
            max_length=32768),
        "observedGeneration": integer(
            "observedGeneration represents the .metadata.generation that the condition was set based upon.\n"
            "For instance, if .metadata.generation is currently 12, but the .status.conditions[x].observedGeneration "
            "is 9, the condition is out of date\n"
            "with respect to the current state of the instance.",
            format="int64", minimum=0),
        "reason": string(
            "reason contains a programmatic identifier indicating the reason for the condition's last transition.\n"
            "Producers of specific condition types may define expected values and meanings for this field,\n"
            "and whether the values are considered a guaranteed API.\n"
            "The value should be a CamelCase string.\n"
            "This field may not be empty.",
            max_length=1024, min_length=1, pattern="^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"),
        "status": string("status of the condition, one of True, False, Unknown.", enum=CONDITION_STATUSES),
        "type": string(
            "type of condition in CamelCase or in foo.example.com/CamelCase.",
            max_length=316,
            pattern=rf"^({names.SUBDOMAIN}/)?"
                    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"),
    },
    required=("lastTransitionTime", "message", "reason", "status", "type"),
    document=False,
)


def conditions(description: str, **kw: Any) -> Field:
    """A list of metav1.Conditions keyed by type."""
    return array(description, CONDITION, list_type="map", list_map_keys=("type",), **kw)


def root(description: str, properties: Mapping[str, Field], **kw: Any) -> Field:
    """The openAPIV3Schema: apiVersion, kind and metadata, then `properties`."""
    return obj(description, {"apiVersion": API_VERSION, "kind": KIND, "metadata": METADATA, **properties}, **kw)
