-- Store a check result unless the stored one is at least as new, and clear the overdue mark.
-- KEYS: result, overdue mark[, a status cache entry to read].
-- A stored checkedAt that is not a number in [earliest, latest] (from the future, corrupt, not JSON) counts as
-- absent. Returns {stored (1/0), previous or false, the cache entry or false}.
-- ARGV, in the order of results.ARGV['save_if_newer'] (tests/fleet/test_store_lua.py holds the two together):
local checked_at = tonumber(ARGV[1])
local payload = ARGV[2]
local latest = tonumber(ARGV[3])
local earliest = tonumber(ARGV[4])
local replace = ARGV[5]  -- a stored value to replace whatever it holds ('' for none)

local prev = redis.call('get', KEYS[1])
local cached = false
if KEYS[3] then
  cached = redis.call('get', KEYS[3])
end
if prev and prev ~= replace then
  local ok, doc = pcall(cjson.decode, prev)
  if ok and type(doc) == 'table' then
    local at = doc['checkedAt']
    if type(at) == 'number' and at >= earliest and at <= latest and at >= checked_at then
      return {0, prev, cached}
    end
  end
end
redis.call('set', KEYS[1], payload)
redis.call('del', KEYS[2])
return {1, prev, cached}
