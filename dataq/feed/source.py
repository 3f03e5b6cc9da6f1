"""A feeder's source, drawn ahead of its sender: the items to send, encoded into lines and handed over in chunks.

One task draws from the source for the whole feed (:func:`draw`), so a connection that fails never interrupts the
source mid-item (cancelling an async generator would end it for good). Items that cannot be sent at all (a line
that does not encode, a line holding a newline) are refused on the spot, in their place in the input order.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Callable, Iterable

from dataq.feed.link import FeedChunk, FeedItem, encode_item
from dataq.protocol import Reply

PRODUCER_CHUNK = 256
"""Items of a synchronous source handed to the sender at once (an async source's go one by one)."""
PRODUCER_CHUNKS = 16
"""Chunks drawn from the source ahead of the sender."""

Entry = tuple[int, bytes, str | None]
"""An item ready to send: its index, its line, and the id its reply must name (None: not checked)."""
Chunk = list[Entry] | BaseException | None
"""What the source hands the sender: entries, the error that stopped the source, or None at its end."""
Refuse = Callable[[int, Reply], None]
"""Told of an item refused on the spot: its index and the refusal."""


async def draw(items: Iterable[FeedItem] | AsyncIterable[FeedItem | FeedChunk], chunks: asyncio.Queue[Chunk],
               refuse: Refuse) -> None:
    """Draw every item of ``items`` into ``chunks``, then None; the error that stops the source, in its place."""
    index = 0
    try:
        if isinstance(items, AsyncIterable):
            # As the source gives them (an item, or a list): it may be slow, and what it gave must go out now.
            async for item in items:
                given = item if isinstance(item, list) else [item]
                entries = []
                for one in given:
                    entry = _prepare(index, one, refuse)
                    index += 1
                    if entry is not None:
                        entries.append(entry)
                if entries:
                    await chunks.put(entries)
        else:
            chunk: list[Entry] = []
            for item in items:
                entry = _prepare(index, item, refuse)
                index += 1
                if entry is not None:
                    chunk.append(entry)
                    if len(chunk) >= PRODUCER_CHUNK:
                        await chunks.put(chunk)
                        chunk = []
            if chunk:
                await chunks.put(chunk)
    except Exception as exc:
        await chunks.put(exc)
        return
    await chunks.put(None)


def _prepare(index: int, item: FeedItem, refuse: Refuse) -> Entry | None:
    encoded = encode_item(item)
    if isinstance(encoded, Reply):
        refuse(index, encoded)
        return None
    return index, encoded[0], encoded[1]
