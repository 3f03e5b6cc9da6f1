-- postpone.lua: records whose destination is unreachable (a transient failure) go back to the right, next-to-run
-- end of the active list, keeping their order, with no failure counted: an outage must not burn their retries.
-- KEYS[1] processing list of the worker   KEYS[2] records hash   KEYS[3] lasterror hash   KEYS[4] events stream
-- KEYS[5] counters hash
-- KEYS[6] default's active list, then one per named activity (lib/activities.lua): each record to its activity's
-- ARGV[1] events max length (0 = keep no events)
-- ARGV[2] the named activities, joined by newlines ('' without activities)
-- ARGV[3], ARGV[4], ... pairs: record id, error message; the first pair's record runs first
-- return: status string, one char per record: 'w' waiting in the active list, '-' not owned
local processing, records, lasterror, events, counters = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local lists, named = activity_lists(6, ARGV[2])
local maxlen = tonumber(ARGV[1])
local status = {}
local waiting = 0
-- Pushed last pair first, so the first pair's record ends up at the very right, next to run.
for i = #ARGV - 1, 3, -2 do
  local id, message = ARGV[i], ARGV[i + 1]
  if redis.call('LREM', processing, -1, id) == 1 then
    redis.call('RPUSH', list_for(lists, named, records, id), id)
    redis.call('HSET', lasterror, id, message)
    waiting = waiting + 1
    status[(i - 3) / 2 + 1] = 'w'
    if maxlen > 0 then redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*', 'k', 'waiting', 'id', id, 'd', message) end
  else
    status[(i - 3) / 2 + 1] = '-'
  end
end
if waiting > 0 then redis.call('HINCRBY', counters, 'waiting', waiting) end
return table.concat(status)
