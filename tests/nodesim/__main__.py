"""``python -m tests.nodesim --seeds N``: run whole-node simulation seeds (`tests.nodesim.sim`)."""

from __future__ import annotations

import sys

from tests.nodesim.sim import main

sys.exit(main())
