-- A standalone object written or deleted by compare-and-set. KEYS: objects hash.
-- 1 when written.
-- ARGV, in the order of proxies.ARGV['put_object'] (tests/fleet/test_store_lua.py holds the two together):
local key = ARGV[1]
local expected_version = ARGV[2]  -- '' = must not exist
local doc = ARGV[3]  -- its resourceVersion already set to expected+1; '' deletes

local cur = redis.call('hget', KEYS[1], key)
if expected_version == '' then
  if cur then return 0 end
else
  if not cur then return 0 end
  local ok, obj = pcall(cjson.decode, cur)
  if not ok or type(obj) ~= 'table' or type(obj['metadata']) ~= 'table'
     or tostring(obj['metadata']['resourceVersion']) ~= expected_version then return 0 end
end
if doc == '' then redis.call('hdel', KEYS[1], key) else redis.call('hset', KEYS[1], key, doc) end
return 1
