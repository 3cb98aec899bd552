"""A pure model of the two API-server answers the deploy tests need, over
rendered objects: which kinds a cluster serves (404 "no matches for kind"
otherwise), and what RBAC allows a ServiceAccount (403 otherwise)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import kubernetes_validate

K8S_VERSION = "1.30"


def builtin(obj: dict[str, Any]) -> bool:
    """A kind a plain cluster of K8S_VERSION serves: the schemas know it."""
    try:
        kubernetes_validate.validate({"apiVersion": obj["apiVersion"], "kind": obj["kind"]}, K8S_VERSION)
    except kubernetes_validate.SchemaNotFoundError:
        return False
    except kubernetes_validate.ValidationError:
        pass
    return True


def served_by(crd: dict[str, Any]) -> set[tuple[str, str]]:
    group = crd["spec"]["group"]
    return {(f"{group}/{v['name']}", crd["spec"]["names"]["kind"]) for v in crd["spec"]["versions"] if v.get("served", True)}


def apply(objects: Iterable[dict[str, Any]], crds: Iterable[dict[str, Any]] = ()) -> list[str]:
    """`kubectl apply` on a cluster serving the built-in kinds, the CRDs
    given and those in `objects`: the errors, one per object it refuses."""
    objects = list(objects)
    served = {k for crd in [*crds, *(o for o in objects if o["kind"] == "CustomResourceDefinition")] for k in served_by(crd)}
    return [
        f'no matches for kind "{o["kind"]}" in version "{o["apiVersion"]}"'
        for o in objects
        if not builtin(o) and (o["apiVersion"], o["kind"]) not in served
    ]


def merged(*installs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the cluster holds after applying each set in turn: same kind,
    namespace and name means the later object replaces the earlier."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for objs in installs:
        for o in objs:
            out[(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])] = o
    return list(out.values())


def _rule_allows(rule: dict[str, Any], verb: str, resource: str, group: str, name: str | None = None) -> bool:
    """RBAC's match of one rule; a rule with resourceNames matches only a
    request naming one of them (never a create, list or watch without a name)."""
    names = rule.get("resourceNames")
    return (
        (group in rule.get("apiGroups", ()) or "*" in rule.get("apiGroups", ()))
        and (resource in rule.get("resources", ()) or "*" in rule.get("resources", ()))
        and (verb in rule.get("verbs", ()) or "*" in rule.get("verbs", ()))
        and (not names or name in names)
    )


def can(
    objects: Iterable[dict[str, Any]], account: tuple[str, str], verb: str, resource: str, namespace: str | None, group: str = "",
    name: str | None = None,
) -> bool:
    """May ServiceAccount `account` = (namespace, name) do `verb` on
    `resource` in `namespace` (None: across all namespaces, e.g. a
    cluster-wide list), on the object `name` when the request names one?
    RBAC's rules: a ClusterRoleBinding grants its ClusterRole everywhere; a
    RoleBinding grants its Role (or ClusterRole) in the binding's namespace
    only; a rule with resourceNames only requests naming one of them."""
    objects = list(objects)
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects if o["kind"] in ("Role", "ClusterRole")}
    for b in objects:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s["kind"] == "ServiceAccount" and (s.get("namespace"), s["name"]) == account for s in b.get("subjects", ())):
            continue
        scope = b["metadata"].get("namespace") if b["kind"] == "RoleBinding" else None
        if scope is not None and scope != namespace:
            continue
        ref = b["roleRef"]
        role = roles.get((ref["kind"], scope if ref["kind"] == "Role" else None, ref["name"]))
        if role and any(_rule_allows(r, verb, resource, group, name) for r in role.get("rules", ())):
            return True
    return False


def forbidden(account: tuple[str, str], verb: str, resource: str, namespace: str | None) -> str:
    """The API server's message for a request RBAC refuses."""
    where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    return (
        f'{resource} is forbidden: User "system:serviceaccount:{account[0]}:{account[1]}" '
        f'cannot {verb} resource "{resource}" in API group "" {where}'
    )
