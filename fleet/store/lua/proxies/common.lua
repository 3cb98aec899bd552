-- Shared by step_begin.lua and finish.lua: claim the Proxy for one reconcile step and read what the step needs.
-- KEYS: claim, due, objects, call, outcome, failures, verdicts, phases. Claims the Proxy for claim_ms as owner
-- (false when another replica holds it), takes key off the due set and answers what the step reads:
-- {1, object, call, outcome, failures, verdict, phase} (each false when absent; the object read only when
-- read_object is '1').
local function begin_step(KEYS, owner, claim_ms, key, read_object)
  if not redis.call('set', KEYS[1], owner, 'NX', 'PX', claim_ms) then return false end
  redis.call('zrem', KEYS[2], key)
  local obj = false
  if read_object == '1' then obj = redis.call('hget', KEYS[3], key) end
  return {1, obj, redis.call('get', KEYS[4]), redis.call('get', KEYS[5]), redis.call('hget', KEYS[6], key),
          redis.call('hget', KEYS[7], key), redis.call('hget', KEYS[8], key)}
end
