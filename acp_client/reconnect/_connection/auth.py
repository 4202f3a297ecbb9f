"""Authentication across connections: :class:`Reauthentication` is the one owner of "how the application
authenticated", and re-does it on every new connection before the sessions are recovered.

Agents keep authentication per connection (qwen-code refuses every ``session/*`` until ``authenticate`` on
each one). Once the application authenticated (``client.authenticate(method_id)``), or its
``on_auth_required`` hook ran because a recovery met ``-32000``, each later connection is authenticated the
same way right after ``initialize``: ``on_auth_required(acp)`` when the application gave one (it may pick a
fresh token or another method), else the method it chose, sent again (``authenticate`` in v1,
``auth/login`` in v2) unless the new connection lists methods and that one is not among them. A recovery
that still meets ``-32000`` calls ``on_auth_required`` once for that connection, shared by every job.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from acp_client._logging import get_logger
from acp_client.client import ACPClient
from acp_client.exceptions import ConnectionLost

__all__ = ["AuthHook", "Reauthentication"]

log = get_logger("acp_client.reconnect")

#: ``on_auth_required(acp)``: authenticate the live per-connection client.
AuthHook = Callable[[ACPClient], Awaitable[None]]


class Reauthentication:
    """Remembers how the application authenticated and re-does it per connection (see the module docstring)."""

    __slots__ = ("_hook", "_hook_runs", "_method", "_needed", "_timeout")

    def __init__(self, hook: AuthHook | None, *, timeout: float | None) -> None:
        self._hook = hook
        self._timeout = timeout
        self._method: str | None = None  # the method id the application chose last
        self._needed = False  # some earlier connection had to authenticate
        self._hook_runs: dict[int, asyncio.Future[None]] = {}  # connection id -> its one hook call

    def __repr__(self) -> str:
        return f"<Reauthentication needed={self._needed} method={self._method!r} hook={self._hook is not None}>"

    @property
    def method(self) -> str | None:
        """The authentication method the application chose last (``None``: none yet)."""
        return self._method

    def chose(self, method_id: str) -> None:
        """The application authenticated with ``method_id``: every new connection is authenticated too."""
        self._method = method_id
        self._needed = True

    async def on_new_connection(self, client: ACPClient) -> None:
        """Authenticate a new connection, before its recovery round, when an earlier one had to. A failure
        is logged and left to the recovery (which meets ``-32000`` and calls the hook once more)."""
        if not self._needed:
            return
        try:
            if self._hook is not None:
                await self.hook_once(client)
            elif self._method is not None:
                # v1 names a method by ``id``, v2 by ``methodId``; an agent that lists none may still want it
                offered = {m.get("methodId", m.get("id")) for m in client.auth_methods}
                if offered and self._method not in offered:
                    log.warning("acp.reauthenticate_skipped", method=self._method, reason="no longer offered")
                    return
                await client.authenticate(self._method, timeout=self._timeout)
            log.info("acp.reauthenticated", connection_id=client.connection.id, method=self._method)
        except (asyncio.CancelledError, ConnectionLost):
            raise
        except Exception as exc:
            log.warning("acp.reauthenticate_failed", connection_id=client.connection.id, error=str(exc))

    async def hook_once(self, client: ACPClient) -> None:
        """Call ``on_auth_required`` for ``client``'s connection, once: every caller for the same connection
        (each session's recovery job meeting ``-32000``) waits for that one call."""
        hook = self._hook
        if hook is None:
            return
        self._needed = True
        key = client.connection.id
        for stale in [k for k in self._hook_runs if k != key]:
            del self._hook_runs[stale]  # one connection at a time: older calls are history
        run = self._hook_runs.get(key)
        if run is None:
            run = self._hook_runs[key] = asyncio.ensure_future(hook(client))
        await asyncio.shield(run)
