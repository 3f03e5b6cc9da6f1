-- claim.lua: move up to N records from the right (next-to-run) end of the active list into a worker's
-- processing list, atomically with the check of the `action` flag, so no record is claimed once it is off.
-- KEYS[1] active list       KEYS[2] processing list of the worker      KEYS[3] records hash
-- KEYS[4] flags hash        KEYS[5] events stream                      KEYS[6] counters hash
-- KEYS[7] workers hash
-- ARGV[1] most records to claim      ARGV[2] events max length (0 = keep no events)      ARGV[3] worker id
-- return: { 'off' } when the action flag is off; { 'unregistered' } when the worker is not in the registry
-- (the sweeper could never give its records back, so it must beat its heart first); otherwise
-- { 'ok', id1, value1, id2, value2, ... }
local active, processing, records, flags, events, counters, workers =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local maxlen = tonumber(ARGV[2])
if redis.call('HGET', flags, 'action') == 'off' then return { 'off' } end
if redis.call('HEXISTS', workers, ARGV[3]) == 0 then return { 'unregistered' } end
local out = { 'ok' }
local claimed, orphaned = 0, 0
for _ = 1, tonumber(ARGV[1]) do
  local id = redis.call('LMOVE', active, processing, 'RIGHT', 'LEFT')
  if not id then break end
  local value = redis.call('HGET', records, id)
  if value then
    out[#out + 1] = id
    out[#out + 1] = value
    claimed = claimed + 1
    if maxlen > 0 then redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*', 'k', 'claimed', 'id', id, 'd', ARGV[3]) end
  else
    -- An id without its record cannot be run; drop it rather than hand a worker nothing to act on.
    redis.call('LREM', processing, 1, id)
    orphaned = orphaned + 1
  end
end
if claimed > 0 then redis.call('HINCRBY', counters, 'claimed', claimed) end
if orphaned > 0 then redis.call('HINCRBY', counters, 'orphaned', orphaned) end
return out
