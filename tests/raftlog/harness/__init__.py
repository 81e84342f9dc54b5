"""Test harnesses for raftlog that speak HTTP: a standalone node process hosting `AppendLog`
groups behind a small control API (`node`), and a helper that starts N of them on loopback
(`localcluster`). Used by the multi-process tests and ``bench/raftlog_bench.py``; not part of
the library."""
