"""Requests to the group that owns a queue: `router` (here or forwarded to the leader), `rpc`
(the typed calls on the peer connection), `ops` (what a leader does with them), `wakeups` (the
long polls' wake-ups, fed by the data groups' apply effects), `receipts` (signed delivery
receipts), `clock` (this node's clock, which every part of the node reads) and `clockfault`
(the test hook on the clock commands carry)."""
