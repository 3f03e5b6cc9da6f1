"""The ``GET /metrics`` endpoint: a minimal HTTP/1.1 server on the daemon's event loop.

It answers one request per connection (``Connection: close``), which is all a Prometheus scrape needs, and
treats every malformed, oversized or slow request as that client's problem: the client gets a 4xx or is
dropped, the server and the daemon carry on.
"""

from __future__ import annotations

import asyncio
import contextlib
from http import HTTPStatus

from dataq.errors import DataqError
from dataq.logs import get_logger
from dataq.metrics.registry import COLLECT_TIMEOUT, CONTENT_TYPE, Registry

METRICS_PATH = "/metrics"
DEFAULT_HOST = "127.0.0.1"
MAX_LINE_BYTES = 8192
"""Longest request or header line read: a scrape's are short, and a longer one is refused, not buffered."""
MAX_HEADERS = 100
REQUEST_TIMEOUT = 10.0
"""Seconds a client gets to send its request; a silent connection is closed, not kept forever."""
ALLOWED_METHODS = ("GET", "HEAD")
LINGER = 1.0
"""Seconds unread input is drained after a response before the connection is closed (see :func:`_linger`)."""
LINGER_BYTES = 65536

log = get_logger()


class MetricsServer:
    """Serves ``registry`` at ``http://host:port/metrics``; every other path is a 404."""

    def __init__(self, registry: Registry, host: str = DEFAULT_HOST, port: int = 0, *,
                 request_timeout: float = REQUEST_TIMEOUT, collect_timeout: float = COLLECT_TIMEOUT) -> None:
        self.registry, self.host, self.port = registry, host, port
        self.request_timeout, self.collect_timeout = request_timeout, collect_timeout
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        """Listen, and return the port bound (the ephemeral one when ``port`` is 0).

        Raises DataqError when the address cannot be bound (in use, not local, not permitted).
        """
        try:
            self._server = await asyncio.start_server(self._handle, self.host, self.port, limit=MAX_LINE_BYTES)
        except OSError as exc:
            raise DataqError(f"cannot serve metrics on {self.host}:{self.port}: {exc.strerror or exc}") from exc
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("metrics endpoint listening", url=f"http://{self.url_host}:{self.port}{METRICS_PATH}")
        return self.port

    @property
    def url_host(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host

    async def close(self) -> None:
        """Stop listening and drop the connections being served."""
        if self._server is None:
            return
        server, self._server = self._server, None
        server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await server.wait_closed()

    async def __aenter__(self) -> MetricsServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            response = await self._respond(reader)
            if response is not None:
                writer.write(response)
                await writer.drain()
                await _linger(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client left; nothing to answer
        except Exception:
            log.exception("metrics request failed")
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _respond(self, reader: asyncio.StreamReader) -> bytes | None:
        try:
            async with asyncio.timeout(self.request_timeout):
                request_line = await reader.readline()
                if not request_line:
                    return None  # connected and closed: a port probe
                for _ in range(MAX_HEADERS + 1):
                    if (await reader.readline()).strip() == b"":
                        break  # the blank line ending the headers (or the client's end of input)
                else:
                    return _response(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "too many header lines\n")
        except TimeoutError:
            return _response(HTTPStatus.REQUEST_TIMEOUT, "request not received in time\n")
        except ValueError:  # a line longer than the reader's limit
            return _response(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "request line or header too long\n")
        parts = request_line.decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return _response(HTTPStatus.BAD_REQUEST, "malformed request line\n")
        method, target = parts[0], parts[1]
        if method not in ALLOWED_METHODS:
            return _response(HTTPStatus.METHOD_NOT_ALLOWED, "only GET and HEAD\n",
                             extra={"Allow": ", ".join(ALLOWED_METHODS)})
        if target.split("?", 1)[0] != METRICS_PATH:
            return _response(HTTPStatus.NOT_FOUND, f"not found; metrics are at {METRICS_PATH}\n")
        await self.registry.collect(self.collect_timeout)
        return _response(HTTPStatus.OK, self.registry.render(), content_type=CONTENT_TYPE,
                         head_only=method == "HEAD")


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Half-close, then drain what the client still sends, briefly: closing with unread input makes the kernel
    reset the connection, and a reset can destroy the response (a 4xx to a refused request) before it is read."""
    if reader.at_eof() or not writer.can_write_eof():
        return
    writer.write_eof()
    drained = 0
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(LINGER):
            while drained < LINGER_BYTES and (chunk := await reader.read(MAX_LINE_BYTES)):
                drained += len(chunk)


def _response(status: HTTPStatus, body: str, *, content_type: str = "text/plain; charset=utf-8",
              extra: dict[str, str] | None = None, head_only: bool = False) -> bytes:
    payload = body.encode()
    headers = {"Content-Type": content_type, "Content-Length": str(len(payload)), "Connection": "close",
               **(extra or {})}
    head = f"HTTP/1.1 {status.value} {status.phrase}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return (head + "\r\n").encode("latin-1") + (b"" if head_only else payload)
