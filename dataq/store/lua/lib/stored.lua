-- lib/stored.lua: stored_push_time(), which the store puts before every script, so that the scripts that need a
-- record's push time read it from its stored value in one way (the value's layout: dataq/record.py,
-- encode_stored: path NUL size NUL push time in microseconds NUL source).
-- value: a stored record value
-- return: its push time (microseconds, as the string stored), or '' for a value without one
local function stored_push_time(value)
  -- Plain finds: a pattern over every character of the path cost more than the rest of the work per record.
  local find = string.find
  local one = find(value, '\0', 1, true)
  local two = one and find(value, '\0', one + 1, true)
  if not two then return '' end
  local three = find(value, '\0', two + 1, true)
  return string.sub(value, two + 1, (three or 0) - 1)
end
