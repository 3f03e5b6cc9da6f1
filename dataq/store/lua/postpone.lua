-- postpone.lua: records whose destination is unreachable (a transient failure) go back to the right, next-to-run
-- end of the active list, keeping their order, with no failure counted: an outage must not burn their retries.
-- KEYS[1] processing list of the worker   KEYS[2] active list   KEYS[3] lasterror hash   KEYS[4] events stream
-- KEYS[5] counters hash
-- ARGV[1] events max length (0 = keep no events)
-- ARGV[2], ARGV[3], ... pairs: record id, error message; the first pair's record runs first
-- return: status string, one char per record: 'w' waiting in the active list, '-' not owned
local processing, active, lasterror, events, counters = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local maxlen = tonumber(ARGV[1])
local status = {}
local waiting = 0
-- Pushed last pair first, so the first pair's record ends up at the very right, next to run.
for i = #ARGV - 1, 2, -2 do
  local id, message = ARGV[i], ARGV[i + 1]
  if redis.call('LREM', processing, -1, id) == 1 then
    redis.call('RPUSH', active, id)
    redis.call('HSET', lasterror, id, message)
    waiting = waiting + 1
    status[(i - 2) / 2 + 1] = 'w'
    if maxlen > 0 then redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*', 'k', 'waiting', 'id', id, 'd', message) end
  else
    status[(i - 2) / 2 + 1] = '-'
  end
end
if waiting > 0 then redis.call('HINCRBY', counters, 'waiting', waiting) end
return table.concat(status)
