-- release_lease.lua: give up a lease only if we still hold it (our token), never someone else's.
-- KEYS[1] lease key
-- ARGV[1] our token
-- return: 1 when released, 0 when the lease had expired or belongs to another holder
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
