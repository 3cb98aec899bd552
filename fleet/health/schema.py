"""The ProviderHealth's fields, once: type, bounds and description of every
field of `providerhealths.crawl.example.com`, from which
`deploy/crd/generate.py` writes deploy/crd/crawl.example.com_providerhealths.yaml
and the docs' table of ProviderHealth fields (docs/generate.py). There is no spec: the
controller writes the status (`fleet.health.decide`, which truncates a
target's message to `MAX_MESSAGE`).
"""

from __future__ import annotations

from fleet.kube.crd import Column, Crd, array, boolean, conditions, integer, obj, root, string
from fleet.kube.resources import PROVIDER_HEALTH
from providers.registry import TYPES

MAX_MESSAGE = 1024  # a target's message, in characters
# Every registered type, from the registry (the one list of them), in words: "kubernetes, kvm, … or fake".
_TYPE_NAMES = ", ".join(list(TYPES)[:-1]) + " or " + list(TYPES)[-1]

TARGET = obj(
    "ProviderTarget is the latest check verdict for one thing a provider\n"
    "depends on: a KVM hypervisor, the Kubernetes API server, a GCP project.",
    {
        "name": string("name identifies the target within its provider: the KVM host name,\n"
                       "\"apiserver\", or the GCP project.", min_length=1),
        "address": string("address is where the check connected to."),
        "ready": boolean("ready is true when the last check succeeded."),
        "reason": string("reason is a CamelCase verdict such as Reachable, Unreachable,\n"
                         "Forbidden, SSHHandshakeFailed or PoolNotActive."),
        "message": string("message is human-readable detail, usually the error of a failed check.",
                          max_length=MAX_MESSAGE),
        "latencyMillis": integer("latencyMillis is how long the last check took.", format="int64"),
        "lastTransitionTime": string("lastTransitionTime is when ready last changed.", format="date-time"),
        "details": obj("details are provider-specific facts from the last check, e.g. the\n"
                       "libvirt version and free storage-pool space of a KVM host.", None,
                       additional=string("")),
    },
    required=("lastTransitionTime", "name", "ready"))

STATUS = obj(
    "status is the result of the latest check",
    {
        "type": string(f"type is the provider's type from the providers config: {_TYPE_NAMES}."),
        "targetsReady": string("targetsReady counts the ready targets as \"ready/total\"."),
        "lastCheckTime": string("lastCheckTime is when the latest written check finished. The status\n"
                                "is written when a verdict, reason, message, detail or condition changes,\n"
                                "else once per --status-heartbeat (5m), so this may be that old while Ready\n"
                                "is current (CheckOverdue is written when due); fleet get ph and the\n"
                                "gauges show every check.", format="date-time"),
        "conditions": conditions("conditions hold Ready, which summarizes the targets."),
        "targets": array("targets hold one verdict per checked target.", TARGET,
                         list_type="map", list_map_keys=("name",)),
    })

CRD = Crd(
    resource=PROVIDER_HEALTH, singular="providerhealth",
    schema=root(
        "ProviderHealth reports the periodic health check of one configured\n"
        "provider. It is named after the provider, and the operator creates,\n"
        "updates and deletes it itself; there is no spec to edit.",
        {"status": STATUS}),
    columns=(
        Column("Type", ".status.type"),
        Column("Ready", '.status.conditions[?(@.type=="Ready")].status'),
        Column("Targets", ".status.targetsReady"),
        Column("Last Check", ".status.lastCheckTime", "date"),
        Column("Age", ".metadata.creationTimestamp", "date"),
    ),
)
