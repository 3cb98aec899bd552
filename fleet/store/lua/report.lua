-- Report: a client's outcome through a proxy (by its lease, or by proxy and target): a cooldown, or an error counted.
-- KEYS[8]: errors.
-- → {'unknown-lease'} | {'revoked', why} (the lease's proxy is gone or another instance: nothing recorded) |
--   {'unknown-proxy'} | {'no-target'} | {'ok', proxy, target} |
--   {'cooldown', proxy, target, scope, until} | {'counted', proxy, target, errors in a row}
-- With a session (`sticky`) that has a life (LIFE_PREFIX): an error adds 1 to its error score, an ok takes
-- `life_decrement` off it, and a 'blocked' of its own proxy retires it (its life counted anew; the answer's
-- 'cooldown' or 'ok' then ends with 'ban').
-- ARGV, in the order of leases.ARGV['report'] (tests/fleet/test_store_lua.py holds the two together):
local now = tonumber(ARGV[1])
local lease_id = ARGV[2]  -- '' when by proxy
local proxy = ARGV[3]  -- '' when by lease
local target = ARGV[4]  -- '' the lease's
local outcome = ARGV[5]  -- ok | blocked | error
local blocked_s = tonumber(ARGV[6])  -- the target-scoped cooldown of a 'blocked'
local errors_max = tonumber(ARGV[7])  -- errors in a row that start a global cooldown
local global_s = tonumber(ARGV[8])  -- the global cooldown
local sticky = ARGV[9]  -- a session's key ('' none): its proxy when none is named; a 'blocked' unbinds it from it
local life_decrement = tonumber(ARGV[10])
local life = nil
if sticky ~= '' and redis.call('exists', LIFE_PREFIX .. sticky) == 1 then life = LIFE_PREFIX .. sticky end

local p = proxy
if lease_id ~= '' then
  local doc = decode(redis.call('hget', KEYS[1], lease_id))
  if not doc or tonumber(doc['expires']) <= now then return {'unknown-lease'} end
  local why = revoked(doc, false)
  if why then return {'revoked', why} end
  p = doc['proxy']
  if target == '' then target = doc['target'] end
else
  if p == '' and sticky ~= '' then p = redis.call('get', STICKY_PREFIX .. sticky) or '' end
  if p == '' or redis.call('hexists', KEYS[4], p) == 0 then return {'unknown-proxy'} end
end
if type(target) ~= 'string' or target == '' then return {'no-target'} end
redis.call('zremrangebyscore', KEYS[6], '-inf', now)
redis.call('zremrangebyscore', KEYS[7], '-inf', now)
if outcome == 'ok' then
  redis.call('hdel', KEYS[8], p)
  if life then
    local score = tonumber(redis.call('hget', life, 'score') or '0')
    if score > 0 then redis.call('hset', life, 'score', tostring(math.max(0, score - life_decrement))) end
  end
  return {'ok', p, target}
end
if outcome == 'blocked' then
  -- the session's next connection takes another proxy ('!' marks the one it left; its open ones keep theirs)
  local key = STICKY_PREFIX .. sticky
  local retired = ''
  if sticky ~= '' and redis.call('get', key) == p then
    redis.call('set', key, '!' .. p, 'PX', math.max(1, redis.call('pttl', key)))
    if life then
      redis.call('hset', life, 'born', tostring(now), 'uses', 0, 'score', 0)
      retired = 'ban'
    end
  end
  local d = blocked_s
  local answer = {'ok', p, target}
  if d > 0 then
    local till = now + d
    redis.call('zadd', KEYS[6], 'GT', till, p .. '|' .. target)
    answer = {'cooldown', p, target, 'target', tostring(till)}
  end
  if retired ~= '' then answer[#answer + 1] = retired end
  return answer
end
if life then redis.call('hincrbyfloat', life, 'score', 1) end
local n = redis.call('hincrby', KEYS[8], p, 1)
if n >= errors_max then
  redis.call('hdel', KEYS[8], p)
  local d = global_s
  if d <= 0 then return {'counted', p, target, tostring(n)} end
  local till = now + d
  redis.call('zadd', KEYS[7], 'GT', till, p)
  return {'cooldown', p, target, 'global', tostring(till)}
end
return {'counted', p, target, tostring(n)}
