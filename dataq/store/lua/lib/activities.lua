-- lib/activities.lua: how the scripts find the active list a record waits in (dataq/activities; the keys:
-- dataq/keys.py), which the store puts before every script. A queue keeps one active list per activity; a
-- script that puts records back takes them as a block of KEYS: the 'default' activity's list ('active'), then
-- one per named activity, whose names come in one ARGV joined by newlines ('' for a queue without activities).
-- activity_lists(first, names): first: the index in KEYS of default's list; names: the named activities
-- return: a table activity name -> its list key ('' and 'default' give default's), and the number of names
local function activity_lists(first, names)
  local lists, n = { [''] = KEYS[first], default = KEYS[first] }, 0
  for name in string.gmatch(names, '[^\n]+') do
    n = n + 1
    lists[name] = KEYS[first + n]
  end
  return lists, n
end
-- stored_activity(value): the activity a stored value names (its 7th field, dataq/stored_value.py), or '' for
-- one that names none ('default')
local function stored_activity(value)
  local find, at = string.find, 0
  for _ = 1, 6 do
    at = find(value, '\0', at + 1, true)
    if not at then return '' end
  end
  local stop = find(value, '\0', at + 1, true)
  return string.sub(value, at + 1, (stop or 0) - 1)
end
-- list_for(lists, named, records, id): the list record id goes back to: its activity's, or default's when the
-- queue has no activities (nothing is read then), when the record is gone, or when its activity is not served
-- here any more (a removed activity's records run as default's)
local function list_for(lists, named, records, id)
  if named == 0 then return lists[''] end
  local value = redis.call('HGET', records, id)
  return value and lists[stored_activity(value)] or lists['']
end
-- count_activity_done(counters, ring, name, n, now): n records of activity name done: the counter
-- 'done@<name>' and the activity's own ring of done counts (ring: its key, dq:{NAME}:rates:<activity>); now: the
-- server's time in seconds (read once for every activity of a call)
local function count_activity_done(counters, ring, name, n, now)
  if n <= 0 then return end
  local total = redis.call('HINCRBY', counters, 'done@' .. name, n)
  count_in_ring(ring, 'done', n, function() return total - n end, now)
end
