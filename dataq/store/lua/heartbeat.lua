-- heartbeat.lua: a daemon says it is alive: refresh its heartbeat (with a TTL) and its registry entry.
-- KEYS[1] heartbeat key   KEYS[2] workers hash
-- ARGV[1] worker id   ARGV[2] TTL in ms   ARGV[3] registry entry (JSON)   ARGV[4] heartbeat stats (JSON)
-- return: 1 when the worker was not registered (first beat, or the sweeper had given it up for dead), else 0
redis.call('SET', KEYS[1], ARGV[4], 'PX', tonumber(ARGV[2]))
return redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
