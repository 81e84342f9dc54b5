"""Every error the archive job reports, each with a machine-readable ``code``.

The job never archives data it could not verify: a replica that fails a check raises
`ReplicaFailed` (the reader then tries the next replica); when every replica failed the
partition raises `SegmentUnreadable`, the Spark job fails and nothing is marked archived.
"""

from __future__ import annotations


class ArchiveError(Exception):
    """Base of the archive job's errors."""

    code: str = "archive_error"

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.code)
        self.message = message or self.code


class InvalidArgument(ArchiveError):
    """A command-line argument or data source option is missing or malformed."""

    code = "invalid_argument"


class ClusterUnavailable(ArchiveError):
    """No URL of the cluster answered a request (connection refused, timeout, 5xx)."""

    code = "cluster_unavailable"


class ApiError(ArchiveError):
    """The cluster answered a request with an error (``{"error": {"code", "message"}}``)."""

    code = "api_error"

    def __init__(self, status: int, api_code: str, message: str) -> None:
        super().__init__(f"HTTP {status} {api_code}: {message}")
        self.status = status
        self.api_code = api_code


class ReplicaFailed(ArchiveError):
    """One replica's stream of a segment failed a check (cut stream, count, stream CRC,
    checksum differing from the listing, seq out of order or range, unreachable, HTTP error)."""

    code = "replica_failed"


class SegmentUnreadable(ArchiveError):
    """Every replica of a segment failed; the message names each replica's reason."""

    code = "segment_unreadable"


class ManifestInvalid(ArchiveError):
    """A manifest under ``_manifests/`` is unreadable, or names a file that is missing or whose
    size differs: the job refuses to mark its segments archived."""

    code = "manifest_invalid"


class NewerManifest(ArchiveError):
    """A manifest under ``_manifests/`` was written by a newer release in a version this one
    does not read; the message names the file and both versions. Run a newer archive job."""

    code = "manifest_newer"


class VerificationFailed(ArchiveError):
    """What was written differs from what was read (rows per segment, seq ranges)."""

    code = "verification_failed"


class ConflictingClaim(ArchiveError):
    """MarkArchived was refused for a segment of this batch (claimed by another batch, or no
    longer released), or a renewal of this batch's claim was refused."""

    code = "conflicting_claim"


class DuplicateSegment(ArchiveError):
    """Two manifests name the same segment: the output holds its records twice."""

    code = "duplicate_segment"


class WriteFailed(ArchiveError):
    """The Spark job reading the segments and writing Parquet failed (the first lines of its
    error; a `SegmentUnreadable` raised in an executor shows here)."""

    code = "write_failed"


class SparkLost(ArchiveError):
    """``--follow``: the Spark session died under a batch (its JVM gone or its context
    stopped). Permanent for this process: restart it for a fresh session."""

    code = "spark_lost"


class UnexpectedFailure(ArchiveError):
    """``--follow``: a batch raised something that is not an `ArchiveError` (named by its
    type and message); retried like a transient failure."""

    code = "unexpected"
