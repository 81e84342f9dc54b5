"""``cmq bench``: a load generator for a running cluster, like ``nats bench`` or PerfTest.

Producers keep ``window`` send requests in flight, each of ``batch`` messages; consumers run
``recv_window`` long-poll receive loops each and acknowledge every received batch in one
request. Every body starts with a printable header (run tag, producer, sequence number, send
time) so consumers measure end-to-end latency and the run detects duplicated and missing
messages. After the duration (or ``messages``) production stops and the queue is drained until
every confirmed message was received, or the queue is empty (no delivery for a few seconds and
its stats show nothing visible, delayed or leased: a *full* drain, and what is still missing
then is lost), or the drain timeout passes. Messages leased by a receive whose answer was lost
(client timeout, or a receive the server retried across a leader change) are not lost: they
come back after the visibility timeout, which the bench sets to :data:`RECV_VISIBILITY_TIMEOUT`
on its receives so that a drain can wait for them.

The package is two halves:

* pure logic with no I/O, clocks or asyncio, unit-tested on its own: `cmq.loadgen.body`
  (:func:`encode_body` / :func:`decode_body`), `cmq.loadgen.measure` (:class:`LatencyHistogram`,
  :class:`SendSchedule`, :class:`SeqTracker`), `cmq.loadgen.report` (:class:`BenchConfig`,
  :class:`BenchReport`, :func:`format_progress`, :func:`format_report`, :func:`report_to_json`);
* the run itself, `cmq.loadgen.run` (:func:`run_bench`; ``cmq bench`` is `cmq.cli.bench`): one
  `cmq.client.Client` (pooled connections, no per-message work beyond JSON) on one event loop
  (uvloop when installed), every task owned by a ``TaskGroup`` or awaited and cancelled.

Memory is bounded by the configuration, not by the run's length: latencies go to log-bucket
histograms (a fixed number of buckets), and duplicate/missing detection costs two bits per
message sent.
"""

from cmq.loadgen.body import HEADER_LEN, Stamp, decode_body, encode_body, new_run_tag
from cmq.loadgen.measure import LatencyHistogram, SendSchedule, SeqTracker
from cmq.loadgen.report import (
    BenchConfig,
    BenchReport,
    LatencySummary,
    ProgressSample,
    format_progress,
    format_report,
    report_to_json,
)
from cmq.loadgen.run import (
    RECV_VISIBILITY_TIMEOUT,
    BenchError,
    run_bench,
)

__all__ = [
    "HEADER_LEN",
    "RECV_VISIBILITY_TIMEOUT",
    "BenchConfig",
    "BenchError",
    "BenchReport",
    "LatencyHistogram",
    "LatencySummary",
    "ProgressSample",
    "SendSchedule",
    "SeqTracker",
    "Stamp",
    "decode_body",
    "encode_body",
    "format_progress",
    "format_report",
    "new_run_tag",
    "report_to_json",
    "run_bench",
]
