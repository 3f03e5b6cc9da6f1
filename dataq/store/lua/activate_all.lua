-- activate_all.lua: move up to N records from the inactive list to the left end of the active list, keeping
-- their order, with error and crash counts reset. Called repeatedly until it returns 0, so that a huge
-- inactive list never blocks Redis for long.
-- KEYS[1] inactive list   KEYS[2] records hash  KEYS[3] errors hash   KEYS[4] lasterror hash   KEYS[5] crashes hash
-- KEYS[6] events stream   KEYS[7] counters hash
-- KEYS[8] default's active list, then one per named activity (lib/activities.lua): each record to its activity's
-- ARGV[1] most records to move   ARGV[2] events max length (0 = keep no events)
-- ARGV[3] the named activities, joined by newlines ('' without activities)
-- return: number of records moved
local inactive, records, errors, lasterror, crashes, events, counters =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local lists, named = activity_lists(8, ARGV[3])
local moved = 0
for _ = 1, tonumber(ARGV[1]) do
  -- Taking the oldest first and pushing each on the left keeps the inactive order within each active list.
  local id = redis.call('RPOP', inactive)
  if not id then break end
  redis.call('LPUSH', list_for(lists, named, records, id), id)
  redis.call('HDEL', errors, id); redis.call('HDEL', lasterror, id); redis.call('HDEL', crashes, id)
  moved = moved + 1
end
if moved > 0 then
  redis.call('HINCRBY', counters, 'activated', moved)
  local maxlen = tonumber(ARGV[2])
  if maxlen > 0 then redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*', 'k', 'activated', 'id', '', 'd', 'all count=' .. moved) end
end
return moved
