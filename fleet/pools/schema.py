"""The ProxyPool's fields, once: type, bounds, default, CEL rules and
description of every field of `proxypools.crawl.example.com`.

From this table `deploy/crd/generate.py` writes
deploy/crd/crawl.example.com_proxypools.yaml (openAPIV3Schema, printer
columns, the status and scale subresources) and the docs' table of ProxyPool
fields; `fleet.pools.model.parse_pool` takes its limits and defaults, so the
controller holds an object to what the API server holds it to (and to the
CEL rules, which the fake API of the tests does not run).

The template reuses the Proxy's own fields (`fleet.proxies.schema`): a
member is an ordinary Proxy.
"""

from __future__ import annotations

from fleet.kube.crd import Column, Crd, Rule, Scale, array, boolean, conditions, int_or_percent, integer, obj, root, string
from fleet.kube.resources import PROXY_POOL
from fleet.proxies.schema import CLOUD_INIT, DNS1123_LABEL, MAX_LABEL, PLACEMENT, PORT

SUFFIX = 5  # characters of a member's random suffix: `<pool>-<suffix>`
MAX_POOL_NAME = MAX_LABEL - 1 - SUFFIX  # a member's name is a label value too (crawl.example.com/pool)
MAX_PROVIDERS = 16
MAX_REPLICAS = 10_000
MAX_WEIGHT = 1000
DAY = 86_400
YEAR = 365 * DAY

_INT_OR_PERCENT = Rule("type(self) == int ? self >= 0 : self.matches('^[0-9]{1,3}%$') && int(self.replace('%', '')) <= 100",
                       "must be a non-negative integer or a percent from 0% to 100%")

PROVIDER_ENTRY = obj(
    "one provider the replicas are spread over.",
    {
        "provider": string("provider is the name of a provider in fleet's providers file.",
                           max_length=MAX_LABEL, min_length=1, pattern=DNS1123_LABEL),
        "weight": integer("weight is this provider's share of the replicas, relative to the others' weights.",
                          format="int32", minimum=1, maximum=MAX_WEIGHT, default=1),
        "max": integer("max is the most members this provider holds; the rest of its share goes to the others.",
                       format="int32", minimum=0, maximum=MAX_REPLICAS),
        "placement": obj(
            "placement, when set, replaces the template's placement for this provider's members "
            "(a whole object, not merged field by field).",
            dict(PLACEMENT.properties or {})),
    },
    required=("provider",))

STRATEGY = obj(
    "strategy bounds how members are replaced (a template change, an age rotation), as a Deployment's rolling "
    "update: at most maxSurge members above replicas (a percent of replicas, rounded up) and at most "
    "maxUnavailable below it (rounded down); they cannot both be 0.",
    {
        "maxSurge": int_or_percent("maxSurge is how many members may exist above replicas while replacing.",
                                   default="25%", rules=(_INT_OR_PERCENT,)),
        "maxUnavailable": int_or_percent("maxUnavailable is how many of replicas may be unavailable while "
                                         "replacing or scaling down.", default=0, rules=(_INT_OR_PERCENT,)),
    },
    default={},
    rules=(Rule("!(has(self.maxSurge) && (self.maxSurge == 0 || self.maxSurge == '0%') && "
                "has(self.maxUnavailable) && (self.maxUnavailable == 0 || self.maxUnavailable == '0%'))",
                "maxSurge and maxUnavailable cannot both be 0"),))

AUTOSCALE = obj(
    "autoscale, when set, makes the controller write spec.replicas (the scale subresource's path) from the lease "
    "API's demand: leases held plus requests refused, over the capacity of the members "
    "(--max-leases-per-proxy each) at targetUtilization percent, between min and max.",
    {
        "min": integer("min is the fewest replicas autoscaling sets.", format="int32", minimum=0, maximum=MAX_REPLICAS),
        "max": integer("max is the most replicas autoscaling sets.", format="int32", minimum=1, maximum=MAX_REPLICAS),
        "targetUtilization": integer("targetUtilization is the percent of lease capacity in use the pool is sized for.",
                                     format="int32", minimum=1, maximum=100, default=80),
        "scaleUpStabilizationSeconds": integer(
            "scaleUpStabilizationSeconds: a scale up takes the lowest recommendation of this window.",
            format="int32", minimum=0, maximum=3600, default=0),
        "scaleDownStabilizationSeconds": integer(
            "scaleDownStabilizationSeconds: a scale down takes the highest recommendation of this window.",
            format="int32", minimum=0, maximum=3600, default=300),
    },
    required=("max", "min"),
    rules=(Rule("self.min <= self.max", "autoscale.min must not exceed autoscale.max"),))

REMEDIATION = obj(
    "remediation replaces unhealthy members (the prober's verdict false for unhealthyAfterSeconds, or Failed), "
    "but only while at most maxUnhealthy members are unhealthy: above it nothing is replaced "
    "(RemediationAllowed=False), so an outage does not replace the whole pool.",
    {
        "maxUnhealthy": int_or_percent("maxUnhealthy is the most unhealthy members remediation still replaces "
                                       "(a percent of replicas, rounded down).", default="40%", rules=(_INT_OR_PERCENT,)),
        "unhealthyAfterSeconds": integer("unhealthyAfterSeconds is how long a member's Healthy condition is False "
                                         "before it counts as unhealthy.", format="int32", minimum=0, maximum=DAY,
                                         default=300),
    },
    default={})

SPEC = obj(
    "spec is what the user asks for.",
    {
        "replicas": integer("replicas is how many member Proxies the pool keeps (`kubectl scale` sets it).",
                            format="int32", minimum=0, maximum=MAX_REPLICAS, default=1),
        "template": obj("template is the members' Proxy spec, without the provider (see providers).",
                        {"port": PORT, "placement": PLACEMENT, "cloudInit": CLOUD_INIT}),
        "providers": array("providers are the providers the replicas are spread over by weight (largest remainder, "
                           "ties to the earlier entry).", PROVIDER_ENTRY, min_items=1, max_items=MAX_PROVIDERS,
                           list_type="map", list_map_keys=("provider",)),
        "maxAgeSeconds": integer("maxAgeSeconds, when set, replaces a member once it is this old (plus its jitter).",
                                 format="int64", minimum=60, maximum=YEAR),
        "maxAgeJitterSeconds": integer(
            "maxAgeJitterSeconds spreads rotations: each member's age limit is raised by a fixed share of this, "
            "taken from its uid.", format="int64", minimum=0, maximum=YEAR, default=0),
        "strategy": STRATEGY,
        "autoscale": AUTOSCALE,
        "remediation": REMEDIATION,
        "uniqueEgressIP": boolean(
            "uniqueEgressIP, when true, keeps no two Running members on one egress address (the prober's): of "
            "members sharing one, the later created are replaced, surge-first within strategy, and only while "
            "the remediation breaker allows (they count with the unhealthy toward maxUnhealthy).", default=False),
        "minReadySeconds": integer("minReadySeconds is how long a member is Ready before it counts as available.",
                                   format="int32", minimum=0, maximum=DAY, default=0),
        "progressDeadlineSeconds": integer(
            "progressDeadlineSeconds: a pool that makes no progress for this long says Progressing=False "
            "(ProgressDeadlineExceeded).", format="int32", minimum=1, maximum=DAY, default=600),
    },
    required=("providers",))

PROVIDER_STATUS = obj(
    "how one provider's share stands.",
    {
        "provider": string("provider is the provider's name.", max_length=MAX_LABEL, min_length=1),
        "desired": integer("desired is its share of replicas after weights, max and refusals.", format="int32", minimum=0),
        "replicas": integer("replicas is how many members it holds.", format="int32", minimum=0),
        "readyReplicas": integer("readyReplicas is how many of them are Ready.", format="int32", minimum=0),
        "refusedAt": string("refusedAt is when a member of it last failed for good or ran out of quota; for a while "
                            "after, its share beyond its working members goes to the others.", format="date-time"),
    },
    required=("provider",))

STATUS = obj(
    "status is what the controller observed and did.",
    {
        "replicas": integer("replicas is how many members exist (not being deleted).", format="int32", minimum=0),
        "readyReplicas": integer("readyReplicas is how many members are Ready.", format="int32", minimum=0),
        "availableReplicas": integer("availableReplicas is how many members have been Ready for minReadySeconds.",
                                     format="int32", minimum=0),
        "updatedReplicas": integer("updatedReplicas is how many members have the current template and are within "
                                   "their age limit.", format="int32", minimum=0),
        "unhealthyReplicas": integer("unhealthyReplicas is how many members count as unhealthy.", format="int32",
                                     minimum=0),
        "observedGeneration": integer("observedGeneration is the metadata.generation this status was written for.",
                                      format="int64", minimum=0),
        "selector": string("selector is the label selector of the members (the scale subresource's).", max_length=512),
        "progressTime": string("progressTime is when the pool last moved toward its spec.", format="date-time"),
        "providers": array("providers is the spread, one entry per provider.", PROVIDER_STATUS,
                           max_items=MAX_PROVIDERS, list_type="map", list_map_keys=("provider",)),
        "conditions": conditions("conditions hold Available, Progressing, RemediationAllowed and ScalingLimited.",
                                 max_items=16),
    })

CRD = Crd(
    resource=PROXY_POOL, singular="proxypool",
    comment=(
        "The ProxyPool CRD: a fleet of egress proxies declared once. The controller\n"
        "keeps spec.replicas member Proxies (named <pool>-<suffix>, labelled\n"
        "crawl.example.com/pool, owned by the pool) spread over providers by weight,\n"
        "rotates them by age and template, and replaces unhealthy ones within\n"
        "bounds. The scale subresource serves `kubectl scale`. Rules in fleet/pools/decide.py."),
    schema=root(
        "ProxyPool keeps a number of Proxies alike: spread over providers by\n"
        "weight, replaced when old or changed without a dip below\n"
        "replicas - maxUnavailable, and replaced when unhealthy only while few are.",
        {"spec": SPEC, "status": STATUS},
        required=("spec",),
        rules=(Rule(f"self.metadata.name.size() <= {MAX_POOL_NAME} && self.metadata.name.matches('{DNS1123_LABEL}')",
                    f"a ProxyPool's name is a DNS-1123 label of at most {MAX_POOL_NAME} characters "
                    f"(its members' names add -<{SUFFIX} characters> and are label values)"),)),
    columns=(
        Column("Desired", ".spec.replicas", "integer"),
        Column("Ready", ".status.readyReplicas", "integer"),
        Column("Available", ".status.availableReplicas", "integer"),
        Column("Age", ".metadata.creationTimestamp", "date"),
    ),
    scale=Scale(".spec.replicas", ".status.replicas", ".status.selector"),
)
