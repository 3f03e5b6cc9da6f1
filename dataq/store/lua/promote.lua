-- promote.lua: move delayed records whose retry time has come to the left end of the active list.
-- KEYS[1] delayed zset      KEYS[2] active list
-- ARGV[1] now in ms         ARGV[2] most records to move
-- return: number of records moved
local delayed, active = KEYS[1], KEYS[2]
local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for i = 1, #due, 1000 do
  local chunk = { unpack(due, i, math.min(i + 999, #due)) }
  redis.call('ZREM', delayed, unpack(chunk))
  redis.call('LPUSH', active, unpack(chunk))
end
return #due
