-- Drop the lock if the owner holds it (compare-and-delete). KEYS: the lock. Returns 1 when dropped.
-- ARGV, in the order of lock.ARGV['release'] (tests/fleet/test_store_lua.py holds the two together):
local owner = ARGV[1]

if redis.call('get', KEYS[1]) == owner then
  return redis.call('del', KEYS[1])
end
return 0
