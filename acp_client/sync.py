"""A blocking facade over the async client, for scripts, notebook cells and IDE threads.

::

    from acp_client import sync

    with sync.connect("ws://127.0.0.1:8765/acp") as client:
        session = client.new_session("/work")
        print(session.prompt("echo: hi").stop_reason)

    with sync.ReconnectingClient(url) as client:   # connects and waits until ready
        session = client.new_session("/work")
        for item in session.updates(timeout=5):   # a blocking generator
            ...

Each client owns a private event loop running in a daemon thread, started when the client is created (never
at import) and stopped by ``close()``. Every call submits a coroutine to that loop and blocks the calling
thread until it finishes. Because the work never runs on the caller's loop, the facade also works from code
that already runs inside an event loop (a Jupyter cell, an IDE's UI thread): the caller's loop is merely
blocked for the duration of the call. Calling it from the client's *own* loop thread (e.g. from inside a
handler) would deadlock and raises :class:`~acp_client.exceptions.UsageError` instead.

**One wrapper, no copies.** Every blocking method is made from its async twin by one shared wrapper
(:class:`_Blocking` and its variants): same name, same parameters with the same defaults, same docstring.
So the blocking API cannot fall behind the async one (a test compares them). Session handles come back as
:class:`SyncSession`; ``session/list`` comes back as a list; update and event streams as blocking generators.

**Errors are the async API's, unchanged**: an ``ACPTimeoutError`` raised by the call reaches the caller as
it is. A call with a ``timeout`` is bounded by that timeout in the async API; the calling thread waits a
little longer (:data:`TIMEOUT_SLACK`) so the typed error wins; only if the loop itself is stuck does the
wait end with an ``ACPTimeoutError`` of the facade's own (and the call is cancelled on the loop).

**KeyboardInterrupt** (Ctrl-C, the notebook's stop button) while a call blocks cancels the call on the loop
and is re-raised; during :meth:`SyncSession.prompt` it first sends ``session/cancel`` so the agent stops the
turn too.

**Without ``with``**: :class:`ReconnectingClient` connects on first use — the first call that needs a
connection starts the client and waits (``ready_timeout``) until it is ready, exactly as entering ``with``
does (subscribing with ``events()`` starts it without waiting). :func:`connect` returns a client that is
already connected.

Names mirror the async API; ``close`` is the twin of ``aclose``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypeVar, overload

from acp_client._connect import Target
from acp_client._connect import connect as _async_connect
from acp_client._logging import get_logger
from acp_client.client import ACPClient
from acp_client.exceptions import ACPError, ACPTimeoutError, ReconnectFailed, UsageError
from acp_client.reconnect import ClientState, Event
from acp_client.reconnect import ReconnectingClient as _AsyncReconnectingClient
from acp_client.sessions import DEFAULT_UPDATES_BUFFER, Session, SessionLink, SessionRecord, StreamItem, Transcript
from acp_client.transports import TransportOptions

__all__ = ["TIMEOUT_SLACK", "ReconnectingClient", "SyncClient", "SyncSession", "connect"]

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")

log = get_logger(__name__)

#: Extra seconds the calling thread waits beyond a call's own ``timeout`` (so the call's typed error wins).
TIMEOUT_SLACK = 5.0
#: Bound on closing a client and stopping its loop thread, and on quick bookkeeping calls.
CLOSE_TIMEOUT = 30.0
#: Bound on sending ``session/cancel`` after a KeyboardInterrupt during a prompt.
CANCEL_TIMEOUT = 5.0


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

    def run(
        self,
        coro: Coroutine[Any, Any, T],
        timeout: float | None = None,
        *,
        on_interrupt: Callable[[], None] | None = None,
    ) -> T:
        """Run ``coro`` on the private loop and return its result or raise its exception, unchanged.

        If it has not finished after ``timeout`` seconds it is cancelled and ``ACPTimeoutError`` is raised.
        On ``KeyboardInterrupt`` (or any other exception raised in the waiting thread) ``on_interrupt`` runs
        first, then the call is cancelled and the exception re-raised.
        """
        if self.on_loop_thread():
            coro.close()
            raise UsageError("a blocking acp_client.sync call from the client's own loop thread would deadlock")
        if not self.alive:
            coro.close()
            raise UsageError("this client is closed; create a new one")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            done, _ = concurrent.futures.wait([future], timeout)
        except BaseException:  # KeyboardInterrupt in a notebook cell: stop the work too
            try:
                if on_interrupt is not None:
                    on_interrupt()
            finally:
                future.cancel()
            raise
        if not done:
            future.cancel()
            assert timeout is not None
            raise ACPTimeoutError(f"the blocking call did not finish within {timeout:g} s (it was cancelled)")
        # the coroutine's own result or exception, whatever its type (``ACPTimeoutError`` stays itself)
        return future.result()

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

    return _blocking_iter(runner, runner.run(create(), CLOSE_TIMEOUT), timeout)


def _blocking_iter(runner: _LoopThread, iterator: AsyncIterator[T], timeout: float | None) -> Generator[T, None, None]:
    async def step() -> list[T]:
        try:
            if timeout is None:
                return [await anext(iterator)]
            async with asyncio.timeout(timeout):
                return [await anext(iterator)]
        except StopAsyncIteration:
            return []
        except TimeoutError as exc:
            if isinstance(exc, ACPTimeoutError):
                raise
            raise ACPTimeoutError(f"no item arrived within {timeout:g} s") from None

    async def finish() -> None:
        closer = getattr(iterator, "aclose", None)
        if closer is not None:
            with contextlib.suppress(RuntimeError):  # still finishing a cancelled step
                await closer()

    try:
        while True:
            items = runner.run(step(), _wait_bound(timeout))
            if not items:
                return
            yield items[0]
    finally:
        if runner.alive and not runner.on_loop_thread():
            runner.run(finish(), CLOSE_TIMEOUT)


# ---------------------------------------------------------------------- the one shared wrapper


class _Twin:
    """What a blocking object shares: the private loop and the async object it drives (``_target``)."""

    _runner: _LoopThread

    @property
    def _target(self) -> Any:
        raise NotImplementedError

    def _before_call(self) -> None:
        """Runs before every wrapped call that needs a connection (connect-on-first-use hook)."""

    def _wrap(self, session: Session) -> SyncSession:
        raise NotImplementedError


def _unwrap(value: Any) -> Any:
    """A :class:`SyncSession` passed to a blocking method reaches the async method as its ``Session``."""
    return value.session if isinstance(value, SyncSession) else value


class _Wrapper(Generic[P, R]):
    """The blocking twin of one method of the async object: same name, parameters, defaults and docstring.

    Used as a class attribute (``new_session = _ReturnsSession(AsyncClient.new_session)``). A call creates
    the coroutine on the private loop, waits for it there (bounded by its ``timeout`` argument plus
    :data:`TIMEOUT_SLACK` when the method has one) and returns :meth:`convert` of its result. Plain
    (non-async) methods run on the loop thread too, so the async object is only ever touched there. The
    subclasses only say, for typing, what kind of method they wrap.
    """

    needs_connection: bool

    def __init__(self, method: Callable[..., Any], *, needs_connection: bool = True) -> None:
        self.name = method.__name__
        self.method = method
        self.needs_connection = needs_connection
        full = inspect.signature(method)
        #: The async method's signature without ``self``: what the blocking method accepts.
        self.signature = full.replace(parameters=list(full.parameters.values())[1:])
        self.__doc__ = method.__doc__

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self.name = name  # the async object's attribute of the same name is called (aliases included)

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Self: ...

    @overload
    def __get__(self, obj: _Twin, owner: type[Any]) -> Callable[P, R]: ...

    def __get__(self, obj: _Twin | None, owner: type[Any]) -> Self | Callable[P, R]:
        if obj is None:
            return self
        twin = obj

        @functools.wraps(self.method)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            result: R = self.call(twin, args, kwargs)
            return result

        call.__signature__ = self.signature  # type: ignore[attr-defined]
        return call

    def wait_bound(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> float | None:
        """How long the calling thread waits: the call's ``timeout`` plus slack, unbounded without one."""
        parameter = self.signature.parameters.get("timeout")
        if parameter is None:
            return None
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:
            return None  # calling the async method raises the same TypeError, in the caller's thread
        timeout = bound.arguments.get("timeout", parameter.default)
        return _wait_bound(timeout) if isinstance(timeout, int | float) else None

    def call(self, twin: _Twin, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run the async method for ``twin`` on its loop and return the converted result."""
        if self.needs_connection:
            twin._before_call()
        args = tuple(_unwrap(a) for a in args)
        kwargs = {k: _unwrap(v) for k, v in kwargs.items()}
        wait = self.wait_bound(args, kwargs)
        target, name = twin._target, self.name

        async def invoke() -> Any:
            result = getattr(target, name)(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
            return await self.collect(result)

        return self.convert(twin, twin._runner.run(invoke(), wait, on_interrupt=self.on_interrupt(twin, args)))

    async def collect(self, result: Any) -> Any:
        """Finish the result on the loop (e.g. drain an async iterator); unchanged by default."""
        return result

    def convert(self, twin: _Twin, result: Any) -> Any:
        """Turn the result into its blocking form in the calling thread; unchanged by default."""
        return result

    def on_interrupt(self, twin: _Twin, args: tuple[Any, ...]) -> Callable[[], None] | None:
        """What to do on KeyboardInterrupt before the call is cancelled (nothing by default)."""
        return None


class _Blocking(_Wrapper[P, R]):
    """The twin of an async method (a coroutine function): blocks until it returns."""

    def __init__(self, method: Callable[Concatenate[Any, P], Awaitable[R]], *, needs_connection: bool = True) -> None:
        super().__init__(method, needs_connection=needs_connection)


class _OnLoop(_Wrapper[P, R]):
    """The twin of a plain method: it runs on the loop thread (the async object is not thread-safe)."""

    def __init__(self, method: Callable[Concatenate[Any, P], R], *, needs_connection: bool = False) -> None:
        super().__init__(method, needs_connection=needs_connection)


class _ReturnsSession(_Wrapper[P, "SyncSession"]):
    """The twin of an async method returning a :class:`Session`: returns its :class:`SyncSession`."""

    def __init__(
        self, method: Callable[Concatenate[Any, P], Awaitable[Session]], *, needs_connection: bool = True
    ) -> None:
        super().__init__(method, needs_connection=needs_connection)

    def convert(self, twin: _Twin, result: Any) -> Any:
        return twin._wrap(result)


class _ReturnsList(_Wrapper[P, list[T]]):
    """The twin of a method returning an async iterator over pages (``session/list``): returns a list."""

    def __init__(
        self, method: Callable[Concatenate[Any, P], AsyncIterator[T]], *, needs_connection: bool = True
    ) -> None:
        super().__init__(method, needs_connection=needs_connection)

    async def collect(self, result: Any) -> Any:
        return [item async for item in result]

    def wait_bound(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> float | None:
        return None  # ``timeout`` bounds each page on the loop; a long listing has many pages


class _Prompt(_Blocking[P, R]):
    """``Session.prompt``: on KeyboardInterrupt, send ``session/cancel`` before giving up the wait."""

    def on_interrupt(self, twin: _Twin, args: tuple[Any, ...]) -> Callable[[], None] | None:
        runner, session = twin._runner, twin._target

        def cancel_turn() -> None:
            try:
                runner.run(session.cancel(), CANCEL_TIMEOUT)
            except ACPError as exc:  # not connected, session lost ...: nothing to stop
                log.debug("interrupted_prompt_not_cancelled", session_id=session.id, error=str(exc))

        return cancel_turn


# ---------------------------------------------------------------------- sessions


class SyncSession(_Twin):
    """A blocking handle on a :class:`~acp_client.sessions.Session` (stable across reconnects like it).

    Every method of the async handle exists here with the same parameters; ``updates`` is a blocking
    generator. ``KeyboardInterrupt`` during :meth:`prompt` sends ``session/cancel`` and is re-raised.
    """

    def __init__(self, runner: _LoopThread, session: Session) -> None:
        self._runner = runner
        #: The underlying async handle (use it only from the client's loop).
        self.session = session

    def __repr__(self) -> str:
        return f"<SyncSession {self.session.id} {self.session.link.value}>"

    @property
    def _target(self) -> Session:
        return self.session

    @property
    def id(self) -> str:
        """The agent's session id."""
        return self.session.id

    @property
    def cwd(self) -> str:
        """The session's working directory."""
        return self.session.cwd

    @property
    def state(self) -> str | None:
        """v2 foreground state (``idle``, ``running``, ...), ``None`` when unknown and always in v1."""
        return self.session.state

    @property
    def replaying(self) -> bool:
        """``True`` while a resume or load for this session is outstanding."""
        return self.session.replaying

    @property
    def link(self) -> SessionLink:
        """Where the session stands with respect to the current connection."""
        return self.session.link

    @property
    def transcript(self) -> Transcript:
        """The conversation as the client knows it (updated by the client's loop thread)."""
        return self.session.transcript

    @property
    def record(self) -> SessionRecord:
        """What is persisted to re-attach the session (its ``meta`` included)."""
        return self.session.record

    prompt = _Prompt(Session.prompt, needs_connection=False)
    cancel = _Blocking(Session.cancel, needs_connection=False)
    on_turn_finished = _OnLoop(Session.on_turn_finished)

    def updates(
        self, timeout: float | None = None, *, maxsize: int = DEFAULT_UPDATES_BUFFER
    ) -> Generator[StreamItem, None, None]:
        """Block over this session's stream (updates, recovery markers, overflow notices) from now on.

        The subscription starts at this call. ``timeout`` bounds the wait for each item: when it passes, the
        generator raises ``ACPTimeoutError``. It ends when the session is lost or closed; ``close()`` it to
        unsubscribe early.
        """
        return _subscribe(self._runner, lambda: self.session.updates(maxsize=maxsize), timeout)


# ---------------------------------------------------------------------- clients


class _Facade(_Twin):
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
    """A blocking :class:`~acp_client.client.ACPClient` over one connection; made by :func:`connect`.

    Every public method of ``ACPClient`` exists here with the same parameters (``list_sessions`` returns a
    list); sessions come back as :class:`SyncSession`.
    """

    def __init__(self, runner: _LoopThread, client: ACPClient) -> None:
        super().__init__(runner)
        #: The underlying async client (use it only from the client's loop).
        self.client = client

    def __repr__(self) -> str:
        return f"<SyncClient {self.client!r}>"

    def __enter__(self) -> SyncClient:
        return self

    @property
    def _target(self) -> ACPClient:
        return self.client

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

    @property
    def sessions(self) -> dict[str, SyncSession]:
        """Sessions attached on this connection, by id (a snapshot)."""
        return {sid: self._wrap(session) for sid, session in list(self.client.sessions.items())}

    supports = _OnLoop(ACPClient.supports)
    request = _Blocking(ACPClient.request)
    notify = _Blocking(ACPClient.notify)
    authenticate = _Blocking(ACPClient.authenticate)
    login = _Blocking(ACPClient.login)
    logout = _Blocking(ACPClient.logout)
    new_session = _ReturnsSession(ACPClient.new_session)
    load_session = _ReturnsSession(ACPClient.load_session)
    resume_session = _ReturnsSession(ACPClient.resume_session)
    attach = _Blocking(ACPClient.attach)
    list_sessions = _ReturnsList(ACPClient.list_sessions)
    close_session = _Blocking(ACPClient.close_session)
    delete_session = _Blocking(ACPClient.delete_session)
    session_status = _Blocking(ACPClient.session_status)
    set_mode = _Blocking(ACPClient.set_mode)
    set_config_option = _Blocking(ACPClient.set_config_option)
    cancel = _Blocking(ACPClient.cancel)


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
    """A blocking :class:`acp_client.ReconnectingClient`; takes the same options, plus ``ready_timeout``.

    Nothing connects until it is used: entering ``with`` — or, without ``with``, the first call that needs a
    connection — starts the client and waits up to ``ready_timeout`` seconds (default 30, ``None``: no
    bound) until it is ready; it raises ``ReconnectFailed`` if the client gives up first. ``with`` closes it
    on exit; without ``with``, call :meth:`close`. Every public method of the async client exists here with
    the same parameters; session handles stay valid across reconnects, exactly as in the async client.
    """

    def __init__(self, target: Target, *, ready_timeout: float | None = 30.0, **options: Any) -> None:
        runner = _LoopThread("acp-sync-reconnecting-client")
        super().__init__(runner)
        self.ready_timeout = ready_timeout
        self._ready_once = False

        async def create() -> _AsyncReconnectingClient:
            return _AsyncReconnectingClient(target, **options)

        try:
            #: The underlying async client (use it only from the client's loop).
            self.client: _AsyncReconnectingClient = runner.run(create(), CLOSE_TIMEOUT)
        except BaseException:
            runner.stop()
            raise

    def __repr__(self) -> str:
        return f"<sync {self.client!r}>"

    @property
    def _target(self) -> _AsyncReconnectingClient:
        return self.client

    def _before_call(self) -> None:
        if not self._ready_once:
            self.wait_ready(self.ready_timeout, first=True)

    def __enter__(self) -> ReconnectingClient:
        try:
            self.wait_ready(self.ready_timeout, first=True)
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
    def failure(self) -> ReconnectFailed | None:
        """Why the client stopped reconnecting (``None`` while it keeps trying)."""
        return self.client.failure

    @property
    def transport_options(self) -> TransportOptions:
        """The transport settings every connection of this client uses."""
        return self.client.transport_options

    @property
    def recovery_limit(self) -> int:
        """How many recovery requests may be in flight right now (adapts unless fixed)."""
        return self.client.recovery_limit

    @property
    def sessions(self) -> dict[str, SyncSession]:
        """Known sessions by id (a snapshot; the handles themselves stay valid across reconnects)."""

        async def snapshot() -> list[Session]:
            return list(self.client.sessions.values())

        return {session.id: self._wrap(session) for session in self._runner.run(snapshot(), CLOSE_TIMEOUT)}

    def start(self) -> None:
        """Start connecting in the background without waiting (``with`` and first use do it for you)."""

        async def start() -> None:
            if self.client.state is ClientState.IDLE:
                await self.client.start()

        self._runner.run(start(), CLOSE_TIMEOUT)

    def wait_ready(self, timeout: float | None = None, *, first: bool = False) -> None:
        """Start the client if needed and block until it is ``READY``; raises ``ReconnectFailed`` (with
        ``first=True`` also when the client gave up before it was ever ready), ``ClientClosed`` or a
        ``TimeoutError``. ``with`` and first use call it with ``first=True`` and ``ready_timeout``."""
        self.start()
        self._runner.run(self.client.wait_ready(timeout, first=first), _wait_bound(timeout))
        self._ready_once = True

    reconnect_now = _OnLoop(_AsyncReconnectingClient.reconnect_now)
    notify_network_changed = _OnLoop(_AsyncReconnectingClient.notify_network_changed)
    set_strategy = _OnLoop(_AsyncReconnectingClient.set_strategy)
    strategy_for = _OnLoop(_AsyncReconnectingClient.strategy_for)
    forget = _Blocking(_AsyncReconnectingClient.forget, needs_connection=False)
    save_session = _Blocking(_AsyncReconnectingClient.save_session, needs_connection=False)
    recover = _ReturnsSession(_AsyncReconnectingClient.recover)
    new_session = _ReturnsSession(_AsyncReconnectingClient.new_session)
    resume_session = _ReturnsSession(_AsyncReconnectingClient.resume_session)
    load_session = _ReturnsSession(_AsyncReconnectingClient.load_session)
    session_status = _Blocking(_AsyncReconnectingClient.session_status)
    list_sessions = _ReturnsList(_AsyncReconnectingClient.list_sessions)
    close_session = _Blocking(_AsyncReconnectingClient.close_session)
    delete_session = _Blocking(_AsyncReconnectingClient.delete_session)
    authenticate = _Blocking(_AsyncReconnectingClient.authenticate)
    request = _Blocking(_AsyncReconnectingClient.request)

    def notify_resumed_from_sleep(self) -> None:
        """Hint that the machine woke up (same as :meth:`notify_network_changed`)."""
        self.notify_network_changed()

    def events(self, timeout: float | None = None) -> Generator[Event, None, None]:
        """Block over the client's typed events from this call on; ``timeout`` bounds the wait for each one
        (``ACPTimeoutError`` when it passes). ``close()`` the generator to unsubscribe.

        Subscribing starts a client that was not started yet (after subscribing, so its first connection's
        events are seen too)."""
        events = _subscribe(self._runner, self.client.events, timeout)
        self.start()
        return events
