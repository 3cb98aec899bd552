"""The lease API's state in Redis (`fleet api`, issue 14): leases, the load of
each proxy, sticky bindings, cooldowns and error counts. Every decision that
must hold across API replicas is one Lua script, so any number of `fleet api`
processes serve one consistent pool and a restart loses nothing.

Keys (all under `fleet:lease:`, defined in `fleet.store.keys`; the proxy keys
are the Proxy reconciler's `<namespace>/<name>` of `fleet:px:endpoints`):

- `docs`      hash: lease id → {"proxy","uid","instance","ip","port","target","sticky","expires","granted"}
  (JSON; uid, instance, ip and port are the endpoint's at grant time)
- `expiry`    sorted set: lease id → when it expires (Unix time); the sweep and the active-leases gauge
- `held:<p>`  sorted set: lease id → expiry, the open leases of proxy p (when the first frees up)
- `load`      sorted set: proxy → open leases; scanned by ascending load, so full proxies are never visited
- `sticky:<k>` string: the proxy the sticky key k was last leased, with a TTL
- `cool:target` sorted set: "<proxy>|<target>" → end of the target-scoped cooldown
- `cool:global` sorted set: proxy → end of the global cooldown
- `errors`    hash: proxy → `error` reports in a row
- `released:<id>` string: the first release's answer ("released", "revoked:<why>", "expired"), kept
  RELEASE_KEEP seconds (Redis expires it), so a second release answers the same
- `refused:<pool>` sorted set: lease id → when, the lease requests naming that pool (a ProxyPool's name)
  refused for want of a free member (busy or none), kept REFUSED_WINDOW seconds and at most REFUSED_MAX:
  the pool's demand the pool controller reads (`fleet.pools`)
- `epoch`     hash: id (random, written when the first script finds none), created, seq (bumped by
  every lease and renew), grace (until when nothing new is leased)

The epoch guard (issue 21): every lease and renew script, and each API
process's check every few seconds, is given the epoch id and the highest
`seq` that process saw. The epoch gone (Redis restarted empty: a new one
is written), another id (another process wrote that new one), or a `seq`
not above what the process saw (a failover to a replica that was behind,
an AOF that lost its last second) mean Redis lost lease data: the script
sets `grace` to now + the grace period (never shortening it), and while it
is in force the lease script grants nothing and the renew script re-creates
the leases it no longer knows from what the client tells it (its proxy,
target and address), within capacity. Every answer starts with the guard's
header: seq, epoch id, why a loss was seen ('' none), grace end.

Expired leases are swept (at most 100 per call) at the start of every lease,
so a proxy's load never counts a lease past its expiry. A proxy is leasable
when its endpoint is in `fleet:px:endpoints`, the prober's verdict for the
same uid is not `healthy: false` (no verdict yet counts as healthy), it is
not cooling down globally or for the target, and its load is below the
limit; these are read inside the script, so a proxy that turns unhealthy or
is deleted stops being leased at once. A lease is revoked when its proxy is
gone, unhealthy, or replaced: another uid, or the same uid on another
instance (the endpoint's `instance`, the provider's id, when both name one;
or another ip:port), so a lease never answers `released` with an address
that no longer is its proxy's. The keys the scripts build from the
proxy or sticky key are not declared in KEYS: fleet runs on one Redis, not a
cluster (like every other fleet key, they are not per installation).

`Leases` runs the scripts on the shared synchronous client (`Store.leases`:
tests, the benchmark's set-up); `AsyncLeases` runs the same scripts on a
`redis.asyncio` client for the API's event loop.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

from fleet.store import keys

PREFIX, DOCS, EXPIRY, HELD, LOAD = keys.LEASE_PREFIX, keys.LEASE_DOCS, keys.LEASE_EXPIRY, keys.LEASE_HELD, keys.LEASE_LOAD
STICKY, COOL_TARGET, COOL_GLOBAL, ERRORS = keys.LEASE_STICKY, keys.LEASE_COOL_TARGET, keys.LEASE_COOL_GLOBAL, keys.LEASE_ERRORS
RELEASED, EPOCH, REFUSED = keys.LEASE_RELEASED, keys.LEASE_EPOCH, keys.LEASE_REFUSED
ALL_FIXED = (DOCS, EXPIRY, LOAD, COOL_TARGET, COOL_GLOBAL, ERRORS)

SWEEP_BATCH = 100  # expired leases swept per call
RELEASE_KEEP = 300.0  # seconds a release's answer is kept for a repeated release (a client's retry)
SCAN_LIMIT = 5000  # proxies one lease request examines at most
REFUSED_WINDOW = 120.0  # seconds a pool's refused lease request counts as demand (the longest autoscale look-back)
REFUSED_MAX = 100_000  # refused requests kept per pool at most (the newest)

# Shared Lua: KEYS[1..7] = docs, expiry, load, endpoints, verdicts, cool:target, cool:global
# in every script that uses these helpers; HELD_PREFIX is substituted.
_COMMON = """
local function decode(raw)
  if not raw then return nil end
  local ok, doc = pcall(cjson.decode, raw)
  if ok and type(doc) == 'table' then return doc end
  return nil
end
local function drop(id, doc)
  redis.call('hdel', KEYS[1], id)
  redis.call('zrem', KEYS[2], id)
  if doc and type(doc['proxy']) == 'string' then
    redis.call('zrem', 'HELD_PREFIX' .. doc['proxy'], id)
    local n = tonumber(redis.call('zincrby', KEYS[3], -1, doc['proxy']))
    if n < 0 then redis.call('zadd', KEYS[3], 0, doc['proxy']) end
  end
end
local function sweep(now)
  local ids = redis.call('zrangebyscore', KEYS[2], '-inf', now, 'LIMIT', 0, SWEEP_BATCH)
  for _, id in ipairs(ids) do
    drop(id, decode(redis.call('hget', KEYS[1], id)))
  end
end
local function named(v) return type(v) == 'string' and v ~= '' end
-- Why the lease `doc` is revoked now (gone, replaced, unhealthy), or nil. Replaced: another uid, or
-- the same uid on another instance (both name one and they differ) or at another ip:port (the doc
-- names them: leases granted before they were stored compare the uid only).
-- `seen` keeps what it read of the proxy (raw endpoint, endpoint, verdict) for the caller's answer.
-- `health`: false for a report, which cares about gone and replaced only (the verdict is not read).
local seen = {}
local function revoked(doc, health)
  if type(doc['proxy']) ~= 'string' then return 'gone' end
  local raw = redis.call('hget', KEYS[4], doc['proxy'])
  local ep = decode(raw)
  if not ep then return 'gone' end
  seen = {raw = raw, ep = ep}
  if ep['uid'] ~= doc['uid'] then return 'replaced' end
  if named(doc['instance']) and named(ep['instance']) and ep['instance'] ~= doc['instance'] then return 'replaced' end
  if (doc['ip'] ~= nil and ep['ip'] ~= doc['ip']) or (doc['port'] ~= nil and ep['port'] ~= doc['port']) then
    return 'replaced'
  end
  if health == false then return nil end
  local v = decode(redis.call('hget', KEYS[5], doc['proxy']))
  seen.v = v
  if v and v['uid'] == doc['uid'] and v['healthy'] == false then return 'unhealthy' end
  return nil
end
-- The epoch guard: the last 5 ARGV are now, the epoch id this process saw ('' at its first call), the highest
-- seq it saw, the grace period (s) and a fresh id (the new epoch when there is none). `bump`: a lease or renew.
-- → {seq, epoch id, why a loss shows ('' none; vanished, changed, rolled-back), grace end}
local function guard(bump)
  local n = #ARGV
  local now, want, last, grace = tonumber(ARGV[n - 4]), ARGV[n - 3], tonumber(ARGV[n - 2]), tonumber(ARGV[n - 1])
  local e = redis.call('hmget', 'EPOCH_KEY', 'id', 'seq', 'grace')
  local id, seq, till = e[1], tonumber(e[2] or '0'), tonumber(e[3] or '0')
  local why = ''
  if not id then
    id = ARGV[n]
    seq = bump and 1 or 0
    redis.call('hset', 'EPOCH_KEY', 'id', id, 'created', ARGV[n - 4], 'seq', tostring(seq))
    if want ~= '' then why = 'vanished' end
  else
    if want ~= '' and id ~= want then why = 'changed' end
    if bump then seq = redis.call('hincrby', 'EPOCH_KEY', 'seq', 1) end
  end
  if why == '' and want ~= '' and (seq < last or (bump and seq == last)) then why = 'rolled-back' end
  if why ~= '' and till < now + grace then
    till = now + grace
    redis.call('hset', 'EPOCH_KEY', 'grace', tostring(till))
  end
  return {tostring(seq), id, why, tostring(till)}
end
-- The guard's header, then the answer of main(header).
local function guarded(bump, main)
  local hdr = guard(bump)
  local out = main(hdr)
  for _, v in ipairs(out) do hdr[#hdr + 1] = v end
  return hdr
end
"""

# ARGV: 1 now, 2 lease id, 3 expires, 4 target, 5 max leases per proxy, 6 sticky ('' none),
# 7 sticky TTL ms, 8 provider, 9 region, 10 zone ('' = any), 11 random in [0,1), 12 scan limit, 13 ttl,
# 14 namespaces (comma-separated; '' = any), 15 proxies to skip (comma-separated keys; the gateway's
# retries: '' none), 16 pool (a ProxyPool's name: the endpoint's `pool`; '' = any); the guard's 5.
# → header + {'ok', proxy, endpoint JSON, egress IP ('' unknown)} | {'busy', earliest time one frees up} | {'none'}
#   | {'grace'} (Redis lost lease data: nothing new until the header's grace end)
_LEASE = _COMMON + """
return guarded(true, function(hdr)
local now = tonumber(ARGV[1])
if tonumber(hdr[4]) > now then return {'grace'} end
local max = tonumber(ARGV[5])
local target = ARGV[4]
local limit = tonumber(ARGV[12])
local spaces, skip = nil, {}
if ARGV[14] ~= '' then
  spaces = {}
  for ns in string.gmatch(ARGV[14], '[^,]+') do spaces[ns] = true end
end
for p in string.gmatch(ARGV[15], '[^,]+') do skip[p] = true end
sweep(now)

-- The endpoint document and raw JSON when p can be leased for target (load aside);
-- else nil, why ('gone', 'filtered', 'unhealthy', 'cooling'), until when it cools.
-- `checked`: the verdict it read of p (grant(p) follows check(p) and answers the egress IP from it).
local checked = nil
local function check(p)
  if skip[p] or (spaces and not spaces[string.match(p, '^([^/]*)/') or '']) then return nil, nil, 'filtered' end
  local raw = redis.call('hget', KEYS[4], p)
  local ep = decode(raw)
  if not ep then return nil, nil, 'gone' end
  if (ARGV[8] ~= '' and ep['provider'] ~= ARGV[8]) or (ARGV[9] ~= '' and ep['region'] ~= ARGV[9])
     or (ARGV[10] ~= '' and ep['zone'] ~= ARGV[10]) or (ARGV[16] ~= '' and ep['pool'] ~= ARGV[16]) then
    return nil, nil, 'filtered'
  end
  local v = decode(redis.call('hget', KEYS[5], p))
  if v and v['uid'] == ep['uid'] and v['healthy'] == false then return nil, nil, 'unhealthy' end
  checked = v
  local cool = 0
  local g = redis.call('zscore', KEYS[7], p)
  if g and tonumber(g) > now then cool = tonumber(g) end
  local t = redis.call('zscore', KEYS[6], p .. '|' .. target)
  if t and tonumber(t) > now and tonumber(t) > cool then cool = tonumber(t) end
  if cool > 0 then return nil, nil, 'cooling', cool end
  return ep, raw
end

local function grant(p, ep, raw)
  local doc = cjson.encode({proxy = p, uid = ep['uid'], instance = named(ep['instance']) and ep['instance'] or nil,
                            ip = ep['ip'], port = ep['port'], target = target, sticky = ARGV[6],
                            expires = tonumber(ARGV[3]), granted = now, ttl = tonumber(ARGV[13])})
  redis.call('hset', KEYS[1], ARGV[2], doc)
  redis.call('zadd', KEYS[2], ARGV[3], ARGV[2])
  redis.call('zadd', 'HELD_PREFIX' .. p, ARGV[3], ARGV[2])
  redis.call('zincrby', KEYS[3], 1, p)
  if ARGV[6] ~= '' then redis.call('set', 'STICKY_PREFIX' .. ARGV[6], p, 'PX', ARGV[7]) end
  local v = checked
  local egress = ''
  if v and v['uid'] == ep['uid'] and named(v['egressIP']) then egress = v['egressIP'] end
  return {'ok', p, raw, egress}
end

local examined = 0
local function attempt()
  if ARGV[6] ~= '' then
    local bound = redis.call('get', 'STICKY_PREFIX' .. ARGV[6])
    if bound then
      local ep, raw = check(bound)
      if ep and tonumber(redis.call('zscore', KEYS[3], bound) or '0') < max then return grant(bound, ep, raw) end
    end
  end
  -- Groups of equal load, least loaded first; within a group from a random place, wrapping.
  local first = redis.call('zrangebyscore', KEYS[3], '-inf', '(' .. max, 'WITHSCORES', 'LIMIT', 0, 1)
  local s = first[2]
  while s and examined < limit do
    local count = redis.call('zcount', KEYS[3], s, s)
    local start = math.floor(tonumber(ARGV[11]) * count)
    for _, range in ipairs({{start, count}, {0, start}}) do
      local off = range[1]
      local step = 4  -- the first proxies examined are almost always free: a small first batch, then 32
      while off < range[2] and examined < limit do
        local n = math.min(step, range[2] - off)
        step = 32
        local batch = redis.call('zrangebyscore', KEYS[3], s, s, 'LIMIT', off, n)
        for _, p in ipairs(batch) do
          examined = examined + 1
          local ep, raw = check(p)
          if ep then return grant(p, ep, raw) end
        end
        off = off + n
      end
    end
    local nxt = redis.call('zrangebyscore', KEYS[3], '(' .. s, '(' .. max, 'WITHSCORES', 'LIMIT', 0, 1)
    s = nxt[2]
  end
  return nil
end

local got = attempt()
if got then return got end
-- Nothing free. Proxies Running but not yet in the load set (new since the last sync) join
-- it now, and the scan runs once more.
local names = redis.call('hkeys', KEYS[4])
local added = 0
for i = 1, #names, 500 do
  local args = {}
  for j = i, math.min(i + 499, #names) do
    args[#args + 1] = 0
    args[#args + 1] = names[j]
  end
  added = added + redis.call('zadd', KEYS[3], 'NX', unpack(args))
end
if added > 0 then
  got = attempt()
  if got then return got end
end
-- When will one be free: the earliest cooldown end of a matching proxy with room, or the
-- earliest expiry (after its cooldown) of a matching full one.
local free_at = nil
local function note(t) if free_at == nil or t < free_at then free_at = t end end
local seen = 0
local all = redis.call('zrange', KEYS[3], 0, limit - 1, 'WITHSCORES')
for i = 1, #all, 2 do
  local p, load = all[i], tonumber(all[i + 1])
  local ep, _, why, till = check(p)
  if ep or why == 'cooling' then
    local at = till or now
    if load >= max then
      local held = redis.call('zrange', 'HELD_PREFIX' .. p, 0, load - max, 'WITHSCORES')
      local exp = tonumber(held[#held] or now)
      if exp > at then at = exp end
    end
    note(at)
    seen = seen + 1
  end
end
-- A request naming a pool that is refused is that pool's demand (fleet.pools reads it).
if ARGV[16] ~= '' then
  local key = 'REFUSED_PREFIX' .. ARGV[16]
  redis.call('zadd', key, now, ARGV[2])
  redis.call('zremrangebyscore', key, '-inf', now - REFUSED_WINDOW)
  redis.call('zremrangebyrank', key, 0, -REFUSED_MAX - 1)
  redis.call('pexpire', key, math.floor(REFUSED_WINDOW * 1000))
end
if seen > 0 then return {'busy', tostring(free_at)} end
return {'none'}
end)
"""

# ARGV: 1 now, 2 lease id, 3 ttl ('' = the lease's own, else 4), 4 default ttl, 5 max leases per proxy,
# 6 proxy, 7 target, 8 ip, 9 port ('' each: not told; re-creation needs proxy and target), 10 ms a sticky
# binding outlives the lease; the guard's 5.
# → header + {'ok', proxy, endpoint JSON, egress IP, expires, ttl, 'renewed' | 'recreated'} | {'revoked', why} |
#   {'expired'} | {'released'} (the release record's answer) | {'unknown'} | {'busy'} (re-creation at capacity)
_RENEW = _COMMON + """
return guarded(true, function(hdr)
local now = tonumber(ARGV[1])
local id = ARGV[2]
-- `seen`: the endpoint and verdict of doc's proxy as read just before (by revoked, or the re-creation)
local function answer(doc, how)
  local p = doc['proxy']
  local raw, ep, v = seen.raw, seen.ep or {}, seen.v
  local egress = ''
  if v and v['uid'] == ep['uid'] and named(v['egressIP']) then egress = v['egressIP'] end
  return {'ok', p, raw, egress, tostring(doc['expires']), tostring(doc['ttl']), how}
end
local function store(doc)
  redis.call('hset', KEYS[1], id, cjson.encode(doc))
  redis.call('zadd', KEYS[2], doc['expires'], id)
  redis.call('zadd', 'HELD_PREFIX' .. doc['proxy'], doc['expires'], id)
  if named(doc['sticky']) then
    redis.call('set', 'STICKY_PREFIX' .. doc['sticky'], doc['proxy'], 'PX', math.floor(doc['ttl'] * 1000) + tonumber(ARGV[10]))
  end
end
local doc = decode(redis.call('hget', KEYS[1], id))
if doc then
  if tonumber(doc['expires']) <= now then return {'expired'} end
  local why = revoked(doc)
  if why then return {'revoked', why} end
  local ttl = tonumber(ARGV[3]) or tonumber(doc['ttl']) or tonumber(ARGV[4])
  doc['ttl'] = ttl
  doc['expires'] = now + ttl
  store(doc)
  return answer(doc, 'renewed')
end
local done = redis.call('get', 'RELEASED_PREFIX' .. id)
if done then
  local kind, why = string.match(done, '^([a-z]+):?(.*)$')
  if kind == 'revoked' then return {kind, why} end
  return {kind or 'unknown'}
end
if tonumber(hdr[4]) <= now or ARGV[6] == '' or ARGV[7] == '' then return {'unknown'} end
-- Redis lost it (the grace is in force): re-create it from what the client says, if its proxy still is that one.
local p = ARGV[6]
local raw = redis.call('hget', KEYS[4], p)
local ep = decode(raw)
if not ep then return {'revoked', 'gone'} end
if (ARGV[8] ~= '' and ep['ip'] ~= ARGV[8]) or (ARGV[9] ~= '' and tostring(ep['port']) ~= ARGV[9]) then
  return {'revoked', 'replaced'}
end
local v = decode(redis.call('hget', KEYS[5], p))
if v and v['uid'] == ep['uid'] and v['healthy'] == false then return {'revoked', 'unhealthy'} end
seen = {raw = raw, ep = ep, v = v}
sweep(now)
if tonumber(redis.call('zscore', KEYS[3], p) or '0') >= tonumber(ARGV[5]) then return {'busy'} end
local ttl = tonumber(ARGV[3]) or tonumber(ARGV[4])
doc = {proxy = p, uid = ep['uid'], instance = named(ep['instance']) and ep['instance'] or nil, ip = ep['ip'],
       port = ep['port'], target = ARGV[7], sticky = '', expires = now + ttl, granted = now, ttl = ttl}
store(doc)
redis.call('zincrby', KEYS[3], 1, p)
return answer(doc, 'recreated')
end)
"""

# The guard alone (each API process every few seconds): ARGV = the guard's 5. → the header.
_CHECK = _COMMON + """
return guarded(false, function(hdr) return {} end)
"""

# ARGV: 1 lease id, 2 now, 3 ms the answer is kept for a repeated release
# → {'released'} | {'revoked', why} | {'expired'} | {'unknown'}: the first release's answer again while kept
_RELEASE = _COMMON + """
local now = tonumber(ARGV[2])
local record = 'RELEASED_PREFIX' .. ARGV[1]
local raw = redis.call('hget', KEYS[1], ARGV[1])
if not raw then
  local done = redis.call('get', record)
  if not done then return {'unknown'} end
  local kind, why = string.match(done, '^([a-z]+):?(.*)$')
  if kind == 'revoked' then return {kind, why} end
  return {kind or 'unknown'}
end
local doc = decode(raw)
drop(ARGV[1], doc)
if not doc then return {'unknown'} end
local answer = {'released'}
if tonumber(doc['expires']) <= now then
  answer = {'expired'}
else
  local why = revoked(doc)
  if why then answer = {'revoked', why} end
end
redis.call('set', record, table.concat(answer, ':'), 'PX', ARGV[3])
return answer
"""

# ARGV: 1 now, 2 lease id ('' when by proxy), 3 proxy ('' when by lease), 4 target ('' = the lease's),
# 5 outcome (ok|blocked|error), 6 blocked cooldown s, 7 errors in a row for a global one, 8 global cooldown s
# → {'unknown-lease'} | {'revoked', why} (the lease's proxy is gone or another instance: nothing recorded) |
#   {'unknown-proxy'} | {'no-target'} | {'ok', proxy, target} |
#   {'cooldown', proxy, target, scope, until} | {'counted', proxy, target, errors in a row}
_REPORT = _COMMON + """
local now = tonumber(ARGV[1])
local p, target = ARGV[3], ARGV[4]
if ARGV[2] ~= '' then
  local doc = decode(redis.call('hget', KEYS[1], ARGV[2]))
  if not doc or tonumber(doc['expires']) <= now then return {'unknown-lease'} end
  local why = revoked(doc, false)
  if why then return {'revoked', why} end
  p = doc['proxy']
  if target == '' then target = doc['target'] end
elseif redis.call('hexists', KEYS[4], p) == 0 then
  return {'unknown-proxy'}
end
if type(target) ~= 'string' or target == '' then return {'no-target'} end
redis.call('zremrangebyscore', KEYS[6], '-inf', now)
redis.call('zremrangebyscore', KEYS[7], '-inf', now)
local outcome = ARGV[5]
if outcome == 'ok' then
  redis.call('hdel', KEYS[8], p)
  return {'ok', p, target}
end
if outcome == 'blocked' then
  local d = tonumber(ARGV[6])
  if d <= 0 then return {'ok', p, target} end
  local till = now + d
  redis.call('zadd', KEYS[6], 'GT', till, p .. '|' .. target)
  return {'cooldown', p, target, 'target', tostring(till)}
end
local n = redis.call('hincrby', KEYS[8], p, 1)
if n >= tonumber(ARGV[7]) then
  redis.call('hdel', KEYS[8], p)
  local d = tonumber(ARGV[8])
  if d <= 0 then return {'counted', p, target, tostring(n)} end
  local till = now + d
  redis.call('zadd', KEYS[7], 'GT', till, p)
  return {'cooldown', p, target, 'global', tostring(till)}
end
return {'counted', p, target, tostring(n)}
"""

# ARGV: 1 now. Proxies Running join the load set; entries of proxies gone with no open lease leave it.
# → {joined, left}
_SYNC = _COMMON + """
local now = tonumber(ARGV[1])
sweep(now)
local joined, left = 0, 0
for _, p in ipairs(redis.call('hkeys', KEYS[4])) do
  joined = joined + redis.call('zadd', KEYS[3], 'NX', 0, p)
end
for _, p in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
  if redis.call('hexists', KEYS[4], p) == 0 then
    redis.call('zremrangebyscore', 'HELD_PREFIX' .. p, '-inf', now)
    if redis.call('zcard', 'HELD_PREFIX' .. p) == 0 then
      redis.call('zrem', KEYS[3], p)
      left = left + 1
    end
  end
end
return {joined, left}
"""


def _script(text: str) -> str:
    return (text.replace("HELD_PREFIX", HELD).replace("STICKY_PREFIX", STICKY).replace("RELEASED_PREFIX", RELEASED)
            .replace("EPOCH_KEY", EPOCH).replace("SWEEP_BATCH", str(SWEEP_BATCH)).replace("REFUSED_PREFIX", REFUSED)
            .replace("REFUSED_WINDOW", repr(REFUSED_WINDOW)).replace("REFUSED_MAX", str(REFUSED_MAX)))


LEASE_SCRIPT, RELEASE_SCRIPT, REPORT_SCRIPT, SYNC_SCRIPT, RENEW_SCRIPT, CHECK_SCRIPT = (
    _script(t) for t in (_LEASE, _RELEASE, _REPORT, _SYNC, _RENEW, _CHECK))
_KEYS7 = [DOCS, EXPIRY, LOAD, keys.PX_ENDPOINTS, keys.PROBE_VERDICTS, COOL_TARGET, COOL_GLOBAL]
_REPORT_KEYS = [*_KEYS7, ERRORS]
_KEYS7_B = [k.encode() for k in _KEYS7]  # the API's hot path: bytes, which redis-py sends as they are
_REPORT_KEYS_B = [k.encode() for k in _REPORT_KEYS]
HEADER = 4  # the guard's header in front of every lease, renew and check answer


@dataclass(frozen=True)
class GuardCall:
    """What one API process knows of the epoch: its id ('' before its first answer), the highest seq it saw,
    and the grace period it applies when a loss shows."""

    epoch: str = ""
    seq: int = 0
    grace: float = 3600.0

    def args(self, now: float, fresh: str = "") -> list[Any]:
        """`fresh`: the id of a new epoch if the script must write one (a lease's own random id will do)."""
        return [repr(now), self.epoch, self.seq, repr(self.grace), fresh or uuid.uuid4().hex]


@dataclass(frozen=True)
class Epoch:
    """The guard's header: the epoch's seq and id now, why a loss showed ('' none: vanished, changed,
    rolled-back) and the grace end in Redis (0 none)."""

    seq: int
    id: str
    lost: str
    grace_until: float


def _split(got: Sequence[Any]) -> tuple[Epoch, list[Any]]:
    seq, epoch, why, till = (_text(v) for v in got[:HEADER])
    return Epoch(int(seq), epoch, why, float(till)), list(got[HEADER:])


@dataclass(frozen=True)
class LeaseCall:
    """One lease request as the script takes it (validated by the caller)."""

    lease_id: str
    target: str
    expires: float
    max_per_proxy: int
    sticky: str = ""
    sticky_ttl: float = 3600.0
    provider: str = ""
    region: str = ""
    zone: str = ""
    ttl: float = 0.0  # the asked ttl (a renewal without one keeps it); 0: expires - now
    namespaces: tuple[str, ...] = ()  # only proxies in these namespaces (a gateway client's); () any
    skip: tuple[str, ...] = ()  # never these proxies (the gateway's retry after one failed)
    pool: str = ""  # only members of this ProxyPool (the endpoint's `pool`); "" any

    def args(self, now: float, rand: float) -> list[Any]:
        return [repr(now), self.lease_id, repr(self.expires), self.target, self.max_per_proxy, self.sticky,
                max(1, int(self.sticky_ttl * 1000)), self.provider, self.region, self.zone, repr(rand), SCAN_LIMIT,
                repr(self.ttl or self.expires - now), ",".join(self.namespaces), ",".join(self.skip), self.pool]


@dataclass(frozen=True)
class RenewCall:
    """One renewal as the script takes it: `proxy`, `target` (and `ip`, `port` when told) re-create a lease
    Redis lost while the grace is in force."""

    lease_id: str
    ttl: float | None  # None: the lease's own
    default_ttl: float
    max_per_proxy: int
    proxy: str = ""
    target: str = ""
    ip: str = ""
    port: int | None = None
    sticky_keep: float = 3600.0

    def args(self, now: float) -> list[Any]:
        return [repr(now), self.lease_id, "" if self.ttl is None else repr(self.ttl), repr(self.default_ttl),
                self.max_per_proxy, self.proxy, self.target, self.ip, "" if self.port is None else str(self.port),
                _ms(self.sticky_keep)]


@dataclass(frozen=True)
class Granted:
    proxy: str
    endpoint: bytes | str  # the endpoint document as stored (JSON)
    egress_ip: str = ""  # the prober's last egress address for this uid ("" unknown)


@dataclass(frozen=True)
class Busy:
    free_at: float  # the earliest time a matching proxy frees up


@dataclass(frozen=True)
class NoProxy:
    """No Running, healthy proxy matches at all."""


@dataclass(frozen=True)
class Grace:
    """Redis lost lease data: nothing new is leased until the guard's grace end."""


LeaseAnswer = Granted | Busy | NoProxy | Grace


@dataclass(frozen=True)
class Renewed:
    proxy: str
    endpoint: bytes | str
    egress_ip: str
    expires: float
    ttl: float
    recreated: bool  # Redis had lost it; re-created from what the client told


@dataclass(frozen=True)
class NotRenewed:
    kind: str  # revoked | expired | released | unknown | busy
    reason: str = ""  # revoked: gone, replaced, unhealthy


RenewAnswer = Renewed | NotRenewed


def renew_answer(got: Sequence[Any]) -> RenewAnswer:
    kind = _text(got[0])
    if kind == "ok":
        return Renewed(_text(got[1]), got[2], _text(got[3]), float(_text(got[4])), float(_text(got[5])),
                       _text(got[6]) == "recreated")
    return NotRenewed(kind, _text(got[1]) if len(got) > 1 else "")


def _text(v: Any) -> str:
    return keys.text(v) if isinstance(v, (bytes, str)) else str(v)


def lease_answer(got: Sequence[Any]) -> LeaseAnswer:
    kind = _text(got[0])
    if kind == "ok":
        return Granted(_text(got[1]), got[2], _text(got[3]) if len(got) > 3 else "")
    if kind == "busy":
        return Busy(float(_text(got[1])))
    if kind == "grace":
        return Grace()
    return NoProxy()


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def plain(got: Sequence[Any]) -> list[str]:
    """A script's answer as strings."""
    return [_text(v) for v in got]


@dataclass(frozen=True)
class ReportCall:
    outcome: str  # ok | blocked | error
    lease_id: str = ""
    proxy: str = ""
    target: str = ""

    def args(self, now: float, blocked: float, errors: int, global_: float) -> list[Any]:
        return [repr(now), self.lease_id, self.proxy, self.target, self.outcome, repr(blocked), errors, repr(global_)]


@dataclass(frozen=True)
class Snapshot:
    """What GET /v1/proxies and /metrics read: endpoints, verdicts, loads, global cooldowns."""

    endpoints: dict[str, bytes | str]
    verdicts: dict[str, bytes | str]
    loads: dict[str, int]
    cooling: dict[str, float]


def _snapshot(got: Sequence[Any]) -> Snapshot:
    endpoints, verdicts, loads, cooling = got
    return Snapshot({keys.text(k): v for k, v in endpoints.items()}, {keys.text(k): v for k, v in verdicts.items()},
                    {keys.text(k): int(float(s)) for k, s in loads}, {keys.text(k): float(s) for k, s in cooling})


class Leases:
    """The scripts on the synchronous client (`Store.leases`)."""

    def __init__(self, client: redis.Redis) -> None:
        self._redis = client
        self._lease = client.register_script(LEASE_SCRIPT)
        self._release = client.register_script(RELEASE_SCRIPT)
        self._report = client.register_script(REPORT_SCRIPT)
        self._sync = client.register_script(SYNC_SCRIPT)
        self._renew = client.register_script(RENEW_SCRIPT)
        self._check = client.register_script(CHECK_SCRIPT)

    def lease(self, call: LeaseCall, now: float, rand: float, guard: GuardCall = GuardCall()) -> LeaseAnswer:
        return self.lease_guarded(call, now, rand, guard)[0]

    def lease_guarded(self, call: LeaseCall, now: float, rand: float, guard: GuardCall) -> tuple[LeaseAnswer, Epoch]:
        epoch, rest = _split(self._lease(keys=_KEYS7, args=call.args(now, rand) + guard.args(now, call.lease_id)))
        return lease_answer(rest), epoch

    def renew(self, call: RenewCall, now: float, guard: GuardCall = GuardCall()) -> tuple[RenewAnswer, Epoch]:
        epoch, rest = _split(self._renew(keys=_KEYS7, args=call.args(now) + guard.args(now)))
        return renew_answer(rest), epoch

    def check(self, now: float, guard: GuardCall) -> Epoch:
        return _split(self._check(keys=_KEYS7, args=guard.args(now)))[0]

    def release(self, lease_id: str, now: float, keep: float = RELEASE_KEEP) -> list[str]:
        return plain(self._release(keys=_KEYS7, args=[lease_id, repr(now), _ms(keep)]))

    def report(self, call: ReportCall, now: float, blocked: float, errors: int, global_: float) -> list[str]:
        return plain(self._report(keys=_REPORT_KEYS, args=call.args(now, blocked, errors, global_)))

    def sync(self, now: float) -> tuple[int, int]:
        got: Any = self._sync(keys=_KEYS7, args=[repr(now)])
        return int(got[0]), int(got[1])

    def active(self, now: float) -> int:
        return int(self._redis.zcount(EXPIRY, f"({now!r}", "+inf"))

    def lease_doc(self, lease_id: str) -> bytes | str | None:
        got: Any = self._redis.hget(DOCS, lease_id)
        return got  # type: ignore[no-any-return]

    def loads(self) -> dict[str, int]:
        got: Any = self._redis.zrange(LOAD, 0, -1, withscores=True)
        return {keys.text(k): int(float(s)) for k, s in got}

    def held(self, proxy: str, now: float) -> int:
        return int(self._redis.zcount(HELD + proxy, f"({now!r}", "+inf"))

    def usage(self, now: float) -> tuple[dict[str, int], dict[str, int]]:
        """(open leases, active cooldowns) by proxy key at `now`, in one round trip (the pool
        controller's scale-down order): the load set, and the target and global cooldowns in force."""
        low = f"({now!r}"
        pipe = self._redis.pipeline(transaction=False)
        pipe.zrange(LOAD, 0, -1, withscores=True)
        pipe.zrangebyscore(COOL_TARGET, low, "+inf")
        pipe.zrangebyscore(COOL_GLOBAL, low, "+inf")
        loads, targets, globals_ = pipe.execute()
        cooling: dict[str, int] = {}
        for raw in [*(keys.text(t).rsplit("|", 1)[0] for t in targets), *(keys.text(g) for g in globals_)]:
            cooling[raw] = cooling.get(raw, 0) + 1
        return {keys.text(k): max(0, int(float(s))) for k, s in loads}, cooling

    def refused(self, pool: str, now: float, window: float) -> int:
        """Lease requests naming `pool` refused in the last `window` seconds (at most REFUSED_WINDOW)."""
        return int(self._redis.zcount(REFUSED + pool, repr(now - min(window, REFUSED_WINDOW)), "+inf"))

    def dump(self) -> dict[str, Any]:
        """Every lease key and its value (tests: 'nothing in Redis changed')."""
        out: dict[str, Any] = {}
        for key in self._redis.scan_iter(match=PREFIX + "*"):
            name = keys.text(key)
            kind = keys.text(self._redis.type(name))
            if kind == "hash":
                out[name] = self._redis.hgetall(name)
            elif kind == "zset":
                out[name] = self._redis.zrange(name, 0, -1, withscores=True)
            else:
                out[name] = self._redis.get(name)
        return out


def online_replicas(info: dict[str, Any]) -> int:
    """The replicas of INFO replication that stream (state online): one still in its first sync
    (wait_bgsave, send_bulk) would make every WAIT run to its timeout."""
    if info.get("role") != "master":
        return 0
    return sum(1 for k, v in info.items() if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online")


class AsyncLeases:
    """The same scripts on a `redis.asyncio` client (the API's event loop)."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._redis = client
        self._lease = client.register_script(LEASE_SCRIPT)
        self._release = client.register_script(RELEASE_SCRIPT)
        self._report = client.register_script(REPORT_SCRIPT)
        self._sync = client.register_script(SYNC_SCRIPT)
        self._renew = client.register_script(RENEW_SCRIPT)
        self._check = client.register_script(CHECK_SCRIPT)

    @classmethod
    def from_url(cls, url: str, timeout: float = 5, connect_timeout: float = 5, max_connections: int = 128) -> AsyncLeases:
        """A bounded pool that waits (up to `timeout`) for a free connection: redis.asyncio's
        default pool fails at once past 100 connections (MaxConnectionsError, a 503 under
        a burst of clients), and every request holds one only for its script's round trip."""
        from fleet.store import target

        return cls(target.async_client(url, max_connections, timeout, socket_timeout=timeout,
                                       socket_connect_timeout=connect_timeout, health_check_interval=30))

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._redis.aclose(close_connection_pool=True)  # its own pool (from_url): nobody else's

    async def ping(self) -> bool:
        return bool(await self._redis.ping())

    async def _eval(self, script: Any, keys_: list[bytes], args: list[Any]) -> Any:
        """EVALSHA of a registered script (SCRIPT LOAD and again when Redis does not know it: a restart)."""
        try:
            return await self._redis.evalsha(script.sha, len(keys_), *keys_, *args)
        except NoScriptError:
            script.sha = await self._redis.script_load(script.script)
            return await self._redis.evalsha(script.sha, len(keys_), *keys_, *args)

    async def _waited(self, script: Any, args: list[Any], wait_ms: int) -> tuple[Any, int | None]:
        """The script's answer, and with `wait_ms` > 0 how many replicas had it within that time (Redis
        WAIT on the same connection, in one round trip: EVALSHA and WAIT written together, without the
        SCRIPT EXISTS redis-py's pipelines send first for a registered script); None when not waited."""
        if wait_ms <= 0:
            return await self._eval(script, _KEYS7_B, args), None
        for attempt in (1, 2):
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.evalsha(script.sha, len(_KEYS7_B), *_KEYS7_B, *args)
                pipe.execute_command("WAIT", 1, wait_ms)
                try:
                    got, acked = await pipe.execute()
                except NoScriptError:
                    if attempt == 2:
                        raise
                    script.sha = await self._redis.script_load(script.script)
                    continue
            return got, int(acked)
        raise AssertionError("unreachable")

    async def lease(self, call: LeaseCall, now: float, rand: float, guard: GuardCall = GuardCall(),
                    wait_ms: int = 0) -> tuple[LeaseAnswer, Epoch, int | None]:
        got, acked = await self._waited(self._lease, call.args(now, rand) + guard.args(now, call.lease_id), wait_ms)
        epoch, rest = _split(got)
        return lease_answer(rest), epoch, acked

    async def renew(self, call: RenewCall, now: float, guard: GuardCall = GuardCall(),
                    wait_ms: int = 0) -> tuple[RenewAnswer, Epoch, int | None]:
        got, acked = await self._waited(self._renew, call.args(now) + guard.args(now), wait_ms)
        epoch, rest = _split(got)
        return renew_answer(rest), epoch, acked

    async def check(self, now: float, guard: GuardCall) -> Epoch:
        return _split(await self._check(keys=_KEYS7, args=guard.args(now)))[0]

    async def replicas(self) -> int:
        """Replicas online on the master now (INFO replication); 0 when Redis cannot say."""
        try:
            info: Any = await self._redis.info("replication")
        except redis.ResponseError:  # a server (or a fake) without INFO
            return 0
        return online_replicas(info)

    async def release(self, lease_id: str, now: float, keep: float = RELEASE_KEEP) -> list[str]:
        return plain(await self._eval(self._release, _KEYS7_B, [lease_id, repr(now), _ms(keep)]))

    async def report(self, call: ReportCall, now: float, blocked: float, errors: int, global_: float) -> list[str]:
        return plain(await self._eval(self._report, _REPORT_KEYS_B, call.args(now, blocked, errors, global_)))

    async def sync(self, now: float) -> tuple[int, int]:
        got: Any = await self._sync(keys=_KEYS7, args=[repr(now)])
        return int(got[0]), int(got[1])

    async def snapshot(self) -> Snapshot:
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.PX_ENDPOINTS)
            pipe.hgetall(keys.PROBE_VERDICTS)
            pipe.zrange(LOAD, 0, -1, withscores=True)
            pipe.zrange(COOL_GLOBAL, 0, -1, withscores=True)
            got = await pipe.execute()
        return _snapshot(got)

    async def gauges(self, now: float) -> tuple[int, int, int]:
        """(open leases, target-scoped cooldowns, global cooldowns) at `now`."""
        low = f"({now!r}"
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.zcount(EXPIRY, low, "+inf")
            pipe.zcount(COOL_TARGET, low, "+inf")
            pipe.zcount(COOL_GLOBAL, low, "+inf")
            got = await pipe.execute()
        return int(got[0]), int(got[1]), int(got[2])
