-- The lease scripts' shared functions: fleet.store.leases loads this once and puts it in front of
-- each script (lease, renew, check, release, report, sync), after the constants it declares
-- (HELD_PREFIX, SESSION_PREFIX, STICKY_PREFIX, LIFE_PREFIX, SESSIONS_KEY, RELEASED_PREFIX, EPOCH_KEY, REFUSED_PREFIX, SWEEP_BATCH, REFUSED_WINDOW,
-- REFUSED_MAX: `CONSTANTS` there). KEYS[1..7] = docs, expiry, load, endpoints, verdicts, cool:target,
-- cool:global in every script (report adds KEYS[8], errors). These functions read no ARGV: each script
-- names its own ARGV at its top, in the order of leases.ARGV.
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
    redis.call('zrem', HELD_PREFIX .. doc['proxy'], id)
    -- a session's lease leaves its holder; the holder leaves the load with the session's last lease
    if type(doc['holder']) == 'string' then
      redis.call('zrem', doc['holder'], id)
      if redis.call('zcard', doc['holder']) > 0 then return end
    end
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
-- The epoch guard. `g` (the ARGV strings): now, epoch (the id this process saw; '' at its first call), seq
-- (the highest it saw), grace (the period, s) and fresh (the new epoch's id when there is none).
-- `bump`: a lease or renew. → {seq, epoch id, why a loss shows ('' none; vanished, changed, rolled-back), grace end}
local function guard(bump, g)
  local now, want, last, grace = tonumber(g.now), g.epoch, tonumber(g.seq), tonumber(g.grace)
  local e = redis.call('hmget', EPOCH_KEY, 'id', 'seq', 'grace')
  local id, seq, till = e[1], tonumber(e[2] or '0'), tonumber(e[3] or '0')
  local why = ''
  if not id then
    id = g.fresh
    seq = bump and 1 or 0
    redis.call('hset', EPOCH_KEY, 'id', id, 'created', g.now, 'seq', tostring(seq))
    if want ~= '' then why = 'vanished' end
  else
    if want ~= '' and id ~= want then why = 'changed' end
    if bump then seq = redis.call('hincrby', EPOCH_KEY, 'seq', 1) end
  end
  if why == '' and want ~= '' and (seq < last or (bump and seq == last)) then why = 'rolled-back' end
  if why ~= '' and till < now + grace then
    till = now + grace
    redis.call('hset', EPOCH_KEY, 'grace', tostring(till))
  end
  return {tostring(seq), id, why, tostring(till)}
end
-- The guard's header, then the answer of main(header).
local function guarded(bump, g, main)
  local hdr = guard(bump, g)
  local out = main(hdr)
  for _, v in ipairs(out) do hdr[#hdr + 1] = v end
  return hdr
end
