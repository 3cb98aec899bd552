-- KEYS: list gate. Sets doc[field] = value on the provider's current list if it is list_id and was not
-- answered yet, keeping the TTL; returns its `at` (when it was asked), else ''. With field 'answered' it
-- takes the answer once; with 'next' it moves the next list.
-- ARGV, in the order of proxies.ARGV['mark_list'] (tests/fleet/test_store_lua.py holds the two together):
local list_id = ARGV[1]
local field = ARGV[2]
local value = ARGV[3]

local cur = redis.call('get', KEYS[1])
if not cur then return '' end
local ok, doc = pcall(cjson.decode, cur)
if not ok or type(doc) ~= 'table' or doc['id'] ~= list_id then return '' end
if field == 'answered' then
  if doc['answered'] then return '' end
  doc['answered'] = true
else
  doc[field] = tonumber(value)
end
local ttl = redis.call('pttl', KEYS[1])
if ttl > 0 then redis.call('set', KEYS[1], cjson.encode(doc), 'PX', ttl) else redis.call('set', KEYS[1], cjson.encode(doc)) end
return tostring(doc['at'])
