-- set_flag.lua: switch the `read` or `action` flag and tell every daemon at once over pub/sub.
-- KEYS[1] flags hash   KEYS[2] events stream
-- ARGV[1] flag name   ARGV[2] 'on' or 'off'   ARGV[3] events max length   ARGV[4] notices channel   ARGV[5] who
-- ARGV[6] 'sharded' to publish with SPUBLISH (a Redis Cluster: see push_batch.lua), else PUBLISH
-- return: the flag's previous value ('on' when it was never set)
local previous = redis.call('HGET', KEYS[1], ARGV[1]) or 'on'
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local maxlen = tonumber(ARGV[3])
if maxlen > 0 then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', maxlen, '*', 'k', 'flag', 'id', '', 'd', ARGV[1] .. '=' .. ARGV[2] .. ' by=' .. ARGV[5])
end
redis.call(ARGV[6] == 'sharded' and 'SPUBLISH' or 'PUBLISH', ARGV[4], 'flag:' .. ARGV[1] .. ':' .. ARGV[2])
return previous
