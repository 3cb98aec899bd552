"""The hcloud client of one provider, built on first use and rebuilt when
the token changes (the token file is re-read when its mtime or size moves).

hcloud's own retries (rate_limit_exceeded, conflict, timeouts: up to five,
sleeping up to 60 s each) are switched off: they would sleep past any
deadline, and the reconciler retries with the back-off the error class
calls for. Its requests session's pools are `providers.watchdog` watched
ones, so a call under `guard(deadline)` has its socket shut at the deadline.
"""

from __future__ import annotations

import os
import threading

from hcloud import Client

from providers.hetzner.config import HetznerConfig
from providers.watchdog import watch_pool_manager

CONNECT_TIMEOUT = 3.0
READ_TIMEOUT = 60.0


class NoToken(Exception):
    """No token inline and none readable in tokenFile."""


class Hcloud:
    def __init__(self, cfg: HetznerConfig) -> None:
        self.cfg = cfg
        self._lock = threading.Lock()
        self._client: Client | None = None
        self._stamp: tuple[float, int] | None = None

    def _token(self) -> tuple[str, tuple[float, int] | None]:
        if self.cfg.token:
            return self.cfg.token, None
        try:
            st = os.stat(self.cfg.tokenFile)
            stamp = (st.st_mtime, st.st_size)
            if self._client is not None and stamp == self._stamp:
                return "", stamp
            with open(self.cfg.tokenFile, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as exc:
            raise NoToken(f"no API token: tokenFile {self.cfg.tokenFile} cannot be read ({exc.strerror})") from None
        if not token:
            raise NoToken(f"no API token: tokenFile {self.cfg.tokenFile} is empty")
        return token, stamp

    def client(self) -> Client:
        with self._lock:
            token, stamp = self._token()
            if self._client is not None and (not token or stamp is None):
                return self._client
            c = Client(token=token, api_endpoint=self.cfg.apiEndpoint, application_name="fleet",
                       timeout=(CONNECT_TIMEOUT, READ_TIMEOUT))
            base = c._client  # hcloud keeps the session and the retry policy private
            base._retry_max_retries = 0
            for adapter in base._session.adapters.values():
                pm = getattr(adapter, "poolmanager", None)
                if pm is not None:
                    watch_pool_manager(pm)
            if self._client is not None:
                self._client._client._session.close()
            self._client, self._stamp = c, stamp
            return c

    def credentials_kind(self) -> str:
        return "inline token" if self.cfg.token else "tokenFile"

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client._client._session.close()
            self._client = None
