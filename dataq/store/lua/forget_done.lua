-- forget_done.lua: forget remembered done records, whole shards at a time (dataq-cli --clear): a record pushed
-- again afterwards is stored and run again, as with the 2014 data-q.
-- KEYS[1..] shards of the remembered done records (dataq/store/remembered.py), a chunk of one or two generations
-- return: number of remembered ids forgotten
local count = 0
for i = 1, #KEYS do count = count + redis.call('HLEN', KEYS[i]) end
-- UNLINK, not DEL: a shard is small, but a chunk names thousands of them; the memory is freed off the main thread.
redis.call('UNLINK', unpack(KEYS))
return count
