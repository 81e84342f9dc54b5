"""Steps 1 and 2 of an archive run (`cmq.archive.job`): what earlier runs left behind, settled
before this run claims anything. Each step is re-entrant; a crash in it is finished by the next
run.

1. **Recover** (`Recovery.recover`). Every manifest under ``_manifests/`` names segments whose
   records are in its files. A segment named there that the cluster still lists as released
   (same seq range and checksum) is marked archived now, with that manifest's batch id (its
   files are checked to exist with their recorded sizes first, but for those a committed
   compaction manifest retires: `cmq.archive.compact` moved their rows; its data is never
   rewritten). A segment named by two manifests is an error (`DuplicateSegment`), raised
   before anything is marked.
2. **Collect garbage** (`Recovery.collect_garbage`). Output directories
   (``queue=Q/date=D/batch_id=B`` and ``_staging/B``) of a batch with no manifest and no live
   claim on any segment are what a crashed run left: removed. A batch with a live claim may
   still be running: left alone. So is a compaction's (``c-...``): `cmq.archive.compact`
   collects its own. A committed batch's leftover ``_staging/B`` (a late task attempt) is
   removed; its output under the root never is.

`mark_archived` (MarkArchived for a batch's segments, a refusal an error) serves step 1 here
and step 6 of the job.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence, Set
from dataclasses import dataclass

from cmq.archive import manifest as mf
from cmq.archive import reader
from cmq.archive.errors import ApiError, ConflictingClaim, DuplicateSegment, ManifestInvalid
from cmq.archive.remote import ClusterClient, Listing
from cmq.archive.storage import Storage

STAGING = "_staging"
"""Where a batch's files are written before they are moved under the root (`cmq.archive.job`)."""


def mark_archived(client: ClusterClient, queue: str, batch_id: str, firsts: Sequence[int]) -> int:
    """MarkArchived the segments of ``queue`` starting at ``firsts`` for ``batch_id``; how many
    the cluster marked. Any refusal: `ConflictingClaim`."""
    res = client.mark_archived(queue, batch_id, firsts)
    if res.refused:
        refused = [(r.first_seq, r.reason, r.batch_id) for r in res.refused]
        raise ConflictingClaim(f"MarkArchived {queue} {batch_id}: refused {refused}")
    return len(res.archived)


def batch_folders(storage: Storage) -> list[tuple[str, str]]:
    """Every ``queue=Q/date=D/batch_id=B`` directory under the root as (B, its path), in the
    order the listings give them: the output of archive batches and compactions alike."""
    out = []
    for q in storage.list(""):
        if not (q.is_dir and q.name.startswith("queue=")):
            continue
        for d in storage.list(q.name):
            if not (d.is_dir and d.name.startswith("date=")):
                continue
            for b in storage.list(f"{q.name}/{d.name}"):
                if b.is_dir and b.name.startswith("batch_id="):
                    out.append((b.name.removeprefix("batch_id="), f"{q.name}/{d.name}/{b.name}"))
    return out


@dataclass(frozen=True, slots=True)
class Recovery:
    """Steps 1 and 2 (module docstring) against ``client``'s cluster and the output root
    ``storage``. ``queues``: the run's chosen queues (their claims count as live too);
    ``clock``: seconds since the epoch (claims expire by it)."""

    client: ClusterClient
    storage: Storage
    queues: tuple[str, ...] = ()
    clock: Callable[[], float] = time.time

    # -- 1. recover ------------------------------------------------------------------------------
    def load_manifests(self) -> list[mf.Manifest]:
        """The manifests under the root; `DuplicateSegment` if two name one segment."""
        out = reader.read_manifests(self.storage)
        seen: dict[tuple[str, int], str] = {}
        for m in out:
            for s in m.segments:
                other = seen.setdefault((s.queue, s.first_seq), m.batch_id)
                if other != m.batch_id:
                    raise DuplicateSegment(
                        f"segment {s.queue}/{s.first_seq} is in batches {other} and {m.batch_id}"
                    )
        return out

    def _listing(self, queue: str) -> Listing | None:
        try:
            return self.client.segments(queue, "released")
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def recover(self, manifests: Sequence[mf.Manifest]) -> int:
        """Mark archived every segment of ``manifests`` still released (see step 1)."""
        marked = 0
        listings: dict[str, Listing | None] = {}
        for m in manifests:
            pending: dict[str, list[int]] = defaultdict(list)
            for s in m.segments:
                if s.queue not in listings:
                    listings[s.queue] = self._listing(s.queue)
                listing = listings[s.queue]
                if listing is None:
                    continue
                if any(
                    x.first_seq == s.first_seq
                    and x.last_seq == s.last_seq
                    and x.checksum == s.checksum
                    and x.state == "released"
                    for x in listing.segments
                ):
                    pending[s.queue].append(s.first_seq)
            if not pending:
                continue
            try:
                self.check_files(m, mf.retired(manifests))
            except ManifestInvalid:  # a compaction may have retired the file since: look again
                self.check_files(m, mf.retired(self.load_manifests()))
            for queue, firsts in sorted(pending.items()):
                marked += mark_archived(self.client, queue, m.batch_id, firsts)
        return marked

    def check_files(self, m: mf.Manifest, retired: Set[str] = frozenset()) -> None:
        """Every file of ``m`` exists with its recorded size, else `ManifestInvalid`; but a file
        in ``retired`` (a committed compaction holds its rows) may be gone."""
        for f in m.files:
            if f.path in retired:
                continue
            size = self.storage.size(f.path)
            if size != f.bytes:
                got = "missing" if size is None else f"{size} bytes"
                raise ManifestInvalid(
                    f"batch {m.batch_id}: {f.path} is {got}, the manifest says {f.bytes} bytes"
                )

    # -- 2. garbage ----------------------------------------------------------------------------
    def batch_dirs(self) -> dict[str, list[str]]:
        """Every batch with output under the root -> its directories."""
        dirs: dict[str, list[str]] = defaultdict(list)
        for e in self.storage.list(STAGING):
            if e.is_dir:
                dirs[e.name].append(f"{STAGING}/{e.name}")
        for batch_id, path in batch_folders(self.storage):
            dirs[batch_id].append(path)
        return dirs

    def live_claims(self, queues: Iterable[str]) -> set[str]:
        """Batches holding an unexpired claim on a released segment of ``queues``."""
        now_ms = int(self.clock() * 1000)
        live = set()
        for queue in sorted(set(queues)):
            listing = self._listing(queue)
            for s in listing.segments if listing else ():
                if s.claim is not None and s.claim.expires_at_ms > now_ms:
                    live.add(s.claim.batch_id)
        return live

    def collect_garbage(self, committed: set[str]) -> tuple[str, ...]:
        """Remove the output of batches with neither a manifest nor a live claim. A compaction's
        output (``c-...``) is left to `cmq.archive.compact`, which may be running."""
        dirs = self.batch_dirs()
        for b in sorted(committed & set(dirs)):  # a late task attempt's leftover staging
            for d in dirs[b]:
                if d.startswith(f"{STAGING}/"):
                    self.storage.delete(d)
        candidates = sorted(
            b for b in dirs if b not in committed and not b.startswith(mf.COMPACTION_PREFIX)
        )
        if not candidates:
            return ()
        live = self.live_claims([*self.client.queues(), *self.queues])
        removed = []
        for b in candidates:
            if b in live or self.storage.exists(mf.manifest_path(b)):
                continue
            for d in dirs[b]:
                self.storage.delete(d)
            removed.append(b)
        return tuple(removed)
