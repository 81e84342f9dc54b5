"""``cmq backup`` and ``cmq restore``: a copy of a cluster's catalog and live messages, read
through the HTTP API while the cluster runs, and its recreation in another cluster.

`cmq.backup.format` is the on-disk format (a versioned manifest, catalog sections, one file
per queue; pure), `cmq.backup.dump` writes a backup, `cmq.backup.load` restores one;
`cmq.backup.errors` holds their errors. A client of the API only (like `cmq.archive`): it
never imports the node, the state machine or Raft.
"""
