"""dataq's settings: one TOML file plus ``DATAQ_*`` environment overrides, loaded into frozen dataclasses.

:mod:`.loader` is the machinery (sections, bounds, the generic loader, :func:`load_options` for actions),
:mod:`.schema` and :mod:`.operators` declare the sections. Import what you need from here.
"""

from __future__ import annotations

from dataq.config.loader import MAX_PORT, load_options
from dataq.config.operators import MailSettings, MetricsSettings
from dataq.config.schema import (
    APPENDFSYNC_CHOICES,
    CONFIG_ENV,
    DEFAULT_APPENDFSYNC,
    DEFAULT_QUEUE,
    ENV_OVERRIDES,
    REDIS_URL_SCHEMES,
    EventSettings,
    LogSettings,
    PopSettings,
    PushSettings,
    QueueSettings,
    RedisSettings,
    Settings,
    default_data_dir,
    load_settings,
)

__all__ = [
    "APPENDFSYNC_CHOICES",
    "CONFIG_ENV",
    "DEFAULT_APPENDFSYNC",
    "DEFAULT_QUEUE",
    "ENV_OVERRIDES",
    "MAX_PORT",
    "REDIS_URL_SCHEMES",
    "EventSettings",
    "LogSettings",
    "MailSettings",
    "MetricsSettings",
    "PopSettings",
    "PushSettings",
    "QueueSettings",
    "RedisSettings",
    "Settings",
    "default_data_dir",
    "load_options",
    "load_settings",
]
