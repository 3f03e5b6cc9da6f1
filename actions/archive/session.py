"""The process's one SparkSession: Spark allows one SparkContext per process, so every user of the same spec
shares it (:data:`SESSIONS`) and the last one to let go stops it. Driver side only; executors never import this.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql import SparkSession

PYTHON_CONF = "spark.pyspark.python"
PYTHON_ENV = "PYSPARK_PYTHON"
"""pyspark's driver reads the executors' Python from this variable only, so the conf key is copied into it."""


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """What a SparkSession is built from; two users share a session only if their specs are equal."""

    master: str
    app_name: str
    conf: tuple[tuple[str, str], ...]


def default_conf(driver_host: str) -> dict[str, str]:
    """The conf every session gets unless the options' ``conf`` overrides a key."""
    return {
        # Loopback by default: a pop daemon must not open ports to the network unless told to.
        "spark.driver.host": driver_host,
        "spark.driver.bindAddress": driver_host,
        "spark.ui.enabled": "false",  # the UI would listen on every interface, and a daemon has no viewer
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",  # the catalog's times are UTC instants, whatever the machine's zone
        # Write and read dates before 1900 (plates, MJD 0 placeholders) as they are: Spark 3 refuses them by default.
        **{f"spark.sql.parquet.{kind}RebaseModeIn{way}": "CORRECTED"
           for kind in ("int96", "datetime") for way in ("Write", "Read")},
        # Executors run this interpreter (it has pyspark and astropy), not whatever `python3` PATH finds.
        PYTHON_CONF: os.environ.get(PYTHON_ENV, sys.executable),
    }


def session_spec(master: str, app_name: str, conf: Mapping[str, str], driver_host: str) -> SessionSpec:
    return SessionSpec(master, app_name, tuple(sorted({**default_conf(driver_host), **conf}.items())))


class SessionConflict(RuntimeError):
    """This process already runs a SparkSession built from another spec."""


class SessionPool:
    """The process's one SparkSession, reference counted: built by the first :meth:`acquire`, stopped by the last
    :meth:`release`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._session: SparkSession | None = None
        self._spec: SessionSpec | None = None
        self._users = 0

    def acquire(self, spec: SessionSpec) -> SparkSession:
        """The shared session (built now if none runs); blocks while the JVM starts."""
        with self._lock:
            if self._session is None:
                python = dict(spec.conf).get(PYTHON_CONF)
                if python:
                    os.environ[PYTHON_ENV] = python
                builder = SparkSession.builder.master(spec.master).appName(spec.app_name)
                for key, value in spec.conf:
                    builder = builder.config(key, value)
                session = builder.getOrCreate()
                if session.sparkContext.master != spec.master:
                    raise SessionConflict(f"a Spark session with master {session.sparkContext.master!r} already "
                                          f"runs in this process (not started by dataq); {spec.master!r} was asked")
                session.sparkContext.setLogLevel("WARN")
                self._session, self._spec = session, spec
            elif spec != self._spec:
                assert self._spec is not None
                raise SessionConflict(f"this process already runs a Spark session for master {self._spec.master!r} "
                                      f"with other settings; one process can hold only one Spark session, so every "
                                      f"archive_ingest queue of one pop daemon needs the same master and conf")
            self._users += 1
            return self._session

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._session is not None:
                session, self._session, self._spec = self._session, None, None
                session.stop()


SESSIONS = SessionPool()
