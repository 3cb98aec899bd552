-- Lease: the least loaded leasable proxy for a target, or when one frees up.
-- → header + {'ok', proxy, endpoint JSON, egress IP ('' unknown), why the session was retired ('' not)}
--   | {'busy', earliest time one frees up} | {'none'}
--   | {'grace'} (Redis lost lease data: nothing new until the header's grace end)
-- ARGV, in the order of leases.ARGV['lease'] (tests/fleet/test_store_lua.py holds the two together):
local now = tonumber(ARGV[1])
local lease_id = ARGV[2]
local expires = ARGV[3]
local target = ARGV[4]
local max_per_proxy = tonumber(ARGV[5])
local sticky = ARGV[6]  -- '' none
local sticky_ms = ARGV[7]  -- the sticky binding's TTL
local provider = ARGV[8]  -- '' any, as region, zone and pool
local region = ARGV[9]
local zone = ARGV[10]
local rand = tonumber(ARGV[11])  -- in [0, 1): where a scan of equal loads starts
local scan_limit = tonumber(ARGV[12])  -- proxies examined at most
local ttl = tonumber(ARGV[13])
local namespaces = ARGV[14]  -- comma-separated; '' any
local skip = ARGV[15]  -- proxies never leased (comma-separated keys; the gateway's retries): '' none
local pool = ARGV[16]  -- a ProxyPool's name: the endpoint's `pool`
-- > 0: the session's leases on its proxy are one holder, at most this many at once; 0: each lease holds alone
local session_connections = tonumber(ARGV[17])
local keep_sticky = ARGV[18]  -- '1': a grant elsewhere leaves the session bound (the gateway's retry after a timeout)
-- The session's life (a gateway session's; leases.Life): retired after this many leases (0: never), this age
-- (s), this error score
local life_uses = tonumber(ARGV[19])
local life_age = tonumber(ARGV[20])
local life_score = tonumber(ARGV[21])
local guard_now = ARGV[22]  -- the guard's five (common.lua: guard)
local epoch = ARGV[23]
local seq = ARGV[24]
local grace = ARGV[25]
local fresh = ARGV[26]

return guarded(true, {now = guard_now, epoch = epoch, seq = seq, grace = grace, fresh = fresh}, function(hdr)
if tonumber(hdr[4]) > now then return {'grace'} end
local spaces, skipped = nil, {}
if namespaces ~= '' then
  spaces = {}
  for ns in string.gmatch(namespaces, '[^,]+') do spaces[ns] = true end
end
for p in string.gmatch(skip, '[^,]+') do skipped[p] = true end
sweep(now)

-- The session's life: past a limit it is retired here, before anything is chosen: its binding marked '!P' (as a
-- ban report does: the next grant, this one, moves it off P) and its life counted anew.
local retired = ''
local life = nil
if sticky ~= '' and life_uses > 0 then
  life = LIFE_PREFIX .. sticky
  local l = redis.call('hmget', life, 'born', 'uses', 'score')
  local born = tonumber(l[1])
  if born then
    if tonumber(l[2] or '0') >= life_uses then retired = 'uses'
    elseif now - born >= life_age then retired = 'age'
    elseif tonumber(l[3] or '0') >= life_score then retired = 'errors' end
  end
  if retired ~= '' then
    local bound = redis.call('get', STICKY_PREFIX .. sticky)
    if bound and string.sub(bound, 1, 1) ~= '!' then
      redis.call('set', STICKY_PREFIX .. sticky, '!' .. bound, 'PX', sticky_ms)
    end
  end
  if retired ~= '' or not born then redis.call('hset', life, 'born', tostring(now), 'uses', 0, 'score', 0) end
end

-- The endpoint document and raw JSON when p can be leased for target (load aside);
-- else nil, why ('gone', 'filtered', 'unhealthy', 'cooling'), until when it cools.
-- `checked`: the verdict it read of p (grant(p) follows check(p) and answers the egress IP from it).
local checked = nil
local function check(p)
  if skipped[p] or (spaces and not spaces[string.match(p, '^([^/]*)/') or '']) then return nil, nil, 'filtered' end
  local raw = redis.call('hget', KEYS[4], p)
  local ep = decode(raw)
  if not ep then return nil, nil, 'gone' end
  if (provider ~= '' and ep['provider'] ~= provider) or (region ~= '' and ep['region'] ~= region)
     or (zone ~= '' and ep['zone'] ~= zone) or (pool ~= '' and ep['pool'] ~= pool) then
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

-- The session's holder on p (its leases there, one holder of p's capacity), or nil: no session, or each
-- lease a holder (session_connections 0).
local function holder_of(p)
  if sticky == '' or session_connections <= 0 then return nil end
  return SESSION_PREFIX .. p .. '|' .. sticky
end

local function grant(p, ep, raw)
  local holder = holder_of(p)
  local doc = cjson.encode({proxy = p, uid = ep['uid'], instance = named(ep['instance']) and ep['instance'] or nil,
                            ip = ep['ip'], port = ep['port'], target = target, sticky = sticky, holder = holder,
                            expires = tonumber(expires), granted = now, ttl = ttl})
  redis.call('hset', KEYS[1], lease_id, doc)
  redis.call('zadd', KEYS[2], expires, lease_id)
  redis.call('zadd', HELD_PREFIX .. p, expires, lease_id)
  local first = true
  if holder then
    redis.call('zadd', holder, expires, lease_id)
    first = redis.call('zcard', holder) == 1
  end
  if first then redis.call('zincrby', KEYS[3], 1, p) end
  if sticky ~= '' and not (keep_sticky == '1' and redis.call('exists', STICKY_PREFIX .. sticky) == 1) then
    redis.call('set', STICKY_PREFIX .. sticky, p, 'PX', sticky_ms)
  end
  if life then
    redis.call('hincrby', life, 'uses', 1)
    redis.call('pexpire', life, sticky_ms)
    redis.call('zadd', SESSIONS_KEY, now + tonumber(sticky_ms) / 1000, sticky)
    redis.call('zremrangebyscore', SESSIONS_KEY, '-inf', now)
  end
  local v = checked
  local egress = ''
  if v and v['uid'] == ep['uid'] and named(v['egressIP']) then egress = v['egressIP'] end
  return {'ok', p, raw, egress, retired}
end

local examined = 0
local full = nil  -- the session's own proxy, at session_connections: when its earliest lease ends
local left = nil  -- the proxy a ban report moved the session off ('!proxy'): skipped while another is free
local function attempt()
  if sticky ~= '' then
    local bound = redis.call('get', STICKY_PREFIX .. sticky)
    if bound and string.sub(bound, 1, 1) == '!' then
      if left == nil and not skipped[string.sub(bound, 2)] then
        left = string.sub(bound, 2)
        skipped[left] = true
      end
      bound = nil
    end
    if bound then
      local ep, raw = check(bound)
      local holder = holder_of(bound)
      if ep and holder and redis.call('zcard', holder) > 0 then
        -- the session holds its proxy already: another of its connections joins it, never moves it
        if redis.call('zcard', holder) < session_connections then return grant(bound, ep, raw) end
        full = tonumber(redis.call('zrange', holder, 0, 0, 'WITHSCORES')[2])
        return nil
      end
      if ep and tonumber(redis.call('zscore', KEYS[3], bound) or '0') < max_per_proxy then return grant(bound, ep, raw) end
    end
  end
  -- Groups of equal load, least loaded first; within a group from a random place, wrapping.
  local first = redis.call('zrangebyscore', KEYS[3], '-inf', '(' .. max_per_proxy, 'WITHSCORES', 'LIMIT', 0, 1)
  local s = first[2]
  while s and examined < scan_limit do
    local count = redis.call('zcount', KEYS[3], s, s)
    local start = math.floor(rand * count)
    for _, range in ipairs({{start, count}, {0, start}}) do
      local off = range[1]
      local step = 4  -- the first proxies examined are almost always free: a small first batch, then 32
      while off < range[2] and examined < scan_limit do
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
    local nxt = redis.call('zrangebyscore', KEYS[3], '(' .. s, '(' .. max_per_proxy, 'WITHSCORES', 'LIMIT', 0, 1)
    s = nxt[2]
  end
  return nil
end

-- Proxies Running but not yet in the load set (new since the last sync) join it: how many did.
local function join()
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
  return added
end

-- More Running proxies than entries (two O(1) counts): a new one joins before the scan, so it takes its share
-- at once rather than only when every other is busy (a gateway's crawler asking one at a time never makes them so).
if redis.call('hlen', KEYS[4]) > redis.call('zcard', KEYS[3]) then join() end
local got = attempt()
if got then return got end
if full then return {'busy', tostring(full)} end
-- Nothing free. A new proxy the counts hid (entries of gone proxies still held, until the sync drops them) joins
-- now, and the scan runs once more.
if join() > 0 then
  got = attempt()
  if got then return got end
end
if left then  -- nothing else is free: the proxy the session left (not for the host that banned it: cooling)
  skipped[left] = nil
  got = attempt()
  if got then return got end
end
-- When will one be free: the earliest cooldown end of a matching proxy with room, or the
-- earliest expiry (after its cooldown) of a matching full one.
local free_at = nil
local function note(t) if free_at == nil or t < free_at then free_at = t end end
local seen = 0
local all = redis.call('zrange', KEYS[3], 0, scan_limit - 1, 'WITHSCORES')
for i = 1, #all, 2 do
  local p, load = all[i], tonumber(all[i + 1])
  local ep, _, why, till = check(p)
  if ep or why == 'cooling' then
    local at = till or now
    if load >= max_per_proxy then
      local held = redis.call('zrange', HELD_PREFIX .. p, 0, load - max_per_proxy, 'WITHSCORES')
      local exp = tonumber(held[#held] or now)
      if exp > at then at = exp end
    end
    note(at)
    seen = seen + 1
  end
end
-- A request naming a pool that is refused is that pool's demand (fleet.pools reads it).
if pool ~= '' then
  local key = REFUSED_PREFIX .. pool
  redis.call('zadd', key, now, lease_id)
  redis.call('zremrangebyscore', key, '-inf', now - REFUSED_WINDOW)
  redis.call('zremrangebyrank', key, 0, -REFUSED_MAX - 1)
  redis.call('pexpire', key, math.floor(REFUSED_WINDOW * 1000))
end
if seen > 0 then return {'busy', tostring(free_at)} end
return {'none'}
end)
