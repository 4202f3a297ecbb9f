"""Key layout 3 of RedisSessionStore, spelled out as the how-to documents it (tests that write raw keys use
it, so they also check that the store keeps to the documented layout)."""

from __future__ import annotations

import zlib

BUCKETS = 64


def group_prefix(namespace: str, session_id: str) -> str:
    """``ns:{ns:b}:``: the prefix (and hash tag) of the key group of ``session_id``."""
    bucket = zlib.crc32(session_id.encode()) % BUCKETS
    return f"{namespace}:{{{namespace}:{bucket}}}:"


def session_key(namespace: str, kind: str, session_id: str) -> str:
    """The ``rec``, ``lease`` or ``fence`` key of ``session_id``."""
    return f"{group_prefix(namespace, session_id)}{kind}:{session_id}"


def index_key(namespace: str, session_id: str) -> str:
    """The index set of the key group ``session_id`` falls in."""
    return f"{group_prefix(namespace, session_id)}index"


def group_key(namespace: str, session_id: str, name: str) -> str:
    """A key of the group ``session_id`` falls in that is not a session's: ``hb:<owner>``, ``owned:<owner>|<inc>``,
    ``owners``, ``free``, ``layout``."""
    return f"{group_prefix(namespace, session_id)}{name}"
