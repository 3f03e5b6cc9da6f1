-- claim.lua: move up to N records from the right (next-to-run) end of the active list into a worker's
-- processing list, atomically with the check of the `action` flag, so no record is claimed once it is off.
-- KEYS[1] active list       KEYS[2] processing list of the worker      KEYS[3] records hash
-- KEYS[4] flags hash        KEYS[5] events stream                      KEYS[6] counters hash
-- KEYS[7] workers hash
-- ARGV[1] most records to claim      ARGV[2] events max length (0 = keep no events)      ARGV[3] worker id
-- return: { 'off' } when the action flag is off; { 'unregistered' } when the worker is not in the registry
-- (the sweeper could never give its records back, so it must beat its heart first); { 'ok' } when nothing was
-- claimed; otherwise { 'ok', ids joined by newlines, stored values joined by newlines } (two strings instead of
-- two per record: the client parses a long reply element by element, and that cost more than the claim itself)
local active, processing, records, flags, events, counters, workers =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local maxlen = tonumber(ARGV[2])
if redis.call('HGET', flags, 'action') == 'off' then return { 'off' } end
if redis.call('HEXISTS', workers, ARGV[3]) == 0 then return { 'unregistered' } end
-- The whole batch in a few commands (LRANGE, LTRIM, LPUSH, HMGET) rather than an LMOVE and an HGET per record.
local wanted = tonumber(ARGV[1])
if wanted < 1 then return { 'ok' } end  -- LRANGE from -0 would take the whole list
local taken = redis.call('LRANGE', active, -wanted, -1)
if #taken == 0 then return { 'ok' } end
redis.call('LTRIM', active, 0, -#taken - 1)
-- Next to run first, as if each had been moved on its own from the right of active to the left of processing.
local order = {}
for i = #taken, 1, -1 do order[#order + 1] = taken[i] end
-- unpack() is limited by Lua's C stack, so push and read in chunks.
for first = 1, #order, 1000 do
  redis.call('LPUSH', processing, unpack(order, first, math.min(first + 999, #order)))
end
local ids, values = {}, {}
local orphaned = 0
for first = 1, #order, 1000 do
  local last = math.min(first + 999, #order)
  local stored = redis.call('HMGET', records, unpack(order, first, last))
  for i = first, last do
    local id, value = order[i], stored[i - first + 1]
    if value then
      -- Values stored by dataq never hold a newline (a path cannot, and the source is cleaned); one written by
      -- hand might, and must not break the framing.
      if string.find(value, '\n', 1, true) then value = (string.gsub(value, '\n', '?')) end
      ids[#ids + 1] = id
      values[#values + 1] = value
      if maxlen > 0 then redis.call('XADD', events, '*', 'k', 'claimed', 'id', id, 'd', ARGV[3]) end
    else
      -- An id without its record cannot be run; drop it rather than hand a worker nothing to act on.
      redis.call('LREM', processing, 1, id)
      orphaned = orphaned + 1
    end
  end
end
if orphaned > 0 then redis.call('HINCRBY', counters, 'orphaned', orphaned) end
if #ids == 0 then return { 'ok' } end
-- Trimmed once per batch, not per event: a per-entry MAXLEN costs more than the XADD itself.
if maxlen > 0 then redis.call('XTRIM', events, 'MAXLEN', '~', maxlen) end
redis.call('HINCRBY', counters, 'claimed', #ids)
return { 'ok', table.concat(ids, '\n'), table.concat(values, '\n') }
