"""Every error ``cmq backup`` and ``cmq restore`` report of their own, each with a machine-
readable ``code`` (errors the cluster answers are raised as the `cmq.errors` class of their
code). A restore checks what it can before it changes anything: a bad manifest, a newer format
or a damaged queue file is refused before the first queue is created.
"""

from __future__ import annotations

from cmq.errors import CmqError


class BackupError(CmqError):
    """Base of the backup's errors."""

    code = "BackupError"


class InvalidBackup(BackupError):
    """A backup directory is incomplete or damaged: a missing or malformed manifest, a queue
    file whose checksum or message count is not the manifest's. The message names the file."""

    code = "InvalidBackup"


class NewerBackupFormat(BackupError):
    """The backup was written in a newer format version than this release reads. The message
    names the manifest file and both versions."""

    code = "NewerBackupFormat"


class BackupTargetNotEmpty(BackupError):
    """``cmq backup --out DIR``: DIR exists and is not empty (nothing is overwritten)."""

    code = "BackupTargetNotEmpty"


class RestoreConflict(BackupError):
    """A queue of the target cluster holds messages that are not a prefix of the backup's
    (someone else sent to it): the restore stops before storing anything in it."""

    code = "RestoreConflict"
