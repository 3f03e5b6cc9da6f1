-- mark_lost.lua: records whose stored copy an audit found missing or damaged here: their remembered done state is
-- forgotten (a record sent again is then stored, and receipts no longer say done), and each is marked lost with
-- why, so that receipts and --trace say what became of it. Records still tracked here are left alone: they are
-- being stored again.
-- KEYS[1] records hash   KEYS[2] lost hash   KEYS[3] events stream   KEYS[4] counters hash
-- KEYS[5..] two per id, in order: its shard of the remembered done records in the current and the previous
--           generation (dataq/store/remembered.py); none when nothing is remembered (ARGV[3] is '')
-- ARGV[1] now (ms)   ARGV[2] events max length (0 = keep no events)   ARGV[3] the ids' digests (16 bytes each)
-- ARGV[4..] two per id: the id, then why it is lost (one line)
-- return: status string with one char per id, '1' marked lost, '0' still tracked here (left alone)
local records, lost, events, counters = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now, maxlen, digests = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local status, marked = {}, 0
for n = 1, (#ARGV - 3) / 2 do
  local id, why = ARGV[2 + 2 * n], ARGV[3 + 2 * n]
  if redis.call('HEXISTS', records, id) == 1 then
    status[n] = '0'
  else
    if digests ~= '' then
      local field = string.sub(digests, 16 * n - 15, 16 * n)
      redis.call('HDEL', KEYS[3 + 2 * n], field)
      redis.call('HDEL', KEYS[4 + 2 * n], field)
    end
    redis.call('HSET', lost, id, now .. ',' .. why)
    if maxlen > 0 then redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*', 'k', 'lost', 'id', id, 'd', why) end
    status[n] = '1'
    marked = marked + 1
  end
end
if marked > 0 then redis.call('HINCRBY', counters, 'lost', marked) end
return table.concat(status)
