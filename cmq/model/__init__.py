"""Values shared by the state machine, the node service and the API: queue attributes with their
limits, what a client sends and receives, and a queue's statistics. Pure: no I/O, no clocks.
The values of the archive's calls are `cmq.segment_values`, those of backups'
`cmq.export_values`.

The values live in this package's modules, by idea, and are all re-exported here:
`cmq.model.limits` (names, ids and limits), `cmq.model.attributes` (a queue's attributes),
`cmq.model.sending` (what is sent, the send rules, the answers), `cmq.model.receiving` (what a
consumer is handed) and `cmq.model.stats` (what a queue and a group report).

Times inside the queue are integer milliseconds since the Unix epoch, always stamped by the
proposer (the leader) and carried in commands, never read during apply.
"""

from __future__ import annotations

from cmq.model import attributes, limits, receiving, sending, stats
from cmq.model.attributes import *  # noqa: F403 - each module's names, re-exported
from cmq.model.limits import *  # noqa: F403
from cmq.model.receiving import *  # noqa: F403
from cmq.model.sending import *  # noqa: F403
from cmq.model.stats import *  # noqa: F403

__all__: list[str] = []
__all__ += attributes.__all__
__all__ += limits.__all__
__all__ += receiving.__all__
__all__ += sending.__all__
__all__ += stats.__all__
