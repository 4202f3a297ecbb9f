"""The one shared wrapper: every blocking method of the facade is made from its async twin here.

:class:`_Twin` is what a blocking object shares (its private loop and the async object it drives);
:class:`_Wrapper` and its variants turn one async method into a blocking one with the same name,
parameters, defaults and docstring (see :mod:`acp_client.sync`).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from acp_client._logging import get_logger
from acp_client.client import UseClientDefault
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

    def _request_timeout(self) -> float | None:
        """The deadline a call left at ``USE_CLIENT_DEFAULT`` runs with (the client's ``Timeouts.request``);
        ``None``: unknown here, the calling thread then waits without a bound of its own."""
        return None

    def _wrap(self, session: Session) -> SyncSession:
        raise NotImplementedError

    def _as_argument(self) -> Any:
        """What the async method receives when this object is passed to a blocking method: itself, unless a
        subclass says otherwise (:class:`SyncSession` passes its ``Session``)."""
        return self


def _blocking_annotation(annotation: Any) -> Any:
    """A parameter annotation for the blocking method: a ``Session`` argument may be its :class:`SyncSession`."""
    return "SyncSession | Session" if annotation in ("Session", Session) else annotation


def _unwrap(value: Any) -> Any:
    """A :class:`SyncSession` passed to a blocking method reaches the async method as its ``Session``."""
    return value._as_argument() if isinstance(value, _Twin) else value


class _Wrapper(Generic[P, R]):
    """The blocking twin of one method of the async object: same name, parameters, defaults and docstring.

    Used as a class attribute (``new_session = _ReturnsSession(AsyncClient.new_session)``). When the class
    is created, the wrapper makes a plain function of that name (:attr:`function`): what the class and its
    instances hand out, so ``help()``, ``inspect.signature`` and IDEs see an ordinary method whose return
    annotation names the blocking type (:meth:`returns`). A call creates the coroutine on the private loop,
    waits for it there (bounded by its ``timeout`` argument plus :data:`TIMEOUT_SLACK` when the method has
    one) and returns :meth:`convert` of its result. Plain (non-async) methods run on the loop thread too, so
    the async object is only ever touched there. The subclasses only say, for typing, what kind of method
    they wrap.
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
        #: The blocking method itself (made by :meth:`__set_name__`).
        self.function: Callable[..., Any] = self._make_function(object)

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self.name = name  # the async object's attribute of the same name is called (aliases included)
        self.function = self._make_function(owner)

    def returns(self, annotation: Any) -> Any:
        """The blocking method's return annotation, from the async one's (unchanged by default)."""
        return annotation

    def _make_function(self, owner: type[Any]) -> Callable[..., Any]:
        wrapper = self

        def blocking(twin: _Twin, /, *args: Any, **kwargs: Any) -> Any:
            return wrapper.call(twin, args, kwargs)

        self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        parameters = [self_parameter] + [
            p.replace(annotation=_blocking_annotation(p.annotation)) for p in self.signature.parameters.values()
        ]
        blocking.__name__ = self.name
        blocking.__qualname__ = f"{owner.__qualname__}.{self.name}"
        blocking.__module__ = owner.__module__
        blocking.__doc__ = self.method.__doc__
        blocking.__signature__ = self.signature.replace(  # type: ignore[attr-defined]
            parameters=parameters, return_annotation=self.returns(self.signature.return_annotation)
        )
        return blocking

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Callable[Concatenate[Any, P], R]: ...

    @overload
    def __get__(self, obj: _Twin, owner: type[Any]) -> Callable[P, R]: ...

    def __get__(self, obj: _Twin | None, owner: type[Any]) -> Callable[Concatenate[Any, P], R] | Callable[P, R]:
        bound: Callable[..., Any] = self.function.__get__(obj, owner)
        return bound

    def wait_bound(self, twin: _Twin, args: tuple[Any, ...], kwargs: dict[str, Any]) -> float | None:
        """How long the calling thread waits: the call's ``timeout`` (``USE_CLIENT_DEFAULT``: the client's
        request timeout) plus slack, unbounded without one."""
        parameter = self.signature.parameters.get("timeout")
        if parameter is None:
            return None
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:
            return None  # calling the async method raises the same TypeError, in the caller's thread
        timeout = bound.arguments.get("timeout", parameter.default)
        if isinstance(timeout, UseClientDefault):
            timeout = twin._request_timeout()
        return _wait_bound(timeout) if isinstance(timeout, int | float) else None

    def call(self, twin: _Twin, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run the async method for ``twin`` on its loop and return the converted result."""
        if self.needs_connection:
            twin._before_call()
        args = tuple(_unwrap(a) for a in args)
        kwargs = {k: _unwrap(v) for k, v in kwargs.items()}
        wait = self.wait_bound(twin, args, kwargs)
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

    def returns(self, annotation: Any) -> Any:
        return "SyncSession"

    def convert(self, twin: _Twin, result: Any) -> Any:
        return twin._wrap(result)


class _ReturnsList(_Wrapper[P, list[T]]):
    """The twin of a method returning an async iterator over pages (``session/list``): returns a list."""

    def __init__(
        self, method: Callable[Concatenate[Any, P], AsyncIterator[T]], *, needs_connection: bool = True
    ) -> None:
        super().__init__(method, needs_connection=needs_connection)

    def returns(self, annotation: Any) -> Any:
        text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
        match = re.fullmatch(r"(?:collections\.abc\.|typing\.)?AsyncIterator\[(.+)\]", text)
        return f"list[{match.group(1)}]" if match else "list[Any]"

    async def collect(self, result: Any) -> Any:
        return [item async for item in result]

    def wait_bound(self, twin: _Twin, args: tuple[Any, ...], kwargs: dict[str, Any]) -> float | None:
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
