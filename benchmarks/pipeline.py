"""fleet's check pipeline against the bare Celery floor, in one run (issue 11).

Real redis-server, W worker processes x T threads consuming the provider
queues between them, one controller (4 threads, as `controller_argv`), and,
in the same run, the bare Celery floor (benchmarks/floor.py: same settings,
same queue shape, same processes and threads, same payload, a check → record
chain whose record is one Redis SET). Checks are sent with fleet's own
message (`fleet.health.dispatch.send_check`, what beat sends), not through
beat, so each check's send time is known.

Each check is timed from its send (this process) to the END OF ITS WRITE:
- standalone fleet and the floor: when Redis applied the SET of the result key,
  taken from a keyspace notification by a separate observer process
  (benchmarks/observe.py keyspace), not by polling;
- fleet with the fake API: when the fake, in its own process
  (benchmarks/observe.py kubeapi), had applied the status PATCH, from its
  request log;
- fleet with `--kubeconfig` (any API server): when a watch on ProviderHealth,
  in a separate process, received the MODIFIED event (an upper bound).

Quantities (ratios fleet/floor are the result; absolute numbers are of a
noisy shared 2-core machine):
- low-load per-check latency: one check at a time to a provider of 1 and of
  50 targets whose check takes 0 ms; p50/p99;
- rounds of N providers (a burst of N checks at once, 50 targets each, check
  latency drawn per provider): per-check overhead = end of write − send − that
  provider's check latency, p50/p99; burst throughput = N / (last end − first
  send); CPU per check = the CPU time (utime+stime from /proc/<pid>/stat) the
  pipeline's processes (workers, controller, redis-server) spent over the
  burst, / N. The fake API's and this process's CPU are not in it;
- controller alone: N record messages put on the controller queue directly,
  records/s = (N−1) / (last end − first end), controller CPU ms per record;
- RSS (VmRSS, peak VmHWM) of every process at the end;
- with the fake API: its requests per provider per round by verb, the PATCH
  bodies' size and how many carry the targets, and its own CPU per request.

Variants (`--vary`, each a complete run with its own floor):
- `steady`: every provider's results are the same every round (fixed
  latencyMs, all targets ready), so a status write changes only
  `lastCheckTime` (plus `latencyMillis` when the measured latency rounds to
  another millisecond);
- `changing`: the fake's round-to-round variation (providers/fake.py):
  `latencyJitterMs` (uniform, `--jitter-ms`; `--low-jitter-ms` for the
  low-load providers) and `flapRatio` (`--flap-ratio` of the targets flip
  every `--flap-every` rounds), so most writes carry the targets and the
  Ready condition, and the controller logs the transitions. The benchmark
  knows each check's latency (`providers.fake.plan`, deterministic per seed,
  provider and round) and subtracts it; the floor sleeps the same latencies.
In the controller-alone case each provider gets its own last result again,
re-stamped (steady), or with `--flap-ratio` of its targets flipped and every
target's `latencyMillis` + 1 (changing).

`--profile DIR` samples the controller with py-spy (`pip install py-spy`)
during the controller-alone case and writes DIR/<variant>-<mode>.txt (raw
collapsed stacks), summarised by benchmarks/profile_summary.py.

`python benchmarks/pipeline.py --quick` (≈ 3 min for both variants), or the
defaults (≈ 5 min), `--rounds 10,50,200,500,1000 --repeat 3 --samples 100` for more.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from celery import Celery, signature  # noqa: E402

from fleet.celery import routing  # noqa: E402
from fleet.health.dispatch import send_check  # noqa: E402
from fleet.testing.procs import die_with_parent, wait_for  # noqa: E402
from fleet.testing.redis import RedisServer  # noqa: E402
from fleet.testing.stack import Stack  # noqa: E402
from providers.fake import FakeConfig, Plan, plan  # noqa: E402

PY = sys.executable
CLK = os.sysconf("SC_CLK_TCK")
LOW = {"lo1": 1, "lo50": 50}  # low-load providers: name -> targets (check latency 0)
API_ROLES = ("fake-api", "api:")  # the API's processes (the fake; a real server's kube-apiserver and etcd): not the pipeline's


def pct(values: list[float], p: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, max(0, math.ceil(p / 100 * len(v)) - 1))]


def cpu_s(pids: list[int]) -> float:
    """CPU seconds of `pids`: the sum over their threads of /proc/<pid>/task/<tid>/schedstat's run time (ns;
    /proc/<pid>/stat's utime+stime count in 10 ms ticks, too coarse for one check), or utime+stime when
    schedstat is missing. A thread that exited during the interval is not counted (Celery's pool threads persist)."""
    total = 0.0
    for pid in pids:
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
            total += sum(int((t / "schedstat").read_text().split()[0]) for t in tasks) / 1e9
        except (OSError, ValueError):
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / CLK  # utime, stime (fields 14, 15)
            except OSError:
                continue
    return total


def rss_mib(pid: int) -> tuple[float, float]:
    got = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            got[line[:5]] = int(line.split()[1]) / 1024
    return got.get("VmRSS", math.nan), got.get("VmHWM", math.nan)


class Planner:
    """Each provider's next round, as its fake will run it: `next(name)` is the
    planned check latency (ms) of the check about to be sent (providers.fake.plan)."""

    def __init__(self, cfgs: dict[str, FakeConfig]) -> None:
        self.cfgs = cfgs
        self.rounds: dict[str, int] = {}

    def next(self, name: str) -> float:
        r = self.rounds.get(name, 0)
        self.rounds[name] = r + 1
        return plan(self.cfgs[name], name, r).latency_ms

    def last(self, name: str) -> Plan:
        return plan(self.cfgs[name], name, self.rounds[name] - 1)


def api_requests(path: Path, t0: float, t1: float) -> list[list[str]]:
    """The fake API's log lines (split) between t0 and t1."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5 and t0 <= float(parts[0]) <= t1:
            out.append(parts)
    return out


class Ends:
    """Tails an observer's log: `<time> ...` lines; `parse(line)` -> name or None."""

    def __init__(self, path: Path, parse: Callable[[list[str]], str | None]) -> None:
        self.path, self.parse, self.offset = path, parse, 0
        self.events: dict[str, list[float]] = {}

    def poll(self) -> None:
        if not self.path.exists():
            return
        with open(self.path) as f:
            f.seek(self.offset)
            data = f.read()
        done = data.rfind("\n") + 1
        self.offset += len(data[:done].encode())
        for line in data[:done].splitlines():
            parts = line.split()
            name = self.parse(parts)
            if name:
                self.events.setdefault(name, []).append(float(parts[0]))

    def wait(self, sent: dict[str, float], timeout: float = 120) -> dict[str, float]:
        """The first end of write of each name at or after its send."""
        def done() -> dict[str, float] | None:
            self.poll()
            out = {}
            for name, t in sent.items():
                after = [e for e in self.events.get(name, ()) if e >= t]
                if not after:
                    return None
                out[name] = min(after)
            return out
        return wait_for(done, timeout, f"{len(sent)} writes", interval=0.005)


class System:
    """One pipeline under test: how to send a check and a record, where its ends are, its processes."""

    def __init__(self, label: str, send: Callable[[str, float, float], None], feed: Callable[[str, float], None],
                 ends: Ends, pids: dict[str, int], planner: Planner) -> None:
        self.label, self.send, self.feed, self.ends, self.pids, self.planner = label, send, feed, ends, pids, planner
        self.profile: Path | None = None  # py-spy output for the controller-alone case
        # With an API: the status carries lastCheckTime to the second, and the controller skips a patch that
        # changes nothing, so a check is sent in a later second than the last one (rounds are 10 s apart in
        # production); otherwise the end of its write would never come.
        self.new_second = False

    def next_second(self) -> None:
        if self.new_second:
            time.sleep(math.floor(time.time()) + 1.01 - time.time())

    def pipeline_pids(self) -> list[int]:
        return [pid for role, pid in self.pids.items() if not role.startswith(API_ROLES)]

    def api_pids(self) -> list[int]:
        return [pid for role, pid in self.pids.items() if role.startswith(API_ROLES)]

    def lowload(self, name: str, n: int) -> dict[str, Any]:
        lat = []
        idle0, t0 = cpu_s(self.pipeline_pids()), time.monotonic()
        time.sleep(1.0)  # the idle CPU rate (broker polls, heartbeats), subtracted below
        idle_rate = (cpu_s(self.pipeline_pids()) - idle0) / (time.monotonic() - t0)
        cpu0, t0, w0 = cpu_s(self.pipeline_pids()), time.monotonic(), time.time()
        for _ in range(n):
            self.next_second()
            planned = self.planner.next(name)
            t = time.time()
            self.send(name, t, planned)
            end = self.ends.wait({name: t})[name]
            lat.append((end - t) * 1000 - planned)
            time.sleep(0.02)
        busy = cpu_s(self.pipeline_pids()) - cpu0 - idle_rate * (time.monotonic() - t0)
        return {"lat": lat, "cpu_ms": max(busy, 0.0) * 1000 / n, "tput": math.nan, "windows": [(w0, time.time(), n)]}

    def burst(self, names: list[str]) -> dict[str, Any]:
        self.next_second()
        planned = {n: self.planner.next(n) for n in names}
        cpu0, api0 = cpu_s(self.pipeline_pids()), cpu_s(self.api_pids())
        sent = {}
        for n in names:
            sent[n] = time.time()
            self.send(n, sent[n], planned[n])
        ends = self.ends.wait(sent)
        cpu1, api1 = cpu_s(self.pipeline_pids()), cpu_s(self.api_pids())
        over = [(ends[n] - sent[n]) * 1000 - planned[n] for n in names]
        span = max(ends.values()) - min(sent.values())
        return {"lat": over, "cpu_ms": (cpu1 - cpu0) * 1000 / len(names), "tput": len(names) / span,
                "api_cpu_ms": (api1 - api0) * 1000 / len(names), "window": (min(sent.values()), max(ends.values()) + 0.001, len(names))}

    def records(self, names: list[str], ctl_role: str) -> dict[str, float]:
        pid = self.pids[ctl_role]
        spy = None
        if self.profile is not None:
            spy_bin = shutil.which("py-spy") or str(Path(PY).parent / "py-spy")
            # --gil: only the thread holding the GIL, i.e. where the Python CPU goes, not threads waiting on a socket
            spy = subprocess.Popen([spy_bin, "record", "--pid", str(pid), "--rate", "500", "--nonblocking", "--gil", "--format", "raw",
                                    "--output", str(self.profile)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   preexec_fn=die_with_parent)
            time.sleep(1.0)  # attached
        self.next_second()
        cpu0, api0 = cpu_s([pid]), cpu_s(self.api_pids())
        sent = {}
        for n in names:
            sent[n] = time.time()
            self.feed(n, sent[n])
        ends = self.ends.wait(sent)
        cpu1, api1 = cpu_s([pid]), cpu_s(self.api_pids())
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(30)
        first, last = min(ends.values()), max(ends.values())
        return {"rate": (len(names) - 1) / max(last - first, 1e-9), "cpu_ms": (cpu1 - cpu0) * 1000 / len(names),
                "api_cpu_ms": (api1 - api0) * 1000 / len(names), "windows": [(min(sent.values()), last + 0.001, len(names))]}


def start(role: str, argv: list[str], env: dict[str, str], tmp: Path, procs: dict[str, subprocess.Popen]) -> int:
    with open(tmp / f"{role}.log", "ab") as log:
        p = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                             preexec_fn=die_with_parent, cwd=ROOT)
    procs[role] = p
    return p.pid


def stop(procs: dict[str, subprocess.Popen], *roles: str) -> None:
    for role in roles or list(procs):
        p = procs.pop(role)
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def celery_worker(app: str, queues: list[str], node: str, concurrency: int) -> list[str]:
    return [PY, "-m", "celery", "-A", app, "worker", "-Q", ",".join(queues), "-n", f"{node}@%h",
            "--pool", "threads", "--concurrency", str(concurrency), "--without-mingle"]


def wait_nodes(app: Celery, prefixes: list[str], timeout: float = 90) -> None:
    def up() -> bool:
        names = {k for reply in app.control.ping(timeout=1) for k in reply}
        return all(any(n.startswith(p + "@") for n in names) for p in prefixes)
    wait_for(up, timeout, f"{prefixes} to answer ping", interval=0.2)


def fake_configs(args: argparse.Namespace, variant: str, names: list[str]) -> dict[str, dict[str, Any]]:
    """Each provider's `fake` block: round providers with a check latency drawn per provider (log-normal around
    --latency-ms), low-load ones with none; `changing` adds the fake's jitter and flapping targets."""
    rng = random.Random(args.seed)
    out: dict[str, dict[str, Any]] = {}
    for n in names:
        latency = min(10 * args.latency_ms, max(1.0, round(rng.lognormvariate(math.log(args.latency_ms), 0.6))))
        out[n] = {"targetCount": args.targets, "latencyMs": int(latency)}
    for n, t in LOW.items():
        out[n] = {"targetCount": t}
    if variant == "changing":
        vary = {"flapRatio": args.flap_ratio, "flapEvery": args.flap_every, "seed": args.seed}
        for n in names:
            out[n] |= vary | {"latencyJitterMs": args.jitter_ms}
        for n in LOW:
            out[n] |= vary | {"latencyJitterMs": args.low_jitter_ms}
    return out


def vary_result(doc: dict[str, Any], variant: str, ratio: float, salt: int) -> dict[str, Any]:
    """A provider's last result for the controller-alone case: as it was (steady), or with `ratio` of its targets
    flipped and every latencyMillis + 1 (changing)."""
    if variant != "changing":
        return doc
    targets = [dict(t) for t in doc.get("targets") or ()]
    rng = random.Random(f"{doc.get('provider')}:{salt}")
    k = max(1, round(ratio * len(targets))) if targets and ratio > 0 else 0
    for i in rng.sample(range(len(targets)), k):
        t = targets[i]
        up = not t["ready"]
        t.update(ready=up, reason="Reachable" if up else "Unreachable", message="" if up else "fake: flapping")
    for t in targets:
        t["latencyMillis"] = int(t.get("latencyMillis") or 0) + 1
    return doc | {"targets": targets}


def verify_rounds(redis_client: Any, planner: Planner, names: list[str], label: str) -> None:
    """The fake in the workers ran the rounds the benchmark planned (same round counts): the down targets of each
    provider's stored result are those its plan says. A mismatch is printed, not fatal."""
    bad = []
    for n in names:
        if not planner.rounds.get(n):
            continue
        raw = redis_client.get("fleet:result:" + n)
        if raw is None:
            continue
        down = {t["name"] for t in json.loads(raw)["targets"] if not t["ready"]}
        if down != set(planner.last(n).down):
            bad.append(n)
    if bad:
        print(f"  WARNING {label}: {len(bad)} provider(s) out of step with the planned rounds, e.g. {bad[:3]}", flush=True)


def run(args: argparse.Namespace, tmp: Path, variant: str, api_pids: dict[str, int]) -> dict[str, Any]:
    sizes = [int(s) for s in args.rounds.split(",")]
    main_part, writes_part = "main" in args.parts, "writes" in args.parts
    names = [f"p{i:04d}" for i in range(max(max(sizes), args.writes_providers if writes_part else 0))]
    fakes = fake_configs(args, variant, names)
    cfgs = {n: FakeConfig.model_validate(f) for n, f in fakes.items()}
    providers = [{"name": n, "type": "fake", "fake": f} for n, f in fakes.items()]
    groups = [names[i:: args.workers] for i in range(args.workers)]
    groups[0] = list(LOW) + groups[0]

    redis_srv = RedisServer(tmp)
    redis_srv.start()
    procs: dict[str, subprocess.Popen] = {}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    results: dict[str, dict[str, Any]] = {}
    rss: list[tuple[str, str, float, float]] = []
    try:
        start("observer-redis", [PY, str(ROOT / "benchmarks/observe.py"), "keyspace", redis_srv.url, str(tmp / "keyspace.log"),
                                 "fleet:result:*", "floor:result:*"], env, tmp, procs)
        if args.kubeconfig:
            kubeconfig = args.kubeconfig
            start("observer-kubewatch", [PY, str(ROOT / "benchmarks/observe.py"), "kubewatch", kubeconfig,
                                         str(tmp / "api.log")], env, tmp, procs)
            api_ends = Ends(tmp / "api.log", lambda p: p[2] if p[1] == "MODIFIED" else None)
            # listed, so watching (from the list's resourceVersion) before anything is timed
            wait_for(lambda: (tmp / "api.log").exists() and " SYNCED " in (tmp / "api.log").read_text(), 60,
                     "the watch observer's first list", interval=0.1)
        else:
            fake = [PY, str(ROOT / "benchmarks/observe.py"), "kubeapi", "--port-file", str(tmp / "api.json"), "--log",
                    str(tmp / "api.log"), "--api-latency-ms", str(args.api_latency_ms)] + (["--api-burn"] if args.api_burn else [])
            start("fake-api", fake, env, tmp, procs)
            url = wait_for(lambda: json.loads((tmp / "api.json").read_text())["url"], 30, "the fake API")
            kubeconfig = str(tmp / "kubeconfig")
            Path(kubeconfig).write_text(json.dumps({
                "apiVersion": "v1", "kind": "Config", "current-context": "fake",
                "clusters": [{"name": "fake", "cluster": {"server": url}}], "users": [{"name": "fake", "user": {"token": "t"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]}))
            # "<t> PATCH 200 <name> status ...": the fake applied a status patch
            api_ends = Ends(tmp / "api.log", lambda p: p[3] if p[1] == "PATCH" and p[2] == "200" and p[4] == "status" else None)
        time.sleep(0.5)
        redis_ends = Ends(tmp / "keyspace.log", lambda p: p[1].split(":", 2)[2] if p[1].startswith("fleet:result:") else None)
        floor_ends = Ends(tmp / "keyspace.log", lambda p: p[1].split(":", 2)[2] if p[1].startswith("floor:result:") else None)

        # ---- fleet ----
        stack = Stack(tmp, redis_srv.url, providers, {"FLEET_LOG_LEVEL": "warning", "HOME": str(tmp), "KUBECONFIG": str(tmp / "none"),
                                                      "FLEET_PROVIDER_CHECK_INTERVAL": "3600s", "PYTHONPATH": str(ROOT)})
        stack.env.pop("KUBERNETES_SERVICE_HOST", None)
        fleet_pids = {"redis-server": redis_srv.proc.pid}
        for i, group in enumerate(groups if main_part else []):
            argv = celery_worker("fleet.celery.app", [routing.provider_queue(n) for n in group], f"bench{i}", args.concurrency)
            fleet_pids[f"fleet-worker{i}"] = start(f"fleet-worker{i}", argv, stack.env, tmp, procs)
        fleet_planner = Planner(cfgs)  # the fleet workers run for both modes: their fakes count rounds across them
        last: dict[str, dict[str, Any]] = {}  # each provider's last stored result, for the controller-alone case
        salt = [0]

        def fleet_send(name: str, t: float, _latency_ms: float) -> None:
            send_check(stack.sender, name, 5.0, 3600.0, t)

        def fleet_feed(name: str, t: float) -> None:
            doc = vary_result(last[name], variant, args.flap_ratio, salt[0])
            stack.sender.send_task(routing.RECORD_CHECK, args=[doc | {"provider": name, "checkedAt": t, "scheduledAt": t,
                                                                       "recordedAt": None}])

        # --status-heartbeat 0: a status write per record, which is what the API mode's ends are (a PATCH each);
        # with the default a steady record writes nothing (issue 24) and its end would never come
        api_env = {**stack.env, "FLEET_KUBECONFIG": kubeconfig, "FLEET_STATUS_HEARTBEAT": "0"}
        modes = [("standalone", stack.env, redis_ends), ("api", api_env, api_ends)]
        for mode, ctl_env, ends in modes if main_part else []:
            role = f"fleet-controller-{mode}"
            pids = dict(fleet_pids)
            pids[role] = start(role, [*celery_worker("fleet.celery.app", [routing.CONTROLLER_QUEUE], role, 4)], ctl_env, tmp, procs)
            if mode == "api":
                pids.update(api_pids if args.kubeconfig else {"fake-api": procs["fake-api"].pid})
            wait_nodes(stack.sender, [f"bench{i}" for i in range(args.workers)] + [role])
            sysm = System(f"fleet {mode}", fleet_send, fleet_feed, ends, pids, fleet_planner)
            sysm.new_second = mode == "api"
            measure(sysm, results, args, names, sizes, role, print_label=f"fleet/{mode}")
            verify_rounds(redis_srv.client(), fleet_planner, names + list(LOW), f"fleet/{mode}")
            rc = redis_srv.client()
            last.update({n: json.loads(rc.get("fleet:result:" + n)) for n in names[: args.records]})
            salt[0] += 1
            if args.profile:
                sysm.profile = Path(args.profile) / f"{variant}-{mode}.txt"
            measure_records(sysm, results, args, names, role, f"fleet/{mode}")
            rss += [(f"fleet/{mode}", r, *rss_mib(p)) for r, p in pids.items()]
            stop(procs, role)

        if writes_part:
            results["writes"] = measure_writes(args, stack, names[: args.writes_providers], tmp, procs, redis_srv, redis_ends,
                                               api_pids if args.kubeconfig else {"fake-api": procs["fake-api"].pid},
                                               kubeconfig, rss)
        if not main_part:
            return {"results": results, "rss": rss, "payload_sizes": (0, 0), "sizes": sizes, "variant": variant}

        # ---- floor ----
        floor_env = {**env, "FLOOR_BROKER_URL": redis_srv.url}
        floor_app = Celery("floor-sender", broker=redis_srv.url, set_as_current=False)
        floor_app.conf.update(task_serializer="json", accept_content=["json"], task_create_missing_queues=True)
        floor_pids = {"redis-server": redis_srv.proc.pid}
        for i, group in enumerate(groups):
            argv = celery_worker("benchmarks.floor", [f"floor.provider.{n}" for n in group], f"floor{i}", args.concurrency)
            floor_pids[f"floor-worker{i}"] = start(f"floor-worker{i}", argv, floor_env, tmp, procs)
        floor_pids["floor-controller"] = start("floor-controller", celery_worker("benchmarks.floor", ["floor.controller"], "floorctl", 4),
                                               floor_env, tmp, procs)
        wait_nodes(floor_app, [f"floor{i}" for i in range(args.workers)] + ["floorctl"])
        targets = {n: args.targets for n in names} | LOW
        link = signature("floor.record")

        def floor_send(name: str, t: float, latency_ms: float) -> None:
            floor_app.send_task("floor.check", kwargs={"provider": name, "latency_ms": latency_ms, "targets": targets[name],
                                                       "scheduled_at": t}, queue=f"floor.provider.{name}", expires=3600.0, link=link)

        def floor_feed(name: str, t: float) -> None:
            doc = vary_result(last[name], variant, args.flap_ratio, salt[0])
            floor_app.send_task("floor.record", args=[doc | {"provider": name, "checkedAt": t, "scheduledAt": t, "recordedAt": None}],
                                queue="floor.controller")

        sysm = System("floor", floor_send, floor_feed, floor_ends, floor_pids, Planner(cfgs))
        measure(sysm, results, args, names, sizes, "floor-controller", print_label="floor")
        measure_records(sysm, results, args, names, "floor-controller", "floor")
        rss += [("floor", r, *rss_mib(p)) for r, p in floor_pids.items()]
        for role in ("observer-redis", "fake-api", "observer-kubewatch"):
            if role in procs:
                rss.append(("observers", role, *rss_mib(procs[role].pid)))
        payload_sizes = (len(json.dumps(last[names[0]], separators=(",", ":"))),
                         len(redis_srv.client().get("floor:result:" + names[0]) or b""))
    finally:
        stop(procs)
        redis_srv.stop()
    if not args.kubeconfig:
        for key, r in results.items():
            if key.startswith("fleet/api|") and "windows" in r:
                r["requests"] = [q for w in r["windows"] for q in api_requests(tmp / "api.log", w[0], w[1])]
    return {"results": results, "rss": rss, "payload_sizes": payload_sizes, "sizes": sizes, "variant": variant,
            "api_roles": [r.removeprefix("api:") for r in api_pids]}


def measure(sysm: System, results: dict[str, dict[str, Any]], args: argparse.Namespace, names: list[str], sizes: list[int],
            ctl_role: str, print_label: str) -> None:
    for name in LOW:
        sysm.lowload(name, 1)  # warm (with an API: creates the object)
        results[f"{print_label}|low-load {LOW[name]} target(s)"] = sysm.lowload(name, args.samples)
        print(f"  {print_label}: low-load {name} done", flush=True)
    for n in sizes:
        runs = [sysm.burst(names[:n]) for _ in range(args.repeat + 1)][1:]  # the first round creates objects: warm-up
        results[f"{print_label}|round of {n}"] = {"lat": [x for r in runs for x in r["lat"]],
                                                  "cpu_ms": statistics.mean(r["cpu_ms"] for r in runs),
                                                  "api_cpu_ms": statistics.mean(r["api_cpu_ms"] for r in runs),
                                                  "tput": statistics.median(r["tput"] for r in runs),
                                                  "windows": [r["window"] for r in runs]}
        print(f"  {print_label}: round of {n} done", flush=True)


def measure_records(sysm: System, results: dict[str, dict[str, Any]], args: argparse.Namespace, names: list[str], ctl_role: str,
                    label: str) -> None:
    results[f"{label}|records"] = sysm.records(names[: args.records], ctl_role)


class ApiCounter:
    """Requests the API served for ProviderHealth objects, by (verb, subresource, code): a real API server's own
    `apiserver_request_total` (its /metrics), or the fake's request log."""

    def __init__(self, kubeconfig: str, fake_log: Path | None) -> None:
        self.fake_log = fake_log
        self.api: Any = None
        if fake_log is None:
            from kubernetes import client

            from providers.kubernetes.client import load_configuration

            self.api = client.ApiClient(load_configuration(kubeconfig))

    def snapshot(self) -> dict[tuple[str, str, str], float]:
        out: dict[tuple[str, str, str], float] = {}
        if self.fake_log is not None:  # "<t> <METHOD> <code> <name> <status|object> ..."
            for line in self.fake_log.read_text().splitlines() if self.fake_log.exists() else ():
                parts = line.split()
                if len(parts) >= 5:
                    key = (parts[1], "status" if parts[4] == "status" else "", parts[2])
                    out[key] = out.get(key, 0) + 1
            return out
        cfg = self.api.configuration
        headers = {"Authorization": cfg.get_api_key_with_prefix("authorization")} if cfg.api_key else {}
        resp = self.api.call_api("GET", cfg.host + "/metrics", header_params=headers)
        resp.read()
        for line in resp.data.decode().splitlines():
            if line.startswith("apiserver_request_total{") and 'resource="providerhealths"' in line:
                labels = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.index("}")]))
                key = (labels.get("verb", "?"), labels.get("subresource", ""), labels.get("code", "?"))
                out[key] = out.get(key, 0) + float(line.rsplit(" ", 1)[1])
        return out


def synthetic_result(name: str, targets: int, latency_ms: int) -> dict[str, Any]:
    """A provider's result for the status-writes part: `targets` targets, all ready, at `latency_ms`."""
    return {"provider": name, "type": "fake", "supported": True, "checkedAt": 0.0,
            "targets": [{"name": f"t{i:04d}", "address": "fake", "ready": True, "reason": "Reachable", "message": "",
                         "latencyMillis": latency_ms, "details": {}} for i in range(targets)],
            "scheduledAt": None, "worker": "bench@writes", "recordedAt": None}


def jittered(doc: dict[str, Any], rng: random.Random, jitter_ms: int) -> dict[str, Any]:
    """The same verdicts, each target's latencyMillis moved by up to ±jitter_ms (under the 10 ms rule: no change)."""
    return doc | {"targets": [t | {"latencyMillis": max(1, int(t["latencyMillis"]) + rng.randint(-jitter_ms, jitter_ms))}
                              for t in doc["targets"]]}


def measure_writes(args: argparse.Namespace, stack: Stack, names: list[str], tmp: Path, procs: dict[str, subprocess.Popen],
                   redis_srv: RedisServer, redis_ends: Ends, api_pids: dict[str, int], kubeconfig: str,
                   rss: list[tuple[str, str, float, float]]) -> dict[str, Any]:
    """Issue 24's status writes: for each --heartbeats value, a controller (FLEET_STATUS_HEARTBEAT) gets rounds of
    record messages for `names` (queued directly, one round every --writes-interval s): a warm-up round, then
    --writes-rounds steady rounds (same verdicts, latency jitter under the 10 ms rule), then as many changing rounds
    (--flap-ratio of each provider's targets flip every round). Per phase: the API's requests by verb (its own
    counter), the API's CPU (kube-apiserver + etcd, or the fake) and the controller's."""
    counter = ApiCounter(kubeconfig, None if args.kubeconfig else tmp / "api.log")
    rc = redis_srv.client()
    base = {n: synthetic_result(n, args.targets, 50) for n in names}
    out: dict[str, Any] = {"providers": len(names), "rounds": args.writes_rounds, "interval": args.writes_interval,
                           "api_roles": sorted(api_pids), "configs": {}}

    def settle(sent: dict[str, float]) -> None:
        redis_ends.wait(sent, timeout=600)  # every result stored; then every record task acked (its API work done)
        wait_for(lambda: rc.llen(routing.CONTROLLER_QUEUE) == 0 and rc.hlen("unacked") == 0, 600, "the controller to drain",
                 interval=0.02)

    def one_round(docs: dict[str, dict[str, Any]]) -> None:
        sent = {}
        t = time.time()
        for n in names:
            sent[n] = time.time()
            stack.sender.send_task(routing.RECORD_CHECK, args=[docs[n] | {"checkedAt": t, "scheduledAt": t, "recordedAt": None}])
        settle(sent)

    def idle_rate(pids: list[int], seconds: float = 5.0) -> float:
        c0, t0 = cpu_s(pids), time.monotonic()
        time.sleep(seconds)
        return (cpu_s(pids) - c0) / (time.monotonic() - t0)

    for hb in args.heartbeats.split(","):
        role = f"fleet-controller-hb{hb}"
        env = {**stack.env, "FLEET_KUBECONFIG": kubeconfig, "FLEET_STATUS_HEARTBEAT": hb}
        pid = start(role, celery_worker("fleet.celery.app", [routing.CONTROLLER_QUEUE], role, 4), env, tmp, procs)
        wait_nodes(stack.sender, [role])
        rng = random.Random(args.seed)
        docs = {n: jittered(base[n], rng, 3) for n in names}
        one_round(docs)  # warm-up: creates the objects (first config) or writes the steady verdicts again
        time.sleep(max(1.05, args.writes_interval))
        cfg: dict[str, Any] = {"api_idle_cpu_s_per_s": idle_rate(list(api_pids.values())),
                               "controller_idle_cpu_s_per_s": idle_rate([pid], 2.0)}
        for phase in ("steady", "changing"):
            req0, api0, ctl0, t0 = counter.snapshot(), cpu_s(list(api_pids.values())), cpu_s([pid]), time.monotonic()
            next_at = time.monotonic()
            for k in range(args.writes_rounds):
                wait = next_at - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                next_at = time.monotonic() + args.writes_interval
                start_second = math.floor(time.time())
                if phase == "steady":
                    docs = {n: jittered(base[n], rng, 3) for n in names}
                else:
                    docs = {n: vary_result(docs[n], "changing", args.flap_ratio, k) for n in names}
                one_round(docs)
                while math.floor(time.time()) == start_second:  # lastCheckTime is to the second: the next round in a later one
                    time.sleep(0.01)
            req1, api1, ctl1, t1 = counter.snapshot(), cpu_s(list(api_pids.values())), cpu_s([pid]), time.monotonic()
            delta = {k: v - req0.get(k, 0) for k, v in req1.items() if v - req0.get(k, 0)}
            cfg[phase] = {"requests": delta, "api_cpu_s": api1 - api0, "controller_cpu_s": ctl1 - ctl0, "span_s": t1 - t0}
            print(f"  writes: heartbeat {hb} {phase}: {sum(v for (verb, _, _), v in delta.items() if verb == 'PATCH'):.0f} "
                  f"PATCHes for {len(names)} x {args.writes_rounds} records in {t1 - t0:.1f} s", flush=True)
        out["configs"][hb] = cfg
        rss.append((f"writes/hb {hb}", role, *rss_mib(pid)))
        stop(procs, role)
    return out


def request_stats(reqs: list[list[str]], n: int) -> str:
    """The fake API's requests in a case: per provider-round by verb, status PATCH body p50 and the share carrying
    the targets."""
    by: dict[str, int] = {}
    for r in reqs:
        by[r[1]] = by.get(r[1], 0) + 1
    patches = [r for r in reqs if r[1] == "PATCH" and r[4] == "status" and len(r) >= 7]
    per = " ".join(f"{verb} {by.get(verb, 0) / n:.2f}" for verb in ("GET", "POST", "PATCH"))
    if not patches:
        return per
    size = statistics.median(int(r[5]) for r in patches)
    with_targets = sum("targets" in r[6].split(",") for r in patches) / len(patches)
    return f"{per}; PATCH body p50 {size:.0f} B, {with_targets:.0%} carry targets"


def report_writes(args: argparse.Namespace, w: dict[str, Any]) -> None:
    """The status-writes part: requests per provider per round, API CPU per provider per round, and per hour at the
    default 60 s interval and at 10 s (the heartbeat's rule applied to the measured CPU per write)."""
    n, r = w["providers"], w["rounds"]
    api = "+".join(role.removeprefix("api:") for role in w["api_roles"])
    print(f"\nstatus writes (issue 24): {n} providers x {args.targets} targets, records queued directly, {r} steady then {r} "
          f"changing rounds (--flap-ratio {args.flap_ratio} of the targets flip each round) at most one per "
          f"{w['interval']:g} s; steady rounds move each latencyMillis by up to ±3 ms. API CPU: {api}, gross and net of its "
          "idle rate (measured in the same run, 5 s with no writes)")
    print(f"| {'heartbeat':<9} | {'phase':<8} | {'PATCH/prov/round':>16} | {'other req/prov/round':>20} | {'409s':>5} | "
          f"{'API ms/prov/round':>17} | {'net':>7} | {'API ms/PATCH net':>16} | {'ctl ms/record':>13} | {'round s':>7} |")
    print("|" + "|".join("-" * w_ for w_ in (11, 10, 18, 22, 7, 19, 9, 18, 15, 9)) + "|")
    per_write: float | None = None  # API CPU s per PATCH (net), from the every-round config
    per_round: dict[str, dict[str, float]] = {}
    for hb, cfg in w["configs"].items():
        for phase in ("steady", "changing"):
            c = cfg[phase]
            reqs = c["requests"]
            patches = sum(v for (verb, _, _), v in reqs.items() if verb == "PATCH")
            conflicts = sum(v for (_, _, code), v in reqs.items() if code == "409")
            other = sum(v for (verb, _, _), v in reqs.items() if verb != "PATCH")
            gross = c["api_cpu_s"] / (n * r)
            net = max(0.0, c["api_cpu_s"] - cfg["api_idle_cpu_s_per_s"] * c["span_s"]) / (n * r)
            by_write = net * n * r / patches if patches else math.nan
            if hb in ("0", "0s") and phase == "steady" and patches:
                per_write = net * n * r / patches
            per_round.setdefault(hb, {})[phase] = net
            per_round[hb][phase + "_patches"] = patches / (n * r)
            ctl = max(0.0, c["controller_cpu_s"] - cfg["controller_idle_cpu_s_per_s"] * c["span_s"]) / (n * r)
            print(f"| {hb:<9} | {phase:<8} | {patches / (n * r):16.3f} | {other / (n * r):20.3f} | {conflicts:5.0f} | "
                  f"{gross * 1000:17.2f} | {net * 1000:7.2f} | {by_write * 1000:16.2f} | {ctl * 1000:13.2f} | "
                  f"{c['span_s'] / r:7.2f} |")
    idle = {hb: cfg["api_idle_cpu_s_per_s"] for hb, cfg in w["configs"].items()}
    print("  API idle CPU (s/s): " + ", ".join(f"heartbeat {hb}: {v:.3f}" for hb, v in idle.items()))
    if per_write is None:
        return
    print("API CPU per provider per hour in steady state (net of idle; 'before' = every round, as measured with heartbeat 0; "
          "'after' = the measured not-due rounds plus one write per heartbeat at the measured CPU per write):")
    for interval in (60.0, 10.0):
        rounds_h = 3600 / interval
        before = per_round.get("0", per_round.get("0s", {})).get("steady", per_write) * rounds_h
        for hb in w["configs"]:
            secs = parse_duration(hb)
            if secs <= 0:
                continue
            writes_h = 3600 / (interval * (math.floor(secs / interval) + 1))  # written once lastCheckTime moved > heartbeat
            after = per_round[hb]["steady"] * rounds_h + writes_h * per_write
            print(f"  interval {interval:g} s, heartbeat {hb}: before {before * 1000:.0f} ms/h ({rounds_h:.0f} writes), after "
                  f"{after * 1000:.0f} ms/h ({writes_h:.1f} writes/h + not-due rounds) = 1/{before / after if after else math.inf:.0f} "
                  f"of before; steady writes per round {writes_h / rounds_h:.3f}")


def parse_duration(text: str) -> float:
    from fleet.durations import parse_duration as parse

    return float(parse(text))


def report(args: argparse.Namespace, run_: dict[str, Any]) -> None:
    if "writes" in run_["results"]:
        report_writes(args, run_["results"]["writes"])
    if "main" not in args.parts:
        for part, role, now, peak in run_["rss"]:
            print(f"  RSS {part:<16} {role:<28} {now:6.1f} / {peak:6.1f} MiB")
        return
    results, rss, payload_sizes, sizes, variant = (run_[k] for k in ("results", "rss", "payload_sizes", "sizes", "variant"))
    # FLEET_BENCH_COMMIT: the commit of a tree exported with `git archive` (no .git to ask)
    commit = os.environ.get("FLEET_BENCH_COMMIT") or subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = "" if os.environ.get("FLEET_BENCH_COMMIT") else subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "fleet", "tasks", "beat", "providers"],
        capture_output=True, text=True).stdout.strip()
    vary = (f"results vary per round: latencyJitterMs {args.jitter_ms} (low-load {args.low_jitter_ms}) uniform, flapRatio "
            f"{args.flap_ratio} every {args.flap_every} round(s)" if variant == "changing" else
            "results the same every round (fixed latencyMs, all targets ready)")
    print(f"\n=== variant {variant}: pipeline benchmark at {commit}"
          f"{' (+ uncommitted changes in fleet/tasks/beat/providers)' if dirty else ''}, {time.strftime('%Y-%m-%d')}: "
          f"{args.workers} worker processes x {args.concurrency} threads, 1 controller x 4 threads, {args.targets} targets per "
          f"provider in rounds, check latency per provider log-normal around {args.latency_ms} ms; {vary}; "
          f"{'API server at ' + args.kubeconfig if args.kubeconfig else f'fake API +{args.api_latency_ms} ms per request'}, "
          f"payload {payload_sizes[0]} B fleet / {payload_sizes[1]} B floor, {os.cpu_count()} CPUs")
    print("latency: send → end of write, minus the check's own planned latency; ms. "
          "CPU: workers + controller + redis-server, ms per check (low-load: minus their idle rate). burst: checks/s over the round.\n")
    hdr = (f"| {'case':<22} | {'fleet mode':<10} | {'p50 fleet':>9} | {'floor':>7} | {'ratio':>5} | {'p99 fleet':>9} | {'floor':>7} | "
           f"{'ratio':>5} | {'CPU/check':>9} | {'floor':>6} | {'ratio':>5} | {'burst/s':>8} | {'floor':>7} | {'ratio':>5} |")
    print(hdr)
    print("|" + "|".join("-" * (len(c)) for c in hdr.split("|")[1:-1]) + "|")
    cases = [f"low-load {t} target(s)" for t in LOW.values()] + [f"round of {n}" for n in sizes]
    for case in cases:
        fl = results[f"floor|{case}"]
        for mode in ("standalone", "api"):
            f = results[f"fleet/{mode}|{case}"]
            p50, p99 = statistics.median(f["lat"]), pct(f["lat"], 99)
            q50, q99 = statistics.median(fl["lat"]), pct(fl["lat"], 99)
            tput = f"{f['tput']:8.0f} | {fl['tput']:7.0f} | {f['tput'] / fl['tput']:5.2f}" if not math.isnan(f["tput"]) else \
                f"{'':>8} | {'':>7} | {'':>5}"
            print(f"| {case:<22} | {mode:<10} | {p50:9.1f} | {q50:7.1f} | {p50 / q50:5.1f} | {p99:9.1f} | {q99:7.1f} | {p99 / q99:5.1f} | "
                  f"{f['cpu_ms']:9.1f} | {fl['cpu_ms']:6.1f} | {f['cpu_ms'] / max(fl['cpu_ms'], 0.01):5.1f} | {tput} |")
    fl = results["floor|records"]
    print(f"\ncontroller alone ({args.records} record messages queued directly; floor: one Redis SET per record):")
    print(f"| {'mode':<10} | {'records/s':>9} | {'floor':>7} | {'ratio':>5} | {'CPU ms/record':>13} | {'floor':>6} | {'ratio':>5} |")
    print(f"|{'-' * 12}|{'-' * 11}|{'-' * 9}|{'-' * 7}|{'-' * 15}|{'-' * 8}|{'-' * 7}|")
    for mode in ("standalone", "api"):
        f = results[f"fleet/{mode}|records"]
        print(f"| {mode:<10} | {f['rate']:9.0f} | {fl['rate']:7.0f} | {f['rate'] / fl['rate']:5.2f} | {f['cpu_ms']:13.2f} | "
              f"{fl['cpu_ms']:6.2f} | {f['cpu_ms'] / max(fl['cpu_ms'], 0.01):5.1f} |")
    if args.kubeconfig and run_.get("api_roles"):
        print(f"\nthe API server's own CPU ({'+'.join(run_['api_roles'])}; heartbeat 0: one PATCH per check), ms per check:")
        for case in [*[f"round of {n}" for n in sizes], "records"]:
            f = results[f"fleet/api|{case}"]
            print(f"  {case:<22} {f['api_cpu_ms']:.2f}")
    if not args.kubeconfig:
        print("\nthe fake API's requests per provider per round (steady-state goal: ≤ 1 PATCH, no GET) and its own CPU:")
        for case in [*cases, "records"]:
            f = results[f"fleet/api|{case}"]
            api_cpu = f"; fake API CPU {f['api_cpu_ms']:.2f} ms per check" if "api_cpu_ms" in f else ""
            print(f"  {case:<22} {request_stats(f.get('requests', []), sum(w[2] for w in f['windows']))}{api_cpu}")
    print("\nRSS at the end of each part (MiB, now / peak):")
    for part, role, now, peak in rss:
        print(f"  {part:<16} {role:<28} {now:6.1f} / {peak:6.1f}")


def footer(args: argparse.Namespace) -> None:
    if not args.kubeconfig:
        print(f"\nThe fake API (fleet/testing/kubeapi.py behind benchmarks/observe.py) adds {args.api_latency_ms} ms per request "
              f"({'CPU burnt on this machine' if args.api_burn else 'a sleep: no CPU of this machine'}), standing for the "
              "apiserver + etcd work of a real cluster, and leaves out: etcd and its fsync, authentication, authorization, "
              "admission and webhooks, schema validation of the CRD, managedFields bookkeeping of a real server, watch fan-out, "
              "priority & fairness, TLS, and any other client's load; its own Python CPU is printed above, not in the CPU column.")
    print("\nReproduce:")
    print(f"  {' '.join(['.venv/bin/python', 'benchmarks/pipeline.py', *sys.argv[1:]])}")
    print("  .venv/bin/python benchmarks/pipeline.py --rounds 10,50,200,500,1000 --repeat 3 --samples 100 --records 1000  # full")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer samples: --samples 10 --repeat 1 --records 200")
    ap.add_argument("--rounds", default="10,50,200,500", help="providers per round, comma-separated")
    ap.add_argument("--repeat", type=int, default=2, help="warm rounds per size (after one warm-up round)")
    ap.add_argument("--samples", type=int, default=20, help="low-load checks per provider")
    ap.add_argument("--records", type=int, default=500, help="record messages for the controller-alone case")
    ap.add_argument("--targets", type=int, default=50)
    ap.add_argument("--latency-ms", type=float, default=50, help="median check latency of the round providers")
    ap.add_argument("--vary", default="steady,changing", help="variants to run, comma-separated: steady, changing")
    ap.add_argument("--jitter-ms", type=int, default=20, help="changing: the round providers' latencyJitterMs (uniform)")
    ap.add_argument("--low-jitter-ms", type=int, default=5, help="changing: the low-load providers' latencyJitterMs (uniform)")
    ap.add_argument("--flap-ratio", type=float, default=0.1, help="changing: the fake's flapRatio")
    ap.add_argument("--flap-every", type=int, default=1, help="changing: the fake's flapEvery")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--api-latency-ms", type=float, default=8.7, help="the fake API's delay per request (issue 11: ≈ 8.7 ms)")
    ap.add_argument("--api-burn", action="store_true", help="burn the fake API's delay as CPU on this machine instead of sleeping")
    ap.add_argument("--kubeconfig", help="write to this API server (the ProviderHealth CRD installed) instead of the fake")
    ap.add_argument("--apiserver", help="start this kube-apiserver (with etcd from PATH, as fleet/testing/kubeserver.py) and write to it; "
                                        "its CPU and etcd's are reported")
    ap.add_argument("--apiserver-pid", type=int, help="with --kubeconfig: the API server's pid, to report its CPU per write")
    ap.add_argument("--etcd-pid", type=int, help="with --kubeconfig: etcd's pid, to report its CPU per write")
    ap.add_argument("--parts", help="main (rounds, controller alone, floor) and/or writes (status writes per heartbeat); "
                                    "default: main, plus writes with a real API server")
    ap.add_argument("--heartbeats", default="0,5m", help="writes: the FLEET_STATUS_HEARTBEAT values, one controller each "
                                                         "(0: every round, the behaviour before issue 24)")
    ap.add_argument("--writes-providers", type=int, default=300, help="writes: providers per round")
    ap.add_argument("--writes-rounds", type=int, default=8, help="writes: steady rounds, and as many changing rounds")
    ap.add_argument("--writes-interval", type=float, default=3.0, help="writes: seconds from one round's start to the next's")
    ap.add_argument("--profile", help="sample the controller with py-spy in the controller-alone case, into this directory")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--workdir", help="keep logs here (default: a temporary directory)")
    args = ap.parse_args()
    if args.quick:
        args.samples, args.repeat, args.records = min(args.samples, 10), 1, min(args.records, 200)
    args.records = min(args.records, max(int(s) for s in args.rounds.split(",")))
    variants = [v for v in args.vary.split(",") if v]
    if not set(variants) <= {"steady", "changing"}:
        ap.error("--vary: steady and/or changing")
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    real = bool(args.kubeconfig or args.apiserver)
    args.parts = set((args.parts or ("main,writes" if real else "main")).split(","))
    if not args.parts <= {"main", "writes"}:
        ap.error("--parts: main and/or writes")
    if (args.apiserver_pid or args.etcd_pid) and not args.kubeconfig:
        ap.error("--apiserver-pid/--etcd-pid go with --kubeconfig (--apiserver knows its own)")
    server = None
    api_pids: dict[str, int] = {}
    if args.apiserver:
        from fleet.testing.kubeserver import KubeServer

        server = KubeServer(args.apiserver).start()
        args.kubeconfig = server.kubeconfig
        api_pids = {f"api:{role}": p.pid for role, p in server.procs.items()}
        print(f"started {args.apiserver} on {server.url} with etcd (pids {api_pids})", flush=True)
    else:
        api_pids = {k: v for k, v in (("api:kube-apiserver", args.apiserver_pid), ("api:etcd", args.etcd_pid)) if v}
    runs = []
    try:
        for variant in variants:
            print(f"variant {variant}:", flush=True)
            if args.workdir:  # kept: the processes' logs and the observers' logs
                work = Path(args.workdir) / variant
                work.mkdir(parents=True, exist_ok=True)
                runs.append(run(args, work, variant, api_pids))
            else:
                with tempfile.TemporaryDirectory() as tmp:
                    runs.append(run(args, Path(tmp), variant, api_pids))
            if "main" not in args.parts:
                break  # the writes part has its own steady and changing phases
    finally:
        if server is not None:
            rss = {role: rss_mib(p.pid) for role, p in server.procs.items() if p.poll() is None}
            server.stop()
            print("API server RSS at the end (MiB, now / peak): " + ", ".join(f"{r} {a:.0f} / {b:.0f}" for r, (a, b) in rss.items()))
    for r in runs:
        report(args, r)
    footer(args)


if __name__ == "__main__":
    main()
