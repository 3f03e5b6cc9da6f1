-- reclaim.lua: give a worker's processing list back to the right (next-to-run) end of the active list.
-- Mode 'crash' (the sweeper): only when the worker's heartbeat has expired; each record's crash count goes up
-- and a record interrupted by crashes more than max_crashes times goes to the inactive list instead (a poison
-- record must not crash-loop the fleet); the worker leaves the registry. Mode 'release' (the worker itself, at
-- shutdown): records go back as they are. Safe to run concurrently: the second run finds nothing to move.
-- KEYS[1] processing list of the worker   KEYS[2] records hash    KEYS[3] inactive list   KEYS[4] crashes hash
-- KEYS[5] lasterror hash                  KEYS[6] heartbeat key   KEYS[7] workers hash    KEYS[8] events stream
-- KEYS[9] counters hash
-- KEYS[10] default's active list, then one per named activity (lib/activities.lua): each record to its activity's
-- ARGV[1] events max length (0 = keep no events)   ARGV[2] worker id   ARGV[3] 'crash' or 'release'
-- ARGV[4] max crashes       ARGV[5] the named activities, joined by newlines ('' without activities)
-- return: { records returned to active, records deactivated }, or { -1, 0 } when the worker is alive (crash mode)
local processing, records, inactive, crashes, lasterror, heartbeat, workers, events, counters =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local maxlen, worker, mode, max_crashes = tonumber(ARGV[1]), ARGV[2], ARGV[3], tonumber(ARGV[4])
local lists, named = activity_lists(10, ARGV[5])
if mode == 'crash' and redis.call('EXISTS', heartbeat) == 1 then return { -1, 0 } end
-- The list holds the newest claim on the left; pushing left to right onto the right end leaves the oldest
-- claim rightmost, so records run again in the order they were first claimed.
local ids = redis.call('LRANGE', processing, 0, -1)
local returned, deactivated = 0, 0
for _, id in ipairs(ids) do
  local poison = false
  if mode == 'crash' then
    local count = redis.call('HINCRBY', crashes, id, 1)
    if count > max_crashes then
      poison = true
      redis.call('HSET', lasterror, id, 'worker ' .. worker .. ' died while running it (' .. count .. ' crashes)')
    end
  end
  if poison then
    redis.call('LPUSH', inactive, id)
    deactivated = deactivated + 1
    if maxlen > 0 then redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*', 'k', 'deactivated', 'id', id, 'd', 'crash-loop') end
  else
    redis.call('RPUSH', list_for(lists, named, records, id), id)
    returned = returned + 1
  end
end
redis.call('DEL', processing)
if mode == 'crash' then
  redis.call('HDEL', workers, worker)
  redis.call('HINCRBY', counters, 'reclaimed', returned)
  if maxlen > 0 then
    redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*', 'k', 'reclaimed', 'id', '', 'd',
      'worker=' .. worker .. ' returned=' .. returned .. ' deactivated=' .. deactivated)
  end
end
if deactivated > 0 then redis.call('HINCRBY', counters, 'deactivated', deactivated) end
return { returned, deactivated }
