"""``dataq web``: the operator's console, an aiohttp server of server-rendered pages and a JSON API.

aiohttp rather than Starlette with uvicorn: it is one asyncio library that is both the server and the framework,
runs inside ``dataq run``'s loop like the daemons, and needs no ASGI server beside it. Pages are Jinja2 templates;
the plots are SVG drawn here (:mod:`.plot`) and the live updates a small script shipped in the package, so the
browser fetches nothing from the internet. Reading is open to whoever reaches the port (loopback by default) under
a host name the console answers to (:mod:`.hosts`); acting needs the operator token (:mod:`.auth`). ``/metrics``
exports the console's own process to Prometheus.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from importlib import resources
from typing import Any
from urllib.parse import urlencode

import jinja2
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from dataq.config import Settings
from dataq.embedded.locate import resolve_redis
from dataq.errors import DataqError, RangeError, StoreUnavailable
from dataq.logs import get_logger
from dataq.ops.documents import duration, when
from dataq.ops.process_metrics import add_process_collectors
from dataq.runtime.signals import install_stop_signals
from dataq.store import Flag, QueueStore
from dataq.web.auth import CSRF_FIELD, CSRF_HEADER, SESSION_COOKIE, Guard
from dataq.web.console import MOVES, BadRequest, Console, NotFound, Page
from dataq.web.hosts import host_check
from dataq.web.plot import Span, View, byte_rate
from dataq.web.repairs import RepairRefused
from dataq.web.search import BadQuery

EXIT_OK = 0
SHUTDOWN_GRACE = 5.0
"""Seconds requests in progress get to finish on shutdown."""
REFRESH_SECONDS = 2
"""How often the pages refresh their numbers."""
FLAGS = {"action": Flag.ACTION, "read": Flag.READ}
ACTIONS = (*FLAGS, "redo", *MOVES, "retry", "again", "repair")
"""What an operator may do to a queue (``POST /api/queues/NAME/ACTION``)."""

log = get_logger()
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
CONSOLE: web.AppKey[Console] = web.AppKey("console", Console)
GUARD: web.AppKey[Guard] = web.AppKey("guard", Guard)
TEMPLATES: web.AppKey[jinja2.Environment] = web.AppKey("templates", jinja2.Environment)
REGISTRY: web.AppKey[CollectorRegistry] = web.AppKey("registry", CollectorRegistry)


def make_app(console: Console, token: str) -> web.Application:
    # The host check first: a misdirected request reaches nothing else.
    app = web.Application(middlewares=[host_check(console.settings.web), _errors])
    app[CONSOLE], app[GUARD] = console, Guard(token)
    # A registry of the app's own, not prometheus-client's global one: one process may build several apps (tests).
    app[REGISTRY] = add_process_collectors(CollectorRegistry(auto_describe=False))
    environment = jinja2.Environment(loader=jinja2.PackageLoader("dataq.web", "templates"),
                                     autoescape=jinja2.select_autoescape(["html"]), undefined=jinja2.StrictUndefined)
    environment.filters["when"] = when
    environment.filters["duration"] = lambda seconds: "-" if seconds is None else duration(seconds)
    environment.filters["rate"] = byte_rate
    app[TEMPLATES] = environment
    app.router.add_get("/", _overview)
    app.router.add_get("/queues/{queue}", _queue_page)
    app.router.add_get("/queues/{queue}/rates.svg", _plot)
    app.router.add_get("/queues/{queue}/plot.svg", _plot)
    app.router.add_post("/queues/{queue}/do", _form_action)
    app.router.add_get("/records/{record}", _record_page)
    app.router.add_get("/search", _search_page)
    app.router.add_get("/feeders", _feeders_page)
    app.router.add_get("/login", _login_page)
    app.router.add_post("/login", _login)
    app.router.add_post("/logout", _logout)
    app.router.add_get("/static/{name}", _static)
    if console.settings.metrics.enabled:  # like every other endpoint: [metrics] enabled = false turns it off
        app.router.add_get("/metrics", _metrics)
    app.router.add_get("/api/queues", _api(lambda c, r: c.queues()))
    app.router.add_get("/api/queues/{queue}", _api(lambda c, r: c.queue(r.match_info["queue"])))
    app.router.add_get("/api/queues/{queue}/workers", _api(lambda c, r: c.workers(r.match_info["queue"])))
    app.router.add_get("/api/queues/{queue}/inactive",
                       _api(lambda c, r: c.inactive(r.match_info["queue"], Page.parse(r.query))))
    app.router.add_get("/api/queues/{queue}/active",
                       _api(lambda c, r: c.active(r.match_info["queue"], Page.parse(r.query))))
    app.router.add_get("/api/queues/{queue}/events", _api(lambda c, r: c.events(r.match_info["queue"])))
    app.router.add_get("/api/queues/{queue}/rates",
                       _api(lambda c, r: c.history(r.match_info["queue"], r.query.get("span", Span.HOUR),
                                                   r.query.get("activity"))))
    app.router.add_get("/api/records/{record}",
                       _api(lambda c, r: c.record(r.match_info["record"], r.query.get("queue"))))
    app.router.add_get("/api/records/{record}/journey",
                       _api(lambda c, r: c.journey(r.match_info["record"], _queue_of(r))))
    app.router.add_get("/api/search", _api(lambda c, r: c.search(r.query.get("q", ""))))
    app.router.add_get("/api/queues/{queue}/destinations", _api(lambda c, r: c.destinations(r.match_info["queue"])))
    app.router.add_get("/api/queues/{queue}/audits", _api(lambda c, r: c.audits(r.match_info["queue"])))
    app.router.add_get("/api/feeders", _api(lambda c, r: c.feeders()))
    app.router.add_post("/api/queues/{queue}/{op}", _api_action)
    return app


# --- errors ------------------------------------------------------------------------------------------------


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A dataq error as a clear status and message: JSON under /api/, text elsewhere."""
    try:
        return await handler(request)
    except DataqError as exc:
        status = (404 if isinstance(exc, NotFound) else 409 if isinstance(exc, RepairRefused)
                  else 400 if isinstance(exc, (BadRequest, BadQuery, RangeError))
                  else 503 if isinstance(exc, StoreUnavailable) else 500)
        if status == 500:
            log.error("web request failed", path=request.path, error=str(exc))
        if request.path.startswith("/api/"):
            return web.json_response({"error": str(exc)}, status=status)
        return web.Response(text=f"Error: {exc}\n", status=status)


def _refused(request: web.Request) -> web.Response:
    guard = request.app[GUARD]
    why = ("this console is read-only: no operator token is configured ([web] token)" if not guard.enabled
           else "the operator token is needed: log in, or send it as 'Authorization: Bearer TOKEN'")
    if request.path.startswith("/api/"):
        return web.json_response({"error": why}, status=401, headers={"WWW-Authenticate": "Bearer"})
    return web.Response(text=f"Refused: {why}\n", status=401)


# --- the JSON API ------------------------------------------------------------------------------------------


def _api(read: Callable[[Console, web.Request], Awaitable[Any]]) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.json_response(await read(request.app[CONSOLE], request))

    return handler


async def _api_action(request: web.Request) -> web.StreamResponse:
    guard = request.app[GUARD]
    allowed = (guard.bearer(request.headers.get("Authorization"))
               or guard.form_allowed(request.cookies.get(SESSION_COOKIE), request.headers.get(CSRF_HEADER)))
    if not allowed:
        return _refused(request)
    body: Any = {}
    if request.can_read_body:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BadRequest(f"the body must be a JSON object: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    who = "bearer" if guard.bearer(request.headers.get("Authorization")) else "session"
    result = await _act(request.app[CONSOLE], request.match_info["queue"], request.match_info["op"], body,
                        _who(request, who))
    return web.json_response(result)


def _who(request: web.Request, how: str) -> str:
    """Who acted, as the log says it: the token's bearer or a logged-in session, and from which address."""
    return f"{how}@{request.remote or '?'}"


async def _act(console: Console, queue: str, op: str, params: Mapping[str, Any], who: str) -> dict[str, Any]:
    """One operator action: ``action`` / ``read`` (``on``), ``redo``, ``activate`` / ``deactivate`` / ``advance``
    (``first``, ``last``), ``retry`` (``id``), ``again`` (``id``, ``path``, ``size``)."""
    if op not in ACTIONS:
        raise BadRequest(f"unknown action {op!r}; one of {', '.join(ACTIONS)}")
    if op in FLAGS:
        on = params.get("on")
        if not isinstance(on, bool):
            raise BadRequest(f"'{op}' needs \"on\": true or false")
        result = await console.set_flag(queue, FLAGS[op], on)
    elif op == "redo":
        result = await console.redo(queue)
    elif op == "retry":
        result = await console.retry(queue, _text(params, "id"))
    elif op == "repair":
        result = await console.repair(queue, _text(params, "target"), who)
    elif op == "again":
        result = await console.send_again(queue, _text(params, "id"), _text(params, "path"),
                                          str(params.get("size", "")).strip())
    else:
        result = await console.move(queue, op, _text(params, "first"), _text(params, "last"))
    log.info("operator action from the web console", queue=queue, action=op, who=who,
             **{k: v for k, v in result.items() if k not in ("queue", "who", "output")})
    return result


def _text(params: Mapping[str, Any], key: str) -> str:
    value = params.get(key)
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f"'{key}' must be a record id")
    return value.strip()


# --- pages -------------------------------------------------------------------------------------------------


def _render(request: web.Request, template: str, **context: Any) -> web.Response:
    guard = request.app[GUARD]
    logged_in = guard.logged_in(request.cookies.get(SESSION_COOKIE))
    page = request.app[TEMPLATES].get_template(template).render(
        refresh_ms=REFRESH_SECONDS * 1000, can_act=guard.enabled, logged_in=logged_in,
        csrf=guard.csrf() if logged_in else "", csrf_field=CSRF_FIELD, **context)
    return web.Response(text=page, content_type="text/html", headers={
        "Content-Security-Policy": "default-src 'self'; img-src 'self'; frame-ancestors 'none'",
        "X-Content-Type-Options": "nosniff"})


def _span(request: web.Request) -> str:
    span = request.query.get("span", Span.HOUR)
    if span not in tuple(Span):
        raise BadRequest(f"span must be one of {', '.join(Span)}, not {span!r}")
    return span


async def _overview(request: web.Request) -> web.StreamResponse:
    return _render(request, "overview.html", queues=await request.app[CONSOLE].queues(), span=_span(request))


async def _queue_page(request: web.Request) -> web.StreamResponse:
    console, name = request.app[CONSOLE], request.match_info["queue"]
    inactive_page, active_page = Page.parse(_prefixed(request, "inactive_")), Page.parse(_prefixed(request, "active_"))
    return _render(request, "queue.html", queue=await console.queue(name), workers=await console.workers(name),
                   inactive=await console.inactive(name, inactive_page), inactive_page=inactive_page,
                   active=await console.active(name, active_page), active_page=active_page,
                   destinations=await console.destinations(name), audits=await console.audits(name),
                   events=await console.events(name), message=request.query.get("done", ""), span=_span(request))


def _prefixed(request: web.Request, prefix: str) -> dict[str, str]:
    return {key.removeprefix(prefix): value for key, value in request.query.items() if key.startswith(prefix)}


async def _record_page(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE]
    doc = await console.record(request.match_info["record"], request.query.get("queue"))
    try:
        journey, journey_error = await console.journey(doc["record"], doc["queue"]), ""
    except DataqError as exc:  # a next site's settings or answer: the rest of the page still stands
        journey, journey_error = [], str(exc)
    name = request.query.get("name", "")
    fields = doc["fields"] or (await console.indexed(doc["queue"], doc["record"], name) if name else None)
    return _render(request, "record.html", record=doc, journey=journey, journey_error=journey_error,
                   message=request.query.get("done", ""), fields=fields)


def _queue_of(request: web.Request) -> str:
    queue = request.query.get("queue")
    if not queue:
        raise BadRequest("name the record's queue: ?queue=NAME")
    return queue


async def _feeders_page(request: web.Request) -> web.StreamResponse:
    return _render(request, "feeders.html", feeders=await request.app[CONSOLE].feeders())


async def _search_page(request: web.Request) -> web.StreamResponse:
    text = request.query.get("q", "")
    hits = await request.app[CONSOLE].search(text) if text.strip() else []
    return _render(request, "search.html", query=text, hits=hits)


async def _plot(request: web.Request) -> web.StreamResponse:
    """``rates.svg`` (records per minute over the hour), or ``plot.svg?view=files|bytes|backlog&span=hour|day``."""
    view = request.query.get("view", View.FILES)
    svg = await request.app[CONSOLE].plot(request.match_info["queue"], view, request.query.get("span", Span.HOUR),
                                          request.query.get("activity"))
    return web.Response(text=svg, content_type="image/svg+xml", headers={"Cache-Control": "no-store"})


async def _form_action(request: web.Request) -> web.StreamResponse:
    """A form of the queue page: ``op`` is ``action-on``, ``read-off``, ``redo``, ``activate``, ``retry``..."""
    guard, form = request.app[GUARD], await request.post()
    csrf = form.get(CSRF_FIELD)
    if not guard.form_allowed(request.cookies.get(SESSION_COOKIE), csrf if isinstance(csrf, str) else None):
        return _refused(request)
    queue, op = request.match_info["queue"], str(form.get("op", ""))
    params: dict[str, Any] = {key: str(value) for key, value in form.items() if key not in ("op", "back", CSRF_FIELD)}
    name, _, state = op.partition("-")
    if name in FLAGS:
        if state not in ("on", "off"):
            raise BadRequest(f"unknown action {op!r}")
        op, params = name, {"on": state == "on"}
    result = await _act(request.app[CONSOLE], queue, op, params, _who(request, "session"))
    done = (f"{op}: {'on' if result.get('on') else 'off'}" if "flag" in result
            else f"repair of {result['target']}: started" if op == "repair" else f"{op}: {result['moved']} moved")
    back = str(form.get("back", ""))
    if back.startswith("/records/"):  # the record page the action came from, not some other site
        raise web.HTTPSeeOther(f"{back.split('?', 1)[0]}?{urlencode({'queue': queue, 'done': done})}")
    raise web.HTTPSeeOther(f"/queues/{queue}?{urlencode({'done': done})}")


async def _login_page(request: web.Request) -> web.StreamResponse:
    return _render(request, "login.html", failed=False)


async def _login(request: web.Request) -> web.StreamResponse:
    guard, form = request.app[GUARD], await request.post()
    token = form.get("token")
    if not (isinstance(token, str) and guard.token_matches(token)):
        response = _render(request, "login.html", failed=True)
        response.set_status(401)
        return response
    response = web.HTTPSeeOther("/")
    response.set_cookie(SESSION_COOKIE, guard.session(), httponly=True, samesite="Strict", path="/")
    raise response


async def _logout(request: web.Request) -> web.StreamResponse:
    response = web.HTTPSeeOther("/")
    response.del_cookie(SESSION_COOKIE, path="/")
    raise response


async def _static(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    kinds = {"console.js": "text/javascript", "console.css": "text/css"}
    if name not in kinds:
        raise NotFound(f"no static file {name!r}")
    text = (resources.files("dataq.web") / "static" / name).read_text(encoding="utf-8")
    return web.Response(text=text, content_type=kinds[name], headers={"Cache-Control": "max-age=300"})


async def _metrics(request: web.Request) -> web.StreamResponse:
    """The console's process, in the format the scraper asks for (as the daemons' endpoints answer)."""
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    body = await asyncio.to_thread(encode, request.app[REGISTRY])  # the process collector reads /proc
    return web.Response(body=body, headers={"Content-Type": content_type})


# --- the daemon --------------------------------------------------------------------------------------------


async def run_web(settings: Settings, *, stop: asyncio.Event | None = None,
                  ready: Callable[[tuple[str, int]], None] | None = None) -> int:
    """Serve the console on ``[web] host``/``port`` until ``stop`` is set (or SIGTERM/SIGINT when it is None);
    ``ready`` gets the bound address. Returns the exit status."""
    if stop is None:
        stop = asyncio.Event()
        install_stop_signals(stop)
    handle = resolve_redis(settings)
    stores = {name: QueueStore.open(settings, handle.url, name) for name in settings.queues}
    console = Console(settings, stores)
    runner = web.AppRunner(make_app(console, settings.web.token), access_log=None, shutdown_timeout=SHUTDOWN_GRACE)
    try:
        await runner.setup()
        site = web.TCPSite(runner, settings.web.host, settings.web.port)
        await site.start()
        host, port = runner.addresses[0][:2]
        address = (str(host), int(port))
        log.info("web console listening", url=f"http://{address[0]}:{address[1]}/",
                 actions="allowed with the token" if settings.web.token else "read-only (no token)")
        if ready is not None:
            ready(address)
        await stop.wait()
        log.info("web console stopping")
    finally:
        await runner.cleanup()
        # A repair started here runs in a session of its own: it is given the grace, then finishes alone.
        await console.repairs.wait(SHUTDOWN_GRACE)
        for store in stores.values():
            await store.close()
    return EXIT_OK


__all__ = ["make_app", "run_web"]
