"""What ``cmq archive`` and ``cmq archive compact`` share at the end of a run: the Spark session
started on first use (and stopped after), the summary printed, the exit code.

* `render`: a summary's text, its headline then only the notes that say something.
* `LazySpark`: a session started the first time a run asks for one; `stop` ends it (a run that
  never asked starts no JVM).
* `finish`: run a job and print its summary (``--json``: one JSON object; else its ``render``);
  exit 0. A job's `ArchiveError` prints ``error: <code>: <message>`` on stderr and exits 1, or
  ``invalid_exit`` for an `InvalidArgument` (``compact`` says 2: nothing changed); either way
  the session, if started, is stopped first.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import msgspec

from cmq.archive.errors import ArchiveError, InvalidArgument

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class Summary(Protocol):
    """A run's summary: a dataclass (encoded as JSON field by field) that renders as text."""

    def render(self) -> str: ...


def render(headline: str, *notes: str) -> str:
    """``headline`` and the non-empty ``notes``, one a line."""
    return "\n".join([headline, *(n for n in notes if n)])


class LazySpark:
    """A Spark session made by ``factory`` the first time it is called for, then the same one."""

    __slots__ = ("_factory", "_session")

    def __init__(self, factory: Callable[[], SparkSession]) -> None:
        self._factory = factory
        self._session: SparkSession | None = None

    def __call__(self) -> SparkSession:
        if self._session is None:
            self._session = self._factory()
        return self._session

    def stop(self) -> None:
        """Stop the session if one was started."""
        if self._session is not None:
            self._session.stop()


def finish(
    run: Callable[[], Summary], spark: LazySpark, as_json: bool, *, invalid_exit: int = 1
) -> int:
    """Run ``run`` and print its summary; the exit code (module docstring)."""
    try:
        summary = run()
    except ArchiveError as e:
        print(f"error: {e.code}: {e.message}", file=sys.stderr)
        return invalid_exit if isinstance(e, InvalidArgument) else 1
    finally:
        spark.stop()
    print(msgspec.json.encode(summary).decode() if as_json else summary.render())
    return 0
