-- adopt.lua: records queued for an activity this site no longer serves (its settings lost it) move to the left
-- (last-to-run) end of default's active list, keeping their order, so that none waits for ever in a list no
-- claim looks at. Called repeatedly until it returns less than it was allowed, so Redis is never held long.
-- The activity stays in the activities set: a daemon still on older settings may put one of its records back into
-- the list later (a retry, a release at its shutdown), and only push_batch adds names to the set.
-- KEYS[1] the activity's active list     KEYS[2] default's active list     KEYS[3] events stream
-- ARGV[1] the activity's name            ARGV[2] most records to move      ARGV[3] events max length
-- return: number of records moved
local moved = 0
for _ = 1, tonumber(ARGV[2]) do
  -- The next to run first, each pushed on the left: the order within the moved block stays the run order.
  if not redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT') then break end
  moved = moved + 1
end
local maxlen = tonumber(ARGV[3])
if moved > 0 and maxlen > 0 then
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', maxlen, '*', 'k', 'adopted', 'id', '', 'd',
    'activity=' .. ARGV[1] .. ' count=' .. moved)
end
return moved
