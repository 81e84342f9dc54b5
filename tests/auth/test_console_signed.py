"""The web console (/ui) against a node that asks for signatures (the secure default), in Debian's
chromium driven by Playwright: it asks for an access key, refuses a wrong secret with a clear
message, signs every call in the browser (Web Crypto SigV4) with the key kept in the tab's
session storage only, and shows what the key's grants allow: a read-only key sees its queue
but no purge button, an admin key purges (after a confirmation) and redrives a dead-letter
queue. Screenshots are kept in ``build/artifacts/console/``."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from api.auth.errors import SignatureDoesNotMatch
from api.auth.sigv4 import SignedRequest, verify
from cmq.client import AccessKey, SyncClient
from cmq.errors import QueueNotFound
from tests.auth.conftest import new_key
from tests.cmq.cluster import CmqCluster, blocking, unique_queue

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.slow

T = TypeVar("T")


@pytest.fixture
def call(
    auth_cluster: CmqCluster, admin_key: AccessKey
) -> Callable[[Callable[[SyncClient], T]], T]:
    """Run ``f`` with an admin client (in a thread of its own: Playwright's sync API runs an
    event loop in the test's thread)."""

    def run(f: Callable[[SyncClient], T]) -> T:
        def inner() -> T:
            with SyncClient(auth_cluster.urls[0], access_key=admin_key) as client:
                return f(client)

        return blocking(inner)

    return run


@pytest.fixture
def queues(call: Callable[[Callable[[SyncClient], Any]], Any]) -> Iterator[list[str]]:
    """Names of the queues a test creates (deleted after it)."""
    made: list[str] = []
    yield made
    for name in made:
        with contextlib.suppress(QueueNotFound):
            call(lambda c, n=name: c.delete_queue(n))


@pytest.fixture
def page(browser_page: object) -> Page:
    """The chromium page (`browser_page`) as the Playwright `Page` it is."""
    from playwright.sync_api import Page

    assert isinstance(browser_page, Page)
    return browser_page


@pytest.fixture(autouse=True)
def patient_expect() -> Iterator[None]:
    """Playwright's assertions wait 15 s here, not 5 (a loaded 2-core machine); reset after."""
    from playwright.sync_api import expect

    expect.set_options(timeout=15_000)
    yield
    expect.set_options(timeout=None)


def sign_in(page: Any, key: AccessKey) -> None:
    page.fill("#key-id", key.access_key_id)
    page.fill("#secret", key.secret_access_key)
    page.click("#signin-submit")


def storage(page: Any) -> dict[str, Any]:
    return dict(
        page.evaluate(
            "() => ({session: {...sessionStorage}, local: {...localStorage},"
            " cookie: document.cookie})"
        )
    )


def test_sign_in_refuses_a_wrong_secret_then_an_admin_purges_and_redrives(
    auth_cluster: CmqCluster,
    *,
    admin_key: AccessKey,
    page: Page,
    call: Callable[[Callable[[SyncClient], Any]], Any],
    queues: list[str],
    console_artifacts: Path,
) -> None:
    from playwright.sync_api import expect

    queue, source = unique_queue("console-dlq"), unique_queue("console-src")
    queues.extend([source, queue])
    call(lambda c: c.create_queue(queue, {}))
    call(lambda c: c.create_queue(source, {"dead_letter_queue": queue, "max_receive_count": 3}))
    call(lambda c: c.send(queue, [f"dead {i}" for i in range(5)]))

    page.goto(auth_cluster.urls[0] + "/ui")
    expect(page.locator("#signin")).to_be_visible(timeout=15_000)
    secret = admin_key.secret_access_key
    wrong = AccessKey(admin_key.access_key_id, secret[:-1] + ("y" if secret.endswith("x") else "x"))
    assert wrong.secret_access_key != secret
    sign_in(page, wrong)
    error = page.locator("#signin-error")
    expect(error).to_have_text(re.compile(r"secret access key is wrong.*SignatureDoesNotMatch"))
    page.screenshot(path=str(console_artifacts / "signed-wrong-secret.png"), full_page=True)
    unknown = AccessKey("AKCMQ0000000000000000", "whatever")
    sign_in(page, unknown)
    expect(error).to_have_text(re.compile(r"access key id is unknown.*InvalidClientTokenId"))
    assert storage(page) == {"session": {}, "local": {}, "cookie": ""}

    sign_in(page, admin_key)
    row = page.locator(f'#queues tr[data-queue="{queue}"]')
    expect(row.locator("td.depth")).to_have_text("5", timeout=15_000)
    expect(page.locator("#who")).to_contain_text(admin_key.access_key_id)
    expect(page.locator("#who")).to_contain_text("*: admin")
    expect(page.locator("#nodes .node")).to_have_count(1)
    expect(page.locator("#clock-state .pill")).to_be_visible()
    expect(page.locator("#repair-state .pill")).to_be_visible()
    expect(page.locator("#disks tbody tr")).to_have_count(1)
    # The key lives in this tab's session storage only: no local storage, no cookie.
    kept = storage(page)
    assert kept["local"] == {} and kept["cookie"] == ""
    assert admin_key.secret_access_key in kept["session"]["cmq.console.key"]
    page.screenshot(path=str(console_artifacts / "signed-overview.png"), full_page=True)

    # Purge asks first; cancelling changes nothing.
    row.locator("a.q").click()
    expect(page.locator("#q-peek tbody tr")).to_have_count(5, timeout=15_000)
    page.click("#purge")
    expect(page.locator("#confirm")).to_be_visible()
    expect(page.locator("#confirm-text")).to_contain_text(queue)
    page.screenshot(path=str(console_artifacts / "signed-purge-confirm.png"))
    page.click("#confirm-cancel")
    expect(page.locator("#confirm")).to_be_hidden()
    assert call(lambda c: c.get_queue(queue).stats.visible) == 5
    page.click("#purge")
    page.click("#confirm-ok")
    expect(page.locator("#q-action-result")).to_have_text("purged 5 messages", timeout=15_000)
    expect(page.locator('#q-stats tr[data-key="visible"] td').nth(1)).to_have_text("0")
    assert call(lambda c: c.get_queue(queue).stats.visible) == 0

    # Redrive: the dead-letter queue's messages go back to the queue that dead-letters into it.
    call(lambda c: c.send(queue, ["again 1", "again 2"]))
    expect(page.locator("#redrive")).to_be_visible(timeout=15_000)
    page.click("#redrive")
    expect(page.locator("#confirm-text")).to_contain_text(source)
    page.click("#confirm-ok")
    expect(page.locator("#q-action-result")).to_have_text(f"redrive to {source} started")
    expect(page.locator("#q-move")).to_contain_text("COMPLETED", timeout=30_000)
    assert call(lambda c: c.get_queue(source).stats.visible) == 2
    page.screenshot(path=str(console_artifacts / "signed-queue-admin.png"), full_page=True)

    page.reload()  # the tab keeps its key across a reload: no sign-in asked
    expect(page.locator("#who")).to_contain_text(admin_key.access_key_id)
    expect(page.locator("#q-name")).to_have_text(queue)
    expect(page.locator("#signin")).to_have_count(0)
    page.click("#sign-out")
    expect(page.locator("#signin")).to_be_visible()
    expect(page.locator("#signin-error")).to_have_text("Signed out.")
    assert storage(page)["session"] == {}
    page.reload()  # a new page load in the same tab asks again
    expect(page.locator("#signin")).to_be_visible(timeout=15_000)


def test_a_read_only_key_sees_its_queue_but_no_purge_button(
    auth_cluster: CmqCluster,
    page: Page,
    call: Callable[[Callable[[SyncClient], Any]], Any],
    queues: list[str],
    console_artifacts: Path,
) -> None:
    from playwright.sync_api import expect

    mine, other = unique_queue("console-ro"), unique_queue("console-hidden")
    queues.extend([mine, other])
    call(lambda c: c.create_queue(mine, {}))
    call(lambda c: c.create_queue(other, {}))
    call(lambda c: c.send(mine, ["read me 1", "read me 2"]))
    reader = call(lambda c: new_key(c, ("console-ro-*", ["receive"])))

    page.goto(auth_cluster.urls[0] + "/ui/")
    sign_in(page, reader)
    row = page.locator(f'#queues tr[data-queue="{mine}"]')
    expect(row.locator("td.depth")).to_have_text("2", timeout=15_000)
    # A queue without a grant is listed (any key lists names) but not read, and has no link.
    hidden = page.locator(f'#queues tr[data-queue="{other}"]')
    expect(hidden).to_have_class("denied")
    expect(hidden).to_contain_text("no grant on this queue")
    expect(hidden.locator("a")).to_have_count(0)
    expect(page.locator("#who")).to_contain_text("console-ro-*: receive")
    page.screenshot(path=str(console_artifacts / "signed-read-only-overview.png"), full_page=True)
    # A grant made meanwhile shows at the next poll (the console reads /v1/whoami each time).
    grant = {"pattern": other, "actions": ["receive"]}
    path = f"/v1/keys/{reader.access_key_id}/grants"
    assert call(lambda c: c.request("POST", path, grant).status) == 200
    expect(hidden.locator("td.depth")).to_have_text("0")
    expect(page.locator("#who")).to_contain_text(f"{other}: receive")

    row.locator("a.q").click()
    expect(page.locator("#q-peek tbody tr")).to_have_count(2, timeout=15_000)
    expect(page.locator("#q-peek tbody tr").first.locator("td.body")).to_have_text("read me 1")
    expect(page.locator("#purge")).to_have_count(0)
    expect(page.locator("#rewind")).to_have_count(0)
    expect(page.locator("#redrive")).to_have_count(0)
    expect(page.locator("#q-action-result")).to_contain_text("need the admin grant")
    # No send form (no send grant) and no attributes form (no admin grant), and it says why.
    expect(page.locator("#send-form")).to_be_hidden()
    expect(page.locator("#attr-form")).to_be_hidden()
    expect(page.locator("#q-forms-denied")).to_be_visible()
    expect(page.locator("#q-levels-summary")).to_have_text(re.compile("^1 priority level"))
    page.screenshot(path=str(console_artifacts / "signed-read-only-queue.png"), full_page=True)
    # The node agrees: this key may not purge.
    raw = blocking(lambda: _purge_as(auth_cluster, reader, mine))
    assert raw == (403, "AccessDenied")
    assert call(lambda c: c.get_queue(mine).stats.visible) == 2


def test_the_browser_signer_agrees_with_the_node_verifier(
    auth_cluster: CmqCluster, page: Page
) -> None:
    """sigv4.js in chromium signs what `api.auth.sigv4.verify` accepts, on the paths, query
    strings and bodies the API sees (encoded names and values, unsorted and empty parameters,
    a UTF-8 body, an empty body), and a wrong secret is what it refuses."""
    page.goto(auth_cluster.urls[0] + "/ui/")
    page.wait_for_selector("#signin")
    host = auth_cluster.urls[0].split("://", 1)[1]
    now = datetime(2026, 11, 27, 4, 40, 5, tzinfo=UTC)
    cases = [
        ("GET", "/v1/queues/a-b_c.fifo/messages", "peek=10&x=%2F%20y&a=&b=%E2%82%AC", None),
        ("POST", "/v1/queues/q/purge", "", "{}"),
        ("POST", "/", "", '{"QueueName":"\u00e9t\u00e9","x":"~!*()"}'),
        ("GET", "/v1/status", "", None),
    ]
    for method, path, query, body in cases:
        url = path + ("?" + query if query else "")
        headers = page.evaluate(
            "([k, m, u, b, t]) => cmqSigV4.sign(k, m, u, b, new Date(t))",
            [KEY, method, url, body, int(now.timestamp() * 1000)],
        )
        request = SignedRequest(
            method, path, query, (("Host", host), *headers.items()), (body or "").encode()
        )
        secrets = {KEY["id"]: KEY["secret"]}
        verified = verify(request, secrets.get, now=now, region="eu-west-3", service="sqs")
        assert verified.access_key_id == KEY["id"]
        with pytest.raises(SignatureDoesNotMatch):
            verify(request, {KEY["id"]: "other"}.get, now=now, region="eu-west-3", service="sqs")


def test_the_console_matches_grant_patterns_as_the_node_does(
    auth_cluster: CmqCluster, page: Page
) -> None:
    """console.js's glob (what it hides and shows by) agrees with `fnmatch.fnmatchcase` (what
    `cmq.grants` decides by) on the grant pattern syntax."""
    page.goto(auth_cluster.urls[0] + "/ui/")
    page.wait_for_selector("#signin")
    patterns = ["*", "orders-*", "o?d", "[abc]x", "[!a]x", "[]a]x", "[!]]x", "q[", "a-b_c", "*-dlq"]
    names = ["orders-eu", "od", "oad", "ax", "bx", "]x", "dx", "q[", "a-b_c", "x-dlq", "a.b"]
    got = page.evaluate(
        "([ps, ns]) => ps.map((p) => ns.map((n) => globRegExp(p).test(n)))", [patterns, names]
    )
    assert got == [[fnmatchcase(n, p) for n in names] for p in patterns]


KEY = {"id": "AKCMQTESTTESTTESTTEST", "secret": "s3cr3t/+=k3y", "region": "eu-west-3"}


def _purge_as(cluster: CmqCluster, key: AccessKey, queue: str) -> tuple[int, str]:
    with SyncClient(cluster.urls[0], access_key=key) as client:
        raw = client.request("POST", f"/v1/queues/{queue}/purge", {})
    return raw.status, raw.payload["error"]["code"]
