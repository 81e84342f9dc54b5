"""The backup and restore routes (``cmq backup`` / ``cmq restore``, `cmq.backup`), added to
`api.routes.ROUTES`: thin handlers over `QueueService`'s backup methods (`cmq.admin.backup_admin`).
Every one needs ``admin`` on ``*`` when requests are authenticated (`api.auth.access`).
"""

from __future__ import annotations

import msgspec

from api.backup_models import (
    CatalogExport,
    CatalogImportRequest,
    CatalogImportResponse,
    ExportQuery,
    ExportResponse,
    ImportRequest,
    ImportResponse,
)
from api.routing import QUEUE_ERRORS, SERVICE_ERRORS, Context, Reply, Response, Route
from cmq.errors import ImportConflict, MessageTooLarge


async def export_catalog(ctx: Context, _: None) -> Reply:
    data = await ctx.service.export_catalog()
    return Reply(CatalogExport(str(data["release"]), dict(data["sections"])))


async def import_catalog(ctx: Context, req: CatalogImportRequest) -> Reply:
    keys = msgspec.to_builtins(req.keys)
    done = await ctx.service.import_catalog(keys, req.metadata)
    return Reply(
        CatalogImportResponse(done["keys_created"], done["keys_present"], done["metadata"])
    )


async def export_messages(ctx: Context, query: ExportQuery) -> Reply:
    page = await ctx.service.export_messages(ctx.name, query.after, query.upto, query.limit)
    return Reply(ExportResponse.of(page))


async def import_messages(ctx: Context, req: ImportRequest) -> Reply:
    messages = [m.to_model() for m in req.messages]
    sent = await ctx.service.import_messages(ctx.name, messages, req.expect_sent)
    return Reply(ImportResponse(len(sent), req.expect_sent + len(sent)))


_Q = "/v1/queues/{name}"
BACKUP_ROUTES: tuple[Route, ...] = (
    Route(
        "GET",
        "/v1/backup/catalog",
        "exportCatalog",
        "The catalog's sections for a backup (access keys sealed)",
        export_catalog,
        (Response(200, "The catalog as the answering node holds it", CatalogExport),),
        raises=SERVICE_ERRORS,
        description="Placement, data groups, queue metadata and access keys with their secrets "
        "sealed under the cluster secret (never in clear); a catalog that has more sections "
        "(feature flags) reports them too. Queue attributes are read per queue (getQueue).",
    ),
    Route(
        "POST",
        "/v1/backup/catalog",
        "importCatalog",
        "Restore access keys (sealed) and queue metadata",
        import_catalog,
        (Response(200, "What was created and what was already there", CatalogImportResponse),),
        request=CatalogImportRequest,
        raises=QUEUE_ERRORS,
        description="Each key's sealed secret must open with this cluster's secret (a backup's "
        "keys restore only into a cluster with the same cluster secret): otherwise 400 and "
        "nothing changes. A key already present with the same sealed secret is left as is. "
        "Metadata is set on queues that exist (404 QueueNotFound otherwise).",
    ),
    Route(
        "GET",
        f"{_Q}/export",
        "exportMessages",
        "A page of the queue's live messages, read without leasing them",
        export_messages,
        (Response(200, "Live messages in seq order (maybe none)", ExportResponse),),
        query=ExportQuery,
        raises=QUEUE_ERRORS,
        description="Visible, in-flight and delayed messages alike, with their state; read at "
        "the queue's leader, nothing changes. The first page (upto=0) fixes the export's bound "
        "(`upto`: the queue's next seq): messages sent after it are not part of the export. "
        "Each page holds the messages live when it is read; follow `next_after` until null.",
        grant_on_queue=False,  # a whole queue's records: admin on the cluster
    ),
    Route(
        "POST",
        f"{_Q}/import",
        "importMessages",
        "Store messages keeping their ids (a restore)",
        import_messages,
        (Response(200, "Stored in order, committed on a majority", ImportResponse),),
        request=ImportRequest,
        raises=(*QUEUE_ERRORS, ImportConflict, MessageTooLarge),
        description="Applied only if the queue has had exactly `expect_sent` messages sent "
        "(its sent_total): otherwise 409 ImportConflict and nothing is stored, so a repeated "
        "or concurrent import cannot store a message twice. Imported messages bypass the "
        "deduplication window and start with a receive count of 0; `delay_ms` keeps one "
        "invisible for that long (FIFO queues too).",
        grant_on_queue=False,  # a whole queue's records: admin on the cluster
    ),
)
