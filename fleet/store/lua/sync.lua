-- Sync: proxies Running join the load set; entries of proxies gone with no open lease leave it. → {joined, left}
-- ARGV, in the order of leases.ARGV['sync'] (tests/fleet/test_store_lua.py holds the two together):
local now = tonumber(ARGV[1])

sweep(now)
local joined, left = 0, 0
for _, p in ipairs(redis.call('hkeys', KEYS[4])) do
  joined = joined + redis.call('zadd', KEYS[3], 'NX', 0, p)
end
for _, p in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
  if redis.call('hexists', KEYS[4], p) == 0 then
    redis.call('zremrangebyscore', HELD_PREFIX .. p, '-inf', now)
    if redis.call('zcard', HELD_PREFIX .. p) == 0 then
      redis.call('zrem', KEYS[3], p)
      left = left + 1
    end
  end
end
return {joined, left}
