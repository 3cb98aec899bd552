"""moto in server mode as a real process on 127.0.0.1: EC2's query API over
HTTP, which boto3 reaches through `endpoint_url` like any EC2 endpoint.

`with MotoServer() as m: m.url`; `m.reset()` empties every backend (POST
/moto-api/reset). The process is moto's own server (`python -m moto.server`,
the `moto_server` entry point), so workers in other processes share it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Any

# Dummy credentials, no instance metadata service, no shared files: no
# request of boto3's can leave loopback or find a real account.
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws/credentials",
    "AWS_CONFIG_FILE": "/nonexistent/aws/config",
}
UNSET = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ROLE_ARN",
         "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
         "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_EC2", "AWS_DEFAULT_REGION", "AWS_REGION")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MotoServer:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k not in UNSET}
        env.update(AWS_ENV)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto_server exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(self.url + "/moto-api/data.json", timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("moto_server did not answer within 30 s")

    def reset(self) -> None:
        req = urllib.request.Request(self.url + "/moto-api/reset", method="POST", data=b"")
        with urllib.request.urlopen(req, timeout=10):
            pass

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def __enter__(self) -> MotoServer:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
