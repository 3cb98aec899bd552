"""How long the `fleet` command takes to answer (issue 24): `fleet --help` and
`fleet get px` / `fleet get ph` against a real redis-server, each against a
floor measured in the same run: `python -c pass` (the interpreter's start-up)
and `python -c 'import argparse'` (the parser module every command needs).

Each command runs `--runs` times (default 5), the commands interleaved round by
round so a load spike hits all of them alike; the median and the minimum wall
time of each are printed, with fleet's median minus the floor's (what fleet's
own imports and work cost) and the machine's load average before and after.
Goals: `fleet --help` <= 0.3 s, `fleet get px` <= 0.6 s (medians of 5).
Numbers, not assertions:
`python benchmarks/cli.py [--runs 5] [--importtime]` (`--importtime` adds the
slowest imports of each fleet command, from `python -X importtime`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROXIES = ROOT / "deploy/examples/proxies.yaml"
GOALS = {"fleet --help": 0.3, "fleet get px": 0.6}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis(workdir: str) -> tuple[subprocess.Popen[bytes], int]:
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("redis-server is not installed")
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", workdir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    sys.exit("redis-server did not answer")


def wall(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def slowest_imports(argv: list[str], env: dict[str, str], n: int = 8) -> list[str]:
    run = subprocess.run([sys.executable, "-X", "importtime", *argv], env=env, capture_output=True, text=True, check=False)
    rows = []
    for line in run.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].rstrip()))
    top = [(us, name) for us, name in rows if not name.startswith("   ")]  # top-level imports: where time goes
    return [f"{us / 1000:7.1f} ms {name.strip()}" for us, name in sorted(top, reverse=True)[:n]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--importtime", action="store_true", help="also print each fleet command's slowest imports")
    args = ap.parse_args()
    fleet = shutil.which("fleet", path=str(Path(sys.executable).parent)) or shutil.which("fleet")
    if fleet is None:
        sys.exit("the fleet console script is not installed next to this python (pip install -e .)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    with tempfile.TemporaryDirectory() as tmp:
        redis, port = start_redis(tmp)
        try:
            broker = f"redis://127.0.0.1:{port}/0"
            commands = {
                "python -c pass": [sys.executable, "-c", "pass"],
                "python -c 'import argparse'": [sys.executable, "-c", "import argparse"],
                "fleet --help": [fleet, "--help"],
                "fleet get px": [fleet, "get", "px", "--broker", broker, "--proxies", str(PROXIES)],
                "fleet get ph": [fleet, "get", "ph", "--broker", broker],
            }
            load_before = os.getloadavg()
            for argv in commands.values():  # warm the page cache and the .pyc files: not counted
                wall(argv, env)
            times: dict[str, list[float]] = {name: [] for name in commands}
            for _ in range(args.runs):
                for name, argv in commands.items():
                    times[name].append(wall(argv, env))
            load_after = os.getloadavg()
            if args.importtime:
                imports = {name: slowest_imports(["-m", "fleet.cli", *argv[1:]], env)
                           for name, argv in commands.items() if name.startswith("fleet")}
        finally:
            redis.terminate()
            redis.wait(10)
    floor = statistics.median(times["python -c 'import argparse'"])
    print(f"{args.runs} runs each, interleaved; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after "
          f"({os.cpu_count()} CPUs)")
    print(f"{'command':30} {'median':>8} {'min':>8} {'- floor':>8}  goal")
    for name, ts in times.items():
        med = statistics.median(ts)
        over = f"{(med - floor) * 1000:6.0f}ms" if name.startswith("fleet") else ""
        goal = GOALS.get(name)
        verdict = "" if goal is None else f"<= {goal:.1f} s: {'met' if med <= goal else 'NOT met'}"
        print(f"{name:30} {med:7.3f}s {min(ts):7.3f}s {over:>8}  {verdict}")
    if args.importtime:
        for name, lines in imports.items():
            print(f"\n{name}: slowest top-level imports (python -X importtime, cumulative)")
            print("\n".join(lines))


if __name__ == "__main__":
    main()
