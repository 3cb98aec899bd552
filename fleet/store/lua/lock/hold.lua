-- Take the lock if it is free, extend it if the owner holds it. KEYS: the lock.
-- Returns 1 when the owner holds the lock afterwards (taken or extended), else 0.
-- ARGV, in the order of lock.ARGV['hold'] (tests/fleet/test_store_lua.py holds the two together):
local owner = ARGV[1]
local ttl_ms = ARGV[2]

local v = redis.call('get', KEYS[1])
if v == owner then
  redis.call('pexpire', KEYS[1], ttl_ms)
  return 1
end
if not v then
  redis.call('set', KEYS[1], owner, 'PX', ttl_ms)
  return 1
end
return 0
