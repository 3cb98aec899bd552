"""The SDK clients of one provider, built on first use.

Constructing a provider must not touch the network (one dead backend must
not stop a process serving the others), so nothing here runs before the
first call. Credentials are Application Default Credentials unless the
caller injects a `google.auth.credentials.Credentials` (tests pass anonymous
ones); both clients share one credentials object, so one token serves both.

Every HTTP pool of both clients (the API session's and the token session's)
is a `providers.watchdog` watched one, so a call made under
`watchdog.guard(deadline)` has its socket shut down at the deadline:
`timeout=` alone bounds each socket read, not the answer.
"""

from __future__ import annotations

import threading

import google.auth
from google.api_core.client_options import ClientOptions
from google.auth.credentials import Credentials
from google.cloud import compute_v1

from providers.gcp import redaction
from providers.gcp.config import GcpConfig
from providers.watchdog import watch_pool_manager

DEFAULT_ADDRESS = "compute.googleapis.com"
SCOPES = ("https://www.googleapis.com/auth/compute", "https://www.googleapis.com/auth/cloud-platform")


def watch_sessions(c: compute_v1.InstancesClient | compute_v1.ZoneOperationsClient) -> None:
    """Watch the pools of the REST transport's AuthorizedSession and of the
    session it fetches tokens with (the SDK keeps both private)."""
    session = c.transport._session
    sessions = [session, getattr(session, "_auth_request_session", None)]
    for s in sessions:
        for adapter in (s.adapters.values() if s is not None else ()):
            pm = getattr(adapter, "poolmanager", None)
            if pm is not None:
                watch_pool_manager(pm)


def address_of(cfg: GcpConfig) -> str:
    """What the check shows as the target's address."""
    return cfg.apiEndpoint or DEFAULT_ADDRESS


class Compute:
    def __init__(self, cfg: GcpConfig, credentials: Credentials | None = None) -> None:
        self.cfg = cfg
        self._credentials = credentials
        self._lock = threading.Lock()
        self._instances: compute_v1.InstancesClient | None = None
        self._operations: compute_v1.ZoneOperationsClient | None = None

    def _build(self) -> None:
        redaction.install()
        creds = self._credentials
        if creds is None:
            # ADC: GOOGLE_APPLICATION_CREDENTIALS, gcloud's ADC file, or the
            # metadata server (workload identity). Reads files, may probe the
            # metadata server; raises DefaultCredentialsError when none works.
            creds, _ = google.auth.default(scopes=list(SCOPES))
            self._credentials = creds
        options = ClientOptions(api_endpoint=self.cfg.apiEndpoint) if self.cfg.apiEndpoint else None
        self._instances = compute_v1.InstancesClient(credentials=creds, transport="rest", client_options=options)
        self._operations = compute_v1.ZoneOperationsClient(credentials=creds, transport="rest", client_options=options)
        for c in (self._instances, self._operations):
            watch_sessions(c)

    def instances(self) -> compute_v1.InstancesClient:
        with self._lock:
            if self._instances is None:
                self._build()
            assert self._instances is not None
            return self._instances

    def operations(self) -> compute_v1.ZoneOperationsClient:
        with self._lock:
            if self._operations is None:
                self._build()
            assert self._operations is not None
            return self._operations

    def credentials(self) -> Credentials | None:
        """The credentials in use once a client was built (for check details)."""
        return self._credentials

    def close(self) -> None:
        with self._lock:
            for c in (self._instances, self._operations):
                if c is not None:
                    c.transport.close()
            self._instances = self._operations = None
