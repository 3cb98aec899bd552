-- Pace: a proxy's turn at a host, at most one per `interval` seconds (virtual scheduling: the key holds when the
-- next turn is free), shared by every gateway replica. KEYS[8]: the pace key of "<proxy>|<host>".
-- → {'ok', seconds to wait for this turn (0: now)} | {'full', seconds the next turn is away} (over `most`: not taken)
-- ARGV, in the order of leases.ARGV['pace'] (tests/fleet/test_store_lua.py holds the two together):
local now = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
local most = tonumber(ARGV[3])  -- the longest wait taken

local free = tonumber(redis.call('get', KEYS[8]) or '0')
if free < now then free = now end
local wait = free - now
if wait > most then return {'full', tostring(wait)} end
redis.call('set', KEYS[8], tostring(free + interval), 'PX', math.ceil((wait + interval) * 1000) + 1000)
return {'ok', tostring(wait)}
