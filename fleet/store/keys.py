"""Every Redis key fleet writes, defined once. The strings are what an
operator sees in `redis-cli` and the runbooks: keep them stable.

The keys are not namespaced by installation, like every queue in the
broker's database: one Redis database holds one installation.
"""

from __future__ import annotations

RESULT = "fleet:result:"  # + provider: its latest check result (JSON), no expiry
SEEN = "fleet:seen:"  # + provider: when a result was first expected (Unix time), set once
OVERDUE = "fleet:overdue:"  # + provider: CheckOverdue was logged (cleared by the next result)
WORKER = "fleet:worker:"  # + provider:node: a provider worker's heartbeat, with a TTL
STATUS = "fleet:status:"  # + plural:[namespace/]name: the last status written, with its resourceVersion (JSON), TTL

BEAT_LOCK = "fleet:beat:lock"  # the active beat's owner id, with a TTL
BEAT_LAST_ROUND = "fleet:beat:last_round"  # Unix time of the last round sent
BEAT_SCHEDULE = "fleet:beat:schedule"  # the schedule the active beat runs (JSON)
BEAT_SKIPPED = "fleet:beat:skipped"  # hash: provider → checks not sent (no live worker)


def result(provider: str) -> str:
    return RESULT + provider


def seen(provider: str) -> str:
    return SEEN + provider


def overdue(provider: str) -> str:
    return OVERDUE + provider


def worker(provider: str, node: str) -> str:
    return f"{WORKER}{provider}:{node}"


def status(plural: str, namespace: str | None, name: str) -> str:
    return f"{STATUS}{plural}:{namespace}/{name}" if namespace else f"{STATUS}{plural}:{name}"


def text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw

# The Proxy reconciler (fleet.proxies), per Proxy key `<namespace>/<name>`:
PX_DUE = "fleet:px:due"  # sorted set: Proxy key → when it is next due (Unix time)
PX_CLAIM = "fleet:px:claim:"  # + key: the replica reconciling it now, with a TTL
PX_CALL = "fleet:px:call:"  # + key: its provider call in flight (JSON), with a TTL past the call's deadline
PX_SLOTS = "fleet:px:slots:"  # + provider: sorted set of Proxy keys with a call in flight → when the slot lapses
PX_WAITING = "fleet:px:waiting:"  # + provider: sorted set of Proxy keys waiting for a slot → since when
PX_OUTCOME = "fleet:px:outcome:"  # + key: its last call's answer not yet applied (JSON)
PX_FAILURES = "fleet:px:failures"  # hash: key → "<failed calls in a row>|<the spec hash they were counted under>"
PX_PHASE = "fleet:px:phase"  # hash: key → status.phase (the proxies gauge, read at scrape time)
PX_OBJECTS = "fleet:px:objects"  # hash: key → the Proxy object (standalone mode: manifests + status)
PX_SYNCED = "fleet:px:synced"  # Unix time the standalone objects last matched the manifests (GC trusts them only then)
PX_ENDPOINTS = "fleet:px:endpoints"  # hash: key → {"uid","ip","port","provider","region","zone","instance","pool"} of each Running Proxy
PX_LIST = "fleet:px:list:"  # + provider: its resync list in flight or answered ({"id","at","answered"}), until its next one is due (TTL)
PX_LIST_FAILURES = "fleet:px:list-failures"  # hash: provider → failed resync lists in a row
PROBE_VERDICTS = "fleet:probe:verdicts"  # hash: key → the prober's verdict {"uid","healthy","since","message","egressIP"}
PROBER_MEMBERS = "fleet:prober:members"  # sorted set: prober replica id → when its membership lapses (Unix time)
POOL_LOCK = "fleet:pool:lock"  # the controller replica running the ProxyPool loop (its owner id), with a TTL
POOL_OBJECTS = "fleet:pool:objects"  # hash: pool key → its record (standalone mode: uid, generation, status; JSON)
POOL_SCALE = "fleet:pool:scale"  # hash: pool key → {"replicas","manifest"} a scale's override of spec.replicas (standalone)
GC_LAST = "fleet:gc:last"  # hash: provider → Unix time of its last complete sweep
GC_LOCK = "fleet:gc:lock"  # hash: the sweep in progress (id, deadline, each provider's state), with a TTL
# The lease API (fleet.leases; fleet.store.leases says what each holds).
LEASE_PREFIX = "fleet:lease:"
LEASE_DOCS = "fleet:lease:docs"  # hash: lease id → the lease (JSON)
LEASE_EXPIRY = "fleet:lease:expiry"  # sorted set: lease id → when it expires
LEASE_HELD = "fleet:lease:held:"  # + proxy key: sorted set of its open leases → expiry
LEASE_LOAD = "fleet:lease:load"  # sorted set: proxy key → its holders (a lease, or a session's leases as one)
LEASE_STICKY = "fleet:lease:sticky:"  # + sticky key: the proxy it was last leased, with a TTL
LEASE_SESSION = "fleet:lease:session:"  # + "<proxy>|<sticky key>": a gateway session's open leases there → expiry (one holder)
LEASE_LIFE = "fleet:lease:life:"  # + sticky key: a gateway session's life (born, uses, score), with the binding's TTL
LEASE_PACE = "fleet:lease:pace:"  # + "<proxy>|<host>": when that proxy's next turn at that host is free (a rule's pace)
LEASE_SESSIONS = "fleet:lease:sessions"  # sorted set: a gateway session's sticky key → when its binding lapses
LEASE_COOL_TARGET = "fleet:lease:cool:target"  # sorted set: "<proxy>|<target>" → end of the cooldown
LEASE_COOL_GLOBAL = "fleet:lease:cool:global"  # sorted set: proxy key → end of the global cooldown
LEASE_ERRORS = "fleet:lease:errors"  # hash: proxy key → error reports in a row
LEASE_RELEASED = "fleet:lease:released:"  # + lease id: the first release's answer, with a TTL (a repeated release)
LEASE_REFUSED = "fleet:lease:refused:"  # + pool name: sorted set of refused lease requests (id → when), the pool's demand
LEASE_EPOCH = "fleet:lease:epoch"  # hash: id, created, seq, grace: the lease state's epoch (a data loss shows, issue 21)
CLOUD_INIT = "fleet:cloudinit:"  # + token: cloud-init text staged for one create: read once (GETDEL), TTL the call timeout

# One installation per Redis database (fleet.store.installation): the installation id written at first start.
INSTALLATION = "fleet:installation"
