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
Each is a plain function on the class, so ``help()`` and ``inspect.signature`` show it like any method, and
its return annotation names the blocking type (``SyncSession``, ``list[SessionInfo]``). So the blocking API
cannot fall behind the async one (a test compares them). Session handles come back as
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

Modules: ``_runner`` (the private loop thread and blocking iteration), ``_wrap`` (the one shared wrapper),
``_session`` (:class:`SyncSession`), ``_clients`` (:class:`SyncClient`, :func:`connect`,
:class:`ReconnectingClient`).
"""

from acp_client.sync._clients import ReconnectingClient, SyncClient, connect
from acp_client.sync._runner import CANCEL_TIMEOUT as CANCEL_TIMEOUT
from acp_client.sync._runner import CLOSE_TIMEOUT as CLOSE_TIMEOUT
from acp_client.sync._runner import TIMEOUT_SLACK
from acp_client.sync._runner import _LoopThread as _LoopThread
from acp_client.sync._session import SyncSession
from acp_client.sync._wrap import _Blocking as _Blocking
from acp_client.sync._wrap import _Wrapper as _Wrapper

__all__ = ["TIMEOUT_SLACK", "ReconnectingClient", "SyncClient", "SyncSession", "connect"]
