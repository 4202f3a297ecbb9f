""":class:`AgentThread`: a :class:`~acp_client.testing.ReferenceAgent` on an event loop and thread of its own,
for tests of blocking code (the :mod:`acp_client.sync` API, or your own) that must not share the agent's loop.

::

    with AgentThread(protocol_version=2) as host, sync.connect(host.agent.url) as client:
        session = client.new_session("/w")
        host.call(host.agent.drop_all_connections())  # agent controls run on the agent's loop
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, TypeVar

from acp_client.testing.reference_agent import ReferenceAgent

__all__ = ["AgentThread"]

T = TypeVar("T")


class AgentThread:
    """A :class:`ReferenceAgent` served by its own event loop in its own (daemon) thread.

    A test that blocks its thread, or its own event loop, never starves the agent. ``with`` starts the
    thread and the agent, and on leaving stops both; :meth:`call` runs an agent coroutine (a fault control, a
    wait) on the agent's loop and blocks until it is done. ``agent_options`` go to :class:`ReferenceAgent`.
    """

    def __init__(self, protocol_version: int = 2, *, timeout: float = 15.0, **agent_options: Any) -> None:
        self.timeout = timeout
        """Bound in seconds on :meth:`call` and on stopping the thread."""
        self.loop = asyncio.new_event_loop()
        """The agent's event loop (run by :attr:`thread`)."""
        self.thread = threading.Thread(target=self._main, name="acp-test-agent", daemon=True)
        self.agent = ReferenceAgent(protocol_version, **agent_options)
        """The hosted agent; read its attributes freely, run its coroutines with :meth:`call`."""

    @property
    def version(self) -> int:
        """The agent's protocol version."""
        return self.agent.protocol_version

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.run_until_complete(self.loop.shutdown_default_executor())
            self.loop.close()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the agent's loop; its result, or ``TimeoutError`` after :attr:`timeout` seconds."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(self.timeout)

    def __enter__(self) -> AgentThread:
        self.thread.start()
        self.call(self.agent.__aenter__())
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self.call(self.agent.aclose())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(self.timeout)
            if self.thread.is_alive():
                raise TimeoutError(f"the agent's thread did not stop within {self.timeout:g} s")
