"""One `fleet api` process on a free loopback port, and an HTTP client of it
that reads every answer as (status, JSON body, headers) (tests'
`apis` fixture, benchmarks/leases_durable.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from fleet.testing.procs import die_with_parent, free_port, stop_group, wait_for

Answer = tuple[int, dict[str, Any], dict[str, str]]  # (status, the JSON body, headers by lower-case name)
TOKEN = "integration-token-0123456789abcdef"


class ApiProc:
    """One `fleet api` process on a free loopback port."""

    def __init__(self, tmp: Path, broker: str, name: str = "api", **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / f"{name}.log"
        self.env = {**os.environ, "FLEET_BROKER_URL": broker, "FLEET_API_BIND_ADDRESS": f"127.0.0.1:{self.port}",
                    "FLEET_API_TOKEN": TOKEN, "FLEET_LOG_LEVEL": "info", "PYTHONUNBUFFERED": "1", **env}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, wait: bool = True) -> ApiProc:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "fleet.cli", "api"], env=self.env, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent)
        if wait:
            wait_for(lambda: self.get("/healthz")[0] == 200, 30, f"the API to answer:\n{self.log()[-2000:]}")
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        stop_group(self.proc)

    def request(self, method: str, path: str, body: bytes | dict[str, Any] | None = None, token: str | None = TOKEN,
                headers: dict[str, str] | None = None) -> Answer:
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers or {})
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                status, raw, hdrs = resp.status, resp.read(), dict(resp.headers)
        except urllib.error.HTTPError as exc:
            status, raw, hdrs = exc.code, exc.read(), dict(exc.headers)
            exc.close()
        try:
            doc = json.loads(raw) if raw else {}
        except ValueError:
            doc = {"text": raw.decode(errors="replace")}
        return status, doc, {k.lower(): v for k, v in hdrs.items()}

    def get(self, path: str, token: str | None = TOKEN) -> Answer:
        return self.request("GET", path, token=token)

    def lease(self, **body: Any) -> Answer:
        return self.request("POST", "/v1/leases", {"target": "example.com", **body})

    def release(self, lease_id: str) -> Answer:
        return self.request("POST", f"/v1/leases/{lease_id}/release", b"")

    def report(self, **body: Any) -> Answer:
        return self.request("POST", "/v1/reports", body)

    def metrics(self) -> str:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as resp:
            return str(resp.read().decode())
