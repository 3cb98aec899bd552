"""The bare floor for benchmarks/leases.py (issue 24): what a lease API
costs with nothing of fleet in it.

A plain ASGI app served exactly as `fleet api` is (fleet/leases/process.py:
uvicorn, uvloop, httptools, one process, the same uvicorn settings, the
same bounded redis.asyncio pool) that answers the two requests the
benchmark's clients send with one Lua call each (EVALSHA, with the keys and
about as many arguments as fleet's lease script takes):

- `POST /v1/leases`: read the JSON body, pick a proxy at random, one script
  that reads its endpoint and stores a lease document, answer a grant of the
  same shape as fleet's;
- `POST /v1/leases/{id}/release`: one script that deletes the document.

No auth, no validation, no limits, no capacity, no epoch: the cost of HTTP +
one Redis round trip + JSON, the least any lease API on this stack pays.

    python -m benchmarks.leases_floor REDIS_URL PORT PROXIES
"""

from __future__ import annotations

import random
import sys
import time
import uuid
from typing import Any

import orjson
import redis.asyncio as aioredis

from fleet.store.keys import PX_ENDPOINTS

# the seven keys of fleet's lease call; the endpoints are fleet's own (the benchmark writes them)
KEYS = [*(f"floor:{k}" for k in ("docs", "expiry", "load")), PX_ENDPOINTS,
        *(f"floor:{k}" for k in ("verdicts", "cool:target", "cool:global"))]

# ARGV as long as fleet's lease call (16 + the guard's 5).
LEASE = """
local raw = redis.call('hget', KEYS[4], ARGV[4])
redis.call('hset', KEYS[1], ARGV[2], ARGV[3])
return {'1', ARGV[17], '', '0', 'ok', ARGV[4], raw, ''}
"""
RELEASE = """
if redis.call('hdel', KEYS[1], ARGV[1]) == 1 then return {'released'} end
return {'unknown'}
"""

JSON = [(b"content-type", b"application/json")]


class Floor:
    def __init__(self, url: str, proxies: int) -> None:
        pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=128, timeout=5, socket_timeout=5,
                                                        socket_connect_timeout=5, health_check_interval=30)
        self.redis = aioredis.Redis(connection_pool=pool)
        self.lease_script = self.redis.register_script(LEASE)
        self.release_script = self.redis.register_script(RELEASE)
        self.names = [f"bench/p{i:05d}" for i in range(proxies)]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await self.redis.aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        path: str = scope["path"]
        if path == "/healthz":
            status, answer = 200, {"ok": await self.redis.ping()}
        elif path == "/v1/leases":
            req = orjson.loads(body)
            lease_id = uuid.uuid4().hex
            now = time.time()
            proxy = random.choice(self.names)
            doc = orjson.dumps({"proxy": proxy, "target": req.get("target"), "expires": now + req.get("ttl", 300)})
            got = await self.lease_script(keys=KEYS, args=[repr(now), lease_id, doc, proxy, 1, "", 3600000, "", "",
                                                           "", repr(random.random()), 5000, repr(60.0), "", "", "",
                                                           repr(now), "", 0, repr(3600.0), uuid.uuid4().hex])
            ep = orjson.loads(got[6])
            status, answer = 200, {"lease": lease_id, "proxy": proxy, "ip": ep.get("ip"), "port": ep.get("port"),
                                   "egressIP": None, "provider": ep.get("provider"), "region": ep.get("region"),
                                   "zone": ep.get("zone"), "pool": None, "url": f"http://{ep.get('ip')}:{ep.get('port')}",
                                   "ttl": req.get("ttl", 300), "expiresAt": now + req.get("ttl", 300)}
        elif path.startswith("/v1/leases/") and path.endswith("/release"):
            lease_id = path[len("/v1/leases/"):-len("/release")]
            got = await self.release_script(keys=KEYS, args=[lease_id, repr(time.time()), 300000])
            status, answer = 200, {"lease": lease_id, "status": got[0].decode(), "reason": None}
        else:
            status, answer = 404, {"error": "no such path"}
        data = orjson.dumps(answer)
        await send({"type": "http.response.start", "status": status,
                    "headers": [*JSON, (b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})


def main() -> None:
    import uvicorn

    url, port, proxies = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    # fleet api's uvicorn.Config (fleet/leases/process.py), with uvicorn's own httptools protocol
    config = uvicorn.Config(Floor(url, proxies), host="127.0.0.1", port=port, loop="uvloop", http="httptools",
                            lifespan="on", access_log=False, log_config=None, server_header=False,
                            timeout_keep_alive=31, backlog=2048, limit_concurrency=None)
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
