"""The EC2 clients of one provider, one per region, built on first use.

Constructing a provider must not touch the network, so nothing here runs
before the first call. Credentials come from boto3's default chain (or the
configured profile): environment, shared files, web identity, container or
instance role. They are resolved and refreshed by botocore and never pass
through fleet's code.

Deadlines: botocore's timeouts are per client and per socket operation, so
every call runs under `providers.watchdog.guard(deadline)`, which shuts the
call's socket down when the deadline passes; the clients' HTTP pools are
built from watched subclasses of botocore's own connection classes.
botocore's retries are off (one attempt): the reconciler retries, with the
back-off the error class calls for, and a retry inside the call could not
keep to the deadline.
"""

from __future__ import annotations

import threading
from typing import Any

import boto3
from botocore.awsrequest import AWSHTTPConnection, AWSHTTPConnectionPool, AWSHTTPSConnection, AWSHTTPSConnectionPool
from botocore.config import Config

from providers import watchdog
from providers.aws import redaction
from providers.aws.config import AwsConfig

CONNECT_TIMEOUT = 3.0  # a connect is not cut by the watchdog (no socket yet): bounded here
READ_TIMEOUT = 60.0  # per socket read; the deadline is enforced by the guard


class _Conn(watchdog._Watched, AWSHTTPConnection):
    pass


class _ConnS(watchdog._Watched, AWSHTTPSConnection):
    pass


class _Pool(AWSHTTPConnectionPool):
    ConnectionCls = _Conn


class _PoolS(AWSHTTPSConnectionPool):
    ConnectionCls = _ConnS


WATCHED_POOLS = {"http": _Pool, "https": _PoolS}


def watch(client: Any) -> None:
    """Make the client's pool managers build watched pools (botocore keeps
    them private: URLLib3Session._manager and its proxy managers)."""
    session = client._endpoint.http_session
    session._pool_classes_by_scheme = dict(WATCHED_POOLS)
    for pm in (session._manager, *session._proxy_managers.values()):
        pm.pool_classes_by_scheme = session._pool_classes_by_scheme
        pm.clear()


def address_of(cfg: AwsConfig, region: str) -> str:
    return cfg.endpointUrl or f"ec2.{region}.amazonaws.com"


class Ec2:
    def __init__(self, cfg: AwsConfig) -> None:
        self.cfg = cfg
        self._lock = threading.Lock()
        self._session: boto3.session.Session | None = None
        self._clients: dict[str, Any] = {}

    def client(self, region: str) -> Any:
        with self._lock:  # boto3 sessions are not safe for concurrent client creation; clients are
            c = self._clients.get(region)
            if c is None:
                redaction.install()
                if self._session is None:
                    self._session = boto3.session.Session(profile_name=self.cfg.profile)
                config = Config(
                    connect_timeout=CONNECT_TIMEOUT,
                    read_timeout=READ_TIMEOUT,
                    retries={"mode": "standard", "total_max_attempts": 1},
                    user_agent_extra="fleet",
                    max_pool_connections=20,
                )
                c = self._session.client("ec2", region_name=region, endpoint_url=self.cfg.endpointUrl, config=config)
                watch(c)
                self._clients[region] = c
            return c

    def credentials_kind(self) -> str:
        """Where the default chain found credentials ("env", "shared-credentials-file",
        "assume-role-with-web-identity", "iam-role", …), or "none"; no request."""
        with self._lock:
            session = self._session
        if session is None:
            return ""
        try:
            creds = session.get_credentials()
        except Exception:  # informational only
            return ""
        return getattr(creds, "method", "") or "none" if creds is not None else "none"

    def close(self) -> None:
        with self._lock:
            for c in self._clients.values():
                c.close()
            self._clients = {}
