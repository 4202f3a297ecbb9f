"""Setting a session's desired config again after a *restored* recovery.

The application's chosen mode and config options (``Session.desired_config``) live in the session record.
An agent that lost the session from memory (``inactive`` → resume/load) may come back with its defaults;
:func:`reapply_config` compares what the resume/load answer said (``configOptions``' ``currentValue``, v1
``modes.currentModeId``) with the desired values and sends ``session/set_config_option`` /
``session/set_mode`` only for those that differ or that the answer did not mention. A failure is collected,
never raised (except a lost connection, which fails the recovery attempt like any other request).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from acp_client._logging import get_logger
from acp_client.client import ACPClient
from acp_client.exceptions import ACPTimeoutError, ConnectionLost, ProtocolError, RPCError, UsageError
from acp_client.sessions import Session, SessionControl

__all__ = ["ConfigRestore", "reapply_config"]

log = get_logger("acp_client.reconnect")
_SESSIONS = SessionControl()


@dataclass(slots=True)
class ConfigRestore:
    """What :func:`reapply_config` did: the settings sent again, and those that failed (setting -> error)."""

    reapplied: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def _current(session: Session, fresh: frozenset[str], config_id: str) -> Any:
    """The value the agent's resume/load answer gave ``config_id`` (``...``: the answer did not say)."""
    if "config" not in fresh:
        return ...
    for option in session.config_options or ():
        if option.get("id") == config_id:
            return option.get("currentValue", ...)
    return ...


async def reapply_config(client: ACPClient, session: Session, timeout: float | None) -> ConfigRestore:
    """Set ``session``'s desired config again on ``client``'s connection (see the module docstring);
    ``timeout`` bounds each request."""
    done = ConfigRestore()
    desired = session.desired_config
    fresh = _SESSIONS.fresh_config(session)
    mode = desired.get("mode")
    if isinstance(mode, str) and not ("mode" in fresh and session.current_mode == mode):
        await _one(done, "mode", lambda: client.set_mode(session.id, mode, timeout=timeout))
    options = desired.get("options")
    for config_id, value in options.items() if isinstance(options, dict) else ():
        if _current(session, fresh, config_id) == value:
            continue  # the agent restored it itself
        key = f"option:{config_id}"
        await _one(done, key, lambda c=config_id, v=value: client.set_config_option(session.id, c, v, timeout=timeout))
    if done.failed:
        log.warning("acp.config_not_restored", session_id=session.id, failures=sorted(done.failed))
    return done


async def _one(done: ConfigRestore, key: str, send: Any) -> None:
    try:
        await send()
    except ConnectionLost:
        raise
    except (RPCError, ACPTimeoutError, ProtocolError, UsageError) as exc:
        done.failed[key] = f"{type(exc).__name__}: {exc}"
    else:
        done.reapplied.append(key)
