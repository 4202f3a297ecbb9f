"""Whether an agent's ``session/list`` proves a session absent (the recovery ladder's last check)."""

from __future__ import annotations

import asyncio
from typing import Literal

from acp_client._logging import get_logger
from acp_client.client import ACPClient
from acp_client.reconnect.dialects import SessionDialects
from acp_client.sessions import Session

__all__ = ["listing_lacks"]

log = get_logger("acp_client.reconnect")


async def listing_lacks(client: ACPClient, session: Session, dialects: SessionDialects, timeout: float | None) -> bool:
    """``True`` only if ``client``'s agent advertises ``session/list`` and its listing (asked for the
    session's ``cwd`` when ``dialects.list_with_cwd``; the whole walk bounded by ``timeout``) names other
    sessions but not ``session``. An empty listing proves nothing unless ``dialects.empty_list_proves_absent``;
    a listing that fails proves nothing either."""
    if not client.supports("list"):
        return False
    cwd = session.record.cwd if dialects.list_with_cwd else None
    # an archived session is left out of a default listing: never read that as absence
    archived: Literal["include"] | None = "include" if client.supports("archive") else None
    listed = 0
    try:
        async with asyncio.timeout(timeout):  # the whole walk, every page
            async for info in client.list_sessions(cwd, timeout=None, archived=archived):
                if info.session_id == session.id:
                    return False
                listed += 1
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.info("acp.session_list_failed", session_id=session.id, error=str(exc))
        return False
    if listed == 0 and not dialects.empty_list_proves_absent:
        log.info("acp.session_list_empty", session_id=session.id, cwd=cwd)
        return False
    return True
