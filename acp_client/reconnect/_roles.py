"""The narrow interfaces the parts of a :class:`~acp_client.ReconnectingClient` see of each other.

The client is composed of objects that each own their state (see docs/design.md): the
:class:`~acp_client.reconnect._connection.supervisor.ConnectionSupervisor` (the connection loop),
the :class:`~acp_client.reconnect._recovery.recoverer.SessionRecoverer` (per-session recovery jobs), the
:class:`~acp_client.reconnect._sessions.keeper.SessionKeeper` (the registry, strategies and store writes) and the
:class:`~acp_client.reconnect._sessions.links.SessionLinks` (recovery outcomes). A part that needs another is given
it typed by one of these Protocols, so it can reach only what the Protocol names.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Protocol

from acp_client.client import ACPClient
from acp_client.exceptions import ReconnectFailed
from acp_client.reconnect._events import ClientState, RecoveryRoundFinished
from acp_client.sessions import Session

__all__ = ["ConnectionView", "Forgetting", "Recovery", "TaskSpawner"]


class ConnectionView(Protocol):
    """What the session calls and the ownership host read of the connection loop (it alone writes it)."""

    @property
    def state(self) -> ClientState:
        """The current lifecycle state."""
        ...

    @property
    def generation(self) -> int:
        """The generation of the current (or last) connection attempt."""
        ...

    @property
    def failure(self) -> ReconnectFailed | None:
        """Why the loop is ``FAILED`` or ``SUSPENDED`` (``None`` otherwise)."""
        ...

    @property
    def running(self) -> bool:
        """``True`` while the loop task exists."""
        ...

    def live_client(self) -> ACPClient | None:
        """The current per-connection client, unless its connection already died."""
        ...

    def changed(self) -> asyncio.Event:
        """An event set at the next change of state or of a session's link."""
        ...

    def notify_changed(self) -> None:
        """Wake everything waiting on :meth:`changed`."""
        ...

    async def wait_ready(self, timeout: float | None = None, *, first: bool = False) -> None:
        """Wait until the state is ``READY`` (raises when it cannot become so)."""
        ...


class Recovery(Protocol):
    """The per-session recovery jobs, as the other parts drive them (:class:`SessionRecoverer`)."""

    def busy(self, session_id: str) -> bool:
        """``True`` while a job for ``session_id`` runs."""
        ...

    def note_cut(self, stream_resumption: str | None) -> None:
        """Why the transport could not resume its event stream before the next round (``None``: no such
        resumption on that transport); that round's ``SessionRecovered`` events carry it."""
        ...

    async def run_round(self, client: ACPClient, sessions: list[Session], generation: int) -> RecoveryRoundFinished:
        """Recover ``sessions`` on ``client``; returns when each has a first outcome."""
        ...

    async def recover_now(self, client: ACPClient, session: Session, generation: int) -> str:
        """Recover one session now (joining its running job)."""
        ...

    async def cancel(self, session_id: str) -> None:
        """Stop the job of ``session_id``."""
        ...

    async def stop_all(self) -> None:
        """Stop every job."""
        ...


class TaskSpawner(Protocol):
    """Runs helper tasks that belong to the client (cancelled when it closes)."""

    def spawn(self, coro: Awaitable[object], name: str) -> None:
        """Run ``coro`` as a named task of the client."""
        ...


class Forgetting(Protocol):
    """Stops a session's recovery job and forgets it (the ownership host's reconcile; it is
    :class:`~acp_client.reconnect._calls.recovery_control.RecoveryControl`)."""

    async def stop_and_forget(self, session: Session, reason: str, via: str | None) -> None:
        """Cancel ``session``'s recovery job, then forget it for good."""
        ...
