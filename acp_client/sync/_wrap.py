"""The one shared wrapper: every blocking method of the facade is made from its async twin here.

:class:`_Twin` is what a blocking object shares (its private loop and the async object it drives);
:class:`_Wrapper` and its variants turn one async method into a blocking one with the same name,
parameters, defaults and docstring (see :mod:`acp_client.sync`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, Self, TypeVar, overload

from acp_client._logging import get_logger
from acp_client.exceptions import ACPError
from acp_client.sessions import Session
from acp_client.sync._runner import CANCEL_TIMEOUT, _LoopThread, _wait_bound

if TYPE_CHECKING:
    from acp_client.sync._session import SyncSession

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")

log = get_logger("acp_client.sync")


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

    def _as_argument(self) -> Any:
        """What the async method receives when this object is passed to a blocking method: itself, unless a
        subclass says otherwise (:class:`SyncSession` passes its ``Session``)."""
        return self


def _unwrap(value: Any) -> Any:
    """A :class:`SyncSession` passed to a blocking method reaches the async method as its ``Session``."""
    return value._as_argument() if isinstance(value, _Twin) else value


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
