-- move_range.lua: apply an operator's range command to the ids first..last (inclusive, as they stand in the
-- source list, index 0 being the left end), all at once or not at all.
--   advance:    active -> right end of active (next to run), order kept
--   deactivate: active -> left end of inactive, order kept
--   activate:   inactive -> left end of active, order kept, error and crash counts reset (fresh retries)
--   delete:     removed from the source list and forgotten
-- KEYS[1] source list     KEYS[2] target list (unused by delete)   KEYS[3] records hash   KEYS[4] errors hash
-- KEYS[5] lasterror hash  KEYS[6] crashes hash                     KEYS[7] the other list (to explain errors)
-- KEYS[8] events stream   KEYS[9] counters hash
-- ARGV[1] mode   ARGV[2] first id   ARGV[3] last id   ARGV[4] events max length   ARGV[5] source list name
-- ARGV[6] other list name
-- return: number of records moved; errors are replies starting with 'DQRANGE'
local source, target, records, errors, lasterror, crashes, other, events, counters =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local mode, first, last, maxlen, source_name, other_name =
  ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[6]
-- Ids are validated to hold no control characters, so this can never be a real id.
local TOMBSTONE = '\0dataq:tombstone'

local function locate(id)
  local pos = redis.call('LPOS', source, id)
  if pos then return pos end
  local where
  if redis.call('LPOS', other, id) then
    where = 'it is in the ' .. other_name .. ' queue'
  elseif redis.call('HEXISTS', records, id) == 1 then
    where = 'it is in flight'
  else
    where = 'no record has this id'
  end
  return redis.error_reply('DQRANGE id ' .. id .. ' is not in the ' .. source_name .. ' queue (' .. where .. ')')
end

local i = locate(first)
if type(i) == 'table' then return i end
local j = locate(last)
if type(j) == 'table' then return j end
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
  push(target, 'RPUSH', 1, #ids, 1)
elseif mode == 'deactivate' then
  push(target, 'LPUSH', #ids, 1, -1)
elseif mode == 'activate' then
  for _, id in ipairs(ids) do
    redis.call('HDEL', errors, id); redis.call('HDEL', lasterror, id); redis.call('HDEL', crashes, id)
  end
  push(target, 'LPUSH', #ids, 1, -1)
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
