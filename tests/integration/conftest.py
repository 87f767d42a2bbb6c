"""Fixtures shared by the engine's integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.engine_support import WebhookSink


@pytest.fixture
def webhook() -> Iterator[WebhookSink]:
    """The on-call chat's incoming webhook, on loopback."""
    receiver = WebhookSink()
    yield receiver
    receiver.close()
