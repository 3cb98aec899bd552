"""Observers for benchmarks/pipeline.py, each run as its own process so the
timestamps are not taken by the process that sends the checks or serves
anything else:

- `keyspace URL OUT PATTERN...`: subscribes to Redis keyspace notifications
  (`notify-keyspace-events K$`) on the keys matching PATTERN and appends
  `<time.time()> <key>` to OUT when Redis announces a SET: the moment Redis
  applied the write (plus the notification's delivery on loopback).
- `kubeapi --port-file F --log OUT [--api-latency-ms 8.7] [--api-burn]`: serves
  fleet.testing.kubeapi.FakeKubeAPI on 127.0.0.1, delaying every request by
  `--api-latency-ms` (a sleep: the API server and etcd are another machine's
  CPU; `--api-burn` spins this process's CPU instead), and appends
  `<time.time()> <METHOD> <code> <name> <status|object> <body bytes> <keys>` to OUT
  for every request once the fake has answered it (a write: applied; before the
  response goes out); `<keys>` are the status fields a status PATCH sets
  (comma-separated, `-` for none), so the benchmark can tell a steady write
  (`lastCheckTime` alone) from one that carries the targets.
- `kubewatch KUBECONFIG OUT`: watches ProviderHealth objects on any API server
  and appends `<time.time()> <event> <name>` per event (with `--kubeconfig`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def keyspace(url: str, out: str, patterns: list[str]) -> None:
    import redis

    r = redis.Redis.from_url(url)
    r.config_set("notify-keyspace-events", "K$")
    db = r.connection_pool.connection_kwargs.get("db", 0)
    ps = r.pubsub(ignore_subscribe_messages=True)
    ps.psubscribe(*[f"__keyspace@{db}__:{p}" for p in patterns])
    prefix = len(f"__keyspace@{db}__:")
    with open(out, "a", buffering=1) as f:
        for msg in ps.listen():
            now = time.time()
            if msg.get("data") == b"set":
                f.write(f"{now:.6f} {msg['channel'][prefix:].decode()}\n")


def kubeapi(port_file: str, log: str, latency_ms: float, burn: bool) -> None:
    from fleet.testing.kubeapi import FakeKubeAPI, Request, Server

    f = open(log, "a", buffering=1)  # noqa: SIM115 - open for the life of the process

    class TimedAPI(FakeKubeAPI):
        def handle(self, req: Request) -> tuple[int, Any]:
            if latency_ms:
                if burn:
                    end = time.perf_counter() + latency_ms / 1000
                    while time.perf_counter() < end:
                        pass
                else:
                    time.sleep(latency_ms / 1000)
            code, body = super().handle(req)
            self.requests.clear()  # the benchmark's log is the file, not memory
            parts = req.path.rstrip("/").split("/")
            status = parts[-1] == "status"
            body_in = req.body if isinstance(req.body, dict) else {}
            created = (body_in.get("metadata") or {}).get("name", "?")
            name = parts[-2] if status else (created if req.method == "POST" else parts[-1])
            size = len(json.dumps(req.body, separators=(",", ":"))) if req.body is not None else 0
            keys = ",".join(sorted(body_in.get("status") or {})) or "-"
            f.write(f"{time.time():.6f} {req.method} {code} {name} {'status' if status else 'object'} {size} {keys}\n")
            return code, body

    with Server(TimedAPI()) as srv:
        Path(port_file).write_text(json.dumps({"url": srv.url}))
        while True:
            time.sleep(3600)


def kubewatch(kubeconfig: str, out: str) -> None:
    """fleet's own list+watch (`fleet.kube.Watcher`): list, watch from the list's
    resourceVersion (a watch without one is refused by a real API server on
    etcd 3.4: "504 Too large resource version"), re-watch from the last event
    on errors and list again on 410. Writes `<time> <event> <name>` per
    ADDED/MODIFIED/DELETED, and `<time> SYNCED <count>` after each list."""
    import threading

    from kubernetes import client

    from fleet import logs
    from fleet.kube import PROVIDER_HEALTH, Watcher
    from providers.kubernetes.client import load_configuration

    logs.setup("text", "info")  # the watcher's retries and relists, with their fields, in this process's log
    f = open(out, "a", buffering=1)  # noqa: SIM115 - open for the life of the process

    def on_event(type_: str, obj: dict[str, Any]) -> None:
        if type_ != "SYNC":
            f.write(f"{time.time():.6f} {type_} {obj['metadata']['name']}\n")

    def on_synced(objects: list[dict[str, Any]]) -> None:
        f.write(f"{time.time():.6f} SYNCED {len(objects)}\n")

    api = client.ApiClient(load_configuration(kubeconfig))
    Watcher(api, PROVIDER_HEALTH, on_event, on_synced=on_synced).run(threading.Event())


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("keyspace")
    k.add_argument("url")
    k.add_argument("out")
    k.add_argument("patterns", nargs="+")
    a = sub.add_parser("kubeapi")
    a.add_argument("--port-file", required=True)
    a.add_argument("--log", required=True)
    a.add_argument("--api-latency-ms", type=float, default=8.7)
    a.add_argument("--api-burn", action="store_true")
    w = sub.add_parser("kubewatch")
    w.add_argument("kubeconfig")
    w.add_argument("out")
    args = ap.parse_args()
    if args.cmd == "keyspace":
        keyspace(args.url, args.out, args.patterns)
    elif args.cmd == "kubeapi":
        kubeapi(args.port_file, args.log, args.api_latency_ms, args.api_burn)
    else:
        kubewatch(args.kubeconfig, args.out)


if __name__ == "__main__":
    main()
