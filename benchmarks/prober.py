"""The prober at scale (issues 13 and 24): N proxies probed once per interval
by one prober process, against a floor in the same run.

- N real loopback listeners answering CONNECT with `200 Connection
  established` (one process listening on N ports, `--listeners`;
  `--listener-procs` splits them over several processes);
- their endpoints written straight into Redis (`fleet:px:endpoints`, as the
  controller keeps them for Running Proxies) on a real redis-server;
- **fleet**: one prober, `fleet.prober.process.main` (the code `fleet
  prober` runs, on uvloop when installed), in its own process (this script's
  `--prober-child`, which only adds a dump of its start delays and counters
  when it stops);
- **floor**: the same probe on the same loop with nothing else of fleet
  (`--floor-child`, which imports nothing of fleet): the same request bytes
  (`Target.connect_request()`, passed in) to the same listeners, through the
  same asyncio streams (`open_connection`, `readuntil`, a 200 check, reset
  with SO_LINGER 0) under the same time limit; one `call_at` timer per proxy
  at a random phase of the interval (uniform, as fleet's hash phases are),
  the same skip rule (a probe still running skips its tick; a loop a whole
  interval behind moves to the next phase); no Redis, no membership, no
  endpoint re-reads, no verdicts, no metrics.

Each size in `-n` runs fleet, then the floor, on the same listeners. After
`--warmup` seconds the measurement window of `--seconds` starts (a child's
delays are reset by SIGUSR1, read by SIGUSR2). Then a saturation run of each
(`--saturate-interval`, the largest size probed that often: a target rate
well above one core) gives the most probes/s a replica manages. Reported per
run: probes/s achieved against the target N/interval, failed and skipped
probes, start delay (scheduled → started) p50/p99/max, CPU (% of one core,
ms per probe) and RSS of the prober process, the listeners' CPU, and the
1-minute load average at the window's start and end; then fleet/floor ratios.

    python benchmarks/prober.py                         # 1,000 / 2,500 / 5,000 at 1 s, 10 s windows, saturation at 0.5 s
    python benchmarks/prober.py -n 2000 --seconds 30 --saturate-interval 0
    python benchmarks/prober.py -n 5000 --only fleet    # no floor (e.g. under py-spy)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ANSWER = b"HTTP/1.1 200 Connection established\r\n\r\n"
MAX_HEAD = 16 * 1024  # fleet.prober.target.MAX_HEAD (the floor imports nothing of fleet)
TIME_LIMIT = 5.0  # fleet's default --probe-time-limit


def raise_nofile() -> None:
    import resource

    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def new_loop() -> asyncio.AbstractEventLoop:
    """uvloop's when installed (as the prober picks it), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run_on_loop(coro: Any) -> None:
    with asyncio.Runner(loop_factory=new_loop) as runner:
        runner.run(coro)


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
    run_on_loop(_listen(n, Path(out)))


class GCTimes:
    """The cyclic garbage collector's passes in a child (gc.callbacks): count and seconds per generation, the longest."""

    def __init__(self) -> None:
        import gc

        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.longest = 0.0
        self._start = 0.0
        gc.callbacks.append(self._cb)

    def _cb(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
            return
        took = time.perf_counter() - self._start
        g = info["generation"]
        self.count[g] += 1
        self.seconds[g] += took
        self.longest = max(self.longest, took)

    def reset(self) -> None:
        self.count, self.seconds, self.longest = [0, 0, 0], [0.0, 0.0, 0.0], 0.0

    def doc(self) -> dict[str, object]:
        import gc

        return {"count": list(self.count), "seconds": list(self.seconds), "longest": self.longest,
                "objects": len(gc.get_objects()), "frozen": gc.get_freeze_count()}


# --- the fleet prober child -------------------------------------------------------


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
    gct = GCTimes()

    def reset(*_: object) -> None:  # SIGUSR1: the window starts
        p = holder.get("p")
        if p is not None:
            result.update(warmup_delays=p.delays.drain(), warmup_verdicts=p.verdicts)
            base.update(probes=p.probes, failed=p.failed, skipped=p.skipped)
        gct.reset()

    def snapshot(*_: object) -> None:  # SIGUSR2: the window ends
        p = holder["p"]
        result.update(delays=p.delays.drain(), probes=p.probes - base["probes"], failed=p.failed - base["failed"],
                      skipped=p.skipped - base["skipped"], share=len(p.owned), gc=gct.doc())

    signal.signal(signal.SIGUSR1, reset)
    signal.signal(signal.SIGUSR2, snapshot)

    def on_stop(p: process.Prober) -> None:
        Path(dump).write_text(json.dumps(result))

    sys.exit(process.main(settings, on_stop=on_stop))


# --- the floor child: the same probe, nothing else ----------------------------------------

_LINGER_RESET = struct.pack("ii", 1, 0)


async def _floor(ports: list[int], interval: float, request: bytes, dump: Path) -> None:
    loop = asyncio.get_running_loop()
    rng = random.Random(0)
    counts = {"probes": 0, "failed": 0, "skipped": 0}
    delays: list[float] = []
    running: dict[int, asyncio.Task[None]] = {}  # also the tasks' strong references
    result: dict[str, object] = {}
    gct = GCTimes()
    stop = asyncio.Event()

    async def probe(i: int, port: int, scheduled: float) -> None:
        delays.append(loop.time() - scheduled)
        writer: asyncio.StreamWriter | None = None
        ok = False
        try:
            async with asyncio.timeout(TIME_LIMIT):
                reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=MAX_HEAD)
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                ok = head.split(b" ", 2)[1:2] == [b"200"]
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            running.pop(i, None)
            if writer is not None:
                sock = writer.get_extra_info("socket")
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
                writer.transport.abort()
        counts["probes"] += 1
        if not ok:
            counts["failed"] += 1

    def tick(i: int, port: int, offset: float, when: float) -> None:
        if stop.is_set():
            return
        nxt = when + interval
        now = loop.time()
        if nxt <= now:  # a whole interval behind: skip to the next phase
            nxt = now - (now - offset) % interval + interval
        loop.call_at(nxt, tick, i, port, offset, nxt)
        if i in running:
            counts["skipped"] += 1
            return
        running[i] = loop.create_task(probe(i, port, when))

    now = loop.time()
    for i, port in enumerate(ports):
        offset = rng.random() * interval
        first = now - (now - offset) % interval + interval
        loop.call_at(first, tick, i, port, offset, first)

    base = dict(counts)

    def reset() -> None:
        result.update(warmup_delays=list(delays), warmup_verdicts=0)
        delays.clear()
        base.update(counts)
        gct.reset()

    def snapshot() -> None:
        result.update(delays=list(delays), share=len(ports), gc=gct.doc(), **{k: counts[k] - base[k] for k in counts})
        delays.clear()

    loop.add_signal_handler(signal.SIGUSR1, reset)
    loop.add_signal_handler(signal.SIGUSR2, snapshot)
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    dump.write_text(json.dumps(result))
    pending = list(running.values())
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


def floor_child(dump: str, ports_file: str, interval: float, request_hex: str) -> None:
    raise_nofile()
    run_on_loop(_floor(json.loads(Path(ports_file).read_text()), interval, bytes.fromhex(request_hex), Path(dump)))


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


def measure(proc: subprocess.Popen[bytes], dump: Path, listeners: list[int], warmup: float, seconds: float,
            profile: Path | None = None) -> dict[str, Any]:
    """Warm up, then one window; the child's counters and delays, its CPU and RSS, the listeners' CPU, the load.
    With `profile`, py-spy samples the child through the window (raw collapsed stacks; --nonblocking, so the
    child is not stopped per sample; time in uvloop's C code shows as the Python frame that called it, run_forever)."""
    from benchmarks.procstats import cpu_s, rss_mib

    time.sleep(warmup)
    if proc.poll() is not None:
        raise SystemExit(f"the prober process exited early ({proc.returncode})")
    spy = None
    if profile is not None:
        spy_bin = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        spy = subprocess.Popen([spy_bin, "record", "-p", str(proc.pid), "-d", str(int(seconds)), "-r", "200", "--nonblocking",
                                "-f", "raw", "-o", str(profile)], stdout=subprocess.DEVNULL)
    proc.send_signal(signal.SIGUSR1)
    load0 = os.getloadavg()[0]
    c0, l0, t0 = cpu_s(proc.pid), sum(cpu_s(p) for p in listeners), time.monotonic()
    time.sleep(seconds)
    proc.send_signal(signal.SIGUSR2)
    c1, l1, t1 = cpu_s(proc.pid), sum(cpu_s(p) for p in listeners), time.monotonic()
    load1 = os.getloadavg()[0]
    rss, hwm = rss_mib(proc.pid)
    if spy is not None:
        spy.wait(60)
    time.sleep(0.2)  # the snapshot is taken on the child's loop
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)
    got = json.loads(dump.read_text())
    wall = t1 - t0
    delays = got["delays"]
    probes = got["probes"]
    warm = got.get("warmup_delays", [])
    return {"probes": probes, "rate": probes / wall, "failed": got["failed"], "skipped": got["skipped"], "share": got["share"],
            "p50": quantile(delays, 0.5) * 1000, "p99": quantile(delays, 0.99) * 1000, "max": max(delays, default=0) * 1000,
            "cpu": 100 * (c1 - c0) / wall, "ms_per_probe": 1000 * (c1 - c0) / max(1, probes), "rss": rss, "hwm": hwm,
            "listeners_cpu": 100 * (l1 - l0) / wall, "load": (load0, load1), "gc": got["gc"],
            "gc_ms_per_s": 1000 * sum(got["gc"]["seconds"]) / wall,
            "warmup": {"probes": len(warm), "p99": quantile(warm, 0.99) * 1000, "max": max(warm, default=0) * 1000,
                       "verdicts": got.get("warmup_verdicts", 0)}}


def line(kind: str, m: dict[str, Any]) -> str:
    return (f"  {kind:<5} {m['rate']:7.0f} probes/s ({m['failed']} failed, {m['skipped']} skipped)  "
            f"delay p50 {m['p50']:6.1f} p99 {m['p99']:7.1f} max {m['max']:7.1f} ms  "
            f"CPU {m['cpu']:4.0f}% ({m['ms_per_probe']:.3f} ms/probe)  RSS {m['rss']:3.0f} MiB  "
            f"listeners {m['listeners_cpu']:3.0f}%  load {m['load'][0]:.2f}→{m['load'][1]:.2f}\n"
            f"        GC {m['gc_ms_per_s']:.0f} ms/s (passes by generation {m['gc']['count']}, longest "
            f"{m['gc']['longest'] * 1000:.0f} ms; {m['gc']['objects']:,} objects tracked, {m['gc']['frozen']:,} frozen); "
            f"warm-up (the first probes, and fleet's first verdict for each proxy): {m['warmup']['probes']} probes, "
            f"{m['warmup']['verdicts']} verdicts, delay p99 {m['warmup']['p99']:.1f} max {m['warmup']['max']:.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--proxies", default="1000,2500,5000", help="sizes, comma-separated")
    ap.add_argument("--interval", default="1s")
    ap.add_argument("--seconds", type=float, default=10.0, help="measurement window")
    ap.add_argument("--warmup", type=float, default=4.0)
    ap.add_argument("--saturate-interval", default="0.5s",
                    help="the saturation run's interval for the largest size (0: no saturation run)")
    ap.add_argument("--only", choices=["fleet", "floor"], help="run one side only")
    ap.add_argument("--listener-procs", type=int, default=1)
    ap.add_argument("--target", default="origin.example:443", help="the CONNECT target (host:port; the listeners answer any)")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--profile", help="sample each window's prober with py-spy (pip install py-spy) into this directory")
    ap.add_argument("--listeners", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--ports-file", help=argparse.SUPPRESS)
    ap.add_argument("--prober-child", help=argparse.SUPPRESS)
    ap.add_argument("--floor-child", help=argparse.SUPPRESS)
    ap.add_argument("--floor-interval", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--request", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.listeners:
        return listener_child(args.listeners, args.ports_file)
    if args.prober_child:
        return prober_child(args.prober_child)
    if args.floor_child:
        return floor_child(args.floor_child, args.ports_file, args.floor_interval, args.request)

    import redis

    from benchmarks.procstats import free_port, stop
    from fleet.durations import parse_duration
    from fleet.prober.target import parse_target
    from fleet.store import keys

    target = parse_target(args.target)
    if target.path is not None:
        raise SystemExit("--target: host:port only (the listeners answer CONNECT, not a GET in the tunnel)")
    sizes = [int(x) for x in args.proxies.split(",")]
    interval = parse_duration(args.interval)
    sat_interval = parse_duration(args.saturate_interval) if args.saturate_interval not in ("0", "") else 0.0
    sides = [args.only] if args.only else ["fleet", "floor"]
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    binary = shutil.which("redis-server")
    if not binary:
        raise SystemExit("redis-server is not installed (apt-get install redis-server)")
    tmp = Path(tempfile.mkdtemp(prefix="fleet-bench-prober-"))
    procs: list[subprocess.Popen[bytes]] = []
    figures: list[dict[str, Any]] = []
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

        most = max(sizes)
        per = [most // args.listener_procs + (1 if i < most % args.listener_procs else 0) for i in range(args.listener_procs)]
        listeners, ports = [], []
        for i, n in enumerate(per):
            out = tmp / f"ports-{i}.json"
            p = subprocess.Popen([sys.executable, __file__, "--listeners", str(n), "--ports-file", str(out)])
            procs.append(p)
            listeners.append((p, out))
        for p, out in listeners:
            wait_file(out, 60, p)
            ports += json.loads(out.read_text())
        listener_pids = [p.pid for p, _ in listeners]

        runs = [(n, interval, "") for n in sizes] + ([(most, sat_interval, "saturation")] if sat_interval else [])
        print(f"prober benchmark: fleet (fleet.prober.process.main) vs floor (the same probe, nothing else), both on "
              f"{new_loop().__class__.__module__.split('.')[0]}; window {args.seconds:.0f} s after {args.warmup:.0f} s warm-up; "
              f"{args.listener_procs} listener process(es); {os.cpu_count()} CPUs; target {target}")
        for n, every, label in runs:
            r.delete(keys.PX_ENDPOINTS, keys.PROBE_VERDICTS, keys.PROBER_MEMBERS)
            r.hset(keys.PX_ENDPOINTS, mapping={f"bench/px-{i:05d}": json.dumps({"uid": f"uid-{i}", "ip": "127.0.0.1", "port": p})
                                               for i, p in enumerate(ports[:n])})
            (tmp / "ports.json").write_text(json.dumps(ports[:n]))
            print(f"{n} proxies every {every:g} s (target {n / every:.0f} probes/s){'  — ' + label if label else ''}")
            row: dict[str, Any] = {"proxies": n, "interval": every, "label": label}
            for side in sides:
                dump = tmp / f"{side}.json"
                dump.unlink(missing_ok=True)
                if side == "fleet":
                    env = {**os.environ, "FLEET_BROKER_URL": url, "FLEET_PROBE_TARGET": str(target),
                           "FLEET_PROBE_INTERVAL": f"{every}s", "FLEET_PROBER_METRICS_BIND_ADDRESS": "0",
                           "FLEET_LOG_LEVEL": "warning", "PYTHONUNBUFFERED": "1"}
                    cmd = [sys.executable, __file__, "--prober-child", str(dump)]
                else:
                    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
                    cmd = [sys.executable, __file__, "--floor-child", str(dump), "--ports-file", str(tmp / "ports.json"),
                           "--floor-interval", str(every), "--request", target.connect_request().hex()]
                child = subprocess.Popen(cmd, env=env)
                procs.append(child)
                spied = Path(args.profile) / f"{side}-{n}-{every:g}s.txt" if args.profile else None
                m = measure(child, dump, listener_pids, args.warmup, args.seconds, spied)
                procs.remove(child)
                row[side] = m
                print(line(side, m), flush=True)
            if len(sides) == 2:
                fl, fo = row["fleet"], row["floor"]
                print(f"  fleet/floor: CPU per probe {fl['ms_per_probe'] / fo['ms_per_probe']:.2f}x, "
                      f"probes/s {fl['rate'] / max(1e-9, fo['rate']):.2f}x", flush=True)
            figures.append(row)
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=1))
        r.close()
    finally:
        stop(procs)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
