-- promote.lua: move delayed records whose retry time has come to the left end of their activity's active list.
-- KEYS[1] delayed zset      KEYS[2] records hash
-- KEYS[3] default's active list, then one per named activity (lib/activities.lua)
-- ARGV[1] now in ms         ARGV[2] most records to move
-- ARGV[3] the named activities, joined by newlines ('' without activities)
-- return: number of records moved
local delayed, records = KEYS[1], KEYS[2]
local lists, named = activity_lists(3, ARGV[3])
local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for i = 1, #due, 1000 do
  local chunk = { unpack(due, i, math.min(i + 999, #due)) }
  redis.call('ZREM', delayed, unpack(chunk))
  if named == 0 then
    redis.call('LPUSH', lists[''], unpack(chunk))
  else
    for _, id in ipairs(chunk) do redis.call('LPUSH', list_for(lists, named, records, id), id) end
  end
end
return #due
