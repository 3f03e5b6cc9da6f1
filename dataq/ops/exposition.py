"""The ``GET /metrics`` endpoint every dataq process serves, and the collector its families come through.

Names, help texts and the text format are prometheus-client's; so is the HTTP server (a thread per scrape,
wsgiref), wrapped only to answer 404 off ``/metrics`` and to drop a client that stalls. Apart from the daemons'
metrics (:mod:`.metrics`), so that a feeder serves its own without loading the store and its Redis client.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.metrics_core import Metric

from dataq.errors import DataqError
from dataq.logs import get_logger

METRICS_PATH = "/metrics"
REQUEST_TIMEOUT = 10.0
"""Seconds a scraper may take to send its request; a silent connection is dropped, not kept forever."""

log = get_logger()


def one_sample(family: Any, labels: list[str], value: float) -> Metric:
    """``family`` with its one sample: the labels' values and the value."""
    family.add_metric(labels, value)
    metric: Metric = family
    return metric


class FamiliesCollector:
    """prometheus-client's custom-collector protocol over a function that yields the families, at each scrape."""

    def __init__(self, families: Callable[[], Iterable[Metric]]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return list(self._families())


class _Handler(WSGIRequestHandler):
    """A scrape's request handler; its ``timeout`` (the socket's) drops a client that stalls."""

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: a scrape every few seconds would flood the log."""


class MetricsServer:
    """Serves ``registry`` at ``http://host:port/metrics`` from a thread of its own; every other path is a 404."""

    def __init__(self, registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 0, *,
                 request_timeout: float = REQUEST_TIMEOUT) -> None:
        self.registry, self.host, self.port, self.request_timeout = registry, host, port, request_timeout
        self._server: ThreadingWSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        """Listen, and return the port bound (the ephemeral one when ``port`` is 0).

        Raises DataqError when the address cannot be bound (in use, not local, not permitted).
        """
        metrics_app = make_wsgi_app(self.registry)

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            if environ.get("PATH_INFO") != METRICS_PATH:
                start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
                return [f"not found; metrics are at {METRICS_PATH}\n".encode()]
            body: Iterable[bytes] = metrics_app(environ, start_response)
            return body

        server_class = _V6Server if ":" in self.host else _V4Server
        try:
            handler = type("_TimedHandler", (_Handler,), {"timeout": self.request_timeout})
            self._server = make_server(self.host, self.port, app, server_class, handler)
        except OSError as exc:
            raise DataqError(f"cannot serve metrics on {self.host}:{self.port}: {exc.strerror or exc}") from exc
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, name="dataq-metrics", daemon=True)
        self._thread.start()
        return self.port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{METRICS_PATH}"

    def close(self) -> None:
        """Stop serving (a scrape under way finishes in its own thread)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            with contextlib.suppress(RuntimeError):
                self._thread.join()
            self._thread = None


async def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> MetricsServer | None:
    """Serve ``registry`` on ``host:port``, or on an ephemeral port when that one cannot be bound (logged, with the
    URL taken); None when neither can be (metrics are never worth stopping a daemon for)."""
    for candidate in dict.fromkeys((port, 0)):
        server = MetricsServer(registry, host, candidate)
        try:
            await asyncio.to_thread(server.start)
        except DataqError as exc:
            # Two daemons of one role on a host cannot share the port; the second takes a free one and says where
            # (the worker registry shows it too).
            log.warning("metrics port unavailable", port=candidate, error=str(exc))
            continue
        log.info("metrics served", url=server.url)
        return server
    return None


class _V4Server(ThreadingWSGIServer):
    address_family = socket.AF_INET


class _V6Server(ThreadingWSGIServer):
    address_family = socket.AF_INET6
