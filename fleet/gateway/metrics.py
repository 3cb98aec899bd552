"""The gateway's metric families (one process's counts; every replica reports its own).

- `proxy_operator_gateway_requests_total{client, kind, outcome, protocol}`: protocol `http` (the HTTP/1.1 front-end,
  and requests inside its intercepted tunnels) or `socks5` (the SOCKS5 front-end: kind `connect`); kind `connect` (a
  tunnel), `http` (a plain request) or `https` (a request inside an intercepted tunnel); outcome `ok`, `banned` (the
  crawler got the origin's ban answer after the retries), `upstream_failed`, `upstream_timeout`, `no_proxy`, `busy`,
  `unauthorized`, `forbidden`, `limited`, `bad_request`, `unavailable`, `broken` (a plain response that broke off
  mid-body: cut, stalled past the idle timeout, or malformed; the crawler's connection closed), `ban_reported` and
  `unknown_proxy` (a ban report to http://fleet.gateway/v1/bans taken, or naming no proxy of the client's),
  `intercepted` (a CONNECT whose TLS the gateway ended: its requests are counted as kind `https`), `tls_handshake`
  (that handshake late, refused or cut), `untrusted_origin` (an intercepted request's origin certificate did not
  verify: 502), `paced` (a site's rule's politeness: 429). `client` is `-` before a client is known.
- `proxy_operator_gateway_upstream_retries_total{reason}`: refused, timeout, connect_error, upstream_auth (the
  upstream proxy refused the gateway's credentials for it), banned, broken; waterfall (a rule's next pool asked).
- `proxy_operator_gateway_bytes_total{direction}`: `up` (crawler → proxy) and `down`.
- `proxy_operator_gateway_tunnels_open{protocol}`: tunnels now, by the front-end that opened them.
- `proxy_operator_gateway_tunnel_duration_seconds`: a histogram of closed tunnels' lifetimes.
- `proxy_operator_gateway_sessions_retired_total{reason}`: sessions this process retired: `uses`, `age`, `errors`
  (their error score), `ban` (a ban of their proxy).
- `proxy_operator_gateway_sessions_active`: sessions whose binding has not lapsed, in Redis (so every replica
  shows the same number; read every 10 s).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from fleet.serving import GATEWAY_BYTES as BYTES
from fleet.serving import GATEWAY_REQUESTS as REQUESTS
from fleet.serving import GATEWAY_RETRIES as RETRIES
from fleet.serving import GATEWAY_SESSIONS_ACTIVE as SESSIONS_ACTIVE
from fleet.serving import GATEWAY_SESSIONS_RETIRED as SESSIONS_RETIRED
from fleet.serving import GATEWAY_TUNNEL_DURATION as TUNNEL_DURATION
from fleet.serving import GATEWAY_TUNNELS_OPEN as TUNNELS_OPEN

OUTCOMES = ("ok", "banned", "upstream_failed", "upstream_timeout", "no_proxy", "busy", "unauthorized", "forbidden",
            "limited", "bad_request", "unavailable", "broken", "ban_reported", "unknown_proxy", "intercepted",
            "tls_handshake", "untrusted_origin", "paced")
RETRY_REASONS = ("refused", "timeout", "connect_error", "upstream_auth", "banned", "broken", "waterfall")
RETIRED_REASONS = ("uses", "age", "errors", "ban")
PROTOCOLS = ("http", "socks5")
BUCKETS = (0.1, 1.0, 10.0, 60.0, 300.0, 1800.0, 3600.0, float("inf"))


class GatewaySeries(Collector):
    def __init__(self) -> None:
        self.requests: dict[tuple[str, str, str, str], int] = {}
        self.retries = dict.fromkeys(RETRY_REASONS, 0)
        self.bytes = {"up": 0, "down": 0}
        self.tunnels_open = dict.fromkeys(PROTOCOLS, 0)
        self.sessions_active = 0
        self.sessions_retired = dict.fromkeys(RETIRED_REASONS, 0)
        self._buckets = [0] * len(BUCKETS)
        self._duration_sum = 0.0

    def request(self, client: str, kind: str, outcome: str, protocol: str) -> None:
        key = (client or "-", kind, outcome, protocol)
        self.requests[key] = self.requests.get(key, 0) + 1

    def retry(self, reason: str) -> None:
        self.retries[reason] = self.retries.get(reason, 0) + 1

    def session_retired(self, reason: str) -> None:
        self.sessions_retired[reason] = self.sessions_retired.get(reason, 0) + 1

    def tunnel_closed(self, seconds: float) -> None:
        for i, edge in enumerate(BUCKETS):
            if seconds <= edge:
                self._buckets[i] += 1
                break
        self._duration_sum += seconds

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        c = CounterMetricFamily(REQUESTS, "Requests and tunnels of this gateway, by client, kind, outcome and protocol.",
                                labels=["client", "kind", "outcome", "protocol"])
        for (client, kind, outcome, protocol), n in sorted(self.requests.items()):
            c.add_metric([client, kind, outcome, protocol], n)
        yield c
        r = CounterMetricFamily(RETRIES, "Attempts on one proxy that failed and were retried on another, by reason.",
                                labels=["reason"])
        for reason, n in self.retries.items():
            r.add_metric([reason], n)
        yield r
        b = CounterMetricFamily(BYTES, "Bytes relayed, up (crawler to proxy) and down.", labels=["direction"])
        for direction, n in self.bytes.items():
            b.add_metric([direction], n)
        yield b
        t = GaugeMetricFamily(TUNNELS_OPEN, "Tunnels (CONNECT) open now, by protocol.", labels=["protocol"])
        for protocol, n in self.tunnels_open.items():
            t.add_metric([protocol], n)
        yield t
        yield GaugeMetricFamily(SESSIONS_ACTIVE, "Sessions whose binding has not lapsed (Redis, every replica's).",
                                value=self.sessions_active)
        s = CounterMetricFamily(SESSIONS_RETIRED, "Sessions this process retired, by reason.", labels=["reason"])
        for reason, n in self.sessions_retired.items():
            s.add_metric([reason], n)
        yield s
        cumulative, buckets = 0, []
        for edge, n in zip(BUCKETS, self._buckets, strict=True):
            cumulative += n
            buckets.append(("+Inf" if edge == float("inf") else repr(edge), cumulative))
        yield HistogramMetricFamily(TUNNEL_DURATION, "Lifetimes of closed tunnels.", buckets=buckets,
                                    sum_value=self._duration_sum)
