"""The queue under the deterministic simulator (`tests.queuesim.sim`): ``python -m tests.queuesim
--seeds N``. A test tool, not part of the ``cmq`` package (it imports ``raftlog.sim``)."""
