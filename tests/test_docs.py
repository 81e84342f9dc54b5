"""The documents: README.md stays a front door (at most 250 lines), every page under docs/ is in
mkdocs.yml's nav, and no shell example drifts unseen. Each fenced ``sh``, ``bash``, ``shell`` or
``console`` block of README.md and docs/*.md is either run by a test (`EXERCISED`: the document,
the block's first line, the test file that runs it, which must name both) or marked
``<!-- illustrative -->`` on the line just before its fence. The site itself is built, strictly,
by ``make docs`` (broken links and anchors fail it)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, NamedTuple

import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README_MAX_LINES = 250
SHELL_LANGS = {"sh", "bash", "shell", "console"}
MARKER = "<!-- illustrative -->"
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^\s`{]*)")

# The shell blocks a test runs as written: (document, first line of the block) -> the test.
TOUR = "tests/cmq/client/test_readme.py"
EXERCISED = {
    ("README.md", "curl -X PUT localhost:8080/v1/queues/orders"): TOUR,
    ("README.md", "cmq queue create orders -a visibility_timeout=30"): TOUR,
    ("docs/usage.md", "curl -X PUT localhost:8080/v1/queues/orders"): TOUR,
    ("docs/usage.md", "cmq queue create orders -a visibility_timeout=30"): TOUR,
    ("docs/usage.md", "cmq queue create reminders --max-delay 604800 --retry 5,2,600"): TOUR,
}


class Block(NamedTuple):
    doc: str  # relative to the repository root
    line: int  # of the opening fence, 1-based
    lang: str
    first: str  # the block's first line
    before: str  # the line before the fence


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def blocks(path: Path, root: Path = ROOT) -> list[Block]:
    """Every fenced block of ``path`` (CommonMark fences: a closing fence is the same character,
    at least as long, with nothing after it), named relative to ``root``."""
    lines = path.read_text().splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        fence, lang = m.group(1), m.group(2).lower()
        j = i + 1
        while j < len(lines) and not re.fullmatch(
            rf" {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*", lines[j]
        ):
            j += 1
        first = lines[i + 1].strip() if i + 1 < j else ""
        before = lines[i - 1].strip() if i > 0 else ""
        out.append(Block(str(path.relative_to(root)), i + 1, lang, first, before))
        i = j + 1
    return out


def shell_blocks() -> list[Block]:
    return [b for p in documents() for b in blocks(p) if b.lang in SHELL_LANGS]


def key(b: Block) -> tuple[str, str] | None:
    """The `EXERCISED` entry naming ``b``, if any."""
    for doc, first in EXERCISED:
        if doc == b.doc and b.first.startswith(first):
            return (doc, first)
    return None


def test_the_readme_is_a_front_door() -> None:
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines (at most {README_MAX_LINES})"


def nav_pages(nav: Any) -> list[str]:
    """Every page file named in a MkDocs ``nav`` (nested lists of {title: page or list})."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [p for item in nav for p in nav_pages(item)]
    if isinstance(nav, dict):
        return [p for value in nav.values() for p in nav_pages(value)]
    raise AssertionError(f"unexpected nav entry {nav!r}")


def test_every_page_is_in_the_nav() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert config["docs_dir"] == "docs" and config["theme"]["name"] == "material"
    pages = nav_pages(config["nav"])
    assert len(pages) == len(set(pages)), "a page is twice in the nav"
    on_disk = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(pages) == on_disk, "mkdocs.yml's nav and the pages under docs/ differ"


def test_every_shell_block_is_run_or_marked_illustrative() -> None:
    found = shell_blocks()
    assert len(found) >= 10  # the scan sees the blocks
    unmarked = [
        f"{b.doc}:{b.line}: {b.first}" for b in found if key(b) is None and b.before != MARKER
    ]
    assert not unmarked, (
        "shell blocks neither run by a test (tests/test_docs.py EXERCISED) nor marked "
        f"{MARKER} on the line before the fence: {unmarked}"
    )


def test_every_exercised_block_exists_and_its_test_reads_it() -> None:
    found = shell_blocks()
    for (doc, first), test in EXERCISED.items():
        matching = [b for b in found if key(b) == (doc, first)]
        assert len(matching) == 1, f"{doc}: {len(matching)} shell blocks start with {first!r}"
        assert matching[0].before != MARKER, f"{doc}:{matching[0].line} is run, not illustrative"
        text = (ROOT / test).read_text()
        assert first in text, f"{test} does not name the block {first!r}"
        assert f'"{Path(doc).name}"' in text, f"{test} does not read {doc}"


def test_a_marker_stands_before_a_shell_block() -> None:
    marked = {(b.doc, b.line - 1) for b in shell_blocks() if b.before == MARKER}
    for path in documents():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip() == MARKER:
                where = (str(path.relative_to(ROOT)), n)
                assert where in marked, f"{where[0]}:{n}: {MARKER} not before a shell block"


def test_the_fence_scan_finds_what_it_should(tmp_path: Path) -> None:
    sample = tmp_path / "sample.md"
    sample.write_text(
        "text\n<!-- illustrative -->\n```sh\necho a\n```\n\n````console\n$ x\n```\n````\n"
        "~~~bash\nb\n~~~\n```python\nprint()\n```\n"
    )
    got = [(b.lang, b.first, b.before == MARKER) for b in blocks(sample, tmp_path)]
    assert got == [
        ("sh", "echo a", True),
        ("console", "$ x", False),
        ("bash", "b", False),
        ("python", "print()", False),
    ]
