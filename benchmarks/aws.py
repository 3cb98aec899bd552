"""100 Proxies to Running on the aws provider, against moto in server mode.

    python benchmarks/aws.py [--proxies 100] [--threads 10] [--hetzner]

Starts moto (`python -m moto.server`) on a free loopback port, points an
AwsProvider at it with dummy credentials, and does what the reconciler
does per Proxy: one create, then a get every poll until Running. Prints the
wall time to all Running, the EC2 requests per Proxy (create's, the polls'),
and the p50/p95 of one create. moto answers in milliseconds and runs
instances at once, so the figure is fleet's and boto3's cost per Proxy,
not EC2's boot time. `--hetzner` does the same against the fake Hetzner API.
Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from providers import base
from providers.base import CreateRequest, Deadline, Placement, State

POLL = 0.2  # seconds between a Proxy's gets (the reconciler's FLEET_PROXY_POLL_INTERVAL, shortened)


def request(uid: str, placement: Placement) -> CreateRequest:
    return CreateRequest(name=base.name_from_uid(uid), uid=uid, namespace="bench", proxy_name=uid[:8],
                         placement=placement, cloud_init="#cloud-config\npackages: [squid]\n", installation="bench")


def run(provider, placement: Placement, n: int, threads: int) -> None:
    uids = [str(uuid.uuid4()) for _ in range(n)]
    creates: list[float] = []
    polls = [0] * n

    def one(i: int) -> None:
        t = time.monotonic()
        pid = provider.create(request(uids[i], placement), Deadline.after(30))
        creates.append(time.monotonic() - t)
        while True:
            polls[i] += 1
            if provider.get(pid, Deadline.after(30)).state is State.RUNNING:
                return
            time.sleep(POLL)

    start = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(n)))
    wall = time.monotonic() - start
    total = provider.calls
    creates.sort()
    print(f"{n} Proxies to Running: {wall:.2f} s wall ({threads} threads)")
    print(f"API requests per Proxy: {total / n:.2f} ({(total - sum(polls)) / n:.2f} for create, {sum(polls) / n:.2f} polls)")
    print(f"create: p50 {statistics.median(creates) * 1000:.0f} ms, p95 {creates[int(0.95 * (n - 1))] * 1000:.0f} ms")
    t = time.monotonic()
    listed = provider.list_by_tag(Deadline.after(60))
    print(f"list_by_tag of {len(listed)}: {(time.monotonic() - t) * 1000:.0f} ms")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--proxies", type=int, default=100)
    ap.add_argument("--threads", type=int, default=10)
    ap.add_argument("--hetzner", action="store_true")
    args = ap.parse_args()
    if args.hetzner:
        from fleet.testing.hcloud import TOKEN, FakeHcloud, Server
        from providers.hetzner.config import HetznerConfig
        from providers.hetzner.provider import HetznerProvider

        fake = FakeHcloud()
        token = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-hcloud-token-{os.getpid()}"
        token.write_text(TOKEN)
        try:
            with Server(fake) as server:
                cfg = HetznerConfig(apiEndpoint=server.url + "/v1", tokenFile=str(token), allowedSources=["203.0.113.0/24"])
                run(HetznerProvider("bench", cfg), Placement(zone="fsn1", machine_type="cx22", image="ubuntu-24.04"),
                    args.proxies, args.threads)
        finally:
            token.unlink()
        return
    from fleet.testing.motoserver import AWS_ENV, UNSET, MotoServer
    from providers.aws.config import AwsConfig
    from providers.aws.provider import AwsProvider

    for var in UNSET:
        os.environ.pop(var, None)
    os.environ.update(AWS_ENV)
    with MotoServer() as moto:
        cfg = AwsConfig(region="eu-west-1", endpointUrl=moto.url, allowedSources=["203.0.113.0/24"])
        placement = Placement(region="eu-west-1", zone="eu-west-1a", machine_type="t3.micro", image="ami-0123456789abcdef0")
        run(AwsProvider("bench", cfg), placement, args.proxies, args.threads)


if __name__ == "__main__":
    main()
