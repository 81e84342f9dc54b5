"""One cmq node: `queue_node.QueueNode` (the `cmq.service.QueueService` over a `MultiRaft`) and
what runs beside it: membership and replica moves, housekeeping, status and metrics, the clock
guard, peer TLS files and the data directory's feature marker."""
