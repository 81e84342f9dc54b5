"""The documents' examples, run as they are written against the session's cluster (only their node
URLs and queue names swapped): the Python client examples of docs/client.md, and the two-minute
tour of README.md (the same blocks open docs/usage.md and docs/sqs.md): its curl commands, its
CLI commands and its boto3 example, and the scheduling commands of docs/usage.md.
tests/test_docs.py names the shell blocks run here and requires every other one to be marked
illustrative."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cmq.cluster import CmqCluster, unique_queue

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
CLIENT_DOC = ROOT / "docs" / "client.md"
USAGE_DOC = ROOT / "docs" / "usage.md"
SQS_DOC = ROOT / "docs" / "sqs.md"

# The first line of each shell block run here (README.md and docs/usage.md carry the tour).
CURL_TOUR = "curl -X PUT localhost:8080/v1/queues/orders"
CLI_TOUR = "cmq queue create orders -a visibility_timeout=30"
CLI_SCHEDULING = "cmq queue create reminders --max-delay 604800 --retry 5,2,600"
BOTO3_TOUR = "import boto3"


def fenced(path: Path, langs: tuple[str, ...]) -> list[str]:
    """The bodies of the fenced blocks of ``path`` whose language is one of ``langs``."""
    pattern = r"^```(?:" + "|".join(map(re.escape, langs)) + r")\n(.*?)^```$"
    return [str(b) for b in re.findall(pattern, path.read_text(), re.S | re.M)]


def block(path: Path, first_line: str, langs: tuple[str, ...] = ("sh",)) -> str:
    """The one block of ``path`` whose first line starts with ``first_line``."""
    found = [b for b in fenced(path, langs) if b.startswith(first_line)]
    assert len(found) == 1, f"{path.name}: no single block starting {first_line!r}"
    return found[0]


def commands(text: str) -> list[list[str]]:
    """The block's commands as a shell splits them: continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", text)
    return [words for line in joined.splitlines() if (words := shlex.split(line, comments=True))]


def example(nth: int = 0) -> str:
    """The ``nth`` Python block of docs/client.md."""
    blocks = fenced(CLIENT_DOC, ("python",))
    assert len(blocks) > nth, "missing python block in docs/client.md"
    return blocks[nth]


def test_the_client_example_works(cmq_cluster: CmqCluster) -> None:
    code = example()
    urls = re.search(r'Client\("([^"]+)"\)', code)
    assert urls is not None and code.count('"orders"') == 4
    queue = unique_queue("orders")
    code = code.replace(urls.group(1), ",".join(cmq_cluster.urls[:2]))
    code = code.replace('"orders"', f'"{queue}"')
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["1 order 1", "2 order 2"]


def test_the_stream_example_works(cmq_cluster: CmqCluster) -> None:
    code = example(1)
    assert code.count('"http://127.0.0.1:8080"') == 2 and code.count('"events"') == 3
    code = code.replace('"http://127.0.0.1:8080"', f'"{cmq_cluster.urls[0]}"')
    code = code.replace('"events"', f'"{unique_queue("events")}"')
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["received 1000"]


@pytest.mark.parametrize("doc", [README, USAGE_DOC], ids=lambda p: p.name)
def test_the_curl_tour_works(cmq_cluster: CmqCluster, doc: Path) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    text = block(doc, CURL_TOUR)
    queue = unique_queue("orders")
    for i, url in enumerate(cmq_cluster.urls[:3]):
        text = text.replace(f"localhost:{8080 + i}", url.removeprefix("http://"))
    assert "localhost" not in text
    text = text.replace("/v1/queues/orders", f"/v1/queues/{queue}")
    receipt = None
    ran = []
    for written in commands(text):
        assert written[0] == "curl"
        words = [w.replace('"<receipt>"', json.dumps(receipt or "")) for w in written]
        p = subprocess.run(
            ["curl", "-sS", "-w", "\n%{http_code}", *words[1:]],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert p.returncode == 0, p.stderr
        body, _, status = p.stdout.rpartition("\n")
        assert status.startswith("2"), f"{words}: {status} {body}"
        answer = json.loads(body) if body.strip() else None
        if words[-1].startswith('{"max_messages"'):
            # The block's comment: order 1 is leased at once; order 2 is still delayed.
            assert isinstance(answer, dict)
            (m,) = answer["messages"]
            assert (m["seq"], m["body"], m["receive_count"]) == (1, "order 1", 1)
            assert {"id", "receipt"} <= set(m)
            receipt = m["receipt"]
        if any(w.endswith("/messages/ack") for w in words):
            assert receipt is not None and json.dumps(receipt) in words[-1]
            assert isinstance(answer, dict) and [r["ok"] for r in answer["results"]] == [True]
        ran.append(answer)
    assert len(ran) == 6 and receipt is not None
    stats, status = ran[-2], ran[-1]
    assert isinstance(stats, dict) and isinstance(status, dict)


def run_cli(words: list[str], url: str) -> subprocess.CompletedProcess[str]:
    assert words[0] == "cmq"
    return subprocess.run(
        [sys.executable, "-m", "cmq", *words[1:], "--url", url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("doc", [README, USAGE_DOC], ids=lambda p: p.name)
def test_the_cli_tour_works(cmq_cluster: CmqCluster, doc: Path) -> None:
    queue = unique_queue("orders")
    outputs = []
    for written in commands(block(doc, CLI_TOUR)):
        words = [queue if w == "orders" else w for w in written]
        p = run_cli(words, cmq_cluster.urls[0])
        assert p.returncode == 0, f"{words}: {p.stderr}"
        outputs.append((words[1], p.stdout))
    assert [name for name, _ in outputs] == ["queue", "send", "receive", "queue", "status"]
    received = outputs[2][1]
    assert "order 1" in received and "order 2" in received


def test_the_scheduling_commands_work(cmq_cluster: CmqCluster) -> None:
    queue = unique_queue("reminders")
    for written in commands(block(USAGE_DOC, CLI_SCHEDULING)):
        words = [queue if w == "reminders" else w for w in written]
        p = run_cli(words, cmq_cluster.urls[0])
        assert p.returncode == 0, f"{words}: {p.stderr}"
    p = run_cli(["cmq", "queue", "stats", queue, "--json"], cmq_cluster.urls[0])
    assert p.returncode == 0, p.stderr
    stats = json.loads(p.stdout)["stats"]
    assert (stats["delayed"], stats["visible"]) == (1, 1)  # "call back" waits a day


@pytest.mark.parametrize("doc", [README, SQS_DOC], ids=lambda p: p.name)
def test_the_boto3_tour_works(cmq_cluster: CmqCluster, doc: Path) -> None:
    code = block(doc, BOTO3_TOUR, ("python",))
    assert code.count('endpoint_url="http://127.0.0.1:8080"') == 1
    assert code.count('QueueName="orders"') == 1
    queue = unique_queue("orders")
    code = code.replace('"http://127.0.0.1:8080"', f'"{cmq_cluster.urls[1]}"')
    code = code.replace('QueueName="orders"', f'QueueName="{queue}"')
    code += "\nprint(len(sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0).get('Messages', [])))"
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=90, check=False
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["0"]  # the one message was received and deleted
