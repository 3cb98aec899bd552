-- A provider call begins. KEYS: call, slots, waiters, cloud-init.
-- Returns 'busy' (a call in flight for this Proxy), 'full:<place>' (the provider's
-- slots are taken: the Proxy waits in line, 0 first, and the next freed slot makes
-- the first due) or 'ok' (recorded, and a create's cloud-init staged for the
-- call's TTL: the caller sends the message now).
-- ARGV, in the order of proxies.ARGV['begin'] (tests/fleet/test_store_lua.py holds the two together):
local key = ARGV[1]
local doc = ARGV[2]
local call_ms = ARGV[3]  -- the call's TTL
local slot_limit = ARGV[4]
local now = ARGV[5]
local slot_expires = ARGV[6]
local stage_cloud_init = ARGV[7]  -- '1' to stage a create's cloud-init
local cloud_init = ARGV[8]  -- its text
local cloud_init_ms = ARGV[9]  -- its TTL

if redis.call('exists', KEYS[1]) == 1 then return 'busy' end
redis.call('zremrangebyscore', KEYS[2], '-inf', now)
if redis.call('zscore', KEYS[2], key) == false and redis.call('zcard', KEYS[2]) >= tonumber(slot_limit) then
  redis.call('zadd', KEYS[3], 'NX', now, key)
  return 'full:' .. redis.call('zrank', KEYS[3], key)
end
redis.call('zrem', KEYS[3], key)
redis.call('zadd', KEYS[2], slot_expires, key)
redis.call('set', KEYS[1], doc, 'PX', call_ms)
if stage_cloud_init == '1' then redis.call('set', KEYS[4], cloud_init, 'PX', cloud_init_ms) end
return 'ok'
