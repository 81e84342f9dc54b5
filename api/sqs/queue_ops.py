"""The SQS queue operations (create, find, list, delete, purge, attributes, tags, dead-letter
sources) on `cmq.service.QueueService`; see `api.sqs.operations`. Pure but for the service calls.
"""

from __future__ import annotations

import asyncio
from typing import Any

from api.sqs import queues
from api.sqs.calls import Caller, Result, call, now_s, page, queue_name, required
from api.sqs.errors import (
    InvalidParameterValue,
    QueueDoesNotExist,
    QueueNameExists,
    UnsupportedOperation,
    from_cmq,
)
from cmq.errors import CmqError, QueueAlreadyExists, QueueNotFound
from cmq.model import QueueAttributes, is_fifo_name


# -- queues ------------------------------------------------------------------------------------
async def create_queue(c: Caller, p: dict[str, Any]) -> Result:
    name = queues.check_name(required(p, "QueueName"))
    changes = queues.parse_attributes(p.get("Attributes"), c.settings, name)
    if is_fifo_name(name) and not changes.cmq.get("fifo"):
        raise InvalidParameterValue(
            "The attribute FifoQueue=true is required to create a queue whose name ends in .fifo."
        )
    tags = _check_tags(p.get("tags", p.get("Tags")))
    try:
        existing, _ = await c.service.get_queue(name)
    except QueueNotFound:
        existing = None
    except CmqError as e:
        raise from_cmq(e) from None
    if existing is not None:
        current = existing.to_dict()
        differ = sorted(k for k, v in changes.cmq.items() if current[k] != v)
        differ += await _stored_differences(c, name, p.get("Attributes"))
        if differ:
            raise QueueNameExists(
                "A queue already exists with the same name and a different value for attribute"
                f"(s) {', '.join(differ)}"
            )
        return {"QueueUrl": c.url(name)}
    if changes.dead_letter_target is not None:
        await _check_dead_letter_target(c, name, changes.dead_letter_target)
    attributes = QueueAttributes.from_dict(changes.cmq) if changes.cmq else QueueAttributes()
    try:
        await c.service.create_queue(name, attributes)
    except QueueAlreadyExists:
        raise QueueNameExists("A queue already exists with the same name.") from None
    except CmqError as e:
        raise from_cmq(e) from None
    now = now_s()
    meta = {queues.META_CREATED: now, queues.META_MODIFIED: now}
    meta.update({k: v for k, v in changes.meta.items() if v is not None})
    meta.update({queues.TAG_PREFIX + k: v for k, v in tags.items()})
    await call(c.service.update_metadata(name, meta, []))
    return {"QueueUrl": c.url(name)}


async def _stored_differences(c: Caller, name: str, requested: object) -> list[str]:
    """The `queues.STORED` attributes of ``requested`` (checked already) whose value differs
    from the existing queue ``name``'s."""
    if not isinstance(requested, dict):
        return []
    asked = {k: v for k, v in requested.items() if k in queues.STORED}
    if not asked:
        return []
    meta = await call(c.service.queue_metadata(name))
    if queues.META_SSE not in meta:  # never set: SQS's default differs from what cmq shows
        asked.pop("SqsManagedSseEnabled", None)
    shown = queues.stored_attributes(meta)
    return sorted(k for k, v in asked.items() if not queues.same_stored(k, v, shown.get(k)))


async def _check_dead_letter_target(c: Caller, source: str, target: str) -> None:
    if target == source:
        raise InvalidParameterValue("A queue cannot be its own dead-letter queue.")
    try:
        meta = await c.service.queue_metadata(target)
    except QueueNotFound:
        raise InvalidParameterValue(
            "Value for parameter RedrivePolicy is invalid. Reason: Dead letter target does not "
            "exist."
        ) from None
    except CmqError as e:
        raise from_cmq(e) from None
    if not queues.redrive_allows(meta.get(queues.META_REDRIVE_ALLOW), c.settings.arn(source)):
        raise InvalidParameterValue(
            "Value for parameter RedrivePolicy is invalid. Reason: the dead-letter queue's "
            "RedriveAllowPolicy does not allow this source queue."
        )


async def get_queue_url(c: Caller, p: dict[str, Any]) -> Result:
    name = required(p, "QueueName")
    owner = p.get("QueueOwnerAWSAccountId")
    if owner is not None and owner != c.settings.account:
        raise QueueDoesNotExist("The specified queue does not exist.")
    name = queues.check_name(name)
    await call(c.service.queue_metadata(name))
    return {"QueueUrl": c.url(name)}


async def list_queues(c: Caller, p: dict[str, Any]) -> Result:
    prefix = p.get("QueueNamePrefix") or ""
    if not isinstance(prefix, str):
        raise InvalidParameterValue("QueueNamePrefix must be a string")
    names = [n for n in await call(c.service.list_queues()) if n.startswith(prefix)]
    shown, token = page(names, p)
    out: dict[str, Any] = {}
    if shown:
        out["QueueUrls"] = [c.url(n) for n in shown]
    if token is not None:
        out["NextToken"] = token
    return out


async def delete_queue(c: Caller, p: dict[str, Any]) -> Result:
    await call(c.service.delete_queue(queue_name(c, p)))
    return None


async def purge_queue(c: Caller, p: dict[str, Any]) -> Result:
    await call(c.service.purge(queue_name(c, p)))
    return None


async def get_queue_attributes(c: Caller, p: dict[str, Any]) -> Result:
    name = queue_name(c, p)
    wanted = queues.check_attribute_names(p.get("AttributeNames"))
    attributes, stats = await call(c.service.get_queue(name))
    meta = await call(c.service.queue_metadata(name)) if wanted else {}
    rendered = queues.render_attributes(
        wanted, attributes=attributes, stats=stats, meta=meta, name=name, settings=c.settings
    )
    return {"Attributes": rendered} if rendered else {}


async def set_queue_attributes(c: Caller, p: dict[str, Any]) -> Result:
    name = queue_name(c, p)
    changes = queues.parse_attributes(required(p, "Attributes"), c.settings, name)
    await call(c.service.get_queue(name))  # exists, before anything changes
    if changes.dead_letter_target is not None:
        await _check_dead_letter_target(c, name, changes.dead_letter_target)
    if changes.cmq:
        await call(c.service.set_attributes(name, changes.cmq))
    meta = {k: v for k, v in changes.meta.items() if v is not None}
    meta[queues.META_MODIFIED] = now_s()
    unset = [k for k, v in changes.meta.items() if v is None]
    await call(c.service.update_metadata(name, meta, unset))
    return None


def _check_tags(tags: object) -> dict[str, str]:
    if tags is None:
        return {}
    if not isinstance(tags, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in tags.items()
    ):
        raise InvalidParameterValue("Tags must be a map of strings to strings")
    for k, v in tags.items():
        if not 1 <= len(k) <= 128 or len(v) > 256:
            raise InvalidParameterValue(
                "Tag keys have 1 to 128 characters and tag values at most 256."
            )
    if len(tags) > queues.MAX_TAGS:
        raise InvalidParameterValue(f"Too many tags: a queue has at most {queues.MAX_TAGS}.")
    return tags


async def tag_queue(c: Caller, p: dict[str, Any]) -> Result:
    name = queue_name(c, p)
    tags = _check_tags(required(p, "Tags"))
    if not tags:
        raise InvalidParameterValue("Tags must not be empty.")
    meta = await call(c.service.queue_metadata(name))
    keys = {k for k in meta if k.startswith(queues.TAG_PREFIX)}
    keys.update(queues.TAG_PREFIX + k for k in tags)
    if len(keys) > queues.MAX_TAGS:
        raise InvalidParameterValue(f"Too many tags: a queue has at most {queues.MAX_TAGS}.")
    changes = {queues.TAG_PREFIX + k: v for k, v in tags.items()}
    await call(c.service.update_metadata(name, changes, []))
    return None


async def untag_queue(c: Caller, p: dict[str, Any]) -> Result:
    name = queue_name(c, p)
    keys = required(p, "TagKeys")
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys):
        raise InvalidParameterValue("TagKeys must be a non-empty list of tag keys")
    await call(c.service.update_metadata(name, {}, [queues.TAG_PREFIX + k for k in keys]))
    return None


async def list_queue_tags(c: Caller, p: dict[str, Any]) -> Result:
    meta = await call(c.service.queue_metadata(queue_name(c, p)))
    n = len(queues.TAG_PREFIX)
    tags = {k[n:]: v for k, v in meta.items() if k.startswith(queues.TAG_PREFIX)}
    return {"Tags": tags} if tags else {}


async def list_dead_letter_source_queues(c: Caller, p: dict[str, Any]) -> Result:
    name = queue_name(c, p)
    await call(c.service.get_queue(name))
    names = [n for n in await call(c.service.list_queues()) if n != name]

    async def source(n: str) -> str | None:
        try:
            attributes, _ = await c.service.get_queue(n)
        except QueueNotFound:
            return None
        except CmqError as e:
            raise from_cmq(e) from None
        return n if attributes.dead_letter_queue == name else None

    found: list[str] = []
    for i in range(0, len(names), 32):  # bounded fan-out
        chunk = await asyncio.gather(*(source(n) for n in names[i : i + 32]))
        found.extend(n for n in chunk if n is not None)
    shown, token = page(found, p)
    out: dict[str, Any] = {"queueUrls": [c.url(n) for n in shown]}
    if token is not None:
        out["NextToken"] = token
    return out


async def permissions(c: Caller, p: dict[str, Any]) -> Result:
    """AddPermission / RemovePermission: refused with SQS's ``UnsupportedOperation``, as SQS
    refuses what it cannot apply. An SQS permission names AWS accounts, which cmq does not
    have; its access control is per access key (``cmq key`` grants), and mapping accounts onto
    keys would grant something other than what was asked. The queue must exist."""
    await call(c.service.queue_metadata(queue_name(c, p)))
    raise UnsupportedOperation(
        "AddPermission and RemovePermission are not supported: cmq grants access per access key "
        "(cmq key grant), not per AWS account; a queue's Policy is stored but not enforced."
    )
