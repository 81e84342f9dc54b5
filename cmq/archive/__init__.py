"""The Spark archive job: released segments of a cmq cluster become Parquet files.

A client of the cluster's HTTP API only (it imports nothing of the state machine, the node or
Raft), and imported by nothing the server runs (pyproject.toml, import-linter contracts
``archive-outside-server`` and ``archive-http-client``).

    cmq/archive/auth.py      signing its requests (the key of the environment; to executors)
    cmq/archive/remote.py    the HTTP contract: listing, claim, MarkArchived, node ids
    cmq/archive/records.py   one segment's records stream, checked end to end -> Arrow batches
    cmq/archive/source.py    the PySpark Python data source ``cmq``
    cmq/archive/storage.py   the output location through Hadoop's FileSystem
    cmq/archive/manifest.py  ``_manifests/<batch_id>.json`` (archive batches, compactions)
    cmq/archive/recovery.py  a run's first steps: earlier runs' manifests and leftovers settled
    cmq/archive/job.py       the re-entrant job: the run; claim, write, verify, commit, mark
    cmq/archive/summary.py   the run summaries printed and the exit codes (archive, compact)
    cmq/archive/reader.py    the live files by the manifests: pyarrow Table/Dataset, Spark paths
    cmq/archive/compact.py   ``cmq archive compact``: small files of a queue-day -> target size
    cmq/archive/pacing.py    ``--follow``'s decisions: back-off, when to stop (pure)
    cmq/archive/follow.py    ``--follow``: batches in a loop in one Spark session, signals
    cmq/archive/main.py      ``cmq archive`` / ``python -m cmq.archive`` and the Spark session
"""
