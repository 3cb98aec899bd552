"""The Proxy's fields, once: type, bounds, pattern, default, CEL rules and
description of every field of `proxies.crawl.example.com`.

From this table `deploy/crd/generate.py` writes
deploy/crd/crawl.example.com_proxies.yaml (its openAPIV3Schema and printer
columns) and the docs' table of Proxy fields (docs/generate.py), and `fleet.proxies.manifests`
takes its limits (lengths, ranges, patterns, the port's default), so a
standalone manifest is held to what the API server would hold it to.
Names users see (phases, the finalizer) stay in `fleet.proxies.model`.
"""

from __future__ import annotations

from fleet.kube.crd import Column, Crd, Rule, conditions, integer, obj, root, string
from fleet.kube.resources import PROXY
from fleet.proxies.model import DEFAULT_PORT, PHASES
from providers import names

DNS1123_LABEL = names.anchored(names.LABEL)
MAX_LABEL = names.MAX_LABEL  # a DNS-1123 label
MAX_SUBDOMAIN = names.MAX_SUBDOMAIN  # a DNS-1123 subdomain: a Secret's or a Proxy's name
SECRET_KEY = "^[-._a-zA-Z0-9]+$"  # Kubernetes' rule for a Secret's data key
_ADDRESS = 64  # an IPv4 or IPv6 address, with room

PROVIDER = string(
    "provider is the name of a provider in fleet's providers file.\n"
    "It cannot be changed: create a new Proxy instead.",
    max_length=MAX_LABEL, min_length=1, pattern=DNS1123_LABEL,
    rules=(Rule("self == oldSelf", "provider is immutable"),))

PLACEMENT = obj(
    "placement says where and as what the instance runs; each field\n"
    "is optional and interpreted by the provider (its guide lists\n"
    "the values it accepts and its defaults).",
    {
        "region": string("region is the provider's region.", max_length=128),
        "zone": string("zone is the provider's zone, or a KVM host.", max_length=128),
        "machineType": string("machineType is the instance size, e.g. e2-small.", max_length=128),
        "image": string("image is the boot image or container image.", max_length=512),
    })

SECRET_REF = obj(
    "secretRef names a key of a Secret in the Proxy's namespace holding the cloud-init text.",
    {
        "name": string("name is the Secret's name.", max_length=MAX_SUBDOMAIN, min_length=1),
        "key": string("key is the Secret's data key.", max_length=MAX_SUBDOMAIN, min_length=1, pattern=SECRET_KEY),
    },
    required=("key", "name"))

CLOUD_INIT = obj(
    "cloudInit is the user data the instance boots with: exactly one\n"
    "of inline (the text) or secretRef (a key of a Secret in the\n"
    "Proxy's namespace, read by the controller when it creates the\n"
    "instance). It never travels in a task message.",
    {
        "inline": string("inline is the cloud-init text itself.", max_length=32768),
        "secretRef": SECRET_REF,
    },
    rules=(Rule("has(self.inline) != has(self.secretRef)",
                "exactly one of cloudInit.inline or cloudInit.secretRef must be set"),))

PORT = integer("port is the port the proxy listens on.", format="int32", minimum=1, maximum=65535, default=DEFAULT_PORT)

SPEC = obj(
    "spec is what the user asks for.",
    {"provider": PROVIDER, "port": PORT, "placement": PLACEMENT, "cloudInit": CLOUD_INIT},
    required=("provider",))

STATUS = obj(
    "status is what the controller observed and did.",
    {
        "phase": string("phase is where the proxy is in its lifecycle.", enum=PHASES),
        "ip": string("ip is the address clients connect to.", max_length=_ADDRESS),
        "port": integer("port is the port clients connect to.", format="int32", minimum=0, maximum=65535),
        "egressIP": string("egressIP is the address the prober's target saw the proxy's traffic come from, when the "
                           "target echoes it.", max_length=_ADDRESS),
        "member": string("member is what kind of proxy this is, as the gateway and the prober dial it: own (one fleet "
                         "made) or upstream/http, upstream/socks5 (a bought proxy of an upstream provider, and how it "
                         "is spoken to). Written with the endpoint while Running.", max_length=64),
        "providerID": string("providerID identifies the instance on its provider's backend.", max_length=1024),
        "specHash": string("specHash is the hash of the spec the instance was created from; a different one means the "
                           "instance is replaced.", max_length=128),
        "observedGeneration": integer("observedGeneration is the metadata.generation this status was written for.",
                                      format="int64", minimum=0),
        "message": string("message is human-readable detail, usually the last error.", max_length=32768),
        "conditions": conditions("conditions hold Provisioned, Healthy and Ready.", max_items=16),
    })

CRD = Crd(
    resource=PROXY, singular="proxy",
    comment=(
        "The Proxy CRD: one egress forward proxy (Squid) that fleet's controller\n"
        "provisions on a provider's backend and reports on. Users write `spec`; the\n"
        "controller writes `status` (a subresource) and the finalizer\n"
        "crawl.example.com/cleanup. Names and values as in fleet/proxies/model.py."),
    schema=root(
        "Proxy is one egress forward proxy that fleet provisions on a\n"
        "provider's backend (a VM, a pod) and keeps running. Deleting it\n"
        "deletes the backend instance first (finalizer crawl.example.com/cleanup),\n"
        "unless it carries the annotation crawl.example.com/skip-cleanup: \"true\".",
        {"spec": SPEC, "status": STATUS},
        required=("spec",)),
    columns=(
        Column("Provider", ".spec.provider"),
        Column("Phase", ".status.phase"),
        Column("IP", ".status.ip"),
        Column("Port", ".status.port", "integer"),
        Column("Ready", '.status.conditions[?(@.type=="Ready")].status'),
        Column("Age", ".metadata.creationTimestamp", "date"),
        Column("Member", ".status.member", priority=1),
    ),
)
