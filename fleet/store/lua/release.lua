-- Release: the lease is dropped, its answer kept for a repeated release (a client's retry).
-- → {'released'} | {'revoked', why} | {'expired'} | {'unknown'}: the first release's answer again while kept
-- ARGV, in the order of leases.ARGV['release'] (tests/fleet/test_store_lua.py holds the two together):
local lease_id = ARGV[1]
local now = tonumber(ARGV[2])
local keep_ms = ARGV[3]  -- how long the answer is kept

local record = RELEASED_PREFIX .. lease_id
local raw = redis.call('hget', KEYS[1], lease_id)
if not raw then
  local done = redis.call('get', record)
  if not done then return {'unknown'} end
  local kind, why = string.match(done, '^([a-z]+):?(.*)$')
  if kind == 'revoked' then return {kind, why} end
  return {kind or 'unknown'}
end
local doc = decode(raw)
drop(lease_id, doc)
if not doc then return {'unknown'} end
local answer = {'released'}
if tonumber(doc['expires']) <= now then
  answer = {'expired'}
else
  local why = revoked(doc)
  if why then answer = {'revoked', why} end
end
redis.call('set', record, table.concat(answer, ':'), 'PX', keep_ms)
return answer
