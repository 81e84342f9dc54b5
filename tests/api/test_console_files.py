"""The web console's files are served under /ui by the API application, and reference only
the node itself (no CDN: the browser may have no internet)."""

from __future__ import annotations

import re

from api.app import UI_DIR
from tests.api.conftest import Client
from tests.api.recording import RecordingService


async def test_ui_redirects_and_serves_the_page_and_its_files(
    client: Client, service: RecordingService
) -> None:
    resp = await client.get("/ui", allow_redirects=False)
    assert resp.status == 302 and resp.headers["Location"] == "/ui/"
    page = await client.get("/ui/")
    assert page.status == 200 and page.content_type == "text/html"
    html = await page.text()
    assets = re.findall(r'(?:src|href)="(/ui/[^"]+)"', html)
    assert sorted(assets) == ["/ui/console.css", "/ui/console.js", "/ui/sigv4.js"]
    for path in assets:
        resp = await client.get(path)
        assert resp.status == 200, path
    missing = await client.get("/ui/nope.js")
    assert missing.status == 404
    assert service.calls == []


def test_console_loads_nothing_from_elsewhere() -> None:
    for f in UI_DIR.iterdir():
        text = f.read_text()
        assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", text), f.name
    assert "/v1/" in (UI_DIR / "console.js").read_text()  # the node's own API, by path


def test_every_element_the_script_looks_up_is_on_the_page() -> None:
    """console.js finds its elements by id: each one it names is in index.html (a renamed or
    forgotten element would otherwise fail only in a browser)."""
    script = (UI_DIR / "console.js").read_text()
    page = (UI_DIR / "index.html").read_text()
    wanted = set(re.findall(r'getElementById\("([\w-]+)"\)', script))
    assert {"send-priority", "attr-priorities", "q-levels", "q-tenants"} <= wanted
    present = set(re.findall(r'\sid="([\w-]+)"', page))
    assert wanted - present == set()
