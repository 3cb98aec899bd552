"""Where a controller's CPU goes per record: summarise py-spy's raw
(collapsed) stacks from `benchmarks/pipeline.py --profile DIR`.

`python benchmarks/profile_summary.py DIR/changing-api.txt --records 500 [--rate 500]`

pipeline.py runs py-spy with `--gil`: only the thread holding the GIL is
sampled, so samples / rate ≈ the process's Python CPU seconds (C code that
releases the GIL, e.g. a socket's send and recv, is not in it). Prints, in
ms per record:
- self time by layer: the innermost frame's file decides (kubernetes client,
  urllib3, http.client, json, redis-py, celery/kombu, fleet, logging, …);
- inclusive time of fleet's steps (a sample counts once per step whose
  function is anywhere on its stack).
"""

from __future__ import annotations

import argparse
import re
from collections import Counter

FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")

# (label, substring of the frame's file), first match wins, innermost frame first
LAYERS = [
    ("kubernetes client: (de)serialise models/JSON", "kubernetes/client/api_client.py"),
    ("kubernetes client: rest/request", "kubernetes/client/rest.py"),
    ("kubernetes client: configuration/other", "kubernetes/"),
    ("urllib3", "urllib3/"),
    ("http.client", "http/client.py"),
    ("socket/ssl/selectors", "socket.py"),
    ("socket/ssl/selectors", "ssl.py"),
    ("socket/ssl/selectors", "selectors.py"),
    ("email (http headers)", "email/"),
    ("json", "json/"),
    ("redis-py", "redis/"),
    ("celery/kombu/billiard/vine", "celery/"),
    ("celery/kombu/billiard/vine", "kombu/"),
    ("celery/kombu/billiard/vine", "billiard/"),
    ("celery/kombu/billiard/vine", "vine/"),
    ("logging", "logging/"),
    ("pydantic", "pydantic"),
    ("prometheus_client", "prometheus_client/"),
    ("opentelemetry", "opentelemetry/"),
    ("fleet: status (build_status, decide, merge_patch)", "fleet/health/decide.py"),
    ("fleet: messages (validation)", "fleet/health/messages.py"),
    ("fleet: results", "fleet/health/results.py"),
    ("fleet: kube writer", "fleet/kube/"),
    ("fleet: store", "fleet/store/"),
    ("fleet: other", "fleet/"),
    ("tasks/", "tasks/"),
    ("threading/queue", "threading.py"),
    ("threading/queue", "queue.py"),
    ("copy/deepcopy", "copy.py"),
    ("datetime/time formatting", "datetime"),
]

STEPS = [
    ("record task (all of it)", "record_check"),
    ("validate the message", "validate_message"),
    ("Redis compare-and-set + status cache read (one Lua script) + decode", "StoredResults.save"),
    ("publish ProviderHealth (Writer.publish)", "Writer.publish"),
    ("  cache entry decode (read by the compare-and-set)", "Writer._cached"),
    ("  decide (build_status + merge_patch)", "decide"),
    ("  PATCH (CustomObjectsApi call, kubernetes client + urllib3)", "Client.call"),
    ("    ApiClient.sanitize_for_serialization (request body)", "ApiClient.sanitize_for_serialization"),
    ("    ApiClient.deserialize (response body)", "ApiClient.deserialize"),
    ("    urllib3 urlopen (send, wait, read)", "HTTPConnectionPool.urlopen"),
    ("  cache write (json.dumps + Redis EVALSHA)", "Writer._remember"),
    ("transition log lines", "Logger._log"),
]


def parse(path: str) -> list[tuple[list[tuple[str, str]], int]]:
    out = []
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack or not count.isdigit():
                continue
            frames = []
            for fr in stack.split(";"):
                m = FRAME.match(fr)
                frames.append((m["func"], m["file"]) if m else (fr, ""))
            out.append((frames, int(count)))
    return out


def layer(frames: list[tuple[str, str]]) -> str:
    func, file = frames[-1]
    for label, part in LAYERS:
        if part in file:
            return label
    return f"other ({file.rsplit('/', 1)[-1] or func})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile")
    ap.add_argument("--records", type=int, required=True, help="records processed while sampling")
    ap.add_argument("--rate", type=int, default=500, help="py-spy's samples per second")
    ap.add_argument("--top", type=int, default=18)
    args = ap.parse_args()
    stacks = parse(args.profile)
    ms = 1000 / args.rate / args.records
    # only the task threads' work: stacks under the record task (idle broker polling etc. excluded separately)
    total = sum(c for _, c in stacks)
    in_record = [(f, c) for f, c in stacks if any(fn.endswith("record_check") or "record_check" in fn for fn, _ in f)]
    rec_total = sum(c for _, c in in_record)
    print(f"{args.profile}: {total} samples at {args.rate}/s over {args.records} records = {total * ms:.2f} ms per record "
          f"sampled in all threads, {rec_total * ms:.2f} ms inside the record task")
    print("\nself time by layer, inside the record task (ms per record):")
    layers: Counter[str] = Counter()
    for frames, c in in_record:
        layers[layer(frames)] += c
    for label, c in layers.most_common(args.top):
        print(f"  {c * ms:6.2f}  {c / max(rec_total, 1):5.1%}  {label}")
    print("\nself time by layer, outside the record task (ms per record: the consumer, broker I/O, acks):")
    outside: Counter[str] = Counter()
    for frames, c in stacks:
        if (frames, c) not in in_record:
            outside[layer(frames)] += c
    for label, c in outside.most_common(8):
        print(f"  {c * ms:6.2f}  {label}")
    print("\ninclusive time of fleet's steps (ms per record):")
    for label, func in STEPS:
        c = sum(cnt for frames, cnt in stacks if any(fn == func or fn.endswith("." + func) for fn, _ in frames))
        print(f"  {c * ms:6.2f}  {label}")


if __name__ == "__main__":
    main()
