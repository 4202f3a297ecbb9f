"""The event-stream parser stays linear in what it is fed and gives the same events however bytes are split."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_client.transports.http._sse import SSEEvent, SSEParser


def _feed_all(parser: SSEParser, chunks: list[bytes]) -> list[SSEEvent]:
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    return events


# the quadratic parser searched the whole rest of the chunk for a CR at every line: ~30 s here, 1 s now
@pytest.mark.timeout(20)
def test_a_chunk_of_many_lines_is_parsed_in_one_pass() -> None:
    count = 600_000
    events = SSEParser().feed(b"data: x\n\n" * count)
    assert len(events) == count
    assert events[-1] == SSEEvent("x")


# the quadratic parser copied and searched the whole partial line at every chunk: ~50 s here, 0.1 s now
@pytest.mark.timeout(20)
def test_a_line_split_over_many_chunks_is_searched_once() -> None:
    parser = SSEParser()
    line = b"a" * (16 * 1024 * 1024)
    size = 1024
    for offset in range(0, len(line), size):
        assert parser.feed((b"data: " if offset == 0 else b"") + line[offset : offset + size]) == []
    (event,) = parser.feed(b"\n\n")
    assert len(event.data) == len(line)


def test_the_size_bound_is_named_in_the_error() -> None:
    parser = SSEParser(max_event_bytes=1000)
    with pytest.raises(ValueError, match=r"1000 bytes \(max_event_bytes\)"):
        for _ in range(20):
            parser.feed(b"x" * 100)


_LINES = st.lists(
    st.tuples(
        st.sampled_from(["data: a", "data:b", "id: 7", "event: e", ": c", "retry: 5", "", "data: é"]),
        st.sampled_from(["\n", "\r", "\r\n"]),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(lines=_LINES, cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_any_split_gives_the_events_of_one_feed(lines: list[tuple[str, str]], cuts: list[int]) -> None:
    stream = "".join(text + end for text, end in lines).encode()
    whole = SSEParser().feed(stream)
    points = sorted({c for c in cuts if c <= len(stream)} | {0, len(stream)})
    chunks = [stream[a:b] for a, b in itertools.pairwise(points)]
    assert _feed_all(SSEParser(), chunks) == whole
