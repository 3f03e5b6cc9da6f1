-- ack.lua: a worker finished records successfully; forget them.
-- A record no longer in the worker's processing list was reclaimed (the worker was presumed dead) and now
-- belongs to someone else: it is left alone and reported as not owned.
-- KEYS[1] processing list of the worker   KEYS[2] records hash   KEYS[3] errors hash   KEYS[4] lasterror hash
-- KEYS[5] crashes hash                    KEYS[6] events stream KEYS[7] counters hash
-- ARGV[1] events max length (0 = keep no events)
-- ARGV[2], ARGV[3], ... pairs: record id, event detail (e.g. the run time)
-- return: status string with one char per record, '1' acknowledged or '0' not owned
local processing, records, errors, lasterror, crashes, events, counters =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local maxlen = tonumber(ARGV[1])
local status = {}
local done = 0
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  if redis.call('LREM', processing, 1, id) == 1 then
    redis.call('HDEL', records, id)
    redis.call('HDEL', errors, id)
    redis.call('HDEL', lasterror, id)
    redis.call('HDEL', crashes, id)
    if maxlen > 0 then redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*', 'k', 'done', 'id', id, 'd', ARGV[i + 1]) end
    done = done + 1
    status[#status + 1] = '1'
  else
    status[#status + 1] = '0'
  end
end
if done > 0 then redis.call('HINCRBY', counters, 'done', done) end
return table.concat(status)
