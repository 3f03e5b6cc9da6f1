-- fail.lua: a worker's action failed on records. Each failure counts; a record that has failed more than
-- max_errors times moves to the inactive list, otherwise it goes back to the left end of the active list
-- (last to run), or into the delayed set when a retry delay is configured.
-- KEYS[1] processing list of the worker   KEYS[2] active list      KEYS[3] inactive list   KEYS[4] delayed zset
-- KEYS[5] errors hash                     KEYS[6] lasterror hash   KEYS[7] events stream   KEYS[8] counters hash
-- ARGV[1] events max length (0 = keep no events)   ARGV[2] max_errors   ARGV[3] retry due time in ms (0 = no delay)
-- ARGV[4], ARGV[5], ... pairs: record id, error message
-- return: status string, one char per record: 'r' retried, 'd' delayed, 'i' inactive, '-' not owned
local processing, active, inactive, delayed, errors, lasterror, events, counters =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local maxlen, max_errors, due = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local status = {}
local failed, deactivated = 0, 0
for i = 4, #ARGV, 2 do
  local id, message = ARGV[i], ARGV[i + 1]
  -- From the right, where the oldest claims are: records mostly finish in the order they were claimed, so
  -- the search ends after a few entries instead of crossing the whole list.
  if redis.call('LREM', processing, -1, id) == 1 then
    local count = redis.call('HINCRBY', errors, id, 1)
    redis.call('HSET', lasterror, id, message)
    failed = failed + 1
    if count > max_errors then
      redis.call('LPUSH', inactive, id)
      deactivated = deactivated + 1
      status[#status + 1] = 'i'
      if maxlen > 0 then redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*', 'k', 'deactivated', 'id', id, 'd', message) end
    else
      if due > 0 then
        redis.call('ZADD', delayed, due, id)
        status[#status + 1] = 'd'
      else
        redis.call('LPUSH', active, id)
        status[#status + 1] = 'r'
      end
      if maxlen > 0 then redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*', 'k', 'failed', 'id', id, 'd', message) end
    end
  else
    status[#status + 1] = '-'
  end
end
if failed > 0 then redis.call('HINCRBY', counters, 'failed', failed) end
if deactivated > 0 then redis.call('HINCRBY', counters, 'deactivated', deactivated) end
return table.concat(status)
