"""Queue URLs, ARNs and queue attributes between SQS's names and cmq's. Pure.

A queue URL is ``<scheme>://<host>:<port>/<account>/<name>`` (the host and port the client
called; the account a fixed 12-digit id, `SqsSettings.account`); an ARN is
``arn:aws:sqs:<region>:<account>:<name>``. cmq keeps what its queues do not model (tags,
timestamps, ``RedriveAllowPolicy``, and the access-policy and encryption attributes) in the
queue's catalog metadata under the keys below.

``Policy``, ``KmsMasterKeyId``, ``KmsDataKeyReusePeriodSeconds`` and ``SqsManagedSseEnabled``
are checked as SQS checks them, stored and returned, and change nothing else: cmq encrypts no
message with a KMS key, and a policy is not enforced (access keys' grants are, `cmq.grants`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

from api.sqs.errors import (
    InvalidAttributeName,
    InvalidAttributeValue,
    InvalidParameterValue,
    QueueDoesNotExist,
)
from cmq.model import LIMITS, QUEUE_NAME, QueueAttributes, is_fifo_name

META_CREATED = "sqs.created"
"""Catalog metadata: creation time, seconds since the epoch (set by SQS CreateQueue)."""
META_MODIFIED = "sqs.modified"
"""Catalog metadata: last attribute change, seconds since the epoch."""
META_REDRIVE_ALLOW = "sqs.redrive_allow"
"""Catalog metadata: the queue's RedriveAllowPolicy (JSON text)."""
META_POLICY = "sqs.policy"
"""Catalog metadata: the queue's access Policy (JSON text, stored as given, not enforced)."""
META_KMS_KEY = "sqs.kms_key"
"""Catalog metadata: KmsMasterKeyId (stored, not used: cmq does no KMS encryption)."""
META_KMS_REUSE = "sqs.kms_reuse"
"""Catalog metadata: KmsDataKeyReusePeriodSeconds (seconds, 60..86400)."""
META_SSE = "sqs.sse"
"""Catalog metadata: SqsManagedSseEnabled (``true`` / ``false``)."""
TAG_PREFIX = "tag."
"""Catalog metadata: one key per tag, ``tag.<key>``."""

MAX_TAGS = 50
FIFO_ONLY = frozenset(
    {"FifoQueue", "ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit"}
)
STORED = frozenset(
    {"Policy", "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds", "SqsManagedSseEnabled"}
)
"""The attributes kept in the catalog metadata only (see the module docstring)."""
KMS_REUSE_DEFAULT = "300"
"""KmsDataKeyReusePeriodSeconds when a key is set and no period is (SQS's default)."""
_KMS_REUSE_RANGE = (60, 86_400)
FIFO_DEFAULTS = {"DeduplicationScope": "queue", "FifoThroughputLimit": "perQueue"}
"""The FIFO attributes cmq accepts only with their default value: dedup covers the whole
queue, and the throughput limit is the queue's (high-throughput mode is not offered)."""

# SQS attribute name -> cmq attribute name (integers)
_INTEGER_ATTRIBUTES = {
    "VisibilityTimeout": "visibility_timeout",
    "DelaySeconds": "delay_seconds",
    "MessageRetentionPeriod": "message_retention_seconds",
    "MaximumMessageSize": "max_message_size",
    "ReceiveMessageWaitTimeSeconds": "receive_wait_seconds",
}
SETTABLE = frozenset({*_INTEGER_ATTRIBUTES, "RedrivePolicy", "RedriveAllowPolicy", *STORED})
READABLE = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
    "QueueArn",
    *_INTEGER_ATTRIBUTES,
    "RedrivePolicy",
    "RedriveAllowPolicy",
    *sorted(FIFO_ONLY),
    *sorted(STORED),
)
_ARN = re.compile(r"^arn:[a-z-]+:sqs:[a-z0-9-]*:(\d{12}):(.+)$")
_MAX_RECEIVE_COUNT = 1000


DEFAULT_ACCOUNT = "000000000000"
DEFAULT_REGION = "us-east-1"


@dataclass(frozen=True, slots=True)
class SqsSettings:
    """What the SQS surface says about itself: the account id in queue URLs and ARNs and the
    region in ARNs."""

    account: str = DEFAULT_ACCOUNT
    region: str = DEFAULT_REGION

    def __post_init__(self) -> None:
        if not re.fullmatch(r"\d{12}", self.account):
            raise ValueError(f"the SQS account id must be 12 digits; got {self.account!r}")

    @staticmethod
    def from_env() -> SqsSettings:
        """Settings from ``CMQ_SQS_ACCOUNT`` and ``CMQ_SQS_REGION`` (defaults when unset)."""
        return SqsSettings(
            os.environ.get("CMQ_SQS_ACCOUNT") or DEFAULT_ACCOUNT,
            os.environ.get("CMQ_SQS_REGION") or DEFAULT_REGION,
        )

    def arn(self, name: str) -> str:
        return f"arn:aws:sqs:{self.region}:{self.account}:{name}"

    def url(self, base: str, name: str) -> str:
        """The URL of ``name`` for a client that called ``base`` (``http://host:port``)."""
        return f"{base}/{self.account}/{name}"

    def name_of_url(self, url: object) -> str:
        """The queue named by a queue URL (any host: every node serves every queue)."""
        if not isinstance(url, str) or not url:
            raise InvalidParameterValue("QueueUrl must be a queue URL")
        path = urlsplit(url).path if "://" in url else url
        parts = [p for p in path.split("/") if p]
        if len(parts) != 2:
            raise InvalidParameterValue(f"{url!r} is not a queue URL (/<account>/<queue name>)")
        account, name = parts
        if account != self.account:
            raise QueueDoesNotExist("The specified queue does not exist.")
        return check_name(name)

    def name_of_arn(self, arn: object, parameter: str) -> str:
        match = _ARN.match(arn) if isinstance(arn, str) else None
        if match is None:
            raise InvalidParameterValue(f"Value {arn!r} for parameter {parameter} is invalid.")
        if match.group(1) != self.account:
            raise QueueDoesNotExist(f"{parameter}: the target queue does not exist.")
        return check_name(match.group(2))


def check_name(name: object) -> str:
    """``name`` if it is a queue name (a FIFO queue's ends in ``.fifo``)."""
    if not isinstance(name, str) or not QUEUE_NAME.match(name):
        raise InvalidParameterValue(
            "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in "
            "length; a FIFO queue's name ends with the .fifo suffix"
        )
    return name


@dataclass(frozen=True, slots=True)
class AttributeChanges:
    """Queue attributes given to CreateQueue / SetQueueAttributes, split by where they live:
    ``cmq`` for `QueueAttributes` (cmq names), ``meta`` for the catalog metadata (a None value
    removes the key). ``dead_letter_target`` is the DLQ a RedrivePolicy names (checked to exist
    by the caller)."""

    cmq: dict[str, Any]
    meta: dict[str, str | None]
    dead_letter_target: str | None


def parse_attributes(attributes: object, settings: SqsSettings, queue: str) -> AttributeChanges:
    """Validated SQS queue attributes of queue ``queue`` (names, values; the FIFO ones only on
    a ``.fifo`` queue, unsupported ones refused). ``FifoQueue=true`` sets cmq's ``fifo``."""
    if attributes is None:
        return AttributeChanges({}, {}, None)
    if not isinstance(attributes, dict):
        raise InvalidParameterValue("Attributes must be a map of attribute names to values")
    cmq: dict[str, Any] = {}
    meta: dict[str, str | None] = {}
    target: str | None = None
    for name, value in attributes.items():
        if name in FIFO_ONLY:
            _fifo_attribute(name, value, is_fifo_name(queue), cmq)
            continue
        if name not in SETTABLE:
            raise InvalidAttributeName(f"Unknown Attribute {name}.")
        if not isinstance(value, str):
            raise InvalidAttributeValue(f"Invalid value for the parameter {name}.")
        if name in _INTEGER_ATTRIBUTES:
            key = _INTEGER_ATTRIBUTES[name]
            lo, hi, _ = LIMITS[key]
            if not value.isdigit() or not lo <= int(value) <= hi:
                raise InvalidAttributeValue(
                    f"Invalid value for the parameter {name}: must be an integer in [{lo}, {hi}]"
                )
            cmq[key] = int(value)
        elif name == "RedrivePolicy":
            target = _redrive_policy(value, settings, cmq)
        elif name == "RedriveAllowPolicy":
            meta[META_REDRIVE_ALLOW] = _redrive_allow_policy(value, settings)
        else:
            _stored_attribute(name, value, meta)
    _check_encryption(attributes, meta)
    return AttributeChanges(cmq, meta, target)


def _stored_attribute(name: str, value: str, meta: dict[str, str | None]) -> None:
    """One of `STORED` into ``meta``, checked as SQS checks it (an empty value removes it)."""
    if name == "Policy":
        if value:
            _json_object(value, "Policy")
        meta[META_POLICY] = value or None
    elif name == "KmsMasterKeyId":
        if len(value) > 2048:
            raise InvalidAttributeValue("Invalid value for the parameter KmsMasterKeyId.")
        meta[META_KMS_KEY] = value or None
    elif name == "KmsDataKeyReusePeriodSeconds":
        lo, hi = _KMS_REUSE_RANGE
        if not value.isdigit() or not lo <= int(value) <= hi:
            raise InvalidAttributeValue(
                "Invalid value for the parameter KmsDataKeyReusePeriodSeconds: must be an "
                f"integer in [{lo}, {hi}]"
            )
        meta[META_KMS_REUSE] = str(int(value))
    else:  # SqsManagedSseEnabled
        if value not in ("true", "false"):
            raise InvalidAttributeValue("Invalid value for the parameter SqsManagedSseEnabled.")
        meta[META_SSE] = value


def _check_encryption(attributes: dict[str, Any], meta: dict[str, str | None]) -> None:
    """One server-side encryption per queue, as in SQS: SSE-SQS (``SqsManagedSseEnabled``)
    and SSE-KMS (``KmsMasterKeyId``) together are refused; setting one turns the other off."""
    sse_on = meta.get(META_SSE) == "true"
    if sse_on and meta.get(META_KMS_KEY):
        raise InvalidAttributeValue(
            "Invalid value for the parameter SqsManagedSseEnabled. Reason: You can use one type "
            "of server-side encryption (SSE) at one time. You can either enable KMS SSE or SQS SSE."
        )
    if sse_on:
        meta[META_KMS_KEY] = None
        meta[META_KMS_REUSE] = None
    elif meta.get(META_KMS_KEY) and "SqsManagedSseEnabled" not in attributes:
        meta[META_SSE] = "false"


def _fifo_attribute(name: str, value: object, fifo: bool, cmq: dict[str, Any]) -> None:
    """One of `FIFO_ONLY` into ``cmq`` (``FifoQueue`` must agree with the name's suffix)."""
    if not isinstance(value, str):
        raise InvalidAttributeValue(f"Invalid value for the parameter {name}.")
    if name == "FifoQueue":
        if value not in ("true", "false"):
            raise InvalidAttributeValue("Invalid value for the parameter FifoQueue.")
        if (value == "true") != fifo:
            raise InvalidParameterValue(
                "The name of a FIFO queue can only include alphanumeric characters, hyphens, "
                "or underscores, must end with .fifo suffix and be 1 to 80 in length "
                "(FifoQueue=true and a .fifo name go together)."
            )
        if fifo:
            cmq["fifo"] = True
        return
    if not fifo:
        raise InvalidAttributeName(f"Unknown Attribute {name}.")
    if name == "ContentBasedDeduplication":
        if value not in ("true", "false"):
            raise InvalidAttributeValue(
                "Invalid value for the parameter ContentBasedDeduplication."
            )
        cmq["content_based_deduplication"] = value == "true"
        return
    if value != FIFO_DEFAULTS[name]:
        raise InvalidAttributeValue(
            f"Invalid value for the parameter {name}: cmq supports only "
            f"{FIFO_DEFAULTS[name]!r} (one deduplication scope and throughput limit per queue)."
        )


def _redrive_policy(value: str, settings: SqsSettings, cmq: dict[str, Any]) -> str | None:
    if value == "":  # removes the policy
        cmq["dead_letter_queue"] = None
        cmq["max_receive_count"] = 0
        return None
    policy = _json_object(value, "RedrivePolicy")
    unknown = set(policy) - {"deadLetterTargetArn", "maxReceiveCount"}
    if unknown or "deadLetterTargetArn" not in policy or "maxReceiveCount" not in policy:
        raise InvalidAttributeValue(
            "Value for parameter RedrivePolicy is invalid. Reason: it needs exactly "
            "deadLetterTargetArn and maxReceiveCount."
        )
    count = policy["maxReceiveCount"]
    if isinstance(count, str) and count.isdigit():
        count = int(count)
    if isinstance(count, bool) or not isinstance(count, int):
        count = -1
    if not 1 <= count <= _MAX_RECEIVE_COUNT:
        raise InvalidAttributeValue(
            "Value for parameter RedrivePolicy is invalid. Reason: maxReceiveCount must be an "
            f"integer in [1, {_MAX_RECEIVE_COUNT}]."
        )
    target = settings.name_of_arn(policy["deadLetterTargetArn"], "RedrivePolicy")
    cmq["dead_letter_queue"] = target
    cmq["max_receive_count"] = count
    return target


def _redrive_allow_policy(value: str, settings: SqsSettings) -> str | None:
    if value == "":
        return None
    policy = _json_object(value, "RedriveAllowPolicy")
    permission = policy.get("redrivePermission")
    sources = policy.get("sourceQueueArns")
    if permission not in ("allowAll", "denyAll", "byQueue") or set(policy) - {
        "redrivePermission",
        "sourceQueueArns",
    }:
        raise InvalidAttributeValue(
            "Value for parameter RedriveAllowPolicy is invalid. Reason: redrivePermission must "
            "be allowAll, denyAll or byQueue."
        )
    if permission == "byQueue":
        if not isinstance(sources, list) or not 1 <= len(sources) <= 10:
            raise InvalidAttributeValue(
                "Value for parameter RedriveAllowPolicy is invalid. Reason: byQueue needs 1 to "
                "10 sourceQueueArns."
            )
        for arn in sources:
            settings.name_of_arn(arn, "RedriveAllowPolicy")
    elif sources is not None:
        raise InvalidAttributeValue(
            "Value for parameter RedriveAllowPolicy is invalid. Reason: sourceQueueArns is "
            "only allowed with byQueue."
        )
    return orjson.dumps(policy).decode()


def redrive_allows(policy: str | None, source_arn: str) -> bool:
    """Whether a DLQ whose RedriveAllowPolicy is ``policy`` accepts ``source_arn``'s messages."""
    if policy is None:
        return True
    data = orjson.loads(policy)
    permission = data.get("redrivePermission")
    if permission == "denyAll":
        return False
    if permission == "byQueue":
        return source_arn in data.get("sourceQueueArns", [])
    return True


def _json_object(value: str, parameter: str) -> dict[str, Any]:
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        raise InvalidAttributeValue(
            f"Value for parameter {parameter} is invalid. Reason: it must be a JSON object."
        )
    return data


def render_attributes(
    names: set[str],
    *,
    attributes: QueueAttributes,
    stats: Any,
    meta: dict[str, str],
    name: str,
    settings: SqsSettings,
) -> dict[str, str]:
    """The SQS attributes ``names`` of a queue (absent optional ones are left out)."""
    created = meta.get(META_CREATED, "0")
    values: dict[str, str | None] = {
        **stored_attributes(meta),
        "ApproximateNumberOfMessages": str(stats.visible),
        "ApproximateNumberOfMessagesNotVisible": str(stats.in_flight),
        "ApproximateNumberOfMessagesDelayed": str(stats.delayed),
        "CreatedTimestamp": created,
        "LastModifiedTimestamp": meta.get(META_MODIFIED, created),
        "QueueArn": settings.arn(name),
        "RedriveAllowPolicy": meta.get(META_REDRIVE_ALLOW),
        "RedrivePolicy": None,
    }
    for sqs_name, key in _INTEGER_ATTRIBUTES.items():
        values[sqs_name] = str(getattr(attributes, key))
    if attributes.fifo:
        values["FifoQueue"] = "true"
        values["ContentBasedDeduplication"] = str(attributes.content_based_deduplication).lower()
        values.update(FIFO_DEFAULTS)
    if attributes.dead_letter_queue and attributes.max_receive_count:
        values["RedrivePolicy"] = orjson.dumps(
            {
                "deadLetterTargetArn": settings.arn(attributes.dead_letter_queue),
                "maxReceiveCount": attributes.max_receive_count,
            }
        ).decode()
    return {k: v for k in READABLE if k in names and (v := values.get(k)) is not None}


def stored_attributes(meta: dict[str, str]) -> dict[str, str]:
    """The `STORED` attributes of a queue whose catalog metadata is ``meta``, as
    GetQueueAttributes shows them (absent ones left out)."""
    values = {
        "Policy": meta.get(META_POLICY),
        "KmsMasterKeyId": meta.get(META_KMS_KEY),
        "KmsDataKeyReusePeriodSeconds": meta.get(META_KMS_REUSE)
        or (KMS_REUSE_DEFAULT if meta.get(META_KMS_KEY) else None),
        "SqsManagedSseEnabled": meta.get(META_SSE, "false"),
    }
    return {k: v for k, v in values.items() if v is not None}


def same_stored(name: str, asked: str, current: str | None) -> bool:
    """Whether a CreateQueue asking for `STORED` attribute ``name`` = ``asked`` agrees with the
    queue's ``current`` value (None: not set). Policies compare as JSON; an empty value
    asks for none."""
    if not asked:
        return current is None
    if name == "Policy" and current is not None:
        return bool(orjson.loads(asked) == orjson.loads(current))
    if name == "KmsDataKeyReusePeriodSeconds":
        return current is not None and int(asked) == int(current)
    return asked == current


def check_attribute_names(names: object) -> set[str]:
    """The attribute names GetQueueAttributes asks for (``All`` expands)."""
    if names is None:
        return set()
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InvalidParameterValue("AttributeNames must be a list of attribute names")
    out: set[str] = set()
    for n in names:
        if n == "All":
            out.update(READABLE)
        elif n in READABLE:
            out.add(n)
        else:
            raise InvalidAttributeName(f"Unknown Attribute {n}.")
    return out
