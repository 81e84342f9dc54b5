"""`cmq.client.leaders`: which hints are followed, how the per-queue preference is learned,
dropped and bounded (pure: no server)."""

from __future__ import annotations

import pytest

from cmq.client.leaders import Leaders, host_port, url_host_port

URLS = ("http://127.0.0.1:8080", "http://127.0.0.1:8081", "http://node-c.example:80")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:8081", "127.0.0.1:8081"),
        ("Node-C.Example:80", "node-c.example:80"),
        ("[::1]:9000", "[::1]:9000"),
        ("127.0.0.1", None),  # no port
        ("127.0.0.1:0", None),
        ("127.0.0.1:70000", None),
        ("http://127.0.0.1:8081", None),  # a scheme
        ("127.0.0.1:8081/x", None),  # a path
        ("user@127.0.0.1:8081", None),
        ("evil.example:80?x", None),
        ("a b:80", None),
        ("", None),
        ("x" * 400 + ":80", None),
        ("::1:9000", None),  # IPv6 unbracketed
        ("127.0.0.1:80\r\nSet-Cookie: a", None),
    ],
)
def test_host_port_accepts_exactly_host_and_port(text: str, expected: str | None) -> None:
    assert host_port(text) == expected


def test_url_host_port_uses_the_schemes_default_port() -> None:
    assert url_host_port("https://Q.example") == "q.example:443"
    assert url_host_port("http://q.example") == "q.example:80"
    assert url_host_port("http://127.0.0.1:8081") == "127.0.0.1:8081"


def test_a_hint_naming_a_configured_node_is_followed() -> None:
    leaders = Leaders(URLS)
    leaders.learn("orders", URLS[0], "127.0.0.1:8081")
    assert leaders.get("orders") == URLS[1]
    leaders.learn("orders", URLS[1], None)  # the leader answered: kept
    assert leaders.get("orders") == URLS[1]
    leaders.learn("jobs", URLS[0], "NODE-C.example:80")
    assert leaders.get("jobs") == URLS[2]
    assert leaders.get("other") is None


def test_a_hint_outside_the_configured_nodes_is_ignored_unless_any_node() -> None:
    strict = Leaders(URLS)
    strict.learn("orders", URLS[0], "127.0.0.1:8081")
    strict.learn("orders", URLS[1], "evil.example:443")  # not ours: drops the preference too
    assert strict.get("orders") is None
    assert strict.resolve("evil.example:443") is None
    strict.learn("orders", URLS[0], "http://127.0.0.1:8081/")  # malformed
    assert strict.get("orders") is None

    anywhere = Leaders(("https://a.example:8443",), any_node=True)
    anywhere.learn("orders", "https://a.example:8443", "b.example:8443")
    assert anywhere.get("orders") == "https://b.example:8443"  # the client's scheme
    anywhere.learn("orders", "https://b.example:8443", "b.example:8443/../x")
    assert anywhere.get("orders") is None


def test_a_failure_drops_only_that_preference() -> None:
    leaders = Leaders(URLS)
    leaders.learn("orders", URLS[0], "127.0.0.1:8081")
    leaders.failed("orders", URLS[0])  # not the preferred URL: nothing changes
    assert leaders.get("orders") == URLS[1]
    leaders.failed("orders", URLS[1])
    assert leaders.get("orders") is None


def test_a_node_naming_itself_is_not_preferred() -> None:
    leaders = Leaders(URLS)
    leaders.learn("orders", URLS[1], "127.0.0.1:8081")
    assert leaders.get("orders") is None


def test_the_map_is_bounded_least_recently_learned_first() -> None:
    leaders = Leaders(URLS, capacity=3)
    for i in range(5):
        leaders.learn(f"q{i}", URLS[0], "127.0.0.1:8081")
    assert len(leaders) == 3
    assert [leaders.get(f"q{i}") for i in range(5)] == [None, None, URLS[1], URLS[1], URLS[1]]
