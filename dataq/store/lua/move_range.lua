-- move_range.lua: apply an operator's range command to the ids first..last (inclusive, as they stand in the
-- source list, index 0 being the left end), all at once or not at all.
--   advance:    active -> right end of its active list (next to run), order kept
--   deactivate: active -> left end of inactive, order kept
--   activate:   inactive -> left end of each record's activity's active list, order kept, error and crash counts
--               reset (fresh retries)
--   delete:     removed from the source list and forgotten
-- With activities, "active" is one list per activity (lib/activities.lua): a range of active records lies within
-- one of them, and a range whose ends are in two activities' lists is refused.
-- KEYS[1] inactive list   KEYS[2] records hash    KEYS[3] errors hash    KEYS[4] lasterror hash
-- KEYS[5] crashes hash    KEYS[6] events stream   KEYS[7] counters hash
-- KEYS[8] default's active list, then one per named activity
-- ARGV[1] mode   ARGV[2] first id   ARGV[3] last id   ARGV[4] events max length   ARGV[5] source list name
-- ('active' or 'inactive')   ARGV[6] other list name   ARGV[7] the named activities, joined by newlines
-- return: number of records moved; errors are replies starting with 'DQRANGE'
local inactive, records, errors, lasterror, crashes, events, counters =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local mode, first, last, maxlen, source_name, other_name =
  ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[6]
local lists, named = activity_lists(8, ARGV[7])
-- The active lists in order, each with its activity's name.
local actives = { { list = lists[''], name = 'default' } }
for name in string.gmatch(ARGV[7], '[^\n]+') do actives[#actives + 1] = { list = lists[name], name = name } end
-- Ids are validated to hold no control characters, so this can never be a real id.
local TOMBSTONE = '\0dataq:tombstone'

-- find(id, among): the position of id in the first list of among that holds it, and that list's entry
local function find(id, among)
  for _, entry in ipairs(among) do
    local pos = redis.call('LPOS', entry.list, id)
    if pos then return pos, entry end
  end
end
local sources = source_name == 'active' and actives or { { list = inactive, name = 'inactive' } }
local others = source_name == 'active' and { { list = inactive, name = 'inactive' } } or actives
local function locate(id)
  local pos, entry = find(id, sources)
  if pos then return pos, entry end
  local where
  if find(id, others) then
    where = 'it is in the ' .. other_name .. ' queue'
  elseif redis.call('HEXISTS', records, id) == 1 then
    where = 'it is in flight'
  else
    where = 'no record has this id'
  end
  return redis.error_reply('DQRANGE id ' .. id .. ' is not in the ' .. source_name .. ' queue (' .. where .. ')')
end

local i, from = locate(first)
if type(i) == 'table' then return i end
local j, to = locate(last)
if type(j) == 'table' then return j end
if from ~= to then
  return redis.error_reply('DQRANGE ' .. first .. ' is queued in activity ' .. from.name .. ' and ' .. last
    .. ' in activity ' .. to.name .. ': a range moves the records of one activity; move each part on its own')
end
local source = from.list
if i > j then
  return redis.error_reply('DQRANGE reversed range: ' .. first .. ' (position ' .. i .. ') comes after '
    .. last .. ' (position ' .. j .. ') in the ' .. source_name .. ' queue')
end
local ids = redis.call('LRANGE', source, i, j)
for k = i, j do redis.call('LSET', source, k, TOMBSTONE) end
redis.call('LREM', source, #ids, TOMBSTONE)

local function push(list, command, from, to, step)
  local chunk = {}
  for k = from, to, step do
    chunk[#chunk + 1] = ids[k]
    if #chunk == 1000 then redis.call(command, list, unpack(chunk)); chunk = {} end
  end
  if #chunk > 0 then redis.call(command, list, unpack(chunk)) end
end

if mode == 'advance' then
  push(source, 'RPUSH', 1, #ids, 1)
elseif mode == 'deactivate' then
  push(inactive, 'LPUSH', #ids, 1, -1)
elseif mode == 'activate' then
  for _, id in ipairs(ids) do
    redis.call('HDEL', errors, id); redis.call('HDEL', lasterror, id); redis.call('HDEL', crashes, id)
  end
  if named == 0 then
    push(lists[''], 'LPUSH', #ids, 1, -1)
  else
    for k = #ids, 1, -1 do redis.call('LPUSH', list_for(lists, named, records, ids[k]), ids[k]) end
  end
elseif mode == 'delete' then
  for _, id in ipairs(ids) do
    redis.call('HDEL', records, id); redis.call('HDEL', errors, id)
    redis.call('HDEL', lasterror, id); redis.call('HDEL', crashes, id)
  end
else
  return redis.error_reply('DQRANGE unknown mode ' .. mode)
end
local kind = ({ advance = 'advanced', deactivate = 'deactivated', activate = 'activated', delete = 'deleted' })[mode]
redis.call('HINCRBY', counters, kind, #ids)
if maxlen > 0 then
  redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*', 'k', kind, 'id', first,
    'd', 'last=' .. last .. ' count=' .. #ids .. ' from=' .. source_name)
end
return #ids
