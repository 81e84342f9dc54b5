"""What ``cmq archive compact`` makes of many small files (docs/archive.md; issue 31, part 3).

An archive of ``--files`` batches, one Parquet file each of ``--rows`` rows with 1,000-byte
random bodies (incompressible: the files' sizes are the data's), one queue and one day, with
their version 1 manifests (`tests.archive.synthetic`, the job's layout), is compacted once to
``--target-bytes`` in this process (`cmq.archive.compact.Compaction`, what ``cmq archive
compact`` runs; pyarrow only). Then the manifest reader reads every row back and checks each
is there once.

    python bench/archive_compact_bench.py [--files 200] [--rows 1000] [--target-bytes 134217728]

Prints one JSON object: files and bytes in and out, the compacted files' sizes (MiB), the
compaction's seconds and MB/s (input bytes), the reader's seconds.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from cmq.archive import compact as cp
from cmq.archive.storage import LocalStorage
from tests.archive.synthetic import read_exact, small_files


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--files", type=int, default=200)
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--target-bytes", type=int, default=cp.DEFAULT_TARGET)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="cmq-compact-bench-") as d:
        root = Path(d)
        keys = small_files(root, args.files, rows=args.rows)
        config = cp.CompactConfig(str(root), target_bytes=args.target_bytes)
        s = cp.Compaction(LocalStorage(str(root)), config).run()
        start = time.monotonic()
        read_exact(root, keys)
        read_seconds = time.monotonic() - start
    print(
        json.dumps(
            {
                "files_in": s.files_in,
                "mb_in": round(s.bytes_in / 1e6, 2),
                "files_out": s.files_out,
                "mb_out": round(s.bytes_out / 1e6, 2),
                "sizes_mib": [round(x / 2**20, 1) for x in s.sizes],
                "target_mib": round(args.target_bytes / 2**20, 1),
                "rows": s.rows,
                "compact_seconds": round(s.seconds, 2),
                "compact_mb_per_s": round(s.bytes_in / 1e6 / s.seconds, 1),
                "reader_seconds": round(read_seconds, 2),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
