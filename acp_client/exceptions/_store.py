"""The session store failed or refused a write (see :mod:`acp_client.exceptions`)."""

from __future__ import annotations

from acp_client.exceptions._root import ACPError

__all__ = ["LeaseLost", "StoreError", "StoreLocked", "StoreUnavailable"]


class StoreError(ACPError):
    """The session store failed or refused an operation."""


class StoreUnavailable(StoreError):
    """The store's server could not be reached, even after the store's own bounded retries.

    ``operation`` names what was attempted (``"save"``, ``"claim"`` ...); ``cause`` is the last error of
    the client library (its text never contains the URL's password); ``where`` names the store (its URL
    with the password redacted) when the store knows it.
    """

    def __init__(self, operation: str, cause: BaseException | None = None, *, where: str | None = None) -> None:
        self.operation = operation
        self.cause = cause
        self.where = where
        detail = f": {type(cause).__name__}: {cause}" if cause is not None else ""
        at = f" at {where}" if where else ""
        super().__init__(f"the session store{at} is unavailable ({operation}){detail}")


class StoreLocked(StoreError):
    """Another process (or another store object) already owns this store; ``holder`` describes it."""

    def __init__(self, path: str, holder: str | None = None) -> None:
        self.path = path
        self.holder = holder
        who = f" by {holder}" if holder else ""
        super().__init__(
            f"the session store {path} is in use{who}; one process owns a SQLite store at a time "
            "(use RedisSessionStore for several workers)"
        )


class LeaseLost(StoreError):
    """A write was rejected because this worker does not hold the session's lease (fencing).

    ``reason``: ``"expired"`` (the lease ran out before it was renewed), ``"taken"`` (another worker holds
    it now, ``holder`` says which), ``"stale"`` (the write carried an older fencing ``token`` than the one
    stored), or ``"reset"`` (the store lost its data).
    """

    def __init__(
        self, session_id: str, reason: str, *, holder: str | None = None, token: int | None = None
    ) -> None:
        self.session_id = session_id
        self.reason = reason
        self.holder = holder
        self.token = token
        who = f" (held by {holder})" if holder else ""
        super().__init__(f"lease on session {session_id} lost: {reason}{who}")
