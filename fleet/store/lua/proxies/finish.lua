-- A provider call's answer comes. KEYS: call, slots, outcome, due, waiters, then begin_step's (claim, due,
-- objects, call, outcome, failures, verdicts, phases).
-- Only the answer to the call in flight is kept (a late one for a call that
-- lapsed is dropped): stored with its call, the call and slot cleared, the
-- Proxy due now, and so is the first Proxy waiting for a slot. 0 when dropped;
-- when kept, {1} and, with step_owner not '', what begin_step answers after it
-- (the step that applies the answer begins in the same round trip).
-- ARGV, in the order of proxies.ARGV['finish'] (tests/fleet/test_store_lua.py holds the two together):
local key = ARGV[1]
local call_id = ARGV[2]
local outcome = ARGV[3]  -- JSON
local now = ARGV[4]
local step_owner = ARGV[5]  -- '' no step
local step_claim_ms = ARGV[6]
local step_key = ARGV[7]
local step_read_object = ARGV[8]

local cur = redis.call('get', KEYS[1])
if not cur then return 0 end
local ok, doc = pcall(cjson.decode, cur)
if not ok or type(doc) ~= 'table' or doc['id'] ~= call_id then return 0 end
redis.call('set', KEYS[3], '{"call":' .. cur .. ',"outcome":' .. outcome .. '}')
redis.call('del', KEYS[1])
redis.call('zrem', KEYS[2], key)
redis.call('zadd', KEYS[4], now, key)
local next = redis.call('zrange', KEYS[5], 0, 0)
if next[1] then
  redis.call('zrem', KEYS[5], next[1])
  redis.call('zadd', KEYS[4], now, next[1])
end
if step_owner == '' then return {1} end
local step = begin_step({KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13]},
                        step_owner, step_claim_ms, step_key, step_read_object)
if not step then return {1} end
return {1, unpack(step)}
