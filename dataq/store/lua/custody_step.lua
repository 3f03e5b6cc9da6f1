-- custody_step.lua: what becomes of records in custody once their next site was asked (dataq/store/custody.py).
-- Each step names the entry it was decided on; an entry that changed since (kept again) is left alone ('0').
-- The step codes (STEP_DONE...) come from dataq/store/custody_codes.py, put before this script by the store.
-- KEYS[1] custody hash      KEYS[2] custody_due zset      KEYS[3] custody_since zset      KEYS[4] custody_sites hash
-- KEYS[5] records hash      KEYS[6] counters hash         KEYS[7] events stream           KEYS[8] receipts list
-- KEYS[9..] two per step, in order: the record's shard of the remembered done records in the current and the
--           previous generation (dataq/store/remembered.py); none when nothing is remembered (ARGV[8] is '')
-- KEYS[9 + 2 * steps] (KEYS[9] without shards) default's active list, then one per named activity
--           (lib/activities.lua): a record resent goes back to its activity's
-- ARGV[1] now (ms)          ARGV[2] events max length     ARGV[3] receipts kept   ARGV[4] work channel
-- ARGV[5] the notice published there when records are resent     ARGV[6] 'sharded' for SPUBLISH, else PUBLISH
-- ARGV[7] when the current generation's shards expire (ms; 0: remember nothing)        ARGV[8] the steps' digests (16 bytes each)
-- ARGV[9] the named activities, joined by newlines ('' without activities)
-- ARGV[10..] five per step: its code, id, the entry it was decided on, then per code:
--   STEP_DONE       the end of the chain holds it:        end time (ms), its histogram bucket field in counters
--   STEP_PENDING    still on its way:                      the entry to keep instead, when to ask next (ms)
--   STEP_ASK_LATER  no answer (an outage, or no receipts): '', when to ask next (ms)
--   STEP_RESEND     unknown there: queue it here again:    the entry to keep instead, when to ask next (ms)
-- return: status string with one char per step, '1' applied or '0' the entry changed meanwhile
local custody, due, since, sites = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local records, counters, events, receipts = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local expires, digests = ARGV[7], ARGV[8]
local lists, named = activity_lists(9 + (digests == '' and 0 or 2 * ((#ARGV - 9) / 5)), ARGV[9])
local now, maxlen, kept = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local status, resent = {}, 0
local function forget(id, entry)
  redis.call('HDEL', custody, id)
  redis.call('ZREM', due, id)
  redis.call('ZREM', since, id)
  if redis.call('HINCRBY', sites, entry['site'], -1) <= 0 then redis.call('HDEL', sites, entry['site']) end
end
-- Every code is checked before anything is written: a step this script does not know leaves the batch untouched.
local known = {[STEP_DONE] = true, [STEP_PENDING] = true, [STEP_ASK_LATER] = true, [STEP_RESEND] = true}
for base = 10, #ARGV, 5 do
  if not known[ARGV[base]] then return redis.error_reply('unknown custody step ' .. ARGV[base]) end
end
local op = 0
for base = 10, #ARGV, 5 do
  op = op + 1
  local kind, id, seen, a, b = ARGV[base], ARGV[base + 1], ARGV[base + 2], ARGV[base + 3], ARGV[base + 4]
  local current = redis.call('HGET', custody, id)
  if kind == STEP_ASK_LATER then
    if current then redis.call('ZADD', due, 'XX', b, id) end
    status[op] = current and '1' or '0'
  elseif current ~= seen then
    status[op] = '0'
  elseif kind == STEP_PENDING then
    redis.call('HSET', custody, id, a)
    redis.call('ZADD', due, b, id)
    status[op] = '1'
  elseif kind == STEP_DONE then
    local entry = cjson.decode(current)
    forget(id, entry)
    -- The done record's memory learns when the end of the chain had it: '<done ms>,<wait ms>,<end - done ms>'.
    local field = string.sub(digests, 16 * op - 15, 16 * op)
    local cur_key, prev_key = KEYS[7 + 2 * op], KEYS[8 + 2 * op]
    local value = digests ~= '' and (redis.call('HGET', cur_key, field) or redis.call('HGET', prev_key, field))
    local end_ms = tonumber(a)
    local done_ms, wait = now, 0
    if value then
      done_ms = tonumber(string.match(value, '^(%d+)'))
      wait = tonumber(string.match(value, '^%d+,(%d+)')) or 0
    end
    local relayed = string.format('%d,%d,%d', done_ms, wait, math.max(0, end_ms - done_ms))
    if expires ~= '0' and redis.call('HSET', cur_key, field, relayed) == 1 and redis.call('HLEN', cur_key) == 1 then
      redis.call('PEXPIREAT', cur_key, expires)  -- the key's first field: it expires with its generation
    end
    local pushed_us = tonumber(stored_push_time(entry['r'])) or now * 1000
    local latency = math.max(0, end_ms - math.floor(pushed_us / 1000))
    redis.call('LPUSH', receipts, string.format('%d,%d', now, latency))
    redis.call('HINCRBY', counters, 'receipts', 1)
    redis.call('HINCRBY', counters, b, 1)
    redis.call('HINCRBY', counters, 'receipt_ms_sum', latency)
    if maxlen > 0 then redis.call('XADD', events, '*', 'k', 'receipt', 'id', id, 'd', 'done at ' .. a) end
    status[op] = '1'
  else -- STEP_RESEND (every code was checked above)
    local entry = cjson.decode(a)
    -- Back in the queue as it was first pushed here, unless it is there already (run again meanwhile).
    if redis.call('HSETNX', records, id, entry['r']) == 1 then
      redis.call('LPUSH', named == 0 and lists[''] or (lists[stored_activity(entry['r'])] or lists['']), id)
      resent = resent + 1
      if maxlen > 0 then redis.call('XADD', events, '*', 'k', 'resent', 'id', id, 'd', entry['site']) end
    end
    redis.call('HSET', custody, id, a)
    -- Asked about again once it is handed on anew (custody_keep); meanwhile only if it is never kept again.
    redis.call('ZADD', due, b, id)
    status[op] = '1'
  end
end
if resent > 0 then
  redis.call('HINCRBY', counters, 'resent', resent)
  redis.call(ARGV[6] == 'sharded' and 'SPUBLISH' or 'PUBLISH', ARGV[4], ARGV[5])
end
if maxlen > 0 then redis.call('XTRIM', events, 'MAXLEN', '~', maxlen) end
redis.call('LTRIM', receipts, 0, kept - 1)
return table.concat(status)
