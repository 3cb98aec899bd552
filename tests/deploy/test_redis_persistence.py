"""Issue 21, item 1: every Redis fleet ships keeps its data — an append-only
file fsynced every second, on storage that outlives the container (a
PersistentVolumeClaim in deploy/redis, a named volume in docker-compose.yml)."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.deploy.test_image import compose  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parents[2]


def aof_everysec(argv: list[str]) -> bool:
    args = dict(zip(argv[1::2], argv[2::2], strict=False))
    return argv[0] == "redis-server" and args.get("--appendonly") == "yes" and args.get("--appendfsync") == "everysec"


def test_the_kubernetes_redis_appends_every_second_to_a_claim():
    docs = [d for d in yaml.safe_load_all((ROOT / "deploy/redis/redis.yaml").read_text()) if d]
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    (claim,) = [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    pod = deploy["spec"]["template"]["spec"]
    (redis,) = pod["containers"]
    assert aof_everysec(redis["command"]), redis["command"]
    data = next(m["mountPath"] for m in redis["volumeMounts"] if m["name"] == "data")
    assert redis["command"][redis["command"].index("--dir") + 1] == data
    volume = next(v for v in pod["volumes"] if v["name"] == "data")
    assert volume == {"name": "data", "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}}
    assert deploy["spec"]["strategy"]["type"] == "Recreate"  # one pod on the ReadWriteOnce claim at a time
    assert "PONG" in " ".join(redis["readinessProbe"]["exec"]["command"])  # LOADING (replaying the AOF) is not ready


def test_compose_redis_appends_every_second_to_a_named_volume(compose):  # noqa: F811
    c = compose
    redis = c["services"]["redis"]
    assert aof_everysec(redis["command"]), redis["command"]
    assert "redis-data:/data" in redis["volumes"] and "redis-data" in c["volumes"]
    assert not any(t.startswith("/data") for t in redis.get("tmpfs", []))
