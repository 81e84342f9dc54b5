"""Fixtures shared by every test package."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

# CI replays a fixed set of examples (derandomized) so a landing is judged on reproducible
# runs; local runs keep exploring new examples. No deadlines on a shared 2-core machine.
settings.register_profile("ci", derandomize=True, deadline=None)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture
def quiet_logging() -> Iterator[None]:
    """Silence logging: simulations report halted groups as violations, not log lines."""
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)
