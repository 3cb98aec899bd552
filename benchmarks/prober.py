"""The prober at scale (issue 13): N proxies probed once per interval by one
prober process.

- N real loopback listeners answering CONNECT with `200 Connection
  established` (one asyncio process listening on N ports, `--listeners`;
  `--listener-procs` splits them over several processes);
- their endpoints written straight into Redis (`fleet:px:endpoints`, as the
  controller keeps them for Running Proxies) on a real redis-server;
- one prober: `fleet.prober.process.main`, the code `fleet prober` runs, in
  its own process (this script's `--prober-child`, which only adds a dump of
  its start delays and counters when it stops).

After `--warmup` seconds the measurement window of `--seconds` starts (the
child's delays are reset by SIGUSR1). Reported: probe start delay (scheduled
→ started, the jitter) p50/p99/max, probes/s achieved against the target
N/interval, failed and skipped probes, the prober's CPU % (of one core) and
RSS, and the listeners' CPU.

    python benchmarks/prober.py                      # 2,000 proxies, 1 s interval, 30 s
    python benchmarks/prober.py -n 500 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from benchmarks.procstats import cpu_s, free_port, rss_mib, stop  # noqa: E402
from fleet.durations import parse_duration  # noqa: E402
from fleet.store import keys  # noqa: E402

ANSWER = b"HTTP/1.1 200 Connection established\r\n\r\n"








def raise_nofile() -> None:
    import resource

    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# --- the listeners ----------------------------------------------------------------


class _Connect(asyncio.Protocol):
    """Answers the first request head with 200 and waits for the client to go."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if b"\r\n\r\n" in self.buf:
            self.transport.write(ANSWER)  # type: ignore[attr-defined]
            self.buf = b""


async def _listen(n: int, out: Path) -> None:
    loop = asyncio.get_running_loop()
    servers = [await loop.create_server(_Connect, "127.0.0.1", 0, backlog=4096) for _ in range(n)]
    ports = [s.sockets[0].getsockname()[1] for s in servers]
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(ports))
    os.replace(tmp, out)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()


def listener_child(n: int, out: str) -> None:
    raise_nofile()
    asyncio.run(_listen(n, Path(out)))


# --- the prober child -------------------------------------------------------------


def prober_child(dump: str) -> None:
    from fleet import logs
    from fleet.prober import process
    from fleet.settings import Settings

    settings = Settings.from_env()
    logs.setup(settings.log_format, settings.log_level)
    holder: dict[str, process.Prober] = {}
    real_init = process.Prober.__init__

    def init(self: process.Prober, *a: object, **kw: object) -> None:
        real_init(self, *a, **kw)  # type: ignore[arg-type]
        holder["p"] = self

    process.Prober.__init__ = init  # type: ignore[method-assign]
    base = {"probes": 0, "failed": 0, "skipped": 0}
    result: dict[str, object] = {}

    def reset(*_: object) -> None:  # SIGUSR1: the window starts
        p = holder.get("p")
        if p is not None:
            p.delays.drain()
            base.update(probes=p.probes, failed=p.failed, skipped=p.skipped)

    def snapshot(*_: object) -> None:  # SIGUSR2: the window ends
        p = holder["p"]
        result.update(delays=p.delays.drain(), probes=p.probes - base["probes"], failed=p.failed - base["failed"],
                      skipped=p.skipped - base["skipped"], share=len(p.owned))

    signal.signal(signal.SIGUSR1, reset)
    signal.signal(signal.SIGUSR2, snapshot)

    def on_stop(p: process.Prober) -> None:
        Path(dump).write_text(json.dumps(result))

    sys.exit(process.main(settings, on_stop=on_stop))


# --- the run ----------------------------------------------------------------------------


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def wait_file(path: Path, timeout: float, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"listener process did not start (exit {proc.poll()})")
        time.sleep(0.05)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--proxies", type=int, default=2000)
    ap.add_argument("--interval", default="1s")
    ap.add_argument("--seconds", type=float, default=30.0, help="measurement window")
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--listener-procs", type=int, default=1)
    ap.add_argument("--target", default="origin.example:443", help="the CONNECT target (the listeners answer any)")
    ap.add_argument("--listeners", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--ports-file", help=argparse.SUPPRESS)
    ap.add_argument("--prober-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.listeners:
        return listener_child(args.listeners, args.ports_file)
    if args.prober_child:
        return prober_child(args.prober_child)

    binary = shutil.which("redis-server")
    if not binary:
        raise SystemExit("redis-server is not installed (apt-get install redis-server)")
    interval = parse_duration(args.interval)
    tmp = Path(tempfile.mkdtemp(prefix="fleet-bench-prober-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        port = free_port()
        procs.append(subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                       "--dir", str(tmp)], stdout=subprocess.DEVNULL))
        url = f"redis://127.0.0.1:{port}/0"
        r = redis.Redis(port=port)
        for _ in range(100):
            with contextlib.suppress(redis.ConnectionError):
                if r.ping():
                    break
            time.sleep(0.05)

        per = [args.proxies // args.listener_procs + (1 if i < args.proxies % args.listener_procs else 0)
               for i in range(args.listener_procs)]
        listeners, ports = [], []
        for i, n in enumerate(per):
            out = tmp / f"ports-{i}.json"
            p = subprocess.Popen([sys.executable, __file__, "--listeners", str(n), "--ports-file", str(out)])
            procs.append(p)
            listeners.append((p, out))
        for p, out in listeners:
            wait_file(out, 60, p)
            ports += json.loads(out.read_text())
        r.hset(keys.PX_ENDPOINTS, mapping={f"bench/px-{i:04d}": json.dumps({"uid": f"uid-{i}", "ip": "127.0.0.1", "port": p})
                                           for i, p in enumerate(ports)})

        dump = tmp / "prober.json"
        env = {**os.environ, "FLEET_BROKER_URL": url, "FLEET_PROBE_TARGET": args.target, "FLEET_PROBE_INTERVAL": args.interval,
               "FLEET_PROBER_METRICS_BIND_ADDRESS": "0", "FLEET_LOG_LEVEL": "warning", "PYTHONUNBUFFERED": "1"}
        prober = subprocess.Popen([sys.executable, __file__, "--prober-child", str(dump)], env=env)
        procs.append(prober)
        time.sleep(args.warmup)
        prober.send_signal(signal.SIGUSR1)
        c0, l0, t0 = cpu_s(prober.pid), sum(cpu_s(p.pid) for p, _ in listeners), time.monotonic()
        time.sleep(args.seconds)
        prober.send_signal(signal.SIGUSR2)
        c1, l1, t1 = cpu_s(prober.pid), sum(cpu_s(p.pid) for p, _ in listeners), time.monotonic()
        rss, hwm = rss_mib(prober.pid)
        prober.send_signal(signal.SIGTERM)
        prober.wait(30)
        got = json.loads(dump.read_text())
        wall = t1 - t0
        delays = got["delays"]
        target_rate = args.proxies / interval
        print(f"prober benchmark: {args.proxies} proxies, interval {args.interval}, window {wall:.1f} s "
              f"(after {args.warmup:.0f} s warm-up), {args.listener_procs} listener process(es), {os.cpu_count()} CPUs")
        print(f"  share                 {got['share']}")
        print(f"  probes/s              {got['probes'] / wall:.0f} (target {target_rate:.0f}); failed {got['failed']}, "
              f"skipped {got['skipped']}")
        print(f"  start delay (jitter)  p50 {quantile(delays, 0.5) * 1000:.1f} ms, p99 {quantile(delays, 0.99) * 1000:.1f} ms, "
              f"max {max(delays, default=0) * 1000:.1f} ms  (goal p99 <= 200 ms) over {len(delays)} probes")
        per_probe = 1000 * (c1 - c0) / max(1, got["probes"])
        print(f"  prober CPU            {100 * (c1 - c0) / wall:.0f}% of one core ({per_probe:.3f} ms/probe)")
        print(f"  prober RSS            {rss:.0f} MiB (peak {hwm:.0f} MiB)")
        print(f"  listeners CPU         {100 * (l1 - l0) / wall:.0f}% of one core")
        r.close()
    finally:
        stop(procs)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
