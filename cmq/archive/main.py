"""``cmq archive`` (and ``python -m cmq.archive``, which ``spark-submit`` can run):

    cmq archive --url URL[,URL...] --out DIR [--queue NAME ...] [--master local[2]]
                [--max-segments N] [--claim-ttl SECONDS] [--writer auto|pyarrow|spark]
                [--segments-per-task N] [--timeout SECONDS] [--json-read] [--json]
                [--follow [--idle-backoff-max SECONDS]]
    cmq archive compact --out DIR [--queue NAME ...] [--date YYYY-MM-DD ...]
                [--target-bytes N] [--json]                  (cmq/archive/compact.py)

Prints a summary (segments, rows, bytes, seconds); exits 0 on success, 1 on any failure (the
error's code and message on stderr), 2 on bad arguments. ``--follow`` runs batches until
SIGTERM/SIGINT (exit 0) in one Spark session, each of at most ``--max-segments`` (default 32),
one line each (`cmq.archive.follow`).

The Spark session: ``--master`` (default ``local[2]``; under ``spark-submit`` the master it was
given). On a local master the session stays quiet and offline: no UI, driver bound to
127.0.0.1, small shuffles. On any other master the executors get the driver's access key as
``spark.executorEnv.*`` (`cmq.archive.auth`). Always: log level WARN, executors' Python = this
interpreter unless ``PYSPARK_PYTHON`` says otherwise.

Under ``spark-submit`` the application file is this package's ``__main__.py`` (docs/archive.md,
"On a Spark cluster", shows the command): the same arguments, the master spark-submit's.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING

from cmq.archive.auth import executor_conf
from cmq.archive.follow import DEFAULT_IDLE_BACKOFF_MAX, DEFAULT_MAX_SEGMENTS, follow_main
from cmq.archive.job import DEFAULT_CLAIM_TTL_MS, WRITERS, ArchiveJob, JobConfig
from cmq.archive.remote import split_urls
from cmq.archive.summary import LazySpark, finish

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOCAL_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
}
COMMON_CONF = {"spark.sql.session.timeZone": "UTC"}


def spark_session(master: str | None, app_name: str = "cmq-archive") -> SparkSession:
    """A Spark session for the job (see the module docstring). ``master`` None: the one
    ``spark-submit`` gave, else ``local[2]``."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # launched by spark-submit
    if master is None and not submitted:
        master = "local[2]"
    local = master is not None and master.startswith("local")
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    # Off a local master, the executors get the driver's access key (cmq.archive.auth).
    for k, v in {**COMMON_CONF, **(LOCAL_CONF if local else executor_conf())}.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cmq archive",
        description="Archive the released segments of a cmq cluster's queues as Parquet.",
        epilog="cmq archive compact --help: rewrite a queue-day's small files into large ones.",
    )
    p.add_argument("--url", required=True, help="URL[,URL...] of the cluster's nodes")
    p.add_argument("--out", required=True, help="output root: a local path or a Hadoop URI")
    p.add_argument(
        "--queue",
        action="append",
        default=[],
        help="a queue to archive (repeat; default: every queue with archive=true)",
    )
    p.add_argument("--master", help="Spark master (default local[2]; spark-submit's under it)")
    p.add_argument(
        "--max-segments",
        type=int,
        help="archive at most N segments in this run (a batch of --follow; default 32 there)",
    )
    p.add_argument(
        "--claim-ttl",
        type=float,
        default=DEFAULT_CLAIM_TTL_MS / 1000,
        help="seconds a claim on a segment lasts (default 600)",
    )
    p.add_argument(
        "--segments-per-task",
        type=int,
        help="segments a Spark task reads and writes as one file a day (default: pyarrow "
        "writer, the batch spread over Spark's cores, at most 64 a task; Spark's writer, 8)",
    )
    p.add_argument(
        "--writer",
        choices=WRITERS,
        default="auto",
        help="who writes the Parquet: pyarrow in the Python workers (local --out only), "
        "Spark's writer, or auto (pyarrow on a local --out, Spark elsewhere)",
    )
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per HTTP call")
    p.add_argument(
        "--json-read",
        action="store_true",
        help="read segments as JSON lines (the older, slower form) instead of binary",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument(
        "--follow",
        action="store_true",
        help="run batches continuously until SIGTERM/SIGINT, backing off when nothing is released",
    )
    p.add_argument(
        "--idle-backoff-max",
        type=float,
        default=DEFAULT_IDLE_BACKOFF_MAX,
        help="--follow: the longest wait (seconds) between batches that find nothing (default 30)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["compact"]:  # cmq archive compact ... (cmq.archive.compact)
        from cmq.archive import compact

        return compact.main(argv[1:])
    args = parser().parse_args(argv)
    urls = split_urls(args.url)
    if (
        not urls
        or (args.max_segments is not None and args.max_segments < 1)
        or (args.segments_per_task is not None and args.segments_per_task < 1)
        or not args.idle_backoff_max > 0
    ):
        print(
            "error: invalid_argument: --url needs a URL, --max-segments and "
            "--segments-per-task N >= 1, --idle-backoff-max S > 0",
            file=sys.stderr,
        )
        return 2
    if args.follow and args.max_segments is None:
        args.max_segments = DEFAULT_MAX_SEGMENTS
    config = JobConfig(
        urls=urls,
        out=args.out,
        queues=tuple(args.queue),
        max_segments=args.max_segments,
        claim_ttl_ms=max(1, int(args.claim_ttl * 1000)),
        timeout=args.timeout,
        binary=not args.json_read,
        segments_per_task=args.segments_per_task,
        writer=args.writer,
    )
    if args.follow:
        return follow_main(
            config, lambda: spark_session(args.master), args.idle_backoff_max, args.json
        )
    spark = LazySpark(lambda: spark_session(args.master))
    started = time.monotonic()

    def progress(step: str) -> None:
        print(f"[{time.monotonic() - started:6.1f} s] {step}", file=sys.stderr, flush=True)

    return finish(lambda: ArchiveJob(spark, config, progress=progress).run(), spark, args.json)
