-- claim.lua: move up to N records from the right (next-to-run) ends of the active lists into a worker's
-- processing list, atomically with the check of the `action` flag, so no record is claimed once it is off.
-- With activities (dataq/activities), the strict ones are served first, in order, each until its list is empty;
-- the rest of the claim is shared between the other activities that have records queued by a smooth weighted
-- round robin (nginx's): each pick adds every candidate's weight to its credit and takes from the one with the
-- most, which then gives back the candidates' total weight. Picks interleave (3:1 runs A A B A, not A A A B),
-- the credits persist between claims (the shares hash), and an activity with nothing queued keeps none, so one
-- that comes back starts level. The work per claim grows with the records claimed and the activities defined
-- (at most 32), never with the records queued.
-- KEYS[1] processing list of the worker    KEYS[2] records hash     KEYS[3] flags hash      KEYS[4] events stream
-- KEYS[5] counters hash                    KEYS[6] workers hash     KEYS[7] shares hash
-- KEYS[8] default's active list, then one active list per named activity (lib/activities.lua)
-- ARGV[1] most records to claim      ARGV[2] events max length (0 = keep no events)      ARGV[3] worker id
-- ARGV[4] the named activities, joined by newlines ('' without activities)
-- ARGV[5] every activity in the order served, 'name:weight' joined by commas (weight 0: strict)
-- return: { 'off' } when the action flag is off; { 'unregistered' } when the worker is not in the registry
-- (the sweeper could never give its records back, so it must beat its heart first); { 'ok' } when nothing was
-- claimed; otherwise { 'ok', ids joined by newlines, stored values joined by newlines } (two strings instead of
-- two per record: the client parses a long reply element by element, and that cost more than the claim itself)
local processing, records, flags, events, counters, workers, shares =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local maxlen = tonumber(ARGV[2])
if redis.call('HGET', flags, 'action') == 'off' then return { 'off' } end
if redis.call('HEXISTS', workers, ARGV[3]) == 0 then return { 'unregistered' } end
local wanted = tonumber(ARGV[1])
if wanted < 1 then return { 'ok' } end  -- LRANGE from -0 would take the whole list
local lists, named = activity_lists(8, ARGV[4])

-- take(list, n): the n next-to-run ids of a list, next to run first, out of the list (LRANGE and LTRIM: a few
-- commands for the whole batch rather than an LMOVE per record)
local function take(list, n)
  local taken = redis.call('LRANGE', list, -n, -1)
  if #taken == 0 then return taken end
  redis.call('LTRIM', list, 0, -#taken - 1)
  local order = {}
  for i = #taken, 1, -1 do order[#order + 1] = taken[i] end
  return order
end

local order
if named == 0 then
  order = take(lists[''], wanted)
else
  local served, remaining = {}, wanted
  for name, weight in string.gmatch(ARGV[5], '([^,:]+):(%d+)') do
    served[#served + 1] = { name = name, weight = tonumber(weight), list = lists[name],
                            left = redis.call('LLEN', lists[name]), take = 0 }
  end
  local picks = {}
  for _, a in ipairs(served) do
    if a.weight == 0 and remaining > 0 and a.left > 0 then
      a.take = math.min(remaining, a.left)
      a.left, remaining = a.left - a.take, remaining - a.take
      for _ = 1, a.take do picks[#picks + 1] = a end
    end
  end
  local sharing = {}
  for _, a in ipairs(served) do if a.weight > 0 then sharing[#sharing + 1] = a end end
  if remaining > 0 and #sharing > 0 then
    local names = {}
    for i, a in ipairs(sharing) do names[i] = a.name end
    local credits = redis.call('HMGET', shares, unpack(names))
    for i, a in ipairs(sharing) do a.credit = tonumber(credits[i]) or 0 end
    while remaining > 0 do
      local total, best = 0, nil
      for _, a in ipairs(sharing) do
        if a.left > 0 then
          a.credit = a.credit + a.weight
          total = total + a.weight
          if not best or a.credit > best.credit then best = a end
        end
      end
      if not best then break end
      best.credit = best.credit - total
      best.take, best.left, remaining = best.take + 1, best.left - 1, remaining - 1
      picks[#picks + 1] = best
    end
    local kept = {}
    for _, a in ipairs(sharing) do
      kept[#kept + 1] = a.name
      kept[#kept + 1] = a.left > 0 and a.credit or 0
    end
    redis.call('HSET', shares, unpack(kept))
  end
  for _, a in ipairs(served) do
    if a.take > 0 then a.ids, a.next = take(a.list, a.take), 1 end
  end
  order = {}
  for _, a in ipairs(picks) do
    order[#order + 1] = a.ids[a.next]
    a.next = a.next + 1
  end
end
if #order == 0 then return { 'ok' } end
-- Next to run first, as if each had been moved on its own from the right of active to the left of processing.
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
