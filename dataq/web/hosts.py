"""The hosts the console answers to: its defence against DNS rebinding.

A page a browser loads from ``http://evil.example:9180/`` can have ``evil.example`` resolve to 127.0.0.1 a moment
later; the browser then sends that page's requests to a console on loopback as the page's own (same origin), with
``Host: evil.example:9180``, and lets the page read the answers. A browser always sends the name it resolved, so
refusing the names the console does not know defeats the attack.

The console answers, with no configuration, to:

- ``localhost``, and ``[web] host`` itself;
- any IP address: a browser resolves no address, so a page at an address was served by whatever listens there,
  and cannot be rebound (this also lets a console on every interface answer to each of the machine's addresses,
  which change with the network, without a list to keep);
- the machine's own names (``gethostname``, ``getfqdn``) when it listens beyond loopback, as its operators type
  them; on loopback they would not reach it anyway.

``[web] allowed_hosts`` extends that list rather than replacing it, so that naming a proxy's public name does not
lock out an ssh tunnel or ``curl`` on the machine itself; ``*`` drops the check. Any port is accepted: the port in
``Host`` is the one the client connected to, which a proxy, an ssh tunnel or a container's port mapping makes
differ from the console's, and the name alone defeats the attack.

A request without ``Host`` (HTTP/1.0 only: aiohttp answers an HTTP/1.1 one with 400 itself) is served: no browser
omits the header, so it cannot carry the attack, and HTTP/1.0 probes (HAProxy's default ``option httpchk``) send
none. A refusal is ``421 Misdirected Request`` (RFC 9110 15.5.20: this server is not the one for that URI), not
403, which would say the client lacks a right, or 401, which the console's token refusals use.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler, Middleware

from dataq.config import WebSettings
from dataq.config.operators import ANY_HOST
from dataq.logs import get_logger

MISDIRECTED = 421
LOOPBACK_NAME = "localhost"
LOGGED_HOSTS = 256
"""Refused hosts logged one by one; past that many, one last warning, so that random names cannot flood the log."""
SHOWN_CHARS = 100
"""A refused ``Host`` is quoted in the log and the answer up to this length."""
_HOST_HEADER = re.compile(r"(?P<host>\[[^\]]*\]|[^:\[\]]+)(?::[0-9]*)?")

log = get_logger()


def is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def host_of(header: str) -> str | None:
    """The host a ``Host`` header names, lower case, without port, IPv6 brackets or final dot; None if malformed."""
    match = _HOST_HEADER.fullmatch(header.strip().lower())
    if match is None:
        return None
    host = match["host"]
    if host.startswith("["):
        return host[1:-1] if is_address(host[1:-1]) else None
    return host.removesuffix(".") or None


def _beyond_loopback(listen: str) -> bool:
    if listen == LOOPBACK_NAME:
        return False
    try:
        return not ipaddress.ip_address(listen.strip("[]")).is_loopback
    except ValueError:
        return True  # a name: whatever it resolves to, it is not the loopback name


def _machine_names() -> set[str]:
    return {name.lower().removesuffix(".") for name in (socket.gethostname(), socket.getfqdn()) if name}


@dataclass(frozen=True, slots=True)
class AllowedHosts:
    """The names a console answers to (any IP address besides): exact ones, and domains with their subdomains."""

    names: frozenset[str]
    domains: tuple[str, ...]
    """``example.org`` for the entry ``.example.org``."""
    any_host: bool = False

    @classmethod
    def of(cls, settings: WebSettings) -> AllowedHosts:
        """What a console with ``settings`` answers to (``allowed_hosts`` entries come normalised from them)."""
        names = {LOOPBACK_NAME, settings.host.lower().strip("[]").removesuffix(".")}
        if _beyond_loopback(settings.host):
            names |= _machine_names()
        entries = settings.allowed_hosts
        names |= {entry for entry in entries if not entry.startswith(".")}
        domains = tuple(entry[1:] for entry in entries if entry.startswith("."))
        return cls(frozenset(names), domains, ANY_HOST in entries)

    def allows(self, host: str) -> bool:
        return (self.any_host or host in self.names or is_address(host)
                or any(host == domain or host.endswith(f".{domain}") for domain in self.domains))


class _Refusals:
    """Logs each refused host once (a misdirected scraper or browser would otherwise log at every request)."""

    def __init__(self) -> None:
        self.logged: set[str] = set()

    def log(self, shown: str, request: web.Request) -> None:
        if shown in self.logged or len(self.logged) > LOGGED_HOSTS:
            return
        self.logged.add(shown)
        if len(self.logged) > LOGGED_HOSTS:
            log.warning("web console refusing more unknown hosts: no longer logging each", hosts=LOGGED_HOSTS)
            return
        log.warning("web console refused a request for a host it does not answer to (logged once per host)",
                    host=shown, setting="web.allowed_hosts", remote=request.remote, path=request.path)


def host_check(settings: WebSettings) -> Middleware:
    """The middleware refusing, with 421, a request whose ``Host`` the console does not answer to."""
    allowed, refusals = AllowedHosts.of(settings), _Refusals()
    if allowed.any_host:
        log.warning("web console answers to any host ([web] allowed_hosts holds '*'): a page a browser loads "
                    "elsewhere may reach it through DNS rebinding; list the console's names instead")

    @web.middleware
    async def check_host(request: web.Request, handler: Handler) -> web.StreamResponse:
        header = request.headers.get(hdrs.HOST)
        if header is None:
            return await handler(request)
        host = host_of(header)
        if host is not None and allowed.allows(host):
            return await handler(request)
        shown = (header if host is None else host)[:SHOWN_CHARS]
        refusals.log(shown, request)
        why = (f"the Host header {shown!r} is malformed" if host is None else
               f"this dataq console does not answer to the host {shown!r} (the request's Host header).\n"
               f"If it should, add {shown!r} to allowed_hosts in the [web] table of the settings file, and restart")
        return web.Response(status=MISDIRECTED, text=f"Misdirected request: {why}.\n",
                            headers={"X-Content-Type-Options": "nosniff"})

    return check_host


__all__ = ["AllowedHosts", "host_check", "host_of"]
