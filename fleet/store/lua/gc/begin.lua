-- A GC sweep begins, unless one is in progress. KEYS: the lock.
-- Returns {'busy'} or {'ok', the providers the replaced sweep never heard from...}.
-- ARGV, in the order of gc.ARGV['begin'] (tests/fleet/test_store_lua.py holds the two together):
local id = ARGV[1]
local now = ARGV[2]
local deadline_at = ARGV[3]
local ttl_ms = ARGV[4]
local providers = {unpack(ARGV, 5)}  -- every provider sent a list, pending

local deadline = redis.call('hget', KEYS[1], 'deadline')
local unanswered = {}
if deadline then
  local all = redis.call('hgetall', KEYS[1])
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'p:' and all[i + 1] == 'pending' then
      table.insert(unanswered, string.sub(all[i], 3))
    end
  end
  if #unanswered > 0 and tonumber(deadline) > tonumber(now) then return {'busy'} end
end
redis.call('del', KEYS[1])
redis.call('hset', KEYS[1], 'id', id, 'started', now, 'deadline', deadline_at)
for _, p in ipairs(providers) do redis.call('hset', KEYS[1], 'p:' .. p, 'pending') end
redis.call('pexpire', KEYS[1], ttl_ms)
local out = {'ok'}
for _, p in ipairs(unanswered) do table.insert(out, p) end
return out
