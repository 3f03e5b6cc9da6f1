"""Network addresses as dataq reads and writes them: ``host:port``, with an IPv6 address in brackets."""

from __future__ import annotations

MAX_PORT = 65535
"""The highest TCP port: the upper bound of every port key."""


def parse_host_port(text: str, default_port: int) -> tuple[str, int]:
    """``host:port``, ``[v6-address]:port`` or a bare host (the default port); a ValueError says what is wrong."""
    text = text.strip()
    if text.startswith("["):
        host, closed, rest = text[1:].partition("]")
        if not closed or (rest and not rest.startswith(":")):
            raise ValueError(f"{text!r} is not host:port ([v6-address]:port for IPv6)")
        port_text = rest[1:]
    elif text.count(":") > 1:
        raise ValueError(f"{text!r} is not host:port (write an IPv6 address as [address]:port)")
    else:
        host, _, port_text = text.partition(":")
    if not host:
        raise ValueError(f"{text!r} has no host")
    if not port_text and ":" not in text.rpartition("]")[2]:
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) <= MAX_PORT:
        raise ValueError(f"{text!r} has no valid port (1-{MAX_PORT})")
    return host, int(port_text)


def host_port_text(host: object, port: object) -> str:
    """``host:port``, with an IPv6 address in brackets."""
    text = str(host)
    return f"[{text}]:{port}" if ":" in text else f"{text}:{port}"


def peer_text(address: object) -> str:
    """``host:port`` (``[v6]:port``) of a socket address; ``unix`` or ``?`` for the rest."""
    if isinstance(address, tuple) and len(address) >= 2:
        return host_port_text(address[0], address[1])
    return "unix" if isinstance(address, str) else "?"
