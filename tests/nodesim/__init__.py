"""The whole node under the deterministic simulator (`tests.nodesim.sim`): ``python -m
tests.nodesim --seeds N``. A test tool, not part of the ``cmq`` package (it imports
``raftlog.sim``)."""
