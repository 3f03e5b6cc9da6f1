"""dataq's settings: one TOML file plus ``DATAQ_*`` environment overrides, loaded into frozen dataclasses.

:mod:`.loader` is the machinery (sections, bounds, the generic loader, :func:`load_options` for actions),
:mod:`.schema`, :mod:`.queue_settings`, :mod:`.redis_settings` and :mod:`.operators` declare the sections. Import
what you need from here.
"""

from __future__ import annotations

from dataq.addresses import MAX_PORT, parse_host_port
from dataq.config.loader import load_options
from dataq.config.operators import HealthSettings, MailSettings, MetricsSettings, WebSettings
from dataq.config.queue_settings import QueueSettings
from dataq.config.redis_settings import (
    APPENDFSYNC_CHOICES,
    DEFAULT_APPENDFSYNC,
    REDIS_URL_SCHEMES,
    RedisSettings,
)
from dataq.config.schema import (
    CONFIG_ENV,
    DEFAULT_QUEUE,
    ENV_OVERRIDES,
    REDIS_URL_ENV,
    SYSTEM_CONFIG,
    EventSettings,
    LogSettings,
    PopSettings,
    PushSettings,
    Settings,
    default_data_dir,
    describe_source,
    load_settings,
    settings_file,
)

__all__ = [
    "APPENDFSYNC_CHOICES",
    "CONFIG_ENV",
    "DEFAULT_APPENDFSYNC",
    "DEFAULT_QUEUE",
    "ENV_OVERRIDES",
    "MAX_PORT",
    "REDIS_URL_ENV",
    "REDIS_URL_SCHEMES",
    "SYSTEM_CONFIG",
    "EventSettings",
    "HealthSettings",
    "LogSettings",
    "MailSettings",
    "MetricsSettings",
    "PopSettings",
    "PushSettings",
    "QueueSettings",
    "RedisSettings",
    "Settings",
    "WebSettings",
    "default_data_dir",
    "describe_source",
    "load_options",
    "load_settings",
    "parse_host_port",
    "settings_file",
]
