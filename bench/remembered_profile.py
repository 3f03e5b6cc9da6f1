"""Where remembering done ids costs the record path: Redis time per call, the calls a script makes, the client.

Against a private redis-server fsyncing every write (``INFO commandstats``, reset before each measurement):

* the store's pushes by 1,000 and its acknowledgements by 200 (as a pop daemon's), remembering done ids and not
  (``remember_done = 0``): Redis µs per record in the scripts, and the remembering commands per record;
* what a lookup from a script costs here: an empty script, 1,000 ``HEXISTS`` from one script, and the filter that
  could replace them, one ``BITFIELD_RO`` of 1,000 ``GET u1`` with offsets computed in the script or sent as
  strings;
* a layout whose lookups could be batched: the ids of a generation packed into 65,536 buckets of fixed-width
  entries (the digest's last 14 bytes, then the done time), the fields of 16 hashes, so that 1,000 lookups are one
  ``HMGET`` per hash (16, not 1,000) and a scan of the buckets it returns; and the same ``HMGET`` calls alone, to
  tell the calls from what their replies cost a script;
* the client: md5 digests of 1,000 ids, one call per id against :func:`dataq.store.remembered.digests_of`.

Run it: ``.venv/bin/python bench/remembered_profile.py [--records 50000] [--bucket-ids 1000000]``
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import tempfile
import timeit
from typing import Any

import redis.asyncio as aioredis

from dataq.embedded.redis_server import EmbeddedRedis
from dataq.record import Record
from dataq.store import QueueStore
from dataq.store.remembered import digest, digests_of

WORKER = "bench:1:pop:profile"
LOOKUPS = """
for i = 1, 1000 do redis.call('HEXISTS', KEYS[1] .. i, 'a field') end
return 1
"""
FILTER_COMPUTED = """
local args = {}
for j = 1, 1000 do
  local a, b, c = string.byte(ARGV[1], 16 * j - 13, 16 * j - 11)
  args[3 * j - 2], args[3 * j - 1], args[3 * j] = 'GET', 'u1', 65537 + (a % 128) * 65536 + b * 256 + c
end
return #redis.call('BITFIELD_RO', KEYS[1], unpack(args))
"""
FILTER_SENT = "return #redis.call('BITFIELD_RO', KEYS[1], unpack(ARGV, 2))"
BUCKET_ENTRY = 22
"""Bytes of a packed entry: the digest's last 14 bytes, the done time in ms (6), a spare 2."""
BUCKETS = """
-- KEYS: the 16 hashes of packed buckets; ARGV[1]: 1,000 digests of 16 bytes; ARGV[2]: 'scan' or 'read';
-- ARGV[3]: the bytes of an entry (BUCKET_ENTRY)
local digests, width, by_hash = ARGV[1], tonumber(ARGV[3]), {}
for i = 1, #digests / 16 do
  local first = string.byte(digests, 16 * i - 15)
  local hash = math.floor(first / 16) + 1
  local ids = by_hash[hash]
  if not ids then ids = {}; by_hash[hash] = ids end
  ids[#ids + 1] = i
end
local found = 0
for hash, ids in pairs(by_hash) do
  local fields = {}
  for j, i in ipairs(ids) do
    local a, b = string.byte(digests, 16 * i - 15, 16 * i - 14)
    fields[j] = string.char(a % 16, b)
  end
  local buckets = redis.call('HMGET', KEYS[hash], unpack(fields))
  if ARGV[2] == 'scan' then
    for j, i in ipairs(ids) do
      local bucket, rest, at = buckets[j], string.sub(digests, 16 * i - 13, 16 * i), 1
      while bucket do
        at = string.find(bucket, rest, at, true)
        if not at then break end
        if (at - 1) % width == 0 then found = found + 1; break end
        at = at + 1
      end
    end
  end
end
return found
"""


def records(count: int, start: int) -> list[Record]:
    return [Record(f"/data/night/f{n:08d}.fits", hashlib.md5(str(n).encode()).hexdigest(), n)
            for n in range(start, start + count)]


async def script_usec(r: aioredis.Redis) -> tuple[int, int]:
    stats = (await r.info("commandstats")).get("cmdstat_evalsha", {"calls": 0, "usec": 0})
    return int(stats["calls"]), int(stats["usec"])


async def calls(r: aioredis.Redis) -> dict[str, int]:
    return {name.removeprefix("cmdstat_"): int(value["calls"])
            for name, value in (await r.info("commandstats")).items()}


async def record_path(url: str, r: aioredis.Redis, count: int, remember_done: float | None) -> list[str]:
    options: dict[str, Any] = {} if remember_done is None else {"remember_done": remember_done}
    label = "remembering" if remember_done is None else "remember_done = 0"
    store = QueueStore.from_url(url, "profile", **options)
    try:
        await r.flushall()
        await r.config_resetstat()
        items = records(count, 0)
        for first in range(0, count, 1000):
            await store.push_batch(items[first:first + 1000], source="bench")
        _, pushed_usec = await script_usec(r)
        await store.heartbeat(WORKER, {}, {}, 600.0)
        await r.config_resetstat()
        for _ in range(0, count, 200):
            claim = await store.claim(WORKER, 200)
            await store.ack(WORKER, [(record.id, "") for record in claim.records])
        _, acked_usec = await script_usec(r)
        made = await calls(r)
    finally:
        await store.close()
    remembering = ", ".join(f"{made.get(name, 0) / count:.2f} {name.upper()}" for name in ("hset", "hlen", "pexpireat"))
    return [f"| pushes by 1,000, {label} | {pushed_usec / count:.2f} µs of Redis per record in the script |",
            f"| acknowledgements by 200, {label} | {acked_usec / count:.2f} µs per record; per record: {remembering} |"]


async def per_call(r: aioredis.Redis, source: str, keys: list[str], args: list[Any], rounds: int = 200) -> float:
    sha = await r.script_load(source)
    await r.config_resetstat()
    for _ in range(rounds):
        await r.evalsha(sha, len(keys), *keys, *args)
    made, usec = await script_usec(r)
    return usec / made


async def lua_costs(r: aioredis.Redis, bucket_ids: int) -> list[str]:
    digests = os.urandom(16 * 1000)
    offsets: list[Any] = []
    for j in range(1000):
        a, b, c = digests[16 * j + 2:16 * j + 5]
        offsets += ["GET", "u1", str(65537 + (a % 128) * 65536 + b * 256 + c)]
    await r.set("dq:{profile}:bits", os.urandom(1 << 20))
    empty = await per_call(r, "return 1", [], [])
    lookups = await per_call(r, LOOKUPS, ["dq:{profile}:done:1:"], [])
    computed = await per_call(r, FILTER_COMPUTED, ["dq:{profile}:bits"], [digests])
    sent = await per_call(r, FILTER_SENT, ["dq:{profile}:bits"], [b"", *offsets])
    hashes, per_id = await packed_buckets(r, bucket_ids)
    scanned = await per_call(r, BUCKETS, hashes, [digests, "scan", BUCKET_ENTRY], rounds=50)
    read = await per_call(r, BUCKETS, hashes, [digests, "read", BUCKET_ENTRY], rounds=50)
    return [f"| an empty script | {empty:.0f} µs per call |",
            f"| 1,000 `HEXISTS` from one script | {lookups:.0f} µs per call ({(lookups - empty) / 1000:.2f} µs each) |",
            f"| one `BITFIELD_RO` of 1,000 `GET u1`, offsets computed in the script | {computed:.0f} µs per call |",
            f"| the same, offsets sent as strings | {sent:.0f} µs per call |",
            f"| 1,000 lookups in packed buckets ({bucket_ids:,} ids, {per_id:.1f} bytes each): 16 `HMGET` and a "
            f"scan | {scanned:.0f} µs per call |",
            f"| the same 16 `HMGET` alone, their replies unread | {read:.0f} µs per call |"]


async def packed_buckets(r: aioredis.Redis, count: int) -> tuple[list[str], float]:
    """``count`` ids of one generation in the packed layout (see the module's docstring): the 16 hashes' names,
    and the bytes of Redis memory each id takes."""
    hashes = [f"dq:{{profile}}:packed:{hash_:x}" for hash_ in range(16)]
    await r.delete(*hashes)
    before = int((await r.info("memory"))["used_memory"])
    done_ms = (1_764_000_000_000).to_bytes(6, "big").ljust(BUCKET_ENTRY - 14, b"\0")
    buckets: dict[tuple[int, bytes], list[bytes]] = {}
    for n in range(count):
        value = hashlib.md5(b"packed %d" % n).digest()
        buckets.setdefault((value[0] >> 4, bytes([value[0] & 15, value[1]])), []).append(value[2:] + done_ms)
    items = list(buckets.items())
    for first in range(0, len(items), 4096):
        async with r.pipeline(transaction=False) as pipe:
            for (hash_, field), entries in items[first:first + 4096]:
                pipe.hset(hashes[hash_], field, b"".join(entries))
            await pipe.execute()
    return hashes, (int((await r.info("memory"))["used_memory"]) - before) / count


def client_costs() -> list[str]:
    ids = [hashlib.md5(str(n).encode()).hexdigest() for n in range(1000)]
    one_by_one = min(timeit.repeat(lambda: [digest(i) for i in ids], number=200, repeat=5)) / 200
    encoded_once = min(timeit.repeat(lambda: digests_of(ids), number=200, repeat=5)) / 200
    return [f"| md5 digests of 1,000 ids, a call per id | {one_by_one * 1e3:.2f} ms |",
            f"| the same from one encoding (`digests_of`) | {encoded_once * 1e3:.2f} ms |"]


async def main(count: int, bucket_ids: int) -> None:
    with tempfile.TemporaryDirectory(prefix="dataq-remembered-") as temp, \
            EmbeddedRedis(temp, port=0, appendfsync="always") as server:
        r = aioredis.Redis.from_url(server.url, decode_responses=True)
        try:
            rows = [*await record_path(server.url, r, count, None), *await record_path(server.url, r, count, 0),
                    *await lua_costs(r, bucket_ids), *client_costs()]
        finally:
            await r.aclose()
    print(f"what remembering done ids costs ({count:,} records; {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f})\n")
    print("| measured | result |\n| --- | --- |")
    print("\n".join(rows))
    print(f"\nrerun: .venv/bin/python bench/remembered_profile.py --records {count} --bucket-ids {bucket_ids}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--bucket-ids", type=int, default=1_000_000, help="ids in the packed layout")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.records, arguments.bucket_ids))
