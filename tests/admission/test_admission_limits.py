"""The webhook server's limits (issue 12): header, body and idle timeouts, the body size limit, the
connection cap and the review concurrency limit, over real HTTPS.

Slow and idle clients are raw TLS sockets: one that never starts the TLS handshake, one that
handshakes and sends nothing, one that trickles its headers a byte per second, one that trickles
its body a byte per second, one that stays connected after a review. While they are held, normal
reviews are answered; then each of them is closed by the server. The server runs with small
timeouts so the test is short; no assertion is about speed: a connection only has to be closed
before a generous deadline (CLOSE_DEADLINE), which a server without the limits misses.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from admission_helpers import QWEN, ServerThread, client_context, example_cr, review_request
from specdeploy.controller.admission import ConfigsUnavailable
from specdeploy.controller.webhooks import ServerLimits, uid_from_prefix

LIMITS = ServerLimits(header_timeout=2.0, body_timeout=2.0, idle_timeout=2.0, max_body=256 << 10,
                      max_connections=32, max_connections_per_client=16, max_concurrent_reviews=2)
CLOSE_DEADLINE = 60.0  # seconds a held connection may stay open in the test (the limits are 2 s)


class SlowLookup:
    """configs_lookup that takes a while and records how many reviews are inside it at once."""

    def __init__(self, pause: float = 0.0):
        self.pause = pause
        self.inside = 0
        self.most = 0
        self.lock = threading.Lock()

    async def __call__(self, namespace, spec, fresh=False):
        import asyncio

        with self.lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
        try:
            await asyncio.sleep(self.pause)
        finally:
            with self.lock:
                self.inside -= 1
        raise ConfigsUnavailable("not known in this test")


@pytest.fixture
def server():
    s = ServerThread(lookup=SlowLookup(), limits=LIMITS).start()
    yield s
    s.stop()


def tls(server, handshake: bool = True) -> socket.socket:
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=CLOSE_DEADLINE)
    if not handshake:
        return raw
    return client_context(server.material.ca_pem).wrap_socket(raw, server_hostname="localhost")


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection; fails if it is still open at the deadline."""
    sock.settimeout(CLOSE_DEADLINE)
    got = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, ssl.SSLEOFError, ssl.SSLZeroReturnError):
            return got
        except (socket.timeout, TimeoutError):
            pytest.fail(f"the server kept the connection open for {CLOSE_DEADLINE}s (got {got[:200]!r})")
        if not chunk:
            return got
        got += chunk


class Trickle(threading.Thread):
    """Sends `head` at once, then `tail` one byte per second until the server closes the connection."""

    def __init__(self, sock: socket.socket, head: bytes, tail: bytes):
        super().__init__(daemon=True)
        self.sock, self.head, self.tail = sock, head, tail
        self.sent = 0
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            self.sock.sendall(self.head)
            for i in range(len(self.tail)):
                if self.stop.wait(1.0):
                    return
                self.sock.sendall(self.tail[i:i + 1])
                self.sent += 1
        except OSError:  # closed by the server
            return


def review_bytes(uid: str | None = None) -> bytes:
    return json.dumps(review_request(example_cr(QWEN, f"cr-{uuid.uuid4().hex[:6]}"), uid=uid)).encode()


def post_head(length: int) -> bytes:
    return (f"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def test_slow_and_idle_connections_are_closed_and_reviews_still_answered(server):
    body = review_bytes()
    held = {
        "no TLS handshake": tls(server, handshake=False),
        "idle after the handshake": tls(server),
        "headers at 1 byte/s": tls(server),
        "body at 1 byte/s": tls(server),
    }
    trickles = [Trickle(held["headers at 1 byte/s"], b"POST /validate HTTP/1.1\r\nHost: localhost\r\n", b"X" * 200),
                Trickle(held["body at 1 byte/s"], post_head(len(body)), body)]
    for t in trickles:
        t.start()
    try:
        # normal reviews while those are held: each answered
        client = server.client()
        for i in range(5):
            r = client.review(review_request(example_cr(QWEN, f"normal-{i}"), uid=f"normal-{i}"))
            assert r["uid"] == f"normal-{i}" and r["allowed"] is True, r
        client.close()
        # and each held connection is closed by the server
        answers = {name: read_until_closed(sock) for name, sock in held.items()}
    finally:
        for t in trickles:
            t.stop.set()
        for sock in held.values():
            sock.close()
    assert answers["no TLS handshake"] == b"" and answers["idle after the handshake"] == b""
    assert answers["headers at 1 byte/s"] == b""  # closed without an answer: there is no request yet
    assert answers["body at 1 byte/s"].startswith(b"HTTP/1.1 408 "), answers["body at 1 byte/s"][:200]
    assert trickles[0].sent < 200 and trickles[1].sent < len(body)  # cut off, not served to the end


def test_a_kept_alive_connection_is_closed_when_idle(server):
    client = server.client()
    r = client.review(review_request(example_cr(QWEN, "keep"), uid="keep"))
    assert r["uid"] == "keep"
    sock = client.conn.sock  # the kept-alive connection
    assert read_until_closed(sock) == b""
    client.close()
    # the client reconnects for the next review
    assert client.review(review_request(example_cr(QWEN, "again"), uid="again"))["uid"] == "again"
    client.close()


def test_a_body_declared_too_large_is_refused_with_its_uid_without_reading_it(server):
    """Content-Length far over the limit: the first bytes are read for the uid, the answer sent, the connection closed."""
    body = review_bytes(uid="uid-huge")
    sock = tls(server)
    try:
        sock.sendall(post_head(10 ** 9) + body)  # a gigabyte announced, a few kilobytes sent
        answer = read_until_closed(sock)
    finally:
        sock.close()
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), head
    doc = json.loads(payload)
    assert doc["response"]["uid"] == "uid-huge" and doc["response"]["allowed"] is False
    assert doc["response"]["status"]["code"] == 413 and "exceeds" in doc["response"]["status"]["message"]


def test_too_large_without_a_readable_uid_is_http_413(server):
    client = server.client()
    status, text = client.post("/validate", b"[" * (LIMITS.max_body + 1))
    assert status == 413 and "exceeds" in text
    client.close()


def test_uid_from_prefix():
    body = review_bytes(uid="abc-123")
    assert uid_from_prefix(body[:200]) == "abc-123"
    assert uid_from_prefix(b'{"request": {"kind": {}, "uid": "abc-1') == ""  # cut before the closing quote
    assert uid_from_prefix(b'{"uid": "top-level", "request": {}}') == ""
    assert uid_from_prefix(b" " * 1000) == ""


def test_reviews_beyond_the_concurrency_limit_wait_their_turn():
    lookup = SlowLookup(pause=0.3)
    s = ServerThread(lookup=lookup, limits=ServerLimits(max_concurrent_reviews=1)).start()
    try:
        def one(i: int) -> dict:
            c = s.client()
            try:
                return c.review(review_request(example_cr(QWEN, f"c-{i}"), uid=f"c-{i}"))
            finally:
                c.close()

        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(one, range(6)))
    finally:
        s.stop()
    assert [a["uid"] for a in answers] == [f"c-{i}" for i in range(6)]
    assert all(a["allowed"] for a in answers)
    assert lookup.most == 1  # never two reviews at once


def test_connections_over_the_clients_share_are_closed():
    s = ServerThread(lookup=SlowLookup(), limits=ServerLimits(max_connections=3, max_connections_per_client=2,
                                                              idle_timeout=120)).start()
    socks = []
    try:
        for _ in range(2):
            socks.append(tls(s))
        time.sleep(0.2)  # not a timing assertion: lets the server register the two before the third arrives
        extra = tls(s, handshake=False)  # refused at accept, before any TLS
        socks.append(extra)
        assert read_until_closed(extra) == b""  # the third is closed at once, not after idle_timeout (120 s)
    finally:
        for sock in socks:
            sock.close()
    # once those are gone, reviews are answered again
    try:
        for _ in range(50):
            c = s.client()
            try:
                r = c.review(review_request(example_cr(QWEN, "after"), uid="after"))
                break
            except (ConnectionError, ssl.SSLError, OSError):
                time.sleep(0.1)
            finally:
                c.close()
        assert r["uid"] == "after"
    finally:
        s.stop()


def test_the_header_timeout_alone_cuts_trickled_headers():
    """With a long idle timeout (120 s) the header deadline is what closes a connection trickling its headers."""
    s = ServerThread(lookup=SlowLookup(), limits=ServerLimits(header_timeout=2.0, idle_timeout=120)).start()
    sock = tls(s)
    t = Trickle(sock, b"POST /validate HTTP/1.1\r\n", b"X-Slow: " + b"x" * 200)
    t.start()
    try:
        assert read_until_closed(sock) == b""
    finally:
        t.stop.set()
        sock.close()
        s.stop()


# ----------------------------------------------------------------- one client cannot take the webhook (issue 37)

SHARE = ServerLimits(header_timeout=60.0, idle_timeout=120.0, max_connections=24, max_connections_per_client=8)


def hold(server, source: str, count: int) -> list[socket.socket]:
    """``count`` connections from ``source``: half of them stopped before the TLS handshake, half idle after it."""
    out = []
    for i in range(count):
        raw = socket.create_connection(("127.0.0.1", server.port), timeout=CLOSE_DEADLINE, source_address=(source, 0))
        if i % 2:
            raw = client_context(server.material.ca_pem).wrap_socket(raw, server_hostname="localhost")
        out.append(raw)
    return out


def wait_held(server, source: str, count: int) -> None:
    """Until the server counts ``count`` connections of ``source`` (bounded: the test fails otherwise)."""
    web = server.server._web
    for _ in range(200):
        if len(web.clients.get(source, ())) == count:
            return
        time.sleep(0.05)
    pytest.fail(f"the server counts {len(web.clients.get(source, ()))} connections of {source}, not {count}")


def test_one_client_holding_its_share_leaves_the_api_server_served():
    """128 idle connections from one address took the webhook down (0 of 23 reviews answered): now one address
    holds at most its share, idle or mid-handshake, and another client's reviews are answered meanwhile."""
    s = ServerThread(limits=SHARE).start()
    held: list[socket.socket] = []
    try:
        held = hold(s, "127.0.0.1", SHARE.max_connections_per_client)
        wait_held(s, "127.0.0.1", SHARE.max_connections_per_client)
        for _ in range(4):  # more from the same address: closed at once, before any TLS
            more = socket.create_connection(("127.0.0.1", s.port), timeout=CLOSE_DEADLINE)
            held.append(more)
            assert read_until_closed(more) == b""
        api = s.client(source="127.0.0.2")  # the API server: its client certificate
        try:
            answers = [api.review(review_request(example_cr(QWEN, f"cr-{i}"), uid=f"u-{i}")) for i in range(23)]
        finally:
            api.close()
        assert [a["uid"] for a in answers] == [f"u-{i}" for i in range(23)]
        assert len(s.server._web.clients["127.0.0.1"]) == SHARE.max_connections_per_client  # still held
    finally:
        for sock in held:
            sock.close()
        s.stop()


def test_at_the_total_cap_a_new_client_takes_an_idle_connection_of_the_largest_holder():
    """Clients on three addresses hold every connection; the API server's connection takes an idle one's place."""
    s = ServerThread(limits=SHARE).start()
    held: list[socket.socket] = []
    try:
        for source in ("127.0.0.3", "127.0.0.4", "127.0.0.5"):
            held += hold(s, source, SHARE.max_connections_per_client)
            wait_held(s, source, SHARE.max_connections_per_client)
        assert s.server._web.open == SHARE.max_connections
        api = s.client(source="127.0.0.2")  # the API server: its client certificate
        try:
            answers = [api.review(review_request(example_cr(QWEN, f"cr-{i}"), uid=f"u-{i}")) for i in range(5)]
        finally:
            api.close()
        assert [a["uid"] for a in answers] == [f"u-{i}" for i in range(5)]
        assert s.server._web.open <= SHARE.max_connections
    finally:
        for sock in held:
            sock.close()
        s.stop()


def test_the_share_is_smaller_than_the_total():
    with pytest.raises(ValueError, match="share"):
        ServerLimits(max_connections=8, max_connections_per_client=8)


def test_a_connection_that_sends_nothing_after_the_handshake_is_closed_at_the_header_timeout():
    """Not at the idle timeout (120 s here): a held connection is freed within the header timeout."""
    s = ServerThread(limits=ServerLimits(header_timeout=2.0, idle_timeout=120)).start()
    sock = tls(s)
    try:
        assert read_until_closed(sock) == b""
    finally:
        sock.close()
        s.stop()


def test_the_verified_api_server_holds_more_than_one_addresses_share():
    """Its handshakes count against its address's share; its verified connections then leave it (the total cap
    still counts them): a burst of concurrent reviews opens more connections than the share."""
    s = ServerThread(limits=SHARE).start()
    clients = [s.client(source="127.0.0.2") for _ in range(SHARE.max_connections_per_client + 4)]
    try:
        answers = [c.review(review_request(example_cr(QWEN, f"cr-{i}"), uid=f"u-{i}")) for i, c in enumerate(clients)]
        assert [a["uid"] for a in answers] == [f"u-{i}" for i in range(len(clients))]
        web = s.server._web
        assert len(web.verified) == len(clients) and not web.clients.get("127.0.0.2")
        # an unverified caller from the same address still has the whole share
        held = hold(s, "127.0.0.2", SHARE.max_connections_per_client)
        wait_held(s, "127.0.0.2", SHARE.max_connections_per_client)
        for sock in held:
            sock.close()
    finally:
        for c in clients:
            c.close()
        s.stop()
