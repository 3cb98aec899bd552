-- One reconcile step ends: its writes in order, then its claim released if still owner's.
-- KEYS: claim, due, phases, endpoints, failures, outcome, verdicts. ops (JSON, `Tail`):
--   ["due", at]                    due at `at` unless due sooner (ZADD LT)
--   ["state", phase, endpoint]     the phase (`phase|since`); the endpoint document, '' removes it
--   ["applied", outcome, failures] the outcome dropped if it is still `outcome` (''
--                                  none); failures '-' left, '' cleared, else stored
--   ["forget"]                     everything kept for the Proxy
-- ARGV, in the order of proxies.ARGV['step_end'] (tests/fleet/test_store_lua.py holds the two together):
local owner = ARGV[1]
local key = ARGV[2]
local ops = ARGV[3]

for _, op in ipairs(cjson.decode(ops)) do
  local kind = op[1]
  if kind == 'due' then
    redis.call('zadd', KEYS[2], 'LT', op[2], key)
  elseif kind == 'state' then
    redis.call('hset', KEYS[3], key, op[2])
    if op[3] == '' then redis.call('hdel', KEYS[4], key) else redis.call('hset', KEYS[4], key, op[3]) end
  elseif kind == 'applied' then
    if op[2] ~= '' and redis.call('get', KEYS[6]) == op[2] then redis.call('del', KEYS[6]) end
    if op[3] == '' then redis.call('hdel', KEYS[5], key) elseif op[3] ~= '-' then redis.call('hset', KEYS[5], key, op[3]) end
  elseif kind == 'forget' then
    redis.call('zrem', KEYS[2], key)
    redis.call('del', KEYS[6])
    redis.call('hdel', KEYS[5], key)
    redis.call('hdel', KEYS[3], key)
    redis.call('hdel', KEYS[4], key)
    redis.call('hdel', KEYS[7], key)
  end
end
if redis.call('get', KEYS[1]) == owner then redis.call('del', KEYS[1]) end
return 1
