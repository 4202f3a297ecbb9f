"""A blocking facade over the async client, for scripts, notebook cells and IDE threads.

::

    from acp_client import sync

    with sync.connect("ws://127.0.0.1:8765/acp") as client:
        session = client.new_session("/work")
        print(session.prompt("echo: hi").stop_reason)

    with sync.ReconnectingClient(url) as client:   # waits until ready
        session = client.new_session("/work")
        for item in session.updates(timeout=5):   # a blocking generator
            ...

Each client owns a private event loop running in a daemon thread, started when the client is created (never
at import) and stopped by ``close()``. Every call submits a coroutine to that loop and blocks the calling
thread until it finishes. Because the work never runs on the caller's loop, the facade also works from code
that already runs inside an event loop (a Jupyter cell, an IDE's UI thread): the caller's loop is merely
blocked for the duration of the call. Calling it from the client's *own* loop thread (e.g. from inside a
handler) would deadlock and raises :class:`~acp_client.exceptions.UsageError` instead.

Errors are the async API's, re-raised in the calling thread. A ``timeout`` bounds the call in the async API
(typed errors) and, with a little slack, the wait in the calling thread (``TimeoutError``, and the call is
cancelled on the loop). ``KeyboardInterrupt`` while waiting cancels the call on the loop too.

Names mirror the async API; ``close`` is the twin of ``aclose``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Generator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from acp_client.client import ACPClient, SessionInfo, Target
from acp_client.client import connect as _async_connect
from acp_client.exceptions import UsageError
from acp_client.reconnect import ClientState, Event
from acp_client.reconnect import ReconnectingClient as _AsyncReconnectingClient
from acp_client.recovery import RecoveryStrategy
from acp_client.schema import SessionStatusResponse
from acp_client.sessions import DEFAULT_UPDATES_BUFFER, PromptResult, Session, SessionLink, StreamItem, Transcript

__all__ = ["ReconnectingClient", "SyncClient", "SyncSession", "connect"]

T = TypeVar("T")

#: Extra seconds the calling thread waits beyond a call's own ``timeout`` (so the typed error wins).
TIMEOUT_SLACK = 5.0
#: Bound on closing a client and stopping its loop thread.
CLOSE_TIMEOUT = 30.0


def _wait_bound(timeout: float | None) -> float | None:
    return None if timeout is None else timeout + TIMEOUT_SLACK


class _LoopThread:
    """A private event loop in a daemon thread; :meth:`run` executes one coroutine there and blocks."""

    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._stopped = False
        self._thread.start()

    def _main(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
            leftovers = asyncio.all_tasks(loop)
            for task in leftovers:
                task.cancel()
            if leftovers:
                loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()

    def on_loop_thread(self) -> bool:
        """Whether the caller runs on the private loop's thread."""
        return threading.get_ident() == self._thread.ident

    @property
    def alive(self) -> bool:
        """Whether the loop still accepts work."""
        return not self._stopped and self._thread.is_alive()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the private loop and return its result; ``TimeoutError`` after ``timeout`` seconds
        (the coroutine is then cancelled)."""
        if self.on_loop_thread():
            coro.close()
            raise UsageError("a blocking acp_client.sync call from the client's own loop thread would deadlock")
        if not self.alive:
            coro.close()
            raise UsageError("this client is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"the call did not finish within {timeout:g} s") from None
        except BaseException:  # KeyboardInterrupt in a notebook cell: stop the work too
            future.cancel()
            raise

    def stop(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Stop the loop (pending tasks are cancelled) and join the thread. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            if not self.on_loop_thread():
                self._thread.join(timeout)


def _subscribe(
    runner: _LoopThread, make: Callable[[], AsyncIterator[T]], timeout: float | None
) -> Generator[T, None, None]:
    """Create an async iterator on the private loop now (so the subscription starts at the call) and return
    a blocking generator over it; closing the generator closes the async iterator on the loop."""

    async def create() -> AsyncIterator[T]:
        return make()

    return _blocking(runner, runner.run(create(), CLOSE_TIMEOUT), timeout)


def _blocking(runner: _LoopThread, iterator: AsyncIterator[T], timeout: float | None) -> Generator[T, None, None]:
    async def step() -> list[T]:
        try:
            return [await anext(iterator)]
        except StopAsyncIteration:
            return []

    async def finish() -> None:
        closer = getattr(iterator, "aclose", None)
        if closer is not None:
            with contextlib.suppress(RuntimeError):  # still finishing a cancelled step
                await closer()

    try:
        while True:
            items = runner.run(step(), timeout)
            if not items:
                return
            yield items[0]
    finally:
        if runner.alive and not runner.on_loop_thread():
            runner.run(finish(), CLOSE_TIMEOUT)


class SyncSession:
    """A blocking handle on a :class:`~acp_client.sessions.Session` (stable across reconnects like it)."""

    def __init__(self, runner: _LoopThread, session: Session) -> None:
        self._runner = runner
        #: The underlying async handle (use it only from the client's loop).
        self.session = session

    def __repr__(self) -> str:
        return f"<SyncSession {self.session.id} {self.session.link.value}>"

    @property
    def id(self) -> str:
        """The agent's session id."""
        return self.session.id

    @property
    def state(self) -> str | None:
        """v2 foreground state (``idle``, ``running``, ...), ``None`` when unknown and always in v1."""
        return self.session.state

    @property
    def link(self) -> SessionLink:
        """Where the session stands with respect to the current connection."""
        return self.session.link

    @property
    def transcript(self) -> Transcript:
        """The conversation as the client knows it (updated by the client's loop thread)."""
        return self.session.transcript

    def prompt(self, content: str | Sequence[dict[str, Any]], timeout: float | None = None) -> PromptResult:
        """Send a prompt and block until the turn ends (see :meth:`Session.prompt`); never re-sent."""
        return self._runner.run(self.session.prompt(content, timeout=timeout), _wait_bound(timeout))

    def cancel(self) -> None:
        """Ask the agent to stop the current turn (``session/cancel``)."""
        self._runner.run(self.session.cancel(), CLOSE_TIMEOUT)

    def updates(
        self, timeout: float | None = None, *, maxsize: int = DEFAULT_UPDATES_BUFFER
    ) -> Generator[StreamItem, None, None]:
        """Block over this session's stream (updates, recovery markers, overflow notices) from now on.

        The subscription starts at this call. ``timeout`` bounds the wait for each item: when it passes, the
        generator raises ``TimeoutError``. It ends when the session is lost or closed; ``close()`` it to
        unsubscribe early.
        """
        return _subscribe(self._runner, lambda: self.session.updates(maxsize=maxsize), timeout)


class _Facade:
    """What both blocking clients share: the private loop, stable session wrappers, context management."""

    def __init__(self, runner: _LoopThread) -> None:
        self._runner = runner
        self._wrappers: dict[int, SyncSession] = {}

    def _wrap(self, session: Session) -> SyncSession:
        wrapper = self._wrappers.get(id(session))
        if wrapper is None or wrapper.session is not session:
            wrapper = self._wrappers[id(session)] = SyncSession(self._runner, session)
        return wrapper

    def _close_with(self, aclose: Callable[[], Coroutine[Any, Any, None]]) -> None:
        try:
            if self._runner.alive:
                self._runner.run(aclose(), CLOSE_TIMEOUT)
        finally:
            self._runner.stop()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (the loop thread is stopped)."""
        return not self._runner.alive

    def close(self) -> None:
        """Close the client and stop its private loop thread (each client says what it closes)."""
        raise NotImplementedError

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class SyncClient(_Facade):
    """A blocking :class:`~acp_client.client.ACPClient` over one connection; made by :func:`connect`."""

    def __init__(self, runner: _LoopThread, client: ACPClient) -> None:
        super().__init__(runner)
        #: The underlying async client (use it only from the client's loop).
        self.client = client

    def __repr__(self) -> str:
        return f"<SyncClient {self.client!r}>"

    def __enter__(self) -> SyncClient:
        return self

    def close(self) -> None:
        """Close the connection and stop the private loop thread. Idempotent."""
        self._close_with(self.client.aclose)

    @property
    def protocol_version(self) -> int:
        """The negotiated protocol version."""
        return self.client.protocol_version

    @property
    def agent_capabilities(self) -> dict[str, Any]:
        """The agent's capabilities (raw JSON object)."""
        return self.client.agent_capabilities

    def supports(self, feature: str) -> bool:
        """Whether the agent advertised ``feature`` (see :meth:`ACPClient.supports`)."""
        return self.client.supports(feature)

    def new_session(
        self,
        cwd: str,
        *,
        mcp_servers: Sequence[Mapping[str, Any]] | None = None,
        additional_directories: Sequence[str] | None = None,
        timeout: float | None = 30.0,
    ) -> SyncSession:
        """Create a session (``session/new``)."""
        coro = self.client.new_session(
            cwd, mcp_servers=mcp_servers, additional_directories=additional_directories, timeout=timeout
        )
        return self._wrap(self._runner.run(coro, _wait_bound(timeout)))

    def session_status(self, session_id: str, *, timeout: float | None = 10.0) -> SessionStatusResponse:
        """``session/status``; raises ``SessionNotFound`` (-32002) for an unknown session."""
        return self._runner.run(self.client.session_status(session_id, timeout=timeout), _wait_bound(timeout))

    def list_sessions(self, cwd: str | None = None, *, timeout: float | None = 30.0) -> list[SessionInfo]:
        """``session/list``: every page, as a list."""

        async def collect() -> list[SessionInfo]:
            return [info async for info in self.client.list_sessions(cwd, timeout=timeout)]

        return self._runner.run(collect(), None)

    def request(self, method: str, params: Any = None, *, timeout: float | None = 30.0) -> Any:
        """Send any request and return its raw result (escape hatch)."""
        return self._runner.run(self.client.request(method, params, timeout=timeout), _wait_bound(timeout))


def connect(target: Target, *, timeout: float | None = 60.0, **options: Any) -> SyncClient:
    """Connect and initialize (see :func:`acp_client.connect` for ``options``); returns a :class:`SyncClient`,
    usable as a context manager. ``timeout`` bounds the whole connect."""
    runner = _LoopThread("acp-sync-client")
    try:
        client = runner.run(_connect(target, options), timeout)
    except BaseException:
        runner.stop()
        raise
    return SyncClient(runner, client)


async def _connect(target: Target, options: dict[str, Any]) -> ACPClient:
    return await _async_connect(target, **options)


class ReconnectingClient(_Facade):
    """A blocking :class:`acp_client.ReconnectingClient`; takes the same options.

    Creating it starts connecting in the background on its private loop; ``with`` waits until ready
    (``ready_timeout`` seconds, default 30) and closes it on exit. Session handles stay valid across
    reconnects, exactly as in the async client.
    """

    def __init__(self, target: Target, *, ready_timeout: float | None = 30.0, **options: Any) -> None:
        runner = _LoopThread("acp-sync-reconnecting-client")
        super().__init__(runner)
        self.ready_timeout = ready_timeout

        async def create() -> _AsyncReconnectingClient:
            client = _AsyncReconnectingClient(target, **options)
            await client.start()
            return client

        try:
            #: The underlying async client (use it only from the client's loop).
            self.client: _AsyncReconnectingClient = runner.run(create(), CLOSE_TIMEOUT)
        except BaseException:
            runner.stop()
            raise

    def __repr__(self) -> str:
        return f"<sync {self.client!r}>"

    def __enter__(self) -> ReconnectingClient:
        try:
            self.wait_ready(self.ready_timeout)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Close the connection, stop reconnecting and stop the private loop thread. Idempotent."""
        self._close_with(self.client.aclose)

    @property
    def state(self) -> ClientState:
        """The current lifecycle state."""
        return self.client.state

    @property
    def protocol_version(self) -> int:
        """The protocol version of the current (or last) connection."""
        return self.client.protocol_version

    @property
    def generation(self) -> int:
        """How many connection attempts were made."""
        return self.client.generation

    @property
    def sessions(self) -> dict[str, SyncSession]:
        """Known sessions by id (a snapshot; the handles themselves stay valid across reconnects)."""

        async def snapshot() -> list[Session]:
            return list(self.client.sessions.values())

        return {session.id: self._wrap(session) for session in self._runner.run(snapshot(), CLOSE_TIMEOUT)}

    def wait_ready(self, timeout: float | None = None) -> None:
        """Block until the client is ``READY``; raises ``ReconnectFailed``, ``ClientClosed`` or ``TimeoutError``."""
        self._runner.run(self.client.wait_ready(timeout), _wait_bound(timeout))

    def reconnect_now(self) -> None:
        """Reconnect without waiting (see :meth:`acp_client.ReconnectingClient.reconnect_now`)."""

        async def now() -> None:
            self.client.reconnect_now()

        self._runner.run(now(), CLOSE_TIMEOUT)

    def new_session(
        self,
        cwd: str,
        *,
        mcp_servers: Sequence[Mapping[str, Any]] | None = None,
        additional_directories: Sequence[str] | None = None,
        timeout: float | None = 30.0,
    ) -> SyncSession:
        """Create a session on the current connection; it is stored and recovered after every drop."""
        coro = self.client.new_session(
            cwd, mcp_servers=mcp_servers, additional_directories=additional_directories, timeout=timeout
        )
        return self._wrap(self._runner.run(coro, _wait_bound(timeout)))

    def recover(self, session_id: str, *, timeout: float | None = None) -> SyncSession:
        """Probe and recover one session now; raises ``SessionLost`` or ``RecoveryFailed``."""
        return self._wrap(self._runner.run(self.client.recover(session_id), timeout))

    def forget(self, session_id: str) -> None:
        """Forget a session locally (client and store); the agent is not told."""
        self._runner.run(self.client.forget(session_id), CLOSE_TIMEOUT)

    def session_status(self, session_id: str, *, timeout: float | None = 10.0) -> SessionStatusResponse:
        """``session/status`` on the current connection."""
        return self._runner.run(self.client.session_status(session_id, timeout=timeout), _wait_bound(timeout))

    def list_sessions(self, cwd: str | None = None, *, timeout: float | None = 30.0) -> list[SessionInfo]:
        """``session/list`` over every page, as a list."""

        async def collect() -> list[SessionInfo]:
            return [info async for info in self.client.list_sessions(cwd, timeout=timeout)]

        return self._runner.run(collect(), _wait_bound(timeout))

    def resume_session(
        self,
        session_id: str,
        cwd: str,
        *,
        mcp_servers: Sequence[Mapping[str, Any]] | None = None,
        additional_directories: Sequence[str] | None = None,
        replay: bool = False,
        timeout: float | None = 60.0,
    ) -> SyncSession:
        """Attach an existing session (``session/resume``) and keep it recovered from now on."""
        coro = self.client.resume_session(
            session_id,
            cwd,
            mcp_servers=mcp_servers,
            additional_directories=additional_directories,
            replay=replay,
            timeout=timeout,
        )
        return self._wrap(self._runner.run(coro, _wait_bound(timeout)))

    def load_session(
        self,
        session_id: str,
        cwd: str,
        *,
        mcp_servers: Sequence[Mapping[str, Any]] | None = None,
        additional_directories: Sequence[str] | None = None,
        timeout: float | None = 60.0,
    ) -> SyncSession:
        """v1 ``session/load`` an existing session and keep it recovered from now on."""
        coro = self.client.load_session(
            session_id, cwd, mcp_servers=mcp_servers, additional_directories=additional_directories, timeout=timeout
        )
        return self._wrap(self._runner.run(coro, _wait_bound(timeout)))

    def close_session(self, session_id: str, *, timeout: float | None = 30.0) -> None:
        """``session/close`` and forget the session locally."""
        self._runner.run(self.client.close_session(session_id, timeout=timeout), _wait_bound(timeout))

    def delete_session(self, session_id: str, *, timeout: float | None = 30.0) -> None:
        """``session/delete`` and forget the session locally."""
        self._runner.run(self.client.delete_session(session_id, timeout=timeout), _wait_bound(timeout))

    def authenticate(self, method_id: str, *, timeout: float | None = 30.0) -> None:
        """Authenticate on the current connection."""
        self._runner.run(self.client.authenticate(method_id, timeout=timeout), _wait_bound(timeout))

    def request(self, method: str, params: Any = None, *, timeout: float | None = 30.0) -> Any:
        """Send any request on the current connection (never re-sent after a drop)."""
        return self._runner.run(self.client.request(method, params, timeout=timeout), _wait_bound(timeout))

    def set_strategy(self, session_id: str, strategy: RecoveryStrategy | None) -> None:
        """Use ``strategy`` for one session (``None``: back to the client's strategy)."""

        async def apply() -> None:
            self.client.set_strategy(session_id, strategy)

        self._runner.run(apply(), CLOSE_TIMEOUT)

    def notify_network_changed(self) -> None:
        """Hint that the network changed or the machine woke up (see the async client)."""

        async def hint() -> None:
            self.client.notify_network_changed()

        self._runner.run(hint(), CLOSE_TIMEOUT)

    notify_resumed_from_sleep = notify_network_changed

    def events(self, timeout: float | None = None) -> Generator[Event, None, None]:
        """Block over the client's typed events from this call on; ``timeout`` bounds the wait for each one
        (``TimeoutError`` when it passes). ``close()`` the generator to unsubscribe."""
        return _subscribe(self._runner, self.client.events, timeout)
