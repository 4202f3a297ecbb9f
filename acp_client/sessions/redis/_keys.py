"""The key names of a :class:`~acp_client.sessions.RedisSessionStore` namespace (key layout 3).

Sessions fall into :data:`BUCKETS` groups by a CRC32 of their id; every key of a group carries the group's
hash tag, so it lives in one cluster slot, and every script touches the keys of one group only. For
namespace ``ns``, group ``b``, session ``sid`` and worker ``w``::

    ns:{ns:b}:epoch          a random id; a different or missing value means the group's data was lost
    ns:{ns:b}:index          the set of the group's session ids
    ns:{ns:b}:rec:sid        a hash: record (JSON), token (of the last accepted write), owner
    ns:{ns:b}:lease:sid      "token|w|inc" (no expiry): valid while ns:{ns:b}:hb:w holds inc
    ns:{ns:b}:fence:sid      the session's fencing counter
    ns:{ns:b}:hb:w           w's heartbeat in the group: its incarnation, expiring after the lease TTL
    ns:{ns:b}:owned:w|inc    the set of sessions w holds in the group under that incarnation
    ns:{ns:b}:owners         the set of "w|inc" that hold (or held) sessions in the group
    ns:{ns:b}:free           the set of sessions released (or migrated) and not claimed since
    ns:{ns:b}:layout         "3" once the group's layout-2 sessions were indexed as free (done once)

A worker renews all its leases of a group with one ``PEXPIRE`` of its heartbeat, and finding free
sessions reads ``owners`` and the heartbeats, not every lease (``_scripts.py``).

Layout 2 (the same keys without heartbeats, sets and marker; a lease ``"token|w"`` set with ``PX``) is read
as it is: such a lease is honoured while its key lives, and the first worker of this release to reach a
group puts its sessions without a layout-3 lease in the ``free`` set (``RedisLink``). Layout 1 (``ns:index``,
``ns:epoch``, ``ns:rec:sid``...; releases up to 0.x) is only read by
:meth:`~acp_client.sessions.RedisSessionStore.migrate_layout_1`.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["BUCKETS", "KeyLayout", "bucket_of", "by_bucket"]

#: session groups of key layouts 2 and 3: each is one hash tag, so one cluster slot. Part of the layout: workers
#: that disagree on it would not find each other's sessions, so it never changes within a layout version.
BUCKETS = 64


def bucket_of(session_id: str) -> int:
    """The group (hash tag) of ``session_id``'s keys."""
    return zlib.crc32(session_id.encode("utf-8")) % BUCKETS


def by_bucket(ids: Iterable[str]) -> dict[int, list[str]]:
    """``ids`` grouped by their key group, each group in the order given."""
    groups: dict[int, list[str]] = {}
    for sid in ids:
        groups.setdefault(bucket_of(sid), []).append(sid)
    return groups


@dataclass(frozen=True, slots=True)
class KeyLayout:
    """The key names of ``namespace`` (see the module docstring)."""

    namespace: str

    def prefix(self, bucket: int) -> str:
        """What every key of group ``bucket`` starts with (the bulk scripts build keys from it)."""
        return f"{self.namespace}:{{{self.namespace}:{bucket}}}:"

    def key(self, kind: str, session_id: str) -> str:
        """The key of one session's ``kind`` (``rec``, ``lease`` or ``fence``)."""
        return f"{self.prefix(bucket_of(session_id))}{kind}:{session_id}"

    def group_key(self, bucket: int, name: str) -> str:
        """A key of group ``bucket`` that is not a session's (``hb:<owner>``, ``free``, ``owners``, ...)."""
        return f"{self.prefix(bucket)}{name}"

    def index_key(self, bucket: int) -> str:
        """The set of group ``bucket``'s session ids."""
        return f"{self.prefix(bucket)}index"

    def epoch_key(self, bucket: int) -> str:
        """The key holding group ``bucket``'s epoch."""
        return f"{self.prefix(bucket)}epoch"

    def legacy_key(self, name: str) -> str:
        """A key of layout 1 (``index``, ``epoch``, ``rec:<sid>``, ``lease:<sid>``, ``fence:<sid>``)."""
        return f"{self.namespace}:{name}"
