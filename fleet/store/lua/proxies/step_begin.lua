-- One reconcile step begins (a round trip: a command per fact was 54% of the controller's time).
-- KEYS: claim, due, objects, call, outcome, failures, verdicts, phases (common.lua's begin_step).
-- Answers begin_step's: nil when another replica holds the Proxy.
-- ARGV, in the order of proxies.ARGV['step_begin'] (tests/fleet/test_store_lua.py holds the two together):
local owner = ARGV[1]
local claim_ms = ARGV[2]
local key = ARGV[3]
local read_object = ARGV[4]  -- '1' to read the standalone object

return begin_step(KEYS, owner, claim_ms, key, read_object)
