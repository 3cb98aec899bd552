-- The provider's resync list. KEYS: list gate. '' when this caller takes it (it sends the list now),
-- else the seconds until the current one's `next` (another replica's list, or this interval's).
-- Times are the callers' clock, as PX_DUE's; gate_ms only collects a gate nobody uses any more.
-- ARGV, in the order of proxies.ARGV['begin_list'] (tests/fleet/test_store_lua.py holds the two together):
local doc = ARGV[1]  -- {"id","at","next"}
local now = ARGV[2]
local gate_ms = ARGV[3]

local cur = redis.call('get', KEYS[1])
if cur then
  local ok, gate = pcall(cjson.decode, cur)
  local nxt = ok and type(gate) == 'table' and tonumber(gate['next'])
  if nxt and nxt > tonumber(now) then return tostring(nxt - tonumber(now)) end
end
redis.call('set', KEYS[1], doc, 'PX', gate_ms)
return ''
