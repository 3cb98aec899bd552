-- A sweep's deadline passed. KEYS: the lock.
-- Returns the providers still pending (now 'no-answer'), each once.
-- ARGV, in the order of gc.ARGV['lapse'] (tests/fleet/test_store_lua.py holds the two together):
local id = ARGV[1]
local now = tonumber(ARGV[2])

if redis.call('hget', KEYS[1], 'id') ~= id then return {} end
local deadline = redis.call('hget', KEYS[1], 'deadline')
if not deadline or tonumber(deadline) > now then return {} end
local out = {}
local all = redis.call('hgetall', KEYS[1])
for i = 1, #all, 2 do
  if string.sub(all[i], 1, 2) == 'p:' and all[i + 1] == 'pending' then
    redis.call('hset', KEYS[1], all[i], 'no-answer')
    table.insert(out, string.sub(all[i], 3))
  end
end
return out
