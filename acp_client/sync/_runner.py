"""The blocking facade's engine: a private event loop in a daemon thread, and blocking iteration over it.

:class:`_LoopThread` runs one coroutine at a time on the loop for a blocked calling thread (timeouts,
KeyboardInterrupt and calls from the loop's own thread handled as :mod:`acp_client.sync` describes);
:func:`_subscribe` turns an async iterator living on that loop into a blocking generator.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Generator
from typing import Any, TypeVar

from acp_client.exceptions import ACPTimeoutError, UsageError

T = TypeVar("T")

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
        future: concurrent.futures.Future[T] | None = None
        try:
            # submitted inside the try: a Ctrl-C that lands as soon as the call is on the loop (this thread
            # can wait long for the GIL while the loop already sent the request) still stops the work
            future = asyncio.run_coroutine_threadsafe(coro, self._loop)
            done, _ = concurrent.futures.wait([future], timeout)
        except BaseException:  # KeyboardInterrupt in a notebook cell: stop the work too
            try:
                if on_interrupt is not None:
                    on_interrupt()
            finally:
                if future is not None:  # None: the interrupt landed inside the submission itself
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
