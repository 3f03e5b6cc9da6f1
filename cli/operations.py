"""What ``dataq-cli`` does with the switches it was given: one fixed order of steps, carried out one by one.

The seed (section 4.3.3) demands that the order of the work never depends on the order of the switches.
:data:`STEPS` is that order; ``--help`` prints it from here, so the two cannot drift apart. Every step talks to
Redis only through :class:`~dataq.store.QueueStore`, and the first step that raises stops the rest.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from dataq.custody.journey import Tracer
from dataq.custody.receipts import ReceiptKind
from dataq.custody.report import custody_report
from dataq.ops.eta import activity_etas, queue_eta
from dataq.ops.health import check_health, rates, unreachable_destinations
from dataq.ops.why import WaitCode, why
from dataq.protocol import ignored_reply, pushed_reply
from dataq.record import Record, RecordRules
from dataq.store import Flag, QueueList, QueueStore

from . import files
from .options import EXIT_FAILURE, EXIT_OK
from .render import Renderer

DEFAULT_EVENTS = 20
"""Events shown by a bare --events (and before --follow starts tailing)."""
FOLLOW_BLOCK = 1.0
"""Seconds one read of --follow waits for new events before it asks again."""
FOLLOW_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
LIST_CHUNK = 1_000
"""Records read per round trip by --list."""
STREAM_START = "0-0"
"""The stream id before any event."""
CLI_SOURCE = "cli"
"""The source stored with records pushed by --pushstr and --pushfile."""


@dataclass(frozen=True)
class Request:
    """Every switch of one call, already validated (records parsed, data files checksummed)."""

    action: bool | None = None
    read: bool | None = None
    clear: bool = False
    pushes: tuple[tuple[str, Record], ...] = ()
    """(switch, record) for each --pushstr and --pushfile, in that order."""
    load: str | None = None
    again: bool = False
    """--load pushes its records sent again on purpose (--pushstr's and --pushfile's already say so)."""
    activity: str | None = None
    """--load queues every record in this activity (--pushstr's and --pushfile's already say so)."""
    advance: tuple[str, str] | None = None
    deactivate: tuple[str, str] | None = None
    activate: tuple[str, str] | None = None
    delete: tuple[QueueList, str, str] | None = None
    redo: bool = False
    dump: str | None = None
    listing: str | None = None
    """What --list names: ``active``, ``inactive`` or ``records`` (every tracked record, in no particular order)."""
    offset: int = 0
    limit: int | None = None
    show: str | None = None
    """The id --show asks about (checked against the queue's checksum pattern)."""
    why: str | None = None
    """The id --why explains (checked as --show's)."""
    trace: str | None = None
    """The id --trace follows across the sites (checked as --show's)."""
    events: int | None = None
    follow: bool = False
    workers: bool = False
    info: bool = False
    health: bool = False
    summary: bool = False


@dataclass
class Context:
    store: QueueStore
    request: Request
    out: Renderer
    rules: RecordRules
    progress: bool
    max_errors: int
    """The queue's ``max_errors`` (--why says how many failures a record has left)."""
    status: int = field(default=EXIT_OK)
    follow_from: str | None = None
    """The id of the last event --events showed (--follow shows what comes after it)."""
    tracer: Tracer | None = None
    """Follows a record across the sites (--trace)."""


def _list_of(name: str | None) -> QueueList | None:
    """The store's list for a --list/--dump target; None means every tracked record."""
    return None if name == "records" else QueueList(name or QueueList.ACTIVE.value)


async def _flags(ctx: Context) -> None:
    for flag, wanted in ((Flag.ACTION, ctx.request.action), (Flag.READ, ctx.request.read)):
        if wanted is not None:
            previous = await ctx.store.set_flag(flag, wanted, who=CLI_SOURCE)
            ctx.out.flag(flag, wanted, previous)


async def _clear(ctx: Context) -> None:
    if ctx.request.clear:
        # The remembered done ids too: records loaded again after a clear are then moved again (the 2014 way).
        ctx.out.cleared(await ctx.store.clear(), await ctx.store.forget_done())


async def _push(ctx: Context) -> None:
    for switch, record in ctx.request.pushes:
        (stored,) = (await ctx.store.push_batch([record], source=CLI_SOURCE)).pushed
        reply = pushed_reply(record.checksum) if stored else ignored_reply(record.checksum)
        ctx.out.pushed(switch, record, stored, reply.rstrip("\n"))
    if ctx.request.load is not None:
        outcome = await files.load(ctx.store, ctx.request.load, ctx.rules, warn=ctx.out.warn, progress=ctx.progress,
                                   again=ctx.request.again, activity=ctx.request.activity)
        ctx.out.loaded(ctx.request.load, outcome.loaded, outcome.duplicates)


async def _moves(ctx: Context) -> None:
    request, store = ctx.request, ctx.store
    ranges: list[tuple[str, tuple[str, str] | None, Callable[[str, str], Awaitable[int]]]] = [
        ("advance", request.advance, store.advance),
        ("deactivate", request.deactivate, store.deactivate),
        ("activate", request.activate, store.activate),
    ]
    for switch, ids, move in ranges:
        if ids is not None:
            ctx.out.moved(switch, await move(*ids), *ids)
    if request.delete is not None:
        which, first, last = request.delete
        ctx.out.moved("delete", await store.delete(which, first, last), first, last, which=which.value)
    if request.redo:
        ctx.out.moved("redo", await store.activate_all())


async def _dump(ctx: Context) -> None:
    if ctx.request.dump is None:
        return
    which = _list_of(ctx.request.listing)
    length = 0
    if ctx.progress:
        summary = await ctx.store.summary()
        length = {QueueList.ACTIVE: summary.active, QueueList.INACTIVE: summary.inactive, None: summary.tracked}[which]
    count = await files.dump(ctx.store, which, ctx.request.dump, length=length, progress=ctx.progress)
    ctx.out.dumped(ctx.request.dump, ctx.request.listing or QueueList.ACTIVE.value, count)


async def _list(ctx: Context) -> None:
    request = ctx.request
    if request.listing is None:
        return
    pages = _pages(ctx.store, _list_of(request.listing), request.offset, request.limit)
    # The first page is read before anything is printed, so an unreachable Redis leaves no half a document.
    page = await anext(pages, None)
    ctx.out.list_begin(request.listing, request.offset, request.limit)
    written = 0
    while page is not None:
        # Inactive records say why they are there: one more round trip per page.
        failures = await ctx.store.failures([r.id for r in page]) if request.listing == "inactive" else None
        ctx.out.list_chunk(page, written, failures)
        written += len(page)
        page = await anext(pages, None)
    ctx.out.list_end(written)


async def _show(ctx: Context) -> None:
    if ctx.request.show is None:
        return
    view = await ctx.store.show(ctx.request.show)
    ctx.out.show(view)
    if view.where == "unknown":
        ctx.status = EXIT_FAILURE


async def _why(ctx: Context) -> None:
    if ctx.request.why is None:
        return
    reason = await why(ctx.store, ctx.request.why, ctx.max_errors)
    ctx.out.why(reason)
    if reason.code is WaitCode.UNKNOWN:
        ctx.status = EXIT_FAILURE


async def _pages(
    store: QueueStore, which: QueueList | None, offset: int, limit: int | None
) -> AsyncIterator[list[Record]]:
    """The records of a list from ``offset`` on, at most ``limit`` of them, :data:`LIST_CHUNK` at a time."""
    if which is None:
        # Every tracked record comes from a hash scan, which cannot start at an offset: skip on this side.
        page: list[Record] = []
        index = 0
        async for record in store.iter_records(None):
            if limit is not None and index >= offset + limit:
                break
            if index >= offset:
                page.append(record)
                if len(page) == LIST_CHUNK:
                    yield page
                    page = []
            index += 1
        if page:
            yield page
        return
    remaining = limit
    while remaining is None or remaining > 0:
        size = LIST_CHUNK if remaining is None else min(LIST_CHUNK, remaining)
        records = await store.list_records(which, offset, size)
        if not records:
            # Stop only on an empty page: a page comes back short when a record was acknowledged between
            # reading its id and its value, and the list goes on after it.
            return
        yield records
        offset += size
        if remaining is not None:
            remaining -= size


async def _events(ctx: Context) -> None:
    count = ctx.request.events
    if count is None:
        return
    recent = await ctx.store.events(max(count, 1))
    # --follow goes on from here, so no event between this step and the tail is lost.
    ctx.follow_from = recent[-1].event_id if recent else STREAM_START
    ctx.out.events(recent[-count:] if count else [])


async def _workers(ctx: Context) -> None:
    if ctx.request.workers:
        ctx.out.workers(await ctx.store.workers(), time.time())


async def _info(ctx: Context) -> None:
    if ctx.request.info:
        ctx.out.info(await ctx.store.server_info(), await ctx.store.replication_status())


async def _health(ctx: Context) -> None:
    if not ctx.request.health:
        return
    health = await check_health(ctx.store)
    ctx.out.health(health.healthy, health.reason, health.alive, health.registered)
    if not health.healthy:
        ctx.status = EXIT_FAILURE


async def _trace(ctx: Context) -> None:
    if ctx.request.trace is None:
        return
    assert ctx.tracer is not None
    hops = await ctx.tracer.trace(ctx.store, ctx.request.trace)
    ctx.out.trace(ctx.request.trace, hops)
    if hops[0].state == ReceiptKind.UNKNOWN:
        ctx.status = EXIT_FAILURE


async def _summary(ctx: Context) -> None:
    if not ctx.request.summary:
        return
    summary = await ctx.store.summary()
    workers = await ctx.store.workers()
    alive = sum(1 for w in workers if w.heartbeat is not None)
    replication = await ctx.store.replication_status() if ctx.store.highly_available else None
    outages = unreachable_destinations(workers, summary.active + summary.delayed)
    ctx.out.summary(summary, alive, await rates(ctx.store), await queue_eta(ctx.store, summary, workers), replication,
                    outages, await custody_report(ctx.store, summary, workers),
                    await activity_etas(ctx.store, summary, workers))


async def _follow(ctx: Context) -> None:
    """Tail the event stream until Ctrl-C or SIGTERM, which end the call with status 0.

    The signals only set an event that the loop checks between two reads (each waits at most
    :data:`FOLLOW_BLOCK`), so the tail ends cleanly instead of relying on cancelling a Redis call mid-read.
    """
    if not ctx.request.follow:
        return
    last_id = ctx.follow_from
    if last_id is None:
        shown = await ctx.store.events(1)
        last_id = shown[-1].event_id if shown else STREAM_START
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in FOLLOW_STOP_SIGNALS:
        loop.add_signal_handler(signum, stop.set)
    try:
        while not stop.is_set():
            for event in await ctx.store.events_after(last_id, block=FOLLOW_BLOCK):
                ctx.out.event(event)
                last_id = event.event_id
    finally:
        for signum in FOLLOW_STOP_SIGNALS:
            loop.remove_signal_handler(signum)


Step = Callable[[Context], Awaitable[None]]

STEPS: tuple[tuple[str, str, Step], ...] = (
    ("--action, --read", "switch the flags", _flags),
    ("--clear", "forget every record and the ids remembered done", _clear),
    ("--pushstr, --pushfile, --load", "push records", _push),
    ("--advance, --deactivate, --activate, --delete, --redo", "range moves, in this order", _moves),
    ("--dump", "write the list to a file", _dump),
    ("--list", "print the list", _list),
    ("--show", "print everything about one record", _show),
    ("--why", "say why one record is not done yet", _why),
    ("--trace", "follow one record across the sites", _trace),
    ("--events", "print the last events", _events),
    ("--workers", "print the worker registry", _workers),
    ("--info", "print the Redis server's state", _info),
    ("--health", "check Redis and the daemons' heartbeats", _health),
    ("--summary", "print the counts, flags and rates", _summary),
    ("--follow", "tail the events until Ctrl-C", _follow),
)
"""The fixed order of the work: (switches, what the step does, the step)."""


async def execute(ctx: Context) -> int:
    """Carry out the plan; the first step that raises stops it (the steps before stay done)."""
    try:
        for _switches, _what, step in STEPS:
            await step(ctx)
    finally:
        await ctx.store.close()
    return ctx.status
