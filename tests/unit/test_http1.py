"""usher's HTTP/1.1 response parser: every way a response may arrive, split anywhere, reads the same. Pure."""

from __future__ import annotations

import pytest

from usher.adapters.http1 import ProtocolError, Response, ResponseParser


def parse_in_pieces(raw: bytes, split: int, *, no_body: bool = False) -> Response | None:
    """Feed ``raw`` in two pieces cut at ``split``; the response (None if it needs the connection's end)."""
    parser = ResponseParser(no_body=no_body)
    first = parser.feed(raw[:split])
    if first is not None:
        assert split == len(raw), "complete before its last byte"
        return first
    return parser.feed(raw[split:])


def every_split(raw: bytes, **kwargs: bool) -> list[Response | None]:
    return [parse_in_pieces(raw, split, **kwargs) for split in range(len(raw) + 1)]


FIXED = b'HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"kind":1}\n'
CHUNKED = (
    b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nAudit-Id: x\r\n\r\n5\r\n{"a":\r\n3;ext=1\r\n1}\n\r\n0\r\n\r\n'
)


def test_a_content_length_body_reads_the_same_however_it_arrives() -> None:
    for response in every_split(FIXED):
        assert response == Response(
            201, {"Content-Type": "application/json", "Content-Length": "11"}, b'{"kind":1}\n', keep_alive=True
        )


def test_a_chunked_body_is_joined_with_extensions_ignored_however_it_arrives() -> None:
    for response in every_split(CHUNKED):
        assert response is not None
        assert (response.status, response.body, response.keep_alive) == (200, b'{"a":1}\n', True)
        assert response.headers["Audit-Id"] == "x"


def test_a_chunked_body_with_trailer_fields_ends_at_the_empty_line() -> None:
    raw = CHUNKED[: -len(b"0\r\n\r\n")] + b"0\r\nX-Trailer: 1\r\n\r\n"
    assert {r.body if r else None for r in every_split(raw)} == {b'{"a":1}\n'}


def test_connection_close_or_http_1_0_is_not_kept_alive() -> None:
    closing = FIXED.replace(b"Content-Length", b"Connection: close\r\nContent-Length")
    assert parse_in_pieces(closing, len(closing)) == Response(
        201,
        {"Content-Type": "application/json", "Connection": "close", "Content-Length": "11"},
        b'{"kind":1}\n',
        keep_alive=False,
    )
    old = FIXED.replace(b"HTTP/1.1", b"HTTP/1.0")
    response = parse_in_pieces(old, len(old))
    assert response is not None and not response.keep_alive


def test_a_body_without_length_runs_to_the_end_of_the_connection() -> None:
    parser = ResponseParser()
    assert parser.feed(b"HTTP/1.1 500 Internal Server Error\r\n\r\npartial ") is None
    assert parser.feed(b"answer") is None
    assert parser.end() == Response(500, {}, b"partial answer", keep_alive=False)


@pytest.mark.parametrize(
    ("raw", "no_body"),
    [
        (b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", False),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", True),  # the answer to a HEAD
    ],
)
def test_answers_without_a_body_end_with_their_headers(raw: bytes, no_body: bool) -> None:
    response = ResponseParser(no_body=no_body).feed(raw)
    assert response is not None and response.body == b"" and response.keep_alive


def test_an_interim_answer_is_skipped_for_the_final_one() -> None:
    raw = b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" + FIXED
    for response in every_split(raw):
        assert response is not None and (response.status, response.body) == (201, b'{"kind":1}\n')
        assert "Link" not in response.headers


def test_repeated_headers_are_joined() -> None:
    raw = b"HTTP/1.1 200 OK\r\nWarning: one\r\nWarning: two\r\nContent-Length: 0\r\n\r\n"
    response = ResponseParser().feed(raw)
    assert response is not None and response.headers["Warning"] == "one, two"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed header line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "bad Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nab", "more bytes than the response's Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n", "bad chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n", "a chunk does not end in CRLF"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nX", "more bytes after the chunked response"),
    ],
)
def test_a_malformed_answer_is_a_protocol_error_naming_what_is_wrong(raw: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        ResponseParser().feed(raw)


def test_an_answer_cut_short_by_the_connection_is_a_protocol_error() -> None:
    for cut in (FIXED[:20], FIXED[:-1], CHUNKED[:-2]):
        parser = ResponseParser()
        assert parser.feed(cut) is None
        with pytest.raises(ProtocolError, match="closed before the response was complete"):
            parser.end()


def test_a_connection_error_is_an_os_error_the_callers_retry() -> None:
    assert issubclass(ProtocolError, ConnectionError) and issubclass(ProtocolError, OSError)
