-- ack.lua: a worker finished records successfully; forget them.
-- A record no longer in the worker's processing list was reclaimed (the worker was presumed dead) and now
-- belongs to someone else: it is left alone and reported as not owned.
-- KEYS[1] processing list of the worker   KEYS[2] records hash   KEYS[3] errors hash   KEYS[4] lasterror hash
-- KEYS[5] crashes hash                    KEYS[6] events stream KEYS[7] counters hash
-- KEYS[8] rates ring (lib/rates.lua)
-- KEYS[9..] one per record, in order: its shard of the remembered done records in the current generation
--           (dataq/store/remembered.py), where a done record is remembered; none when nothing is (ARGV[6] = 0)
-- ARGV[1] events max length (0 = keep no events)
-- ARGV[2] the record ids, joined by newlines      ARGV[3] an event detail per id (e.g. the run time), joined by
-- newlines (two arguments instead of two per record: the client packs each argument on its own, at a cost)
-- KEYS[9 + records] with activities: the ring of done counts of 'default', then of each named activity
-- ARGV[4] the records' digests (16 bytes each, in order)   ARGV[5] now (ms)   ARGV[6] when the current
-- generation's shards expire (ms since the epoch); 0: remember nothing (remember_done = 0)
-- ARGV[7] the named activities, joined by newlines ('' without activities: nothing is counted per activity)
-- Counts 'done' in the counters and the rates ring, and the records' bytes ('done_bytes') in the ring alone.
-- return: status string with one char per record, '1' acknowledged or '0' not owned
local processing, records, errors, lasterror, crashes, events, counters, rates =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local maxlen = tonumber(ARGV[1])
local details = {}
for detail in string.gmatch(ARGV[3] .. '\n', '([^\n]*)\n') do details[#details + 1] = detail end
local status = {}
local done = {}
local done_at = {}
local i = 0
for id in string.gmatch(ARGV[2], '[^\n]+') do
  i = i + 1
  -- From the right, where the oldest claims are: records mostly finish in the order they were claimed, so
  -- the search ends after a few entries instead of crossing the whole list.
  if redis.call('LREM', processing, -1, id) == 1 then
    done[#done + 1] = id
    done_at[#done] = i
    if maxlen > 0 then redis.call('XADD', events, '*', 'k', 'done', 'id', id, 'd', details[i] or '') end
    status[#status + 1] = '1'
  else
    status[#status + 1] = '0'
  end
end
if #done == 0 then return table.concat(status) end
-- Remember each done record: '<done ms>,<ms it waited since its push>' (see dataq/store/remembered.py).
local now_ms, expires = tonumber(ARGV[5]), ARGV[6]
local sub = string.sub
local digests = ARGV[4]
-- Done per activity, counted from the activities the stored values name (rings: after the shards' keys).
local per_activity, ring_of = nil, {}
if ARGV[7] ~= '' then
  per_activity = {}
  local rings = 9 + (expires == '0' and 0 or i)
  ring_of[''] = KEYS[rings]
  local n = 0
  for name in string.gmatch(ARGV[7], '[^\n]+') do
    n = n + 1
    ring_of[name] = KEYS[rings + n]
  end
end
-- The bytes done, from each stored value's size (path NUL size NUL ...), for the rates ring's plots.
local bytes, find, bytes_of = 0, string.find, {}
for first = 1, #done, 1000 do
  local last = math.min(first + 999, #done)
  local values = redis.call('HMGET', records, unpack(done, first, last))
  local sizes = {}
  for j = 1, last - first + 1 do
    local value = values[j]
    local cut = value and find(value, '\0', 1, true)
    local after = cut and find(value, '\0', cut + 1, true)
    sizes[j] = after and tonumber(sub(value, cut + 1, after - 1)) or 0
    bytes = bytes + sizes[j]
  end
  for j = first, expires == '0' and 0 or last do
    local value, wait = values[j - first + 1], 0
    local pushed_us = value and tonumber(stored_push_time(value))
    if pushed_us then wait = math.max(0, now_ms - math.floor(pushed_us / 1000)) end
    local i = done_at[j]
    local remembered = ARGV[5] .. ',' .. string.format('%d', wait)
    local key = KEYS[8 + i]
    -- A shard's keys all expire with their generation: set once, when the first field creates the key (a write
    -- per record more would double what the AOF writes for it).
    if redis.call('HSET', key, sub(digests, 16 * i - 15, 16 * i), remembered) == 1
        and redis.call('HLEN', key) == 1 then
      redis.call('PEXPIREAT', key, expires)
    end
  end
  if per_activity then
    for j = 1, last - first + 1 do
      local name = values[j] and stored_activity(values[j]) or ''
      if not ring_of[name] then name = '' end  -- an activity no longer defined: counted as default's
      per_activity[name] = (per_activity[name] or 0) + 1
      bytes_of[name] = (bytes_of[name] or 0) + sizes[j]
    end
  end
end
if per_activity then
  local now = tonumber(redis.call('TIME')[1])
  for name, n in pairs(per_activity) do
    count_activity_done(counters, ring_of[name], name == '' and 'default' or name, n, now)
    if (bytes_of[name] or 0) > 0 then
      count_in_ring(ring_of[name], 'done_bytes', bytes_of[name], function() return 0 end, now)
    end
  end
end
-- One HDEL per hash for the whole batch (unpack() is limited by Lua's C stack, hence the chunks).
for first = 1, #done, 1000 do
  local last = math.min(first + 999, #done)
  for _, hash in ipairs({ records, errors, lasterror, crashes }) do redis.call('HDEL', hash, unpack(done, first, last)) end
end
-- Trimmed once per batch, not per event: a per-entry MAXLEN costs more than the XADD itself.
if maxlen > 0 then redis.call('XTRIM', events, 'MAXLEN', '~', maxlen) end
tally(counters, rates, 'done', #done)
if bytes > 0 then count_in_ring(rates, 'done_bytes', bytes, function() return 0 end) end
return table.concat(status)
