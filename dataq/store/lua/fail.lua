-- fail.lua: a worker's action failed on records. Each failure counts; a record that has failed more than
-- max_errors times moves to the inactive list, otherwise it goes back to the left end of the active list
-- (last to run), or into the delayed set when a retry delay is configured: the delay after the n-th failure is
-- min(max delay, first delay * backoff ^ (n - 1)), times the record's jitter factor.
-- KEYS[1] processing list of the worker   KEYS[2] records hash     KEYS[3] inactive list   KEYS[4] delayed zset
-- KEYS[5] errors hash                     KEYS[6] lasterror hash   KEYS[7] events stream   KEYS[8] counters hash
-- KEYS[9] rates ring (lib/rates.lua)
-- KEYS[10] default's active list, then one per named activity (lib/activities.lua): a retried record goes back
--          to its activity's
-- ARGV[1] events max length (0 = keep no events)   ARGV[2] max_errors   ARGV[3] now in ms
-- ARGV[4] first retry delay in ms (0 = retry at once)   ARGV[5] backoff factor   ARGV[6] longest delay in ms
-- ARGV[7] the named activities, joined by newlines ('' without activities)
-- ARGV[8], ARGV[9], ARGV[10], ... triples: record id, error message, jitter factor (0 < factor <= 1)
-- return: status string, one char per record: 'r' retried, 'd' delayed, 'i' inactive, '-' not owned
local processing, records, inactive, delayed, errors, lasterror, events, counters, rates =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local maxlen, max_errors, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local first_delay, backoff, max_delay = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local lists, named = activity_lists(10, ARGV[7])
local status = {}
local failed, deactivated = 0, 0
for i = 8, #ARGV, 3 do
  local id, message, jitter = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
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
      if first_delay > 0 then
        -- Capped before it is multiplied further: backoff ^ n overflows to inf after enough failures.
        local delay = first_delay * backoff ^ math.min(count - 1, 1000)
        if delay > max_delay then delay = max_delay end
        redis.call('ZADD', delayed, now + math.floor(delay * jitter), id)
        status[#status + 1] = 'd'
      else
        redis.call('LPUSH', list_for(lists, named, records, id), id)
        status[#status + 1] = 'r'
      end
      if maxlen > 0 then redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*', 'k', 'failed', 'id', id, 'd', message) end
    end
  else
    status[#status + 1] = '-'
  end
end
tally(counters, rates, 'failed', failed)
if deactivated > 0 then redis.call('HINCRBY', counters, 'deactivated', deactivated) end
return table.concat(status)
