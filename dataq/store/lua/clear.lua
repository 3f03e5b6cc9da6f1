-- clear.lua: forget every record of the queue without running any action; flags, counters, the worker
-- registry and the event stream stay. Workers still running a cleared record find it no longer theirs.
-- KEYS[1] records hash   KEYS[2] events stream   KEYS[3] counters hash   KEYS[4..] the other data keys and the
-- processing lists of registered workers
-- ARGV[1] events max length (0 = keep no events)
-- return: number of records forgotten
local count = redis.call('HLEN', KEYS[1])
redis.call('UNLINK', KEYS[1])
for i = 4, #KEYS do redis.call('UNLINK', KEYS[i]) end
redis.call('HINCRBY', KEYS[3], 'cleared', count)
local maxlen = tonumber(ARGV[1])
if maxlen > 0 then redis.call('XADD', KEYS[2], 'MAXLEN', '~', maxlen, '*', 'k', 'cleared', 'id', '', 'd', 'count=' .. count) end
return count
