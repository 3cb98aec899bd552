"""fleet's crawler side: a client of the lease API (`LeaseClient`, `AsyncLeaseClient`), the gateway's proxy
settings per HTTP library (`Gateway`), a Crawlee-style `SessionPool`, and Scrapy's middlewares
(`fleet_crawler.scrapy`, with the `scrapy` extra). It speaks to fleet over HTTP only and depends on httpx alone.
The public names are the ones below (a test pins them); the modules behind them are private. docs/crawler.md.
"""

from fleet_crawler._calls import Cooldown, Grant, Outcome, ProxyInfo, Released, Report
from fleet_crawler._client import AsyncLease, AsyncLeaseClient, Lease, LeaseClient
from fleet_crawler._errors import ApiError, LeaseEnded, NoProxy, Unauthorized, Unreachable
from fleet_crawler._gateway import Gateway, username
from fleet_crawler._sessions import Session, SessionLimits, SessionPool

__all__ = [
    "ApiError",
    "AsyncLease",
    "AsyncLeaseClient",
    "Cooldown",
    "Gateway",
    "Grant",
    "Lease",
    "LeaseClient",
    "LeaseEnded",
    "NoProxy",
    "Outcome",
    "ProxyInfo",
    "Released",
    "Report",
    "Session",
    "SessionLimits",
    "SessionPool",
    "Unauthorized",
    "Unreachable",
    "username",
]
