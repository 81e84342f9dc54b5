"""Fixtures shared by every test package."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture
def quiet_logging() -> Iterator[None]:
    """Silence logging: simulations report halted groups as violations, not log lines."""
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)
