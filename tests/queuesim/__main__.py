"""``python -m tests.queuesim --seeds N``: run queue-simulation seeds (see `tests.queuesim.sim`)."""

from __future__ import annotations

import sys

from tests.queuesim.sim import main

sys.exit(main())
