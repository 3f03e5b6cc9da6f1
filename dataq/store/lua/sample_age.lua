-- sample_age.lua: note how long the next record to run has waited, in the current bucket of the rates ring's hour
-- and day (lib/rates.lua; the last sample of a bucket stands for it), for the console's plot of the backlog's age.
-- A pop daemon samples it as it refreshes its gauges (dataq/ops/daemon_ops.py), every second or so.
-- KEYS[1] rates ring
-- ARGV[1] whole seconds the next record to run has waited (0: none waits)
-- return: nothing
sample_in_ring(KEYS[1], 'backlog_age', tonumber(ARGV[1]), tonumber(redis.call('TIME')[1]))
return 0
