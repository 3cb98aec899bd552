-- Check: the epoch guard alone (each API process every few seconds). → the header.
-- ARGV, in the order of leases.ARGV['check'] (tests/fleet/test_store_lua.py holds the two together):
local guard_now = ARGV[1]  -- the guard's five (common.lua: guard)
local epoch = ARGV[2]
local seq = ARGV[3]
local grace = ARGV[4]
local fresh = ARGV[5]

return guarded(false, {now = guard_now, epoch = epoch, seq = seq, grace = grace, fresh = fresh}, function(hdr) return {} end)
