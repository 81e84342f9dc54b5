"""Archive throughput on Spark ``local[2]`` against the test double of the cluster (three
replicas serving synthetic segments over HTTP from this process):

    python -m tests.archive.throughput [--segments 40] [--rows 5000] [--body 200]

Prints the job's time without the JVM start (a warm-up batch runs first), rows/s, and MB/s of
segment bytes read (the listing's ``bytes``) and of bodies.
"""

from __future__ import annotations

import argparse
import base64
import tempfile
import time

from cmq.archive.job import ArchiveJob, JobConfig
from cmq.archive.main import spark_session
from tests.archive.fake_cluster import FakeCluster


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--segments", type=int, default=40)
    p.add_argument("--rows", type=int, default=5000)
    p.add_argument("--body", type=int, default=200, help="approximate body bytes")
    args = p.parse_args()
    start = time.monotonic()
    spark = spark_session("local[2]")
    print(f"Spark session: {time.monotonic() - start:.1f} s")
    with FakeCluster() as fake, tempfile.TemporaryDirectory() as out:
        fake.add_segments("warmup", [100])
        cfg = JobConfig(urls=tuple(fake.urls), out=out, queues=("warmup",))
        s = ArchiveJob(lambda: spark, cfg).run()
        print(f"warm-up batch (first Python workers): {s.seconds:.1f} s")
        fake.add_segments("q", [args.rows] * args.segments)
        for seg in fake.queues["q"].segments.values():
            for r in seg.records:  # bodies of about --body bytes
                r["body_b64"] = base64.b64encode(b"x" * args.body + r["id"].encode()).decode()
        body_mb = sum(args.body + len(r["id"]) for r in fake.records("q")) / 1e6
        cfg = JobConfig(urls=tuple(fake.urls), out=out, queues=("q",))
        s = ArchiveJob(lambda: spark, cfg).run()
        print(s.render())
        print(
            f"{s.rows / s.seconds:,.0f} rows/s, {s.source_bytes / 1e6 / s.seconds:.2f} MB/s of "
            f"segments read, {body_mb / s.seconds:.2f} MB/s of bodies"
        )
    spark.stop()


if __name__ == "__main__":
    main()
