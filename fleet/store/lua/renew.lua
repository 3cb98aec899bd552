-- Renew: a lease's new expiry; while the guard's grace is in force, a lease Redis lost is re-created from what
-- the client tells (its proxy and target, and ip and port when told), if its proxy still is that one.
-- → header + {'ok', proxy, endpoint JSON, egress IP, expires, ttl, 'renewed' | 'recreated'} | {'revoked', why} |
--   {'expired'} | {'released'} (the release record's answer) | {'unknown'} | {'busy'} (re-creation at capacity)
-- ARGV, in the order of leases.ARGV['renew'] (tests/fleet/test_store_lua.py holds the two together):
local now = tonumber(ARGV[1])
local lease_id = ARGV[2]
local asked_ttl = ARGV[3]  -- '' the lease's own
local default_ttl = ARGV[4]
local max_per_proxy = tonumber(ARGV[5])
local proxy = ARGV[6]  -- proxy, target, ip, port: '' each when not told; re-creation needs proxy and target
local target = ARGV[7]
local ip = ARGV[8]
local port = ARGV[9]
local sticky_keep_ms = tonumber(ARGV[10])  -- how long a sticky binding outlives the lease
local guard_now = ARGV[11]  -- the guard's five (common.lua: guard)
local epoch = ARGV[12]
local seq = ARGV[13]
local grace = ARGV[14]
local fresh = ARGV[15]

return guarded(true, {now = guard_now, epoch = epoch, seq = seq, grace = grace, fresh = fresh}, function(hdr)
-- `seen`: the endpoint and verdict of doc's proxy as read just before (by revoked, or the re-creation)
local function answer(doc, how)
  local p = doc['proxy']
  local raw, ep, v = seen.raw, seen.ep or {}, seen.v
  local egress = ''
  if v and v['uid'] == ep['uid'] and named(v['egressIP']) then egress = v['egressIP'] end
  return {'ok', p, raw, egress, tostring(doc['expires']), tostring(doc['ttl']), how}
end
local function store(doc)
  redis.call('hset', KEYS[1], lease_id, cjson.encode(doc))
  redis.call('zadd', KEYS[2], doc['expires'], lease_id)
  redis.call('zadd', HELD_PREFIX .. doc['proxy'], doc['expires'], lease_id)
  if named(doc['sticky']) then  -- kept alive, unless the session moved since (to another proxy, or off this one)
    local key = STICKY_PREFIX .. doc['sticky']
    local bound = redis.call('get', key)
    if not bound or bound == doc['proxy'] then
      redis.call('set', key, doc['proxy'], 'PX', math.floor(doc['ttl'] * 1000) + sticky_keep_ms)
    end
  end
end
local doc = decode(redis.call('hget', KEYS[1], lease_id))
if doc then
  if tonumber(doc['expires']) <= now then return {'expired'} end
  local why = revoked(doc)
  if why then return {'revoked', why} end
  local ttl = tonumber(asked_ttl) or tonumber(doc['ttl']) or tonumber(default_ttl)
  doc['ttl'] = ttl
  doc['expires'] = now + ttl
  store(doc)
  return answer(doc, 'renewed')
end
local done = redis.call('get', RELEASED_PREFIX .. lease_id)
if done then
  local kind, why = string.match(done, '^([a-z]+):?(.*)$')
  if kind == 'revoked' then return {kind, why} end
  return {kind or 'unknown'}
end
if tonumber(hdr[4]) <= now or proxy == '' or target == '' then return {'unknown'} end
-- Redis lost it (the grace is in force): re-create it from what the client says, if its proxy still is that one.
local p = proxy
local raw = redis.call('hget', KEYS[4], p)
local ep = decode(raw)
if not ep then return {'revoked', 'gone'} end
if (ip ~= '' and ep['ip'] ~= ip) or (port ~= '' and tostring(ep['port']) ~= port) then
  return {'revoked', 'replaced'}
end
local v = decode(redis.call('hget', KEYS[5], p))
if v and v['uid'] == ep['uid'] and v['healthy'] == false then return {'revoked', 'unhealthy'} end
seen = {raw = raw, ep = ep, v = v}
sweep(now)
if tonumber(redis.call('zscore', KEYS[3], p) or '0') >= max_per_proxy then return {'busy'} end
local ttl = tonumber(asked_ttl) or tonumber(default_ttl)
doc = {proxy = p, uid = ep['uid'], instance = named(ep['instance']) and ep['instance'] or nil, ip = ep['ip'],
       port = ep['port'], target = target, sticky = '', expires = now + ttl, granted = now, ttl = ttl}
store(doc)
redis.call('zincrby', KEYS[3], 1, p)
return answer(doc, 'recreated')
end)
