-- lib/rates.lua: tally(), which the store puts before every script (see load_scripts in
-- dataq/store/connection.py), so that the scripts that push, finish and fail records count them in one way.
-- tally(counters, rates, kind, n) adds n to the queue's monotonic total of ``kind`` (the counters hash) and to
-- the current 10-second bucket of its rates ring (dq:{NAME}:rates, documented in dataq/keys.py): field
-- 't:<slot>' holds the bucket (server time // RATE_BUCKET_SECONDS) the slot counts, '<kind>:<slot>' its count,
-- 'since' the server time the ring began counting (0: with the queue itself, so nothing before it is missing).
-- 360 slots of 10 s keep an hour; a slot is emptied when a new bucket takes it. The day's ring, in the same
-- hash, is the same with 'd:' before each field and buckets of 5 minutes. Reading the last minute is one
-- HMGET of a few dozen fields, whatever the traffic: the operator's --summary never reads the event stream.
-- RATE_BUCKET_SECONDS, RATE_SLOTS and RATE_KINDS are the ring's shape, put before this file by the store from
-- dataq/store/rate_ring.py (the one place the store that reads the ring also takes them from).
-- counters, rates: keys (KEYS entries of the calling script)   kind: one of RATE_KINDS   n: records (nothing
-- is written for n <= 0)
-- return: nothing
-- count_in_ring(rates, kind, n, earlier[, now]): adds n to the current bucket's count of ``kind`` in the ring
-- ``rates``, and in the day's ring kept in the same hash (DAY_PREFIX fields: 288 buckets of 5 minutes); earlier()
-- says how many records of the ring were counted before it began (0: none), asked on its first count; now: the
-- server's time in seconds, when the caller read it already (one TIME for several rings)
local function count_in_slot(rates, kind, n, now, prefix, seconds, slots, sample)
  local bucket = math.floor(now / seconds)
  local slot = bucket % slots
  local stamp = prefix .. 't:' .. slot
  local fresh = tonumber(redis.call('HGET', rates, stamp)) ~= bucket
  if fresh then
    -- The slot still counts a bucket a ring's length old or more (or none yet): start it afresh.
    local stale = {}
    for i, name in ipairs(RATE_KINDS) do stale[i] = prefix .. name .. ':' .. slot end
    redis.call('HDEL', rates, unpack(stale))
    redis.call('HSET', rates, stamp, bucket)
  end
  redis.call(sample and 'HSET' or 'HINCRBY', rates, prefix .. kind .. ':' .. slot, n)
  return fresh
end
-- sample_in_ring(rates, kind, value, now): ``value`` stands for the current bucket of the hour's and the day's rings
-- (the last sample of a bucket wins): a level, such as how long the next record has waited, not a count
local function sample_in_ring(rates, kind, value, now)
  count_in_slot(rates, kind, value, now, '', RATE_BUCKET_SECONDS, RATE_SLOTS, true)
  count_in_slot(rates, kind, value, now, DAY_PREFIX, DAY_BUCKET_SECONDS, DAY_SLOTS, true)
end
local function count_in_ring(rates, kind, n, earlier, now)
  -- The server's clock, not the caller's: every daemon's counts land in the buckets of one clock.
  now = now or tonumber(redis.call('TIME')[1])
  count_in_slot(rates, kind, n, now, '', RATE_BUCKET_SECONDS, RATE_SLOTS)
  -- Asked at every count, not only a bucket's first: the pop daemons' notes of the backlog's age start buckets too.
  if redis.call('HEXISTS', rates, 'since') == 0 then
    -- The ring's first count. Records counted before it (a queue older than its ring) are in no bucket, so
    -- the rates cover only from now; a new queue's ring misses nothing.
    redis.call('HSET', rates, 'since', earlier() > 0 and now or 0)
  end
  count_in_slot(rates, kind, n, now, DAY_PREFIX, DAY_BUCKET_SECONDS, DAY_SLOTS)
end
local function tally(counters, rates, kind, n)
  if n <= 0 then return end
  redis.call('HINCRBY', counters, kind, n)
  count_in_ring(rates, kind, n, function()
    local before = 0
    for _, total in ipairs(redis.call('HMGET', counters, unpack(RATE_KINDS))) do
      before = before + (tonumber(total) or 0)
    end
    return before - n
  end)
end
