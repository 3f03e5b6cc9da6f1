-- custody_keep.lua: records handed on to the next site enter (or stay in) this site's custody until a receipt
-- says the end of the chain holds them (dataq/store/custody.py).
-- A record kept again (resent, or run again after a crash) keeps its first hand-on time, so its age counts
-- from the first, and its resend count.
-- KEYS[1] custody hash      KEYS[2] custody_due zset      KEYS[3] custody_since zset      KEYS[4] custody_sites hash
-- ARGV[1] now (ms)          ARGV[2] when each is first asked about (ms)
-- ARGV[3] the ids, joined by newlines          ARGV[4] their custody entries (JSON), joined by newlines
-- return: the number of records in custody after
local custody, due, since, sites = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now, first_ask = ARGV[1], ARGV[2]
local ids, entries = {}, {}
for id in string.gmatch(ARGV[3], '[^\n]+') do ids[#ids + 1] = id end
for entry in string.gmatch(ARGV[4], '[^\n]+') do entries[#entries + 1] = entry end
if #ids ~= #entries then
  return redis.error_reply('ERR custody_keep: ' .. #ids .. ' ids but ' .. #entries .. ' entries')
end
for i, id in ipairs(ids) do
  local entry = cjson.decode(entries[i])
  local old = redis.call('HGET', custody, id)
  if old then
    local previous = cjson.decode(old)
    entry['n'] = previous['n'] or 0
    if redis.call('HINCRBY', sites, previous['site'], -1) <= 0 then redis.call('HDEL', sites, previous['site']) end
  end
  redis.call('HINCRBY', sites, entry['site'], 1)
  redis.call('HSET', custody, id, cjson.encode(entry))
  redis.call('ZADD', since, 'NX', now, id)
  redis.call('ZADD', due, first_ask, id)
end
return redis.call('HLEN', custody)
