"""Logging for every dataq process: structlog events rendered by the stdlib ``logging`` handlers.

structlog builds the event (context variables, level, logger name, component, ISO UTC timestamp) and hands it
to the stdlib root logger, whose handlers each render it their own way: JSON lines into
``<log_dir>/<component>.log``, and a human console format or JSON lines on stderr. Records of other libraries
(redis-py, asyncio) that log through stdlib ``logging`` pass the same chain, so every line of a file has the
same shape.

Callers bind what identifies their work with ``structlog.contextvars.bind_contextvars(queue=..., id=...)``
or ``get_logger(queue=...)``.
"""

from __future__ import annotations

import logging
import logging.handlers
import re
import sys
from pathlib import Path
from typing import TextIO, cast

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from dataq.errors import ConfigError

LOG_LEVELS = ("debug", "info", "warning", "error")
"""Levels a setting may name, least severe first."""
LOG_FORMATS = ("auto", "json", "console")
"""Renderings of stderr: ``auto`` is console on a terminal, JSON lines otherwise."""
DEFAULT_LEVEL = "info"
DEFAULT_FORMAT = "auto"
COMPONENT_PATTERN = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
COMPONENT_KEY = "component"
SYSTEM_LOG_DIR = "/var/log/dataq"
"""Where logs go when ``log.dir`` is unset and this directory is writable (else ``<data_dir>/log``)."""
DATA_DIR_LOG_SUBDIR = "log"
LOG_FILE_SUFFIX = ".log"
LOG_FILE_ENCODING = "utf-8"
# Our handlers carry these names so a second configure_logging replaces them instead of adding more.
HANDLER_NAME_PREFIX = "dataq."
CONSOLE_HANDLER_NAME = HANDLER_NAME_PREFIX + "console"
FILE_HANDLER_NAME = HANDLER_NAME_PREFIX + "file"
RENDERED_KEY = "_dataq_rendered"
"""Where a record keeps its rendering, and the formatter that made it."""


def configure_logging(
    *, component: str, level: str = DEFAULT_LEVEL, log_dir: str | Path | None = None, fmt: str = DEFAULT_FORMAT
) -> None:
    """Route all logging of this process to stderr and, when ``log_dir`` is given, ``<log_dir>/<component>.log``.

    ``fmt`` chooses the stderr rendering: ``console`` (for people), ``json`` (for journald and collectors) or
    ``auto`` (console on a terminal, JSON otherwise). The file is always JSON lines. Calling it again replaces
    the previous set-up. A log directory that cannot be written is reported on stderr and skipped.
    """
    if COMPONENT_PATTERN.fullmatch(component) is None:
        raise ConfigError(f"log component {component!r} must match {COMPONENT_PATTERN.pattern}")
    if level.lower() not in LOG_LEVELS:
        raise ConfigError(f"log level must be one of {', '.join(LOG_LEVELS)}, not {level!r}")
    if fmt not in LOG_FORMATS:
        raise ConfigError(f"log format must be one of {', '.join(LOG_FORMATS)}, not {fmt!r}")

    shared = _shared_processors(component)
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        # Loggers made before a (re)configuration must follow the new one; building one per call is cheap.
        cache_logger_on_first_use=False,
    )

    root = logging.getLogger()
    _remove_our_handlers(root)
    root.setLevel(level.upper())
    stream = sys.stderr
    console = logging.StreamHandler(stream)
    console.set_name(CONSOLE_HANDLER_NAME)
    use_console_renderer = fmt == "console" or (fmt == "auto" and _isatty(stream))
    # One JSON formatter for stderr and the file: each event is rendered once, not once per handler.
    json_lines = _formatter(shared, json=True, colors=False)
    console.setFormatter(_formatter(shared, json=False, colors=_isatty(stream)) if use_console_renderer else json_lines)
    root.addHandler(console)

    if log_dir is not None:
        path = Path(log_dir) / f"{component}{LOG_FILE_SUFFIX}"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # Watched: logrotate may move the file away, and we must follow with a new one.
            file_handler = logging.handlers.WatchedFileHandler(path, encoding=LOG_FILE_ENCODING)
        except OSError as exc:
            get_logger().warning("cannot write the log file; logging to stderr only", path=str(path), error=str(exc))
        else:
            file_handler.set_name(FILE_HANDLER_NAME)
            file_handler.setFormatter(json_lines)
            root.addHandler(file_handler)


def get_logger(**context: object) -> structlog.stdlib.BoundLogger:
    """A logger carrying ``context`` in every event, named for the calling module; it follows the configuration
    current when it logs."""
    name = sys._getframe(1).f_globals.get("__name__")
    return cast(structlog.stdlib.BoundLogger, _Logger(name if isinstance(name, str) else None, context))


class _Logger:
    """structlog's lazy logger, whose debug events are dropped before they are built when the level leaves them
    out. structlog builds a logger for every event (so that it follows the configuration current then), finds
    the calling module by walking the stack, and only then drops the event: 12 us a call, made once per record
    by the pop daemon's actions. The name is found once here; the level is the stdlib logger's, as
    ``filter_by_level`` reads it."""

    __slots__ = ("_lazy", "_stdlib")

    def __init__(self, name: str | None, context: dict[str, object]) -> None:
        self._stdlib = logging.getLogger(name)
        self._lazy = structlog.stdlib.get_logger(*([name] if name is not None else []), **context)

    def debug(self, event: str, *args: object, **values: object) -> None:
        if self._stdlib.isEnabledFor(logging.DEBUG):
            self._lazy.debug(event, *args, **values)

    def __getattr__(self, attribute: str) -> object:
        return getattr(self._lazy, attribute)


def _shared_processors(component: str) -> list[Processor]:
    """What every event gets, whether it comes from structlog or from a stdlib logger."""

    def add_component(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        event_dict.setdefault(COMPONENT_KEY, component)
        return event_dict

    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        add_component,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]


class _RenderedOnce(structlog.stdlib.ProcessorFormatter):
    """A formatter that renders a record once however many handlers use it (a daemon's stderr and its file)."""

    def format(self, record: logging.LogRecord) -> str:
        rendered = record.__dict__.get(RENDERED_KEY)
        if rendered is not None and rendered[0] is self:
            return str(rendered[1])
        text = super().format(record)  # renders a copy of the record: this one keeps its fields
        record.__dict__[RENDERED_KEY] = (self, text)
        return text


def _formatter(shared: list[Processor], *, json: bool, colors: bool) -> structlog.stdlib.ProcessorFormatter:
    renderer: list[Processor]
    if json:
        renderer = [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    else:
        # The console renderer formats exceptions itself, so format_exc_info must not run before it.
        renderer = [structlog.dev.ConsoleRenderer(colors=colors)]
    return _RenderedOnce(
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *renderer],
        foreign_pre_chain=shared,
    )


def _remove_our_handlers(root: logging.Logger) -> None:
    for handler in list(root.handlers):
        if (handler.get_name() or "").startswith(HANDLER_NAME_PREFIX):
            root.removeHandler(handler)
            handler.close()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # replaced or closed streams
        return False
