-- A provider's state in a sweep moves on. KEYS: the lock.
-- Returns 1 when moved (the sweep is `id` and the field was `was`), else 0.
-- ARGV, in the order of gc.ARGV['move'] (tests/fleet/test_store_lua.py holds the two together):
local id = ARGV[1]
local field = ARGV[2]
local was = ARGV[3]
local becomes = ARGV[4]

if redis.call('hget', KEYS[1], 'id') ~= id then return 0 end
if redis.call('hget', KEYS[1], field) ~= was then return 0 end
redis.call('hset', KEYS[1], field, becomes)
return 1
