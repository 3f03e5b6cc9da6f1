-- receipts.lua: what this site knows of records a site upstream asks about (read only; dataq/store/custody.py).
-- KEYS[1] records hash      KEYS[2] delayed zset      KEYS[3] inactive list      KEYS[4] errors hash
-- KEYS[5] lasterror hash    KEYS[6] custody hash      KEYS[7] lost hash (dataq/store/audits.py)
-- KEYS[8..] two per id, in order: its shard of the remembered done records in the current and the previous
--           generation (dataq/store/remembered.py); none when nothing is remembered (ARGV[3] is '')
-- ARGV[1] max_errors of the queue (a record failed more often is inactive)
-- ARGV[2] the ids, joined by newlines      ARGV[3] their digests (16 bytes each)
-- ARGV[4] newest inactive records searched for an id (LPOS MAXLEN: inactive lists stay short, but never a scan)
-- return: per id, KNOWN_TRACKED NUL state NUL push time (us) NUL last error (STATE_QUEUED, STATE_DELAYED or
--         STATE_INACTIVE; a running record is queued), KNOWN_IN_CUSTODY NUL its custody entry, KNOWN_DONE NUL its
--         remembered value, KNOWN_LOST NUL '<ms>,<why>' (an audit found its copy missing or damaged), or
--         KNOWN_UNKNOWN (the codes: dataq/store/custody_codes.py, put before this script)
local records, delayed, inactive, errors, lasterror, custody = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local lost = KEYS[7]
local max_errors, digests, searched = tonumber(ARGV[1]), ARGV[3], tonumber(ARGV[4])
local out, i = {}, 0
for id in string.gmatch(ARGV[2], '[^\n]+') do
  i = i + 1
  local stored = redis.call('HGET', records, id)
  if stored then
    local state = STATE_QUEUED
    if redis.call('ZSCORE', delayed, id) then
      state = STATE_DELAYED
    elseif tonumber(redis.call('HGET', errors, id) or '0') > max_errors
        or redis.call('LPOS', inactive, id, 'MAXLEN', searched) then
      state = STATE_INACTIVE
    end
    local pushed = stored_push_time(stored)
    out[i] = KNOWN_TRACKED .. '\0' .. state .. '\0' .. pushed .. '\0' .. (redis.call('HGET', lasterror, id) or '')
  else
    local entry = redis.call('HGET', custody, id)
    if entry then
      out[i] = KNOWN_IN_CUSTODY .. '\0' .. entry
    else
      local field = string.sub(digests, 16 * i - 15, 16 * i)
      local value = digests ~= ''
          and (redis.call('HGET', KEYS[6 + 2 * i], field) or redis.call('HGET', KEYS[7 + 2 * i], field))
      if value then
        out[i] = KNOWN_DONE .. '\0' .. value
      else
        local marked = redis.call('HGET', lost, id)
        out[i] = marked and (KNOWN_LOST .. '\0' .. marked) or KNOWN_UNKNOWN
      end
    end
  end
end
return out
