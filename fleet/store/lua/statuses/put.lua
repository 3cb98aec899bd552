-- KEYS: the entry. 1 when stored. resourceVersions are compared only when both are numbers (etcd's are).
-- ARGV, in the order of statuses.ARGV['put'] (tests/fleet/test_store_lua.py holds the two together):
local resource_version = ARGV[1]
local doc = ARGV[2]
local ttl_ms = ARGV[3]

local cur = redis.call('get', KEYS[1])
if cur then
  local ok, old_doc = pcall(cjson.decode, cur)
  if ok and type(old_doc) == 'table' then
    local old, new = tonumber(old_doc['resourceVersion']), tonumber(resource_version)
    if old and new and old > new then
      return 0
    end
  end
end
redis.call('set', KEYS[1], doc, 'PX', ttl_ms)
return 1
