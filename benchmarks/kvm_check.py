"""kvm health check: 50 configured hosts, cold (first dial) and warm
(connection reused), against the lab's real sshd + libvirtd on loopback.

Every host name points at the same lab sshd, so each gets its own SSH
connection and libvirt session, as 50 real hypervisors would. Prints p50/p99
per host (the TargetStatus latency) and per round (wall time of `check`),
and the same for a single host, so "50 hosts ≤ 2× one host" can be read off.
Not a timed assertion; run it with `python benchmarks/kvm_check.py [hosts] [warm rounds]`.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fleet.testing.kvmlab import TEST_POOL, TEST_URI, running_lab
from providers.base import Deadline
from providers.kvm.config import KvmConfig
from providers.kvm.provider import new


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def config(lab, n: int) -> KvmConfig:
    hosts = [
        {"name": f"hv{i:02d}", "address": lab.address, "user": lab.user, "pool": TEST_POOL, "socket": lab.socket,
         "uri": TEST_URI}
        for i in range(n)
    ]
    return KvmConfig.model_validate(
        {"sshKeyFile": str(lab.key_file), "knownHostsFile": str(lab.known_hosts), "hosts": hosts}
    )


def measure(lab, n: int, cold_rounds: int, warm_rounds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"cold_host": [], "cold_round": [], "warm_host": [], "warm_round": []}
    for _ in range(cold_rounds):
        p = new("bench", config(lab, n))
        try:
            start = time.perf_counter()
            got = p.check(Deadline.after(60))
            out["cold_round"].append(time.perf_counter() - start)
            bad = [s for s in got if not s.ready]
            if bad:
                raise SystemExit(f"cold round: {len(bad)} hosts not ready, e.g. {bad[0].reason}: {bad[0].message}")
            out["cold_host"] += [s.latency for s in got]
            for _ in range(warm_rounds):
                start = time.perf_counter()
                got = p.check(Deadline.after(30))
                out["warm_round"].append(time.perf_counter() - start)
                out["warm_host"] += [s.latency for s in got]
                assert all(s.ready for s in got)
        finally:
            p.close()
    return out


def show(label: str, values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return f"{label:<12} p50 {statistics.median(ms):8.2f} ms   p99 {pct(ms, 99):8.2f} ms   (n={len(ms)})"


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    warm = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    with running_lab() as lab:
        one = measure(lab, 1, cold_rounds=10, warm_rounds=warm)
        many = measure(lab, n, cold_rounds=3, warm_rounds=warm)
    print(f"kvm check over the loopback lab (sshd + libvirtd test driver); {n} hosts vs 1 host")
    for title, res in ((f"{n} hosts", many), ("1 host", one)):
        print(f"-- {title}")
        print("  " + show("cold host", res["cold_host"]))
        print("  " + show("cold round", res["cold_round"]))
        print("  " + show("warm host", res["warm_host"]))
        print("  " + show("warm round", res["warm_round"]))
    ratio = statistics.median(many["warm_round"]) / statistics.median(one["warm_round"])
    print(f"warm round, {n} hosts / 1 host (p50): {ratio:.2f}x")


if __name__ == "__main__":
    main()
