-- renew_lease.lua: extend a lease only if we still hold it (our token), never someone else's.
-- KEYS[1] lease key
-- ARGV[1] our token
-- ARGV[2] new time to live, in milliseconds
-- return: 1 when renewed, 0 when the lease had expired or belongs to another holder
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
