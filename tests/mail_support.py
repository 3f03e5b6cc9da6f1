"""A real SMTP server for the tests of e-mail notices: aiosmtpd on a free loopback port, keeping every message."""

from __future__ import annotations

import asyncio
import email
import email.policy
import threading
from collections.abc import Callable, Iterator
from email.message import EmailMessage
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from dataq.embedded.redis_server import free_port

WAIT = 10.0
"""Seconds a test waits for mail before failing (generous: only a broken notifier takes this long)."""


class SmtpSink:
    """An aiosmtpd server on loopback that keeps every message it receives."""

    def __init__(self, port: int, **controller: Any) -> None:
        self.messages: list[EmailMessage] = []
        self.envelopes: list[tuple[str, list[str]]] = []
        self._changed = threading.Condition()
        self.controller = Controller(self, hostname="127.0.0.1", port=port, **controller)

    async def handle_DATA(self, server: object, session: object, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        with self._changed:
            self.messages.append(message)
            self.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
            self._changed.notify_all()
        return "250 OK"

    def start(self) -> SmtpSink:
        self.controller.start()
        return self

    def stop(self) -> None:
        self.controller.stop()

    async def eventually(self, condition: Callable[[list[EmailMessage]], bool], timeout: float = WAIT) -> None:
        def wait() -> bool:
            with self._changed:
                return self._changed.wait_for(lambda: condition(self.messages), timeout)

        assert await asyncio.to_thread(wait), f"mail not received in time; got {len(self.messages)}"

    async def wait_for(self, count: int, timeout: float = WAIT) -> list[EmailMessage]:
        await self.eventually(lambda messages: len(messages) >= count, timeout)
        return list(self.messages)


@pytest.fixture
def smtp() -> Iterator[SmtpSink]:
    sink = SmtpSink(free_port()).start()
    yield sink
    sink.stop()


