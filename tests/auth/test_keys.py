"""Access keys in the catalog (pure): commands, refusals that change nothing, snapshots, the
sealing of secrets, and the access tables covering every route and SQS operation."""

from __future__ import annotations

import orjson
import pytest

from api.auth.access import OPEN_OPERATIONS, SQS, NativeOperation, allowed, native_need, sqs_need
from api.routes import ROUTES
from api.routing import Reply, Route
from api.sqs.operations import OPERATIONS
from cmq.catalog.keys import KeyStore, Vault, cluster_credential
from cmq.catalog.meta import CatalogMachine, Refused
from cmq.grants import KeyGrant, check_grant


def apply(catalog: CatalogMachine, command: bytes, index: int = 1) -> object:
    return catalog.apply(index, command)


def test_create_grant_revoke_delete_and_refusals_change_nothing() -> None:
    catalog = CatalogMachine()
    grant = KeyGrant("orders-*", ("send",))
    res = apply(catalog, KeyStore.create("AKCMQAAAAAAAAAAAAAAAA", "sealed", [grant], 5))
    assert isinstance(res, dict) and res["id"] == "AKCMQAAAAAAAAAAAAAAAA"
    before = catalog.snapshot()
    for refused in (
        KeyStore.create("AKCMQAAAAAAAAAAAAAAAA", "other", [], 6),
        KeyStore.grant("AKCMQNOPE", grant),
        KeyStore.revoke("AKCMQAAAAAAAAAAAAAAAA", "billing"),
        KeyStore.delete("AKCMQNOPE"),
    ):
        assert isinstance(apply(catalog, refused), Refused)
        assert catalog.snapshot() == before
    apply(catalog, KeyStore.grant("AKCMQAAAAAAAAAAAAAAAA", KeyGrant("orders-*", ("receive",))))
    record = catalog.keys.keys["AKCMQAAAAAAAAAAAAAAAA"]
    assert record.grants == (KeyGrant("orders-*", ("receive", "send")),)
    apply(catalog, KeyStore.revoke("AKCMQAAAAAAAAAAAAAAAA", "orders-*"))
    assert catalog.keys.keys["AKCMQAAAAAAAAAAAAAAAA"].grants == ()
    assert apply(catalog, KeyStore.delete("AKCMQAAAAAAAAAAAAAAAA")) is True
    assert catalog.keys.keys == {}


def test_bootstrap_happens_once_and_snapshots_keep_keys() -> None:
    catalog = CatalogMachine()
    assert apply(catalog, KeyStore.create_bootstrap("AKCMQFIRST0000000000A", "s1", 1)) == (
        "AKCMQFIRST0000000000A"
    )
    assert apply(catalog, KeyStore.create_bootstrap("AKCMQSECOND000000000A", "s2", 2)) == (
        "AKCMQFIRST0000000000A"
    )
    assert list(catalog.keys.keys) == ["AKCMQFIRST0000000000A"]
    copy = CatalogMachine()
    copy.restore(3, catalog.snapshot())
    assert copy.keys.keys == catalog.keys.keys
    assert copy.keys.bootstrap == "AKCMQFIRST0000000000A"
    assert copy.snapshot() == catalog.snapshot()
    apply(catalog, KeyStore.delete("AKCMQFIRST0000000000A"))
    assert apply(catalog, KeyStore.create_bootstrap("AKCMQTHIRD0000000000A", "s3", 4)) == (
        "AKCMQFIRST0000000000A"
    )
    assert catalog.keys.keys == {}


def test_secrets_are_sealed_per_key_and_cluster() -> None:
    vault = Vault.of(b"cluster-secret-0123456789")
    sealed = vault.seal("AKCMQA", "the secret")
    assert "the secret" not in sealed
    assert vault.open("AKCMQA", sealed) == "the secret"
    assert vault.open("AKCMQB", sealed) is None
    assert Vault.of(b"another-cluster-secret-01").open("AKCMQA", sealed) is None
    assert vault.seal("AKCMQA", "the secret") != sealed  # fresh nonce
    command = KeyStore.create("AKCMQA", sealed, [], 1)
    assert b"the secret" not in command and b"the secret" not in orjson.dumps(command.decode())


def test_cluster_credential_is_derived() -> None:
    one = cluster_credential(b"cluster-secret-0123456789")
    assert one == cluster_credential(b"cluster-secret-0123456789")
    assert one != cluster_credential(b"cluster-secret-9876543210")


@pytest.mark.parametrize(
    ("pattern", "actions"),
    [("", ["send"]), ("a/b", ["send"]), ("q", []), ("q", ["write"]), (3, ["send"])],
)
def test_bad_grants_are_refused(pattern: object, actions: object) -> None:
    with pytest.raises(ValueError):
        check_grant(pattern, actions)


def test_grants() -> None:
    grants = (KeyGrant("orders-*", ("receive",)), KeyGrant("team-?", ("admin",)))
    assert allowed(grants, "receive", "orders-1")
    assert not allowed(grants, "send", "orders-1")
    assert allowed(grants, "send", "team-a") and allowed(grants, "delete", "team-b")
    assert not allowed(grants, "admin", None)
    assert allowed(grants, "any", "orders-x") and not allowed(grants, "any", "billing")
    assert allowed((), "signed", None)
    assert allowed((KeyGrant("*", ("admin",)),), "admin", None)


PINNED_NEEDS = {
    "listQueues": ("signed", False),
    "createQueue": ("admin", True),
    "getQueue": ("any", True),
    "setQueueAttributes": ("admin", True),
    "deleteQueue": ("admin", True),
    "purgeQueue": ("admin", True),
    "rewindQueue": ("admin", True),
    "sendMessages": ("send", True),
    "peekMessages": ("receive", True),
    "receiveMessages": ("receive", True),
    "ackMessages": ("delete", True),
    "changeVisibility": ("delete", True),
    "nackMessages": ("delete", True),
    "listSegments": ("receive", True),
    "readSegmentRecords": ("receive", True),
    "claimSegments": ("admin", True),
    "markSegmentsArchived": ("admin", True),
    "clusterStatus": ("signed", False),
    "whoami": ("signed", False),
    "exportMessages": ("admin", False),
    "importMessages": ("admin", False),
}
"""The grants docs/api.md promises, written out by hand so that a route's ``action`` changed by
mistake (a wider grant is a hole) fails here; every other native route needs admin on the
cluster."""


def test_every_route_needs_the_grant_the_docs_promise() -> None:
    for route in ROUTES:
        if route.operation_id in OPEN_OPERATIONS:
            continue
        want = PINNED_NEEDS.get(route.operation_id, ("admin", False))
        assert route.need == want, (route.operation_id, route.need, want)
    assert set(PINNED_NEEDS) <= {r.operation_id for r in ROUTES}
    assert set(OPERATIONS) == set(SQS)
    assert native_need(None, "q") == ("admin", None)
    assert sqs_need("Unknown", "q") == ("admin", None)
    assert native_need(NativeOperation("sendMessages", "send", True), "q") == ("send", "q")
    assert native_need(NativeOperation("listNodes"), "") == ("admin", None)
    assert Route("GET", "/v1/new/{name}", "newRoute", "", _no_handler, ()).need == ("admin", True)


async def _no_handler(ctx: object, req: object) -> Reply:
    raise AssertionError("not called")
