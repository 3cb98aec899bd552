"""Where Redis is: one URL for every process, a plain server or a Sentinel set.

    redis://[:PASSWORD@]HOST:PORT/DB                  (rediss://, unix:// as redis-py reads them)
    sentinel://[:PASSWORD@]H1:P1;H2:P2;…/DB?master_name=NAME[&sentinel_password=SECRET]

With `sentinel://`, every process asks the sentinels for the master of
`master_name` and asks again after a connection error, so a failover is
followed without a restart: redis-py's `Sentinel.master_for` (sync and
asyncio) for the store, the lease API and the prober; Celery's and kombu's
own sentinel transport (`broker_transport_options`/
`result_backend_transport_options` with `master_name`) for the queues and
results. PASSWORD is the master's; `sentinel_password` is the sentinels' own
(when they require one). `MasterWatch` logs the master's address once per
change, so an operator sees a failover in each process's log.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, unquote

import redis
from redis.sentinel import Sentinel

if TYPE_CHECKING:
    import redis.asyncio as aioredis

log = logging.getLogger("fleet.store")

SENTINEL = "sentinel"
MAX_SENTINELS = 16
_HOST = re.compile(r"[A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]")
_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")


class TargetError(ValueError):
    """A Redis URL fleet cannot use; the message never quotes a password."""


@dataclass(frozen=True)
class Target:
    url: str  # a plain server's URL as given (empty for sentinel)
    sentinels: tuple[tuple[str, int], ...] = ()
    master_name: str = ""
    db: int = 0
    password: str | None = None
    sentinel_password: str | None = None

    @property
    def is_sentinel(self) -> bool:
        return bool(self.sentinels)


def parse(url: str) -> Target:
    """A `sentinel://` URL read into its parts (pure), or a plain URL passed through."""
    if not url.startswith(SENTINEL + "://"):
        return Target(url)
    rest = url[len(SENTINEL) + 3:]
    auth, at, rest = rest.rpartition("@") if "@" in rest else ("", "", rest)
    rest, _, query = rest.partition("?")
    hosts, _, path = rest.partition("/")
    password = unquote(auth.partition(":")[2]) if at and ":" in auth else (unquote(auth) if at else None)
    sentinels = []
    for part in hosts.split(";"):
        host, sep, port = part.rpartition(":")
        if not sep or not _HOST.fullmatch(host) or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise TargetError("each sentinel must be HOST:PORT, separated by ';' "
                              "(sentinel://h1:26379;h2:26379/0?master_name=NAME)")
        sentinels.append((host.strip("[]"), int(port)))
    if len(sentinels) > MAX_SENTINELS:
        raise TargetError(f"at most {MAX_SENTINELS} sentinels")
    if path and not path.isdigit():
        raise TargetError("the path must be a database number, e.g. /0")
    params = dict(parse_qsl(query, keep_blank_values=True))
    unknown = sorted(set(params) - {"master_name", "sentinel_password"})
    if unknown:
        raise TargetError(f"unknown query parameters {', '.join(unknown)[:80]} (master_name, sentinel_password)")
    name = params.get("master_name", "")
    if not _NAME.fullmatch(name):
        raise TargetError("needs ?master_name=NAME (letters, digits, '.', '_', '-'), the name the sentinels monitor")
    return Target("", tuple(sentinels), name, int(path or 0), password or None, params.get("sentinel_password") or None)


def _sentinel_kwargs(t: Target, timeout: float) -> dict[str, Any]:
    out: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    if t.sentinel_password:
        out["password"] = t.sentinel_password
    return out


def client(url: str, **kwargs: Any) -> redis.Redis:
    """A client of the master (`kwargs` as redis.Redis takes them: socket timeouts, health checks)."""
    t = parse(url)
    if not t.is_sentinel:
        return redis.Redis.from_url(url, **kwargs)
    timeout = float(kwargs.get("socket_connect_timeout") or 5)
    s = Sentinel(list(t.sentinels), sentinel_kwargs=_sentinel_kwargs(t, timeout), **kwargs)  # type: ignore[no-untyped-call, unused-ignore]
    master: redis.Redis = s.master_for(t.master_name, db=t.db, password=t.password, **kwargs)  # type: ignore[no-untyped-call, unused-ignore]
    return master


def async_client(url: str, max_connections: int, pool_timeout: float, **kwargs: Any) -> aioredis.Redis:
    """The asyncio client of the master: a blocking pool of `max_connections` for a plain server
    (a request waits up to `pool_timeout` for a free connection rather than failing), Sentinel's
    pool otherwise."""
    import redis.asyncio as aioredis
    from redis.asyncio.sentinel import Sentinel as AsyncSentinel

    t = parse(url)
    if not t.is_sentinel:
        pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=max_connections, timeout=pool_timeout,
                                                        **kwargs)
        return aioredis.Redis(connection_pool=pool)
    timeout = float(kwargs.get("socket_connect_timeout") or 5)
    s = AsyncSentinel(list(t.sentinels), sentinel_kwargs=_sentinel_kwargs(t, timeout), **kwargs)  # type: ignore[no-untyped-call, unused-ignore]
    master: aioredis.Redis = s.master_for(t.master_name, db=t.db, password=t.password, max_connections=max_connections,
                                          **kwargs)
    return master


def celery_config(url: str) -> dict[str, Any]:
    """broker_url/result_backend and their transport options for Celery (kombu's sentinel transport)."""
    t = parse(url)
    if not t.is_sentinel:
        return {"broker_url": url, "result_backend": url}
    auth = f":{_quote(t.password)}@" if t.password else ""
    urls = ";".join(f"sentinel://{auth}{_host(h)}:{p}/{t.db}" for h, p in t.sentinels)
    options: dict[str, Any] = {"master_name": t.master_name}
    if t.sentinel_password:
        options["sentinel_kwargs"] = {"password": t.sentinel_password}
    return {"broker_url": urls, "result_backend": urls, "broker_transport_options": dict(options),
            "result_backend_transport_options": dict(options)}


def _quote(s: str) -> str:
    return quote(s, safe="")


def _host(h: str) -> str:
    return f"[{h}]" if ":" in h else h


class MasterWatch:
    """Logs the master's address at start and once per change (a failover), asking a sentinel every `every` s."""

    def __init__(self, url: str, every: float = 5.0) -> None:
        self.target = parse(url)
        self.every = every
        self.master: tuple[str, int] | None = None
        self._sentinel = Sentinel(list(self.target.sentinels), sentinel_kwargs=_sentinel_kwargs(self.target, 2.0))  # type: ignore[no-untyped-call, unused-ignore]

    def look(self) -> tuple[str, int] | None:
        try:
            got = self._sentinel.discover_master(self.target.master_name)  # type: ignore[no-untyped-call, unused-ignore]
        except (redis.RedisError, OSError):
            return self.master
        master = (str(got[0]), int(got[1]))
        if master != self.master:
            if self.master is None:
                log.info("Redis master found through Sentinel", extra={"fields": {"master_name": self.target.master_name,
                                                                                    "address": f"{master[0]}:{master[1]}"}})
            else:
                log.warning("Redis master changed (a Sentinel failover)",
                            extra={"fields": {"master_name": self.target.master_name, "from": f"{self.master[0]}:{self.master[1]}",
                                              "to": f"{master[0]}:{master[1]}"}})
            self.master = master
        return master

    def start(self, stop: threading.Event | None = None) -> threading.Thread | None:
        """A daemon thread looking every `every` s (None for a plain server: nothing to watch)."""
        if not self.target.is_sentinel:
            return None
        stop = stop or threading.Event()

        def run() -> None:
            while True:
                self.look()
                if stop.wait(self.every):
                    return

        t = threading.Thread(target=run, name="fleet-redis-master-watch", daemon=True)
        t.start()
        return t


def watch(url: str) -> threading.Thread | None:
    """Start logging master changes for `url` if it is a Sentinel URL (every process calls it once)."""
    return MasterWatch(url).start() if url.startswith(SENTINEL + "://") else None
