-- push_batch.lua: store new records and queue them on the left of the active list (last to run).
-- A record whose id is already tracked (active, inactive, delayed or in flight) is a duplicate: not stored again,
-- unless the stored value is byte for byte the one offered (same push time and source): that is this very write
-- retried after its reply was lost, and it counts as pushed, so a retry never turns 'Pushed' into 'Ignored'.
-- A retry (ARGV[2] > 0) must also not queue again a record its lost attempt stored and a worker has since
-- finished: such a record is untracked again, but its 'pushed' event since the first attempt is still in the
-- stream. Only retries pay for that scan; first attempts never read the stream.
-- KEYS[1] records hash      KEYS[2] active list      KEYS[3] events stream      KEYS[4] counters hash
-- KEYS[5] rates ring (lib/rates.lua)
-- KEYS[6..] two per record, in order: its shard of the remembered done records in the current and the previous
--           generation (dataq/store/remembered.py); a record remembered there was done lately: a duplicate.
--           None when nothing is remembered (remember_done = 0; ARGV[8] is then '')
-- KEYS[6 + 2 * records] (KEYS[6] without shards) the activities set (dataq/keys.py), then one active list per
--           named activity (of ARGV[11]); with named activities, the rings of done counts of 'default' and of each
--           named activity (where the records pushed per activity are counted too, for the console's plots); then,
--           when ARGV[12] > 0, the names index, its count of names and the index before it
-- ARGV[1] events max length (0 = keep no events)
-- ARGV[2] 0 for a first attempt; for a retry, the stream id (ms) from which the first attempt's events may be
-- ARGV[3] work channel, ARGV[4] the notice published there when records were queued (idle pop daemons then
--         claim at once instead of polling)
-- ARGV[5] the record ids, joined by newlines     ARGV[6] their stored values, in the same order, joined by newlines
--         (two arguments, not two per record: the client packs each argument on its own, at a cost; neither an id
--         nor a stored value holds a newline). Every value of one call carries the same push time.
-- ARGV[7] 'sharded' to publish the notice with SPUBLISH (on a Redis Cluster, where the channel shares the queue's
--         slot: sharded pub/sub stays on the slot's master instead of crossing the cluster bus), else PUBLISH
-- ARGV[8] the records' digests (16 bytes each, in order), their fields in those shards
-- ARGV[9] one character per record, '1' for a record sent again on purpose (stored even if remembered done), or
--         '' when none is (the common case: nothing to split)
-- ARGV[10] one character per record naming its active list: '0' default's (KEYS[2]), '0' + j the j-th named
--          activity's; '' when every record is default's      ARGV[11] the named activities, joined by newlines
-- ARGV[12] the names index's size (search_names; dataq/store/names.py): each batch's stored records are added to
--          it, and a full index becomes the one before, replacing that; 0 (or absent): no index
-- return: { status string with one char per record, '1' pushed, '2' pushed by an earlier try of this same
--           write (still tracked, or already done), '0' duplicate; records in the active lists after }
local records, active, events, counters, rates = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local maxlen = tonumber(ARGV[1])
-- The push time (µs) inside a stored value (lib/stored.lua); with the id it names one write exactly.
local push_time = stored_push_time
local landed = {}
local retrying = tonumber(ARGV[2]) > 0
if retrying then
  for _, entry in ipairs(redis.call('XRANGE', events, ARGV[2], '+')) do
    local fields = entry[2]
    if fields[2] == 'pushed' and fields[6] then
      for id in string.gmatch(fields[4], '[^\n]+') do landed[id .. ' ' .. fields[6]] = true end
    end
  end
end
-- Split with plain finds: a pattern match per character (gmatch) cost more than the split strings themselves.
-- Counters, not #t: the length of a growing table is a binary search each time. No id or stored value is empty,
-- so an empty piece means a malformed argument: nil, and the call is refused before anything is written.
local function split(packed)
  local parts, n, start, find, sub = {}, 0, 1, string.find, string.sub
  if packed == '' then return parts, 0 end
  while true do
    local stop = find(packed, '\n', start, true)
    if stop == start or start > #packed then return nil end
    n = n + 1
    if not stop then
      parts[n] = sub(packed, start)
      return parts, n
    end
    parts[n] = sub(packed, start, stop - 1)
    start = stop + 1
  end
end
local ids, count = split(ARGV[5])
local values, value_count = split(ARGV[6])
if not ids or not values then
  return redis.error_reply('ERR push_batch: an empty id or stored value (a doubled or trailing newline)')
end
if count ~= value_count then
  return redis.error_reply('ERR push_batch: ' .. count .. ' ids but ' .. value_count .. ' stored values')
end
-- What is stored under each id already, read in one HMGET per chunk and written in one HSET per chunk: a call
-- per record (HSETNX) cost Redis more than the records' own bytes.
local stored = {}
for first = 1, count, 1000 do
  local got = redis.call('HMGET', records, unpack(ids, first, math.min(first + 999, count)))
  for j = 1, #got do stored[first + j - 1] = got[j] end
end
local digests, again = ARGV[8], ARGV[9]
local function remembered(i)
  if digests == '' or (again ~= '' and string.byte(again, i) == 49) then return false end  -- '1': sent again
  local field = string.sub(digests, 16 * i - 15, 16 * i)
  return redis.call('HEXISTS', KEYS[4 + 2 * i], field) == 1 or redis.call('HEXISTS', KEYS[5 + 2 * i], field) == 1
end
local codes, named_keys = ARGV[10], 6 + (digests == '' and 0 or 2 * count)
local named = {}
for name in string.gmatch(ARGV[11], '[^\n]+') do named[#named + 1] = name end
local status, fresh, fields, seen = {}, {}, {}, {}
local lanes, lane_of = {}, {}  -- per named activity's index, its fresh ids; per id, its lane (only with codes)
local fresh_count, duplicates = 0, 0
local batch_time
for i = 1, count do
  local id, value = ids[i], values[i]
  local was = stored[i]
  if seen[id] or (was and was ~= value) then
    -- A tracked id, or the same id twice in one batch (the second is a duplicate of the first, whatever the
    -- first was).
    status[i] = '0'
    duplicates = duplicates + 1
    if maxlen > 0 then redis.call('XADD', events, '*', 'k', 'duplicate', 'id', id) end
  elseif was or (retrying and landed[id .. ' ' .. push_time(value)]) then
    status[i] = '2'
  elseif remembered(i) then
    -- Done lately (within remember_done): the same data again is not moved again.
    status[i] = '0'
    duplicates = duplicates + 1
    if maxlen > 0 then redis.call('XADD', events, '*', 'k', 'duplicate', 'id', id, 'd', 'done lately') end
  else
    fresh_count = fresh_count + 1
    fresh[fresh_count] = id
    if codes ~= '' then
      local lane = string.byte(codes, i) - 48
      if lane > 0 then
        lanes[lane] = lanes[lane] or {}
        lanes[lane][#lanes[lane] + 1] = id
        lane_of[id] = lane
      end
    end
    fields[2 * fresh_count - 1] = id
    fields[2 * fresh_count] = value
    status[i] = '1'
    batch_time = batch_time or push_time(value)
  end
  seen[id] = true
end
for first = 1, 2 * fresh_count, 1000 do
  redis.call('HSET', records, unpack(fields, first, math.min(first + 999, 2 * fresh_count)))
end
-- The names of the stored records, for the console's search: the batch's ids and stored values as two elements of
-- the names list, as they came when every record is new (no work per record: a sorted set of names cost each push
-- 2.8 µs of Redis per record, a quarter of its rate). Renaming a full index (O(1)) bounds it without a trim per
-- batch; the one it replaces is freed in the background (UNLINK), not while the push waits.
local rings = named_keys + #named + 1  -- default's ring, then each named activity's (with named activities)
local after_rings = rings + (#named > 0 and #named + 1 or 0)
local index_size = tonumber(ARGV[12] or '0') or 0
if index_size > 0 and fresh_count > 0 then
  local names_key = KEYS[after_rings]
  local count_key = KEYS[after_rings + 1]
  local ids_blob, values_blob = ARGV[5], ARGV[6]
  if fresh_count < count then
    local kept = {}
    for j = 1, fresh_count do kept[j] = fields[2 * j] end
    ids_blob, values_blob = table.concat(fresh, '\n'), table.concat(kept, '\n')
  end
  redis.call('LPUSH', names_key, values_blob, ids_blob)  -- the ids first from the head, then their values
  if redis.call('INCRBY', count_key, fresh_count) >= index_size then
    local before = KEYS[after_rings + 2]
    redis.call('UNLINK', before)
    redis.call('RENAME', names_key, before)
    redis.call('DEL', count_key)
  end
end
-- One 'pushed' event for the whole batch, its ids joined by newlines (the store's readers list one event per
-- id): an entry per record cost Redis more than storing and queueing the record itself.
if maxlen > 0 and fresh_count > 0 then
  -- When every record is new, the joined ids are the argument as it came (joining them again costs a copy).
  local joined = fresh_count == count and ARGV[5] or table.concat(fresh, '\n')
  redis.call('XADD', events, '*', 'k', 'pushed', 'id', joined, 'd', batch_time)
end
-- unpack() is limited by Lua's C stack, so push in chunks.
local function queue(list, ids, n)
  for i = 1, n, 1000 do redis.call('LPUSH', list, unpack(ids, i, math.min(i + 999, n))) end
end
if codes == '' then
  queue(active, fresh, fresh_count)
else
  -- Each record to its activity's list, in the order it came; the activity is noted as one whose list exists,
  -- so that a pop daemon that does not serve it (its settings lack it) finds the list and adopts its records.
  local plain = {}
  for _, id in ipairs(fresh) do if not lane_of[id] then plain[#plain + 1] = id end end
  queue(active, plain, #plain)
  for lane, ids in pairs(lanes) do
    queue(KEYS[named_keys + lane], ids, #ids)
    redis.call('SADD', KEYS[named_keys], named[lane])
  end
end
-- Trimmed once per batch, not per event: a per-entry MAXLEN costs more than the XADD itself.
if maxlen > 0 and count > 0 then redis.call('XTRIM', events, 'MAXLEN', '~', maxlen) end
if #named > 0 and fresh_count > 0 then
  -- Pushed per activity, in each activity's own ring (the queue's ring counts them all).
  local now, none_before, by_default = tonumber(redis.call('TIME')[1]), function() return 0 end, fresh_count
  for lane, ids in pairs(lanes) do
    count_in_ring(KEYS[rings + lane], 'pushed', #ids, none_before, now)
    by_default = by_default - #ids
  end
  if by_default > 0 then count_in_ring(KEYS[rings], 'pushed', by_default, none_before, now) end
end
if fresh_count > 0 then
  tally(counters, rates, 'pushed', fresh_count)
  redis.call(ARGV[7] == 'sharded' and 'SPUBLISH' or 'PUBLISH', ARGV[3], ARGV[4])
end
tally(counters, rates, 'duplicate', duplicates)
local length = redis.call('LLEN', active)
for lane = 1, #named do length = length + redis.call('LLEN', KEYS[named_keys + lane]) end
return { table.concat(status), length }
